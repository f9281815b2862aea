"""The multiclass mixture's registration (``meanfield.engine.registry``): its claims
(``meanfield model check mixture_multiclass``)."""

from __future__ import annotations

from ...engine import registry

registry.register_claims("mixture_multiclass", "meanfield.models.multiclass:check")
