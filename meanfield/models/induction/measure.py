"""Measurements of an induction-head run, in one module: the claims
(:mod:`.claims`) check them and the figures (:mod:`.plot`) draw them; neither
figures nor claims compute them twice, and this module imports neither.

A run is a recorded run (``meanfield.core.io.Run`` or a dict with the same
datasets and an ``"attrs"`` entry). Heads and lags: a head points at the lag
of its largest RPE weight (``run["lags"][h, argmax_j rpe[h, j]]``), so a
subset of heads has a lag set.
"""

from __future__ import annotations

import math

import numpy as np

from ...core.report import fit_line
from .model import subset_label

def _attrs(run) -> dict:
    if isinstance(run, dict) and "attrs" in run:
        return run["attrs"]
    return getattr(run, "attrs", {})


def stage_end_index(run, stage: int) -> int | None:
    """Index of the last record of ``stage`` (None when the run has none)."""
    idx = np.flatnonzero(np.asarray(run["stage"]) == stage)
    return int(idx[-1]) if idx.size else None


def phase_start_index(run, stage: int) -> int | None:
    """Index of the record where ``stage`` starts: the last record of the
    previous stage (the state the stage starts from), else its first record."""
    prev = stage_end_index(run, stage - 1) if stage > 1 else None
    if prev is not None:
        return prev
    idx = np.flatnonzero(np.asarray(run["stage"]) == stage)
    return int(idx[0]) if idx.size else None


def head_lags(run, i: int) -> list[int]:
    """The lag each head points at in record i (largest RPE weight)."""
    rpe = np.asarray(run["rpe"])[i]
    lags = np.asarray(run["lags"])
    return [int(lags[h, int(np.argmax(rpe[h]))]) for h in range(rpe.shape[0])]


def subset_lag_sets(run, i: int) -> list[tuple[int, ...]]:
    """Lag set of every subset of heads in record i (canonical subset order)."""
    hl = head_lags(run, i)
    out = []
    for row in np.asarray(run["subset_members"]):
        out.append(tuple(sorted({hl[h] for h in row if h >= 0})))
    return out


def subset_labels(run) -> list[str]:
    if "subsets" in run:
        return [str(s) for s in run["subsets"]]
    return [subset_label(tuple(int(h) for h in row if h >= 0)) for row in np.asarray(run["subset_members"])]


def lag_weights(run, i: int) -> dict[tuple[int, ...], float]:
    """c_S^2 weights of record i summed by lag set."""
    out: dict[tuple[int, ...], float] = {}
    for S, w in zip(subset_lag_sets(run, i), np.asarray(run["c_weight"])[i]):
        out[S] = out.get(S, 0.0) + float(w)
    return out


# ------------------------------------------------------------------ phase 3: a against log t


def fit_log_growth(tau, a, lo: float = 0.1, hi: float = 0.9) -> dict:
    """The growth-window fits of claim 4 from tau (time since the start of
    phase 3, tau[0] = 0 allowed) and a. Keys: a0, a_end, tau_lo, tau_hi, span,
    n_points, slope, intercept, r2, r2_linear, slope_first_half,
    slope_second_half, curvature (ratio of the half slopes, >= 1), window
    (index array), beta and r2_rate (the fit log(da/dtau) = c - beta a over
    the window, da/dtau by second-order finite differences of the records:
    the rate law da/dt ~ e^{-beta a}, whose beta = 1 is a = log t + const)."""
    tau = np.asarray(tau, float)
    a = np.asarray(a, float)
    a0, ae = float(a[0]), float(a[-1])
    rise = ae - a0
    out = {"a0": a0, "a_end": ae, "rise": rise}
    nan = {"beta": math.nan, "r2_rate": math.nan, "tau_lo": math.nan, "tau_hi": math.nan, "span": math.nan, "n_points": 0, "slope": math.nan,
           "intercept": math.nan, "r2": math.nan, "r2_linear": math.nan, "slope_first_half": math.nan,
           "slope_second_half": math.nan, "curvature": math.nan, "window": np.zeros(0, dtype=np.int64)}
    if not rise > 0:
        return {**out, **nan}
    ilo = int(np.argmax(a >= a0 + lo * rise))
    ihi = int(np.argmax(a >= a0 + hi * rise))
    win = np.arange(ilo, ihi + 1)
    win = win[tau[win] > 0]
    if win.size < 4:
        return {**out, **nan, "n_points": int(win.size)}
    x, y = np.log(tau[win]), a[win]
    f = fit_line(x, y)
    fl = fit_line(tau[win], y)
    mid = 0.5 * (x[0] + x[-1])
    h1, h2 = x <= mid, x >= mid
    s1 = fit_line(x[h1], y[h1])["slope"] if h1.sum() >= 2 else math.nan
    s2 = fit_line(x[h2], y[h2])["slope"] if h2.sum() >= 2 else math.nan
    curv = max(s1 / s2, s2 / s1) if s1 > 0 and s2 > 0 else math.inf
    # the rate law da/dt ~ C e^{-beta a}: beta from log(da/dtau) against a over the window
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.gradient(a, tau)
    rw = win[rate[win] > 0]
    fr = fit_line(a[rw], np.log(rate[rw])) if rw.size >= 3 else {"slope": math.nan, "r2": math.nan}
    out.update({"beta": -fr["slope"], "r2_rate": fr["r2"]})
    return {**out, "tau_lo": float(tau[win[0]]), "tau_hi": float(tau[win[-1]]),
            "span": float(tau[win[-1]] / tau[win[0]]), "n_points": int(win.size), "slope": f["slope"],
            "intercept": f["intercept"], "r2": f["r2"], "r2_linear": fl["r2"], "slope_first_half": s1,
            "slope_second_half": s2, "curvature": curv, "window": win}


def phase3_series(run) -> tuple[np.ndarray, np.ndarray, float] | None:
    """(tau, a, t_start) of phase 3, tau = t - t_start, starting with the
    state phase 3 starts from (tau = 0); None if the run has no phase 3."""
    i0 = phase_start_index(run, 3)
    idx = np.flatnonzero(np.asarray(run["stage"]) == 3)
    if i0 is None or idx.size == 0:
        return None
    sel = np.r_[i0, idx[idx > i0]]
    t = np.asarray(run["t"], float)[sel]
    return t - t[0], np.asarray(run["a"], float)[sel], float(t[0])
