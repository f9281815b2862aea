"""The incontext paper's registration (``meanfield.engine.registry``): its claims (``meanfield model check incontext``)."""

from __future__ import annotations

from ...engine import registry

registry.register_claims("incontext", "meanfield.models.incontext:check")
registry.register_data_size("meanfield.models.incontext:prompts", size="meanfield.models.incontext.sizes:prompts_size")
