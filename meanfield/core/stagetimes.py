"""Stage times of a recorded trajectory: the one rule of every system.

Documented criteria (all thresholds are arguments; defaults in
:data:`DEFAULTS`), evaluated on the recorded states and interpolated between
the two records around the crossing (:func:`first_crossing`; for GD runs
rounded up to the step: the state changes only at steps), so a time does not depend on the record grid beyond
the interpolation (record every step for exact steps):

* ``T1`` (neuron stage done). Staged runs: the end of stage 1. Simultaneous
  runs: the first record at which every consistent sample has margin >=
  ``margin`` AND the neuron gradient is small, |dLoss/dw~| <= ``grad_ratio``
  x |dLoss/dw~| at t = 0.
* ``T2`` (attention stage done): the first record at or after T1 at which
  every inconsistent sample has margin >= ``margin``.
* ``T_loss``: the first record at which loss <= ``loss_level``.

A time that is never reached is NaN. Run files store them as attributes T1,
T2, T_loss and ``stage_time_criteria`` (JSON).

Example
-------
>>> import numpy as np
>>> from meanfield.core.stagetimes import stage_times_of
>>> t = np.arange(4.0); margin = np.array([[0.0, 0.0], [0.2, 0.0], [0.2, 0.3], [0.3, 0.4]])
>>> r = stage_times_of(t, [0.7, 0.5, 0.1, 0.01], margin, [True, False], [1.0, 0.05, 0.0, 0.0], "simultaneous")
>>> round(r["T1"], 4), round(r["T2"], 4), round(r["T_loss"], 4)  # interpolated between the records
(0.9474, 1.3333, 2.5556)
"""

from __future__ import annotations

import math

import numpy as np

DEFAULTS = {"margin": 0.1, "grad_ratio": 0.1, "loss_level": 0.05}


def _first(mask: np.ndarray, t: np.ndarray, start: int = 0) -> float:
    idx = np.flatnonzero(mask[start:])
    return float(t[start + idx[0]]) if idx.size else math.nan


def first_crossing(conds, t, start: int = 0, step=None) -> float:
    """The first time at which every condition holds, interpolated between
    records: at the first record j (from ``start``) where all hold, each
    condition that failed at record j - 1 crosses its threshold at the linear
    interpolation of its value between t[j-1] and t[j]; the time is the latest
    of those crossings. With ``step`` (the records' GD step numbers) the time
    is rounded up to the first whole step at or after it (a GD run changes
    only at steps). A condition already true at the first record considered
    gives that record's time; none reached: NaN.

    Parameters
    ----------
    conds : list of (values (T,), op, threshold)
        op ``">="`` or ``"<="``.
    t : array (T,)
    start : int
        the first record considered.
    step : array (T,), optional

    Returns
    -------
    float

    Examples
    --------
    >>> first_crossing([(np.array([1.0, 0.5, 0.0]), "<=", 0.25)], np.array([0.0, 10.0, 20.0]))
    15.0
    >>> first_crossing([(np.array([1.0, 0.5, 0.0]), "<=", 0.25)], np.array([0.0, 10.0, 20.0]), step=np.array([0, 4, 8]))
    15.0
    """
    t = np.asarray(t, dtype=float)
    vals = [(np.asarray(v, dtype=float), op, float(thr)) for v, op, thr in conds]

    def holds(v, op, thr):
        return v >= thr if op == ">=" else v <= thr

    ok = np.ones(t.size, dtype=bool)
    for v, op, thr in vals:
        ok &= holds(v, op, thr)
    idx = np.flatnonzero(ok[start:])
    if not idx.size:
        return math.nan
    j = start + int(idx[0])
    if j == start:
        return float(t[j])
    t0, t1 = float(t[j - 1]), float(t[j])
    tc = t0
    for v, op, thr in vals:
        if holds(v[j - 1], op, thr):
            continue
        tc = max(tc, crossing(float(v[j - 1]), float(v[j]), thr, t0, t1))
    if step is not None:
        tc = at_step(tc, t0, t1, float(step[j - 1]), float(step[j]), True)
    return float(tc)


def crossing(a: float, b: float, thr: float, t0: float, t1: float) -> float:
    """The time at which a value going linearly from ``a`` (at ``t0``) to ``b`` (at ``t1``) reaches ``thr``,
    clipped to [t0, t1]; ``t1`` when either value is not finite or they are equal. The interpolation of
    :func:`first_crossing`; plain arithmetic on floats, so a paper's numba summary kernel compiles this very
    function (``numba.njit(crossing)``, e.g. ``meanfield.models.mixture.ensemble``) instead of copying it.

    Parameters
    ----------
    a, b : float
        the values at the two records.
    thr : float
        the threshold.
    t0, t1 : float
        the two records' times.

    Returns
    -------
    float

    Example
    -------
    >>> crossing(1.0, 0.5, 0.75, 0.0, 10.0)
    5.0
    """
    if not (math.isfinite(a) and math.isfinite(b)) or a == b:
        lam = 1.0
    else:
        lam = min(max((thr - a) / (b - a), 0.0), 1.0)
    return t0 + lam * (t1 - t0)


