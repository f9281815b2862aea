"""The maxmargin paper's registration (``meanfield.engine.registry``): its claims (``meanfield model check maxmargin``)."""

from __future__ import annotations

from ...engine import registry

registry.register_claims("maxmargin", "meanfield.models.maxmargin:check")
registry.register_data_size("meanfield.models.maxmargin:dataset", size="meanfield.models.maxmargin.sizes:dataset_size")
