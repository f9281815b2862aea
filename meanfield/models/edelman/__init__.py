"""Edelman, Edelman, Goel, Malach, Tsilivis, "The evolution of statistical induction
heads: in-context learning Markov chains" (NeurIPS 2024) as a two-layer description
(``meanfield/models/edelman.toml``) and its claims (``meanfield model check edelman``).
docs/models.md lists what was read and every difference from the authors' setup."""
