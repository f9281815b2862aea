"""Size of the in-context prompts from their arguments alone (registered in ``.plugin``): refuse before building."""

from __future__ import annotations

import math

from ...engine.edges import arg_number, log_comb


def prompts_size(P: float, a: dict):
    """(log of the number of prompts, L) of ``prompts(features, N=...)``: every multiset of N
    tokens over the P features times the query: P C(N + P - 1, P - 1); L = P + 1 positions.

    Example
    -------
    >>> round(prompts_size(2.0, {"N": 3})[0], 6) == round(math.log(2 * 4), 6)
    True
    """
    N = arg_number(a, "N", 20)
    return math.log(P) + log_comb(N + P - 1.0, P - 1.0), P + 1.0
