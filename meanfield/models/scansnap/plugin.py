"""The Scan and Snap paper's registration (``meanfield.engine.registry``): its claims
(``meanfield model check scansnap``)."""

from __future__ import annotations

from ...engine import registry

registry.register_claims("scansnap", "meanfield.models.scansnap.claims:check",
                         "Tian, Wang, Chen, Du (NeurIPS 2023): scan toward distinct tokens, snap set by eta_Y / eta_Z")
