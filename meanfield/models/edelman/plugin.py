"""Edelman et al.'s registration (``meanfield.engine.registry``): its claims
(``meanfield model check edelman``)."""

from __future__ import annotations

from ...engine import registry

registry.register_claims("edelman", "meanfield.models.edelman.claims:check",
                         "Edelman et al. (NeurIPS 2024): stages uniform -> unigram -> bigram on ICL Markov chains")
