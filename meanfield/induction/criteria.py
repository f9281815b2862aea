"""Names of the induction system's stop criteria and their kernel codes.

Kept apart from the numba kernels so that validating a config (and building
the CLI parser) does not import numba.
"""

CRITERIA = {"loss": 1, "grad_norm": 2, "a": 3, "c_top": 4, "rpe_top": 5, "grad_c": 6, "grad_w": 7, "grad_a": 8}
