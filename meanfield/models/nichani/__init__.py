"""Nichani, Damian, Lee, "How transformers learn causal structure with gradient descent"
(ICML 2024) as a two-layer description (``meanfield/models/nichani.toml``) and its claims
(``meanfield model check nichani``). docs/models.md, section 8, lists what was read and every
difference from the authors' setup."""
