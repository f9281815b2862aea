"""How long a trajectory of an ensemble takes: the chunk plan's one number (``meanfield.core.ensemble.solve``).

:func:`seconds_per_trajectory` decides it: the system's own estimate when it
has one (``estimate_seconds(cfg)``, e.g. the mixture's size estimate) and the
whole grid is estimated under :data:`ESTIMATE_SKIP_S` even at
:data:`ESTIMATE_SAFETY` times that estimate (then a probe would cost more than
the plan it informs: the grid runs in one chunk in this process, its launches
sized by the inflated estimate); otherwise :func:`probe_seconds` times a few
points. :func:`chunk_size_for` turns it into points per chunk.
"""

from __future__ import annotations

import math
import time

import numpy as np

from .config import ConfigError

PROBE_STEPS = 100  # steps of each probe trajectory, when the system can shorten its points (``probe_point``)
ESTIMATE_SKIP_S = 0.25  # a grid estimated under this (at ESTIMATE_SAFETY x the system's estimate) is not probed
ESTIMATE_SAFETY = 4.0  # the system's estimate times this: an upper bound (the mixture's is within 2x of measured)
CHUNK_TARGET_S = 5.0  # default chunk length (s), inside the 1-30 s the chunks should take


def seconds_per_trajectory(problem) -> tuple[float, str]:
    """(seconds per trajectory, how it was found: ``"estimate"`` or ``"probe"``).

    The estimate is taken when the system has ``estimate_seconds(cfg)`` and
    every point's config is known (a grid of at most
    ``meanfield.core.ensemble.MEMO_MAX`` points), and the sum over the points of
    :data:`ESTIMATE_SAFETY` x the estimate is under :data:`ESTIMATE_SKIP_S`;
    the per-trajectory figure is then the largest inflated estimate. Else
    :func:`probe_seconds`.

    Example
    -------
    >>> from meanfield.core.ensemble import EnsembleProblem
    >>> per, how = seconds_per_trajectory(EnsembleProblem({"steps": 20}, axes={"omega": [0.1, 0.2]}))
    >>> how, per < 1e-2
    ('estimate', True)
    """
    from .ensemble import MEMO_MAX, _base_key, _point

    est = getattr(problem.system, "estimate_seconds", None)
    N = problem.size
    if est is not None and N <= MEMO_MAX:
        bk = _base_key(problem.system, problem.base)
        total, top = 0.0, 0.0
        for i in range(N):
            try:
                e = ESTIMATE_SAFETY * float(est(_point(problem.system, problem.base, problem.point(i), bk)[0]))
            except ConfigError:  # an invalid combination (status -3 later): no estimate, probe as before
                total = math.inf
                break
            if not e >= 0.0:  # NaN: unknown (e.g. an adaptive solver)
                total = math.inf
                break
            total += e
            top = max(top, e)
            if total >= ESTIMATE_SKIP_S:
                break
        if total < ESTIMATE_SKIP_S:
            return max(top, 1e-7), "estimate"
    return probe_seconds(problem), "probe"


def probe_seconds(problem, k: int = 8) -> float:
    """Seconds per trajectory of ``problem``, estimated in this process on one
    thread: ``k`` points spread over the grid, after a warm-up that loads the
    compiled kernels. A system with ``probe_point(base, over, steps) ->
    (over, factor)`` runs each probe point shortened to about
    :data:`PROBE_STEPS` steps (``factor``: how much longer the real point is),
    so the probe takes milliseconds and a signal stops it within a second
    whatever the points' length; without it the points run whole. The faster
    of two runs counts (the first also loads or compiles the kernels).

    Parameters
    ----------
    problem : EnsembleProblem
    k : int
        Probe points.

    Returns
    -------
    float

    Example
    -------
    >>> from meanfield.core.ensemble import EnsembleProblem
    >>> probe_seconds(EnsembleProblem({"steps": 50}, axes={"omega": [0.1, 0.2]})) > 0
    True
    """
    N = problem.size
    idx = sorted({int(round(x)) for x in np.linspace(0, N - 1, min(k, N))})
    shorten = getattr(problem.system, "probe_point", None)
    pts, factors = [], []
    for i in idx:
        ov = problem.point(i)
        r = shorten(problem.base, ov, PROBE_STEPS) if shorten is not None else None
        pts.append(ov if r is None else r[0])
        factors.append(1.0 if r is None else float(r[1]))
    from .ensemble import EnsembleProblem, _task, run_chunk

    sub = EnsembleProblem(problem.base, prob_func=_Fixed(pts), n=len(pts), outputs=problem.outputs,
                          system=problem.system)
    best = math.inf
    for _ in range(2):  # the first also loads / compiles the kernels (a batch's kernel may depend on its size)
        t0 = time.perf_counter()
        run_chunk(dict(_task(sub, 0, len(pts), "cpu", 1)))
        best = min(best, time.perf_counter() - t0)
    return max(best / len(pts) * float(np.mean(factors)), 1e-7)


def chunk_size_for(per: float, N: int, workers: int, target_s: float = CHUNK_TARGET_S) -> int:
    """Points per chunk: a chunk takes about ``target_s`` at ``per`` seconds a
    trajectory, every worker gets about four chunks, and a chunk takes about
    1 s at least (fewer, larger chunks when the grid is small).

    Parameters
    ----------
    per : float
        Seconds per trajectory (:func:`probe_seconds`).
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


class _Fixed:
    """prob_func of a fixed list of point dicts (picklable)."""

    def __init__(self, pts):
        self.pts = list(pts)

    def __call__(self, i):
        return self.pts[i]
