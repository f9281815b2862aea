"""Sizes of the multi-class mixture's samples and features from their arguments alone (registered in ``.plugin``)."""

from __future__ import annotations

import math

from ...engine.edges import arg_number


def samples_size(P: float, a: dict):
    """(log n, L) of ``samples(features, K=, C=, L=)``: K C groups times ((K - 1) C)^(L - 2) fillers.

    Example
    -------
    >>> samples_size(9.0, {"K": 3, "C": 3, "L": 2}) == (math.log(9.0), 2.0)
    True
    """
    K, C, L = arg_number(a, "K", 3), arg_number(a, "C", 3), arg_number(a, "L", 3)
    return math.log(K) + math.log(C) + max(L - 2.0, 0.0) * math.log(max((K - 1.0) * C, 1.0)), L


def feature_count(a: dict) -> float:
    """K c's + K (C - 1) v's = K C features of ``feature_names(K=, C=)``.

    Example
    -------
    >>> feature_count({"K": 3, "C": 2})
    6.0
    """
    return arg_number(a, "K") * arg_number(a, "C")
