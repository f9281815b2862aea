"""Size estimates of the mixture paper's runs, derivations and constructions (refused before anything is allocated).

Each estimate is a cost model from the config alone (floats, so absurd sizes
do not overflow); :func:`meanfield.core.limits.check_size` turns it into a
one-line refusal quoting it (``--force`` goes past it on purpose).
"""

from __future__ import annotations

import math

from ...core.limits import _T_CALL, _T_MATRIX, _T_SAMPLE, check_size

#: seconds of the first compilation of this paper's kernels, measured cold on a loaded 2-core machine
#: (benchmarks/bench_first_use.py); the "compiling kernels" notice quotes it
COMPILE_S = 15


# Cost model of one evaluation of the reduced dynamics: the per-unit costs _T_SAMPLE, _T_MATRIX, _T_CALL
# (meanfield.core.limits, shared with the engine's estimate) were fitted to this paper's benchmark numbers.


def _log_n_samples(K: int, L: int) -> float:
    """log of K x 2 x C(2(K-1) + L - 3, L - 2), without forming the number."""
    a = 2 * (K - 1) + L - 3
    b = L - 2
    if b < 0 or a < b:
        return math.log(2 * K)
    return math.log(2 * K) + math.lgamma(a + 1) - math.lgamma(b + 1) - math.lgamma(a - b + 1)


def _records(cfg) -> float:
    H = float(cfg.horizon or 0.0)
    if cfg.record_log is not None:
        return cfg.record_log + 4.0
    if cfg.record_dt is not None:
        return H / cfg.record_dt + 4.0
    if cfg.record_every is not None:
        if cfg.method == "gd":
            return H / cfg.record_every + 4.0
        return 1e3  # solver steps: unknown in advance
    return 1004.0


def mixture_estimate(cfg, particles_d: int | None = None) -> dict:
    """Estimated peak memory (bytes) and compute time (s) of one mixture run
    from its config alone. Floats, so absurd sizes do not overflow."""
    P = 2 * cfg.K
    if cfg.n_train is not None:
        n = float(cfg.n_train)
        D = float(cfg.ambient_d or (2 * cfg.K + 4))
    else:
        n = math.exp(min(_log_n_samples(cfg.K, cfg.L), 700.0)) * (2.0 if cfg.label_noise > 0 else 1.0)
        D = float(P)
    nn = float(cfg.n_neurons)
    T = _records(cfg)
    state = 6.0 * D * D + 2.0 * D * nn
    per_record = state + 3.0 * n * nn + 2.0 * nn * D
    mem = 8.0 * (3.0 * T * per_record + 4.0 * n * cfg.L + 20.0 * state)
    if cfg.width is not None:
        mem += 8.0 * 2 * 2 * float(cfg.width) * D * 2
    per_eval = _T_SAMPLE * n * cfg.L * cfg.L * D * nn + _T_MATRIX * D ** 3 + _T_CALL
    H = float(cfg.horizon or 0.0)
    if cfg.method == "gd":
        steps = H
    elif cfg.method == "rk4":
        steps = 4.0 * H / cfg.dt
    else:
        steps = 0.0  # adaptive: not known in advance
    if particles_d is not None:
        m = float(cfg.width or 0)
        mem += 8.0 * (6.0 * m * particles_d + 4.0 * n * cfg.L * particles_d)
        per_eval += 5e-9 * m * particles_d * n * cfg.L
    return {"n_samples": n, "records": T, "bytes": mem, "steps": steps, "seconds": steps * per_eval}


def check_mixture_size(cfg, force: bool = False, what: str = "size", particles_d: int | None = None,
                       copies: float = 1.0) -> dict:
    """:func:`mixture_estimate` x ``copies`` (runs of a sweep) through :func:`check_size`."""
    est = mixture_estimate(cfg, particles_d)
    est = {**est, "seconds": est["seconds"] * copies, "bytes": est["bytes"]}
    desc = (f" (K={cfg.K}, L={cfg.L}: {est['n_samples']:.3g} samples, {est['records']:.3g} records, "
            f"{est['steps']:.3g} steps" + (f", {copies:.3g} runs" if copies != 1 else "") + ")")
    check_size(est, what, force, desc)
    return est


def derive_estimate(K: int, L: int, fmts, reduce_symmetry: bool = False, force: bool = False) -> dict:
    """Refuse a sympy derivation that would not finish. Cost model, timed on
    this project's 2-core machine: the LaTeX / Python formats differentiate
    every sample's pre-activation in every score variable, about
    2.2e-3 s x n L^2 P^2 (K = 2, L = 3: 10 s; K = 3: 23 s); JSON only lists the
    6 P^2 + 2 P variables (~1e-4 s each); the symmetry reduction tries every
    group permutation and sign pattern, K! 4^K candidates (~7e-5 s each)."""
    P = 2 * K
    log_n = _log_n_samples(K, L)
    secs = 2.0
    if any(f in ("latex", "python") for f in fmts):
        secs += 2.2e-3 * math.exp(min(log_n + math.log(L * L * P * P), 700.0))
    secs += 1e-4 * (6.0 * P * P + 2 * P)
    if reduce_symmetry:
        secs += 7e-5 * math.exp(min(math.lgamma(K + 1) + K * math.log(4.0), 700.0))
    est = {"bytes": 8.0 * 50 * math.exp(min(log_n, 700.0)) * L * P, "seconds": secs}
    check_size(est, "size", force, f" (derive K={K}, L={L}: {math.exp(min(log_n, 700.0)):.3g} samples)")
    return est


def construct_estimate(K: int, L: int, d: int, force: bool = False) -> dict:
    """Refuse a Lemma 6.1 check that would not fit: it evaluates the explicit
    network on every sample, about 48 n L d bytes and 1.3e-7 n L d K seconds
    (timed here: K = 8, L = 8, 434112 samples: 58 s, 2.4 GB)."""
    n = math.exp(min(_log_n_samples(K, L), 700.0))
    est = {"bytes": 48.0 * n * L * d, "seconds": 1.3e-7 * n * L * d * K}
    check_size(est, "size", force, f" (construct K={K}, L={L}: {n:.3g} samples)")
    return est
