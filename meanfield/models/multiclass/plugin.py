"""The multiclass mixture's registration (``meanfield.engine.registry``): its claims
(``meanfield model check mixture_multiclass``)."""

from __future__ import annotations

from ...engine import registry

registry.register_claims("mixture_multiclass", "meanfield.models.multiclass:check")
registry.register_data_size("meanfield.models.multiclass:samples", size="meanfield.models.multiclass.sizes:samples_size")
registry.register_data_size("meanfield.models.multiclass:feature_names",
                            feature_count="meanfield.models.multiclass.sizes:feature_count")
