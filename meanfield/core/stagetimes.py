"""Stage times of a recorded trajectory: the one rule of every system.

Documented criteria (all thresholds are arguments; defaults in
:data:`DEFAULTS`), evaluated on the recorded states, so a time is resolved to
the record grid (record every step, or use stage criteria, for exact steps):

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
>>> r["T1"], r["T2"], r["T_loss"]
(1.0, 2.0, 3.0)
"""

from __future__ import annotations

import math

import numpy as np

DEFAULTS = {"margin": 0.1, "grad_ratio": 0.1, "loss_level": 0.05}


def _first(mask: np.ndarray, t: np.ndarray, start: int = 0) -> float:
    idx = np.flatnonzero(mask[start:])
    return float(t[start + idx[0]]) if idx.size else math.nan


def stage_times_of(t, loss, margin, consistent, grad_w, schedule: str, stage_ends: list | None = None,
                   clean=None, margin_level: float | None = None, grad_ratio: float | None = None,
                   loss_level: float | None = None) -> dict:
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
        ok = (mc >= crit["margin"]) & (g <= crit["grad_ratio"] * g[0])
        T1 = _first(ok, t)
        crit["T1"] = "first record with consistent margin >= margin and |dLoss/dw| <= grad_ratio |dLoss/dw|(0)"
    out["T1"] = T1
    if not math.isnan(T1):
        i1 = int(np.searchsorted(t, T1 - 1e-12 * max(1.0, abs(T1))))
        out["T2"] = _first(mi >= crit["margin"], t, i1)
    crit["T2"] = "first record at or after T1 with inconsistent margin >= margin"
    out["T_loss"] = _first(np.asarray(loss) <= crit["loss_level"], t)
    crit["T_loss"] = "first record with loss <= loss_level"
    return {**out, "criteria": crit}
