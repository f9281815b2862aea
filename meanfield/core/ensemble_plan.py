"""How long a trajectory of an ensemble takes: the chunk plan's one number (``meanfield.core.ensemble.solve``).

:func:`from_estimate`: the system's own estimate (``estimate_seconds(cfg)``,
e.g. the mixture's size estimate) when the whole grid is estimated under
:data:`ESTIMATE_SKIP_S` even at :data:`ESTIMATE_SAFETY` times that estimate
(then a probe would cost more than the plan it informs: the grid runs in one
chunk in this process, its launches sized by the inflated estimate);
otherwise ``meanfield.core.ensemble.probe_seconds`` times a few points
(``ensemble.seconds_per_trajectory`` chooses). :func:`chunk_size_for` turns
the figure into points per chunk. Nothing here imports the ensemble.

Why a signal is still seen within 2 s: a grid taken from the estimate sums
to under 0.25 s at 4x the estimate, so even an estimate 10x below the real
time (the mixture's is 2-10x below, a lone short run being the worst) keeps
the whole grid, and so every launch of it, under about 0.7 s.
"""

from __future__ import annotations

import math

from .config import ConfigError

PROBE_STEPS = 100  # steps of each probe trajectory, when the system can shorten its points (``probe_point``)
ESTIMATE_SKIP_S = 0.25  # a grid estimated under this (at ESTIMATE_SAFETY x the system's estimate) is not probed
ESTIMATE_SAFETY = 4.0  # the system's estimate times this (the mixture's is 2-10x below a lone short run's time)
CHUNK_TARGET_S = 5.0  # default chunk length (s), inside the 1-30 s the chunks should take


def from_estimate(estimate, configs) -> float | None:
    """The seconds per trajectory to plan with from the system's estimate, or
    None (probe instead).

    ``estimate(cfg)`` is the system's ``estimate_seconds``; ``configs`` yields
    every point's config (a ConfigError from it, an invalid combination:
    None). Each estimate is taken :data:`ESTIMATE_SAFETY` times; when their
    sum over the grid is under :data:`ESTIMATE_SKIP_S` the largest one is
    returned, else (or for an unknown, NaN, estimate) None.

    Example
    -------
    >>> from_estimate(lambda c: 1e-4, [None] * 3)
    0.0004
    >>> from_estimate(lambda c: 1.0, [None] * 3) is None
    True
    """
    total, top = 0.0, 0.0
    try:
        for cfg in configs:
            e = ESTIMATE_SAFETY * float(estimate(cfg))
            if not e >= 0.0:  # NaN: unknown (e.g. an adaptive solver)
                return None
            total += e
            top = max(top, e)
            if total >= ESTIMATE_SKIP_S:
                return None
    except ConfigError:  # an invalid combination (status -3 later): no estimate
        return None
    return max(top, 1e-7)


def chunk_size_for(per: float, N: int, workers: int, target_s: float = CHUNK_TARGET_S) -> int:
    """Points per chunk: a chunk takes about ``target_s`` at ``per`` seconds a
    trajectory, every worker gets about four chunks, and a chunk takes about
    1 s at least (fewer, larger chunks when the grid is small).

    Parameters
    ----------
    per : float
        Seconds per trajectory (``ensemble.seconds_per_trajectory``).
    N : int
        Points.
    workers : int

    Returns
    -------
    int

    Example
    -------
    >>> chunk_size_for(1e-3, 100, 1), chunk_size_for(1e-3, 10**6, 2)
    (100, 5000)
    """
    cs = int(round(target_s / per))
    cs = min(cs, math.ceil(N / (4 * workers)))  # several chunks per worker
    cs = max(cs, min(int(round(1.0 / per)), math.ceil(N / workers)))  # but about 1 s at least
    return max(1, min(cs, N))
