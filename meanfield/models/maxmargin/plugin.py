"""The maxmargin paper's registration (``meanfield.engine.registry``): its claims (``meanfield model check maxmargin``)."""

from __future__ import annotations

from ...engine import registry

registry.register_claims("maxmargin", "meanfield.models.maxmargin:check")
