"""The prompt-attention paper's registration (``meanfield.engine.registry``): its claims
(``meanfield model check prompt_attention``)."""

from __future__ import annotations

from ...engine import registry

registry.register_claims("prompt_attention", "meanfield.models.prompt_attention.claims:check",
                         "Oymak, Rawat, Soltanolkotabi, Thrampoulidis (ICML 2023): the prompt attends to the "
                         "context-relevant tokens; held-out test error")
