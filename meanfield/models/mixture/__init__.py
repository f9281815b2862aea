"""The mixture paper (seed 000): K-mixture of linear classification, two-headed transformer.

What belongs here: what is this paper's own. Its configuration (``config``:
``MixtureConfig``, the flags of ``meanfield mixture run``), data (``data``:
the sample set, features c1..cK, v1..vK), the family builder registered with
the engine (``family``, registration in ``plugin``), the score / self-score
variables S, A, B, w and their fast hand kernels (``kernels``, ``system``,
``batched``, ``run``: a registered fast path, held equal to the engine's
generic path by ``tests/test_engine_mixture.py``), the symmetry reduction
(``symmetry``, ``symmetry_group``, ``symmetry_kernels``,
``symmetry_symbolic``), the named-variable derivation (``symbolic``,
``symbolic_gram``: named on the engine's derivation), the construction (``construct``), the
claims and studies (``claims``, ``studies``, ``extensions``, ``robustness``,
``escape``, ``figure4``, ``widths``, ``softmax_scale``), figures (``plot``: which of the engine's
generic panels, with the paper's labels), its names in the bound language (``schema.BOUND_NAMES``),
the demo and the command (``cli``).

What does not: generic machinery (``meanfield.core``, ``meanfield.engine``),
and nothing of another paper: this package imports core and engine only.
"""
