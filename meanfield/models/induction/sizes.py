"""Size estimates of the induction paper's runs and data sets (refused before anything is allocated).

Cost models from the config alone; :func:`meanfield.core.limits.check_size`
turns them into a one-line refusal quoting the estimate.
"""

from __future__ import annotations

import math

from ...core.limits import check_size

#: seconds of the first compilation of this paper's kernels, measured cold on a loaded 2-core machine
#: (benchmarks/bench_first_use.py); the "compiling kernels" notice quotes it
COMPILE_S = 25


# Induction system: one full-batch gradient on the engine's generic network costs about 3e-8 s per
# (sequence x position) at the default H = M = 3 (`benchmarks/bench_twolayer.py`, 2026-12-06: 30 ms for 10,000
# sequences of L = 100 on a loaded 2-core machine, 1.13x the retired hand kernels' 26.5 ms in the same run).
_T_IND = 3.0e-8


def induction_estimate(cfg) -> dict:
    """Estimated memory (bytes) and time (s) of an induction run from its config."""
    L = float(cfg.L)
    Lt = float(cfg.L_test or cfg.L)
    n = float(cfg.n_train or 0)
    heads = max(1.0, cfg.H * cfg.M / 9.0)
    seqs = 8.0 * (n * (L + 1) + float(cfg.n_test) * (Lt + 1) + float(cfg.batch) * (L + 1))
    mem = 6.0 * seqs * heads
    if cfg.method == "gd":
        steps = float(sum(cfg.stage_steps) if cfg.schedule != "simultaneous" else cfg.steps)
    elif cfg.method == "rk4" and cfg.dt:
        H = sum(cfg.stage_times) if cfg.schedule != "simultaneous" and cfg.stage_times else (cfg.t_end or 0.0)
        steps = 4.0 * float(H) / cfg.dt
    else:
        steps = 0.0
    per = n if cfg.sampling == "fixed" else float(cfg.batch)
    # the model's features: every subset of at most D heads; a sequence's kernel: d^(|pa| + 1) floats
    n_feat = float(sum(math.comb(cfg.H, j) for j in range(0, cfg.D + 1)))
    kernel = math.exp(min((len(cfg.pa) + 1) * math.log(max(cfg.d, 1)), 700.0))
    rec = cfg.record_log if cfg.record_log is not None else (steps / cfg.record_every if cfg.record_every
                                                             else min(steps, 1000.0))
    mem += 8.0 * (4.0 * kernel + float(rec + 4) * (cfg.H * cfg.M + n_feat + 8.0))
    return {"bytes": mem, "seconds": steps * _T_IND * per * L * heads * max(1.0, n_feat / 7.0), "steps": steps}


def check_induction_size(cfg, force: bool = False) -> dict:
    est = induction_estimate(cfg)
    check_size(est, "size", force, f" (induction: {cfg.n_train} sequences of L = {cfg.L}, {est['steps']:.3g} steps)")
    return est


def induction_data_estimate(N: int, d: int, L: int, n_parents: int, kernels: bool, force: bool = False) -> dict:
    """``induction data``: tokens N (L + 1) int64, kernels N d^(|pa| + 1) floats;
    generation about 3.2e-8 s per token (README: 32 ms for 10,000 x 100)."""
    k1 = math.exp(min((n_parents + 1) * math.log(max(d, 1)), 700.0))  # one sequence's kernel, always drawn
    k = k1 if kernels else 0.0
    est = {"bytes": 3.0 * 8.0 * (float(N) * ((L + 1) + k) + k1), "seconds": 3.2e-8 * float(N) * (L + 1 + k1)}
    check_size(est, "size", force, f" (induction data: {N} sequences of L = {L})")
    return est


#: ``meanfield model run induction`` and ``meanfield induction run`` both train on the engine's generic
#: two-layer path now (the hand kernels are retired): the same cost model
GENERIC_SLOWDOWN = 1.0


