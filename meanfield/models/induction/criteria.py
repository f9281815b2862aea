"""Names of the induction system's stop criteria and their kernel codes.

The table lives with every other criterion helper in ``meanfield.core.criteria``
(:data:`~meanfield.core.criteria.INDUCTION_CRITERIA`); this name stays for the
kernels and the config. Kept apart from the numba kernels so that validating a
config (and building the CLI parser) does not import numba.
"""

from ...core.criteria import INDUCTION_CRITERIA as CRITERIA  # noqa: F401