def at_step(tc: float, t0: float, t1: float, s0: float, s1: float, gd: bool) -> float:
    """A crossing time ``tc`` in [t0, t1] of a GD run rounded up to the first whole step at or after it
    (the records at ``t0``, ``t1`` are GD steps ``s0``, ``s1``: the state changes only at steps); ``tc``
    itself when ``gd`` is false or ``t1 <= t0``. The rounding of :func:`first_crossing`, compilable by numba
    like :func:`crossing`.

    Parameters
    ----------
    tc : float
        the interpolated crossing time.
    t0, t1 : float
        the two records' times.
    s0, s1 : float
        their step numbers.
    gd : bool
        whether the run is a GD run (steps are whole).

    Returns
    -------
    float

    Example
    -------
    >>> at_step(5.0, 0.0, 10.0, 0.0, 4.0, True)  # step 2 of 4, exactly
    5.0
    >>> at_step(6.0, 0.0, 10.0, 0.0, 4.0, True)  # step 2.4: rounded up to step 3
    7.5
    """
    if not gd or not t1 > t0:
        return tc
    s = s0 + (tc - t0) / (t1 - t0) * (s1 - s0)
    s = min(s1, float(math.ceil(s - 1e-9 * max(1.0, abs(s)))))
    return t0 + (s - s0) / (s1 - s0) * (t1 - t0) if s1 > s0 else t1


def stage_times_of(t, loss, margin, consistent, grad_w, schedule: str, stage_ends: list | None = None,
                   clean=None, margin_level: float | None = None, grad_ratio: float | None = None,
                   loss_level: float | None = None, step=None) -> dict:
    """{"T1", "T2", "T_loss", "criteria"} for one recorded trajectory, given the
    neuron-gradient norm ``grad_w`` (one per record; the ``grad_w`` criterion,
    read only for simultaneous runs). ``clean`` (n,) bool: the samples whose
    margins count (default all; with label noise the unflipped ones). The one
    stage-time rule of every system (a paper's fast path, the engine)."""
    crit = dict(DEFAULTS)
    if margin_level is not None:
        crit["margin"] = margin_level
    if grad_ratio is not None:
        crit["grad_ratio"] = grad_ratio
    if loss_level is not None:
        crit["loss_level"] = loss_level
    t = np.asarray(t, dtype=float)
    out = {"T1": math.nan, "T2": math.nan, "T_loss": math.nan}
    if t.size == 0:
        return {**out, "criteria": crit}
    c = np.asarray(consistent, dtype=bool)
    m = np.asarray(margin)
    if clean is not None:
        keep = np.asarray(clean, dtype=bool)
        c, m = c[keep], m[:, keep]
    mc = m[:, c].min(axis=1) if c.any() else np.full(t.size, np.inf)
    mi = m[:, ~c].min(axis=1) if (~c).any() else np.full(t.size, np.inf)
    if schedule == "three-stage":
        ends = [e for e in (stage_ends or []) if e["stage"] == 1]
        T1 = float(ends[0]["t"]) if ends else math.nan
        crit["T1"] = "end of stage 1"
    else:
        g = np.asarray(grad_w, dtype=float)
        T1 = first_crossing([(mc, ">=", crit["margin"]), (g, "<=", crit["grad_ratio"] * g[0])], t, step=step)
        crit["T1"] = ("first time with consistent margin >= margin and |dLoss/dw| <= grad_ratio |dLoss/dw|(0), "
                      "interpolated between records" + (" to the step" if step is not None else ""))
    out["T1"] = T1
    if not math.isnan(T1):
        i1 = int(np.searchsorted(t, T1 - 1e-12 * max(1.0, abs(T1))))
        T2 = first_crossing([(mi, ">=", crit["margin"])], t, i1, step=step)
        if not math.isnan(T2) and i1 < t.size and T2 == float(t[i1]) and i1 > 0 and mi[i1 - 1] < crit["margin"]:
            # the crossing lies between T1 and the record after it: interpolate there (not before T1)
            T2 = max(T1, first_crossing([(mi, ">=", crit["margin"])], t, i1 - 1, step=step))
        out["T2"] = T2
    crit["T2"] = "first time at or after T1 with inconsistent margin >= margin, interpolated between records"
    out["T_loss"] = first_crossing([(np.asarray(loss), "<=", crit["loss_level"])], t, step=step)
    crit["T_loss"] = "first time with loss <= loss_level, interpolated between records" + (
        " to the step" if step is not None else "")
    return {**out, "criteria": crit}
