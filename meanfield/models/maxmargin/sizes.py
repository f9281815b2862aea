"""Size of the max-margin dataset from its arguments alone (registered in ``.plugin``)."""

from __future__ import annotations

import math

from ...engine.edges import arg_number


def dataset_size(P: float, a: dict):
    """(log n, T) of ``dataset(features, n=..., T=...)``.

    Example
    -------
    >>> dataset_size(4.0, {"n": 4, "T": 3}) == (math.log(4.0), 3.0)
    True
    """
    return math.log(max(arg_number(a, "n", 4), 1.0)), arg_number(a, "T", 3)
