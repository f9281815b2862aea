"""Nichani et al.'s registration (``meanfield.engine.registry``): its claims
(``meanfield model check nichani``)."""

from __future__ import annotations

from ...engine import registry

registry.register_claims("nichani", "meanfield.models.nichani.claims:check",
                         "Nichani, Damian, Lee (ICML 2024): layer-1 attention learns the latent causal graph")