def family_size_first(values: dict, force: bool, particles_d=None, copies: float = 1.0, width=None) -> dict:
    """The ``size_first`` hook of the induction family: the estimate of
    :func:`induction_estimate` (time x :data:`GENERIC_SLOWDOWN`) refused before
    any sequence is drawn (``--n-test 1e9`` drew a billion test sequences:
    gigabytes, no answer).

    Parameters
    ----------
    values : dict
        The description's parameters and the flags (text or numbers).
    force : bool
        Go past the estimate on purpose.
    particles_d, copies, width
        The engine's size keywords (unused: the family runs at infinite width, once).

    Returns
    -------
    dict
        The estimate.

    Example
    -------
    >>> family_size_first({}, False)["steps"]
    900.0
    """
    from .config import make_config

    cfg = make_config({k: v for k, v in values.items() if v is not None})
    est = induction_estimate(cfg)
    est["seconds"] *= GENERIC_SLOWDOWN
    check_size(est, "size", force, f" (model induction: {cfg.n_train} + {cfg.n_test} sequences of L = {cfg.L}, "
                                   f"{est['steps']:.3g} steps)")
    return est


def chi2_estimate(d: int, pa, lags, D: int, n: int, force: bool = False) -> dict:
    """Refuse an ``induction chi2`` table that would not fit or finish: the
    exact stationary joint law of a window W = max(pa, lags) is found from the
    window chain's transition matrix, d^W x d^W per kernel (1000 kernels at a
    time: the matrix, its elimination copy and their temporaries, about 4
    copies), by an elimination of about (d^W)^3 / 3 updates per kernel (about
    1e-8 s each, measured: d = 5 and 6 with W = 3, 2000 kernels, 17 s and 70 s
    on the loaded 2-core machine); the law itself holds d^(W+1) floats per
    kernel, the kernels n d^(|pa|+1), and every subset of the lags with
    |S| <= D is scored on every kernel (about 1e-8 s per law entry and
    subset). Logs throughout: d = 1e6 must not overflow.

    Parameters
    ----------
    d : int
        Alphabet size.
    pa, lags : sequences of int
        Parent lags and candidate lags.
    D : int
        Largest subset size.
    n : int
        Monte Carlo kernels.
    force : bool
        Go past the estimate on purpose.

    Returns
    -------
    dict
        ``bytes`` and ``seconds``.

    Example
    -------
    >>> chi2_estimate(3, (1, 2), (1, 2, 3), 2, 2000)["bytes"] < 1e9
    True
    """
    W = max(max(pa), max(lags))
    ld = math.log(max(d, 1))
    n_sub = sum(math.comb(len(lags), j) for j in range(0, min(D, len(lags)) + 1)) if len(lags) < 10_000 else math.inf

    def ex(x):
        return math.exp(min(x, 700.0))

    law = ex((W + 1) * ld)
    chain2, chain3 = ex(2 * W * ld), ex(3 * W * ld)  # (states of the window chain)^2, ^3
    est = {"bytes": 8.0 * (2.0 * min(n, 1000) * law + n * ex((len(pa) + 1) * ld) + 4.0 * min(n, 1000) * chain2),
           "seconds": 1e-8 * n * law * n_sub + 1e-8 * n * chain3 / 3.0}
    check_size(est, "size", force, f" (chi2: alphabet d = {d}, window {W}, {len(lags)} lags, {n} kernels)")
    return est


# ``induction full``: the simplified model and the official code's full transformer, trained side by side;
# the quick study (300 sequences of L = 20, 300 steps) takes about a minute here: ~3.3e-5 s per
# (sequence x position x step).
_T_FULL = 3.3e-5


def full_study_estimate(steps: int, n: int, L: int, force: bool = False) -> dict:
    """Refuse an ``induction full`` study estimated beyond ``meanfield.core.limits.MAX_SECONDS`` (30 s).

    Parameters
    ----------
    steps, n, L : int
        GD steps, training sequences and their length.
    force : bool
        Go past the estimate on purpose.

    Returns
    -------
    dict
        ``bytes`` and ``seconds``.

    Example
    -------
    >>> full_study_estimate(300, 300, 20, force=True)["seconds"] < 600
    True
    """
    est = {"bytes": 64.0 * n * (L + 1), "seconds": _T_FULL * float(steps) * n * (L + 1)}
    check_size(est, "steps", force, f" (induction full: {steps:.3g} steps on {n} sequences of L = {L})")
    return est
