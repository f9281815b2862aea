"""What happened in a run, in a few lines: printed by ``run`` at its end.

:func:`outcome_lines` reads a run file (either system) and says: the status;
how each stage ended (its criterion fired, or it ran to its cap, and then
whether a criterion was set that never fired, with the value it reached);
the final loss and margins (mixture) or the selected parent set, each head's
top lag and a (induction); the detected stage times.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np


def _crit_value(name: str, run, i: int = -1) -> float | None:
    """The last recorded value of a mixture criterion, where the file has it."""
    if name == "loss":
        return float(run["loss"][i])
    m = np.asarray(run["margin"][i])
    c = np.asarray(run["samples"]["consistent"]).astype(bool)
    if name == "min_margin":
        return float(m.min())
    if name == "consistent_margin" and c.any():
        return float(m[c].min())
    if name == "inconsistent_margin" and (~c).any():
        return float(m[~c].min())
    return None


def _induction_value(name: str, run, i: int = -1) -> float | None:
    if name == "loss":
        return float(run["loss_train"][i])
    if name == "a":
        return float(run["a"][i])
    if name == "c_top":
        return float(np.max(run["c_weight"][i]))
    if name == "rpe_top":
        return float(np.max(run["rpe"][i]))
    return None


def _stage_lines(run, crits: list, names: list, value) -> list[str]:
    lines = []
    ends = run.attrs.get("stage_ends") or []
    unit = "step"
    for e in ends:
        k = int(e.get("stage", 0))
        crit = crits[k - 1] if 0 < k <= len(crits) else None
        name = names[k - 1] if 0 < k <= len(names) else str(k)
        where = f"step {int(e.get('step', 0))}, t = {float(e.get('t', math.nan)):.6g}"
        if e.get("reason") == "criterion":
            lines.append(f"  stage {k} ({name}): criterion {crit} fired at {where}")
        elif crit:
            v = None
            steps = np.asarray(run["step"]) if "step" in run else np.zeros(0)
            hit = np.flatnonzero(steps == int(e.get("step", -1)))
            i = int(hit[-1]) if hit.size else -1  # the record at the stage's end
            try:
                v = value(crit.replace(">=", "<=").split("<=")[0].strip(), run, i)
            except (KeyError, IndexError, ValueError):
                v = None
            got = f" (it reached {v:.6g})" if v is not None and math.isfinite(v) else ""
            lines.append(f"  stage {k} ({name}): ran to its cap at {where}; criterion {crit} NEVER fired{got}")
        else:
            lines.append(f"  stage {k} ({name}): ran to its {unit} cap at {where} (no criterion)")
    return lines


def mixture_lines(run) -> list[str]:
    cfg = run.config or {}
    if cfg.get("schedule") == "three-stage":
        crits = list(cfg.get("stage_criteria") or [None] * 3)
        names = ["neurons", "attention", "neurons" if cfg.get("stage3", "neurons") == "neurons" else "both"]
    else:
        crits, names = [cfg.get("criterion")], ["simultaneous"]
    lines = _stage_lines(run, crits, names, _crit_value)
    if len(run["t"]):
        m = np.asarray(run["margin"][-1])
        c = np.asarray(run["samples"]["consistent"]).astype(bool)
        parts = [f"loss {float(run['loss'][-1]):.6g}", f"min margin {float(m.min()):.4g}"]
        if c.any():
            parts.append(f"consistent {float(m[c].min()):.4g}")
        if (~c).any():
            parts.append(f"inconsistent {float(m[~c].min()):.4g}")
        lines.append(f"  final (t = {float(run['t'][-1]):.6g}): " + ", ".join(parts))
    times = []
    for k in ("T1", "T2", "T_loss"):
        v = run.attrs.get(k)
        if v is not None:
            v = float(v)
            times.append(f"{k} = {v:.6g}" if math.isfinite(v) else f"{k} never reached")
    if times:
        lines.append("  stage times: " + ", ".join(times))
    return lines


def induction_lines(run) -> list[str]:
    cfg = run.config or {}
    sched = {"three-phase": "three-stage", "joint": "simultaneous"}.get(cfg.get("schedule"), cfg.get("schedule"))
    stage_crits = cfg.get("stage_criteria", cfg.get("phase_criteria"))  # files before the one vocabulary: phase_*
    if sched in (None, "three-stage"):
        crits = list(stage_crits or [None] * 3)
        names = ["c (selector)", "w (RPE)", "a (classifier)"]
    elif sched == "simultaneous":
        crits, names = [cfg.get("criterion")], ["simultaneous"]
    else:  # a schedule string such as w,c,a or cw,a: one phase per group
        groups = str(cfg["schedule"]).split(",")
        crits = list(stage_crits or [None] * len(groups))
        names = [f"trains {g}" for g in groups]
    lines = _stage_lines(run, crits, names, _induction_value)
    if not len(run["t"]):
        return lines
    cw = np.asarray(run["c_weight"][-1])
    subsets = [str(s) for s in run["subsets"]]
    members = np.asarray(run["subset_members"])
    rpe = np.asarray(run["rpe"][-1])
    lags = np.asarray(run["lags"])
    top = [int(lags[h, int(np.argmax(rpe[h]))]) for h in range(rpe.shape[0])]
    j = int(np.argmax(cw))
    heads = [int(h) for h in members[j] if h >= 0]
    parents = sorted({top[h] for h in heads})
    lines.append(f"  selected subset {subsets[j]} (c-mass {cw[j]:.3f}): parent set {{{', '.join(map(str, parents))}}}"
                 f" (true pa = {{{', '.join(str(p) for p in cfg.get('pa', []))}}})")
    lines.append("  heads' top lags: " + ", ".join(
        f"head {h + 1} lag {top[h]} ({float(np.max(rpe[h])):.3f})" for h in range(len(top))))
    lt = float(run["loss_train"][-1])
    lines.append(f"  final (t = {float(run['t'][-1]):.6g}): a = {float(run['a'][-1]):.4g}, train loss {lt:.4g}"
                 + (f", held-out loss {float(run['loss_test_seen'][-1]):.4g} (sequences whose target occurs in "
                    f"the context)" if "loss_test_seen" in run and math.isfinite(float(run["loss_test_seen"][-1]))
                    else f", held-out loss {float(run['loss_test'][-1]):.4g}" if "loss_test" in run
                    and math.isfinite(float(run["loss_test"][-1])) else ""))
    return lines


def outcome_lines(path) -> list[str]:
    """A few lines saying what happened in the run file at ``path`` (either system)."""
    from .io import read_run

    run = read_run(Path(path))
    status = run.attrs.get("status", "?")
    head = f"outcome: {status}"
    try:
        body = induction_lines(run) if run.attrs.get("system") == "induction" else mixture_lines(run)
    except (KeyError, IndexError, ValueError, TypeError) as e:  # an unusual file: say so, never crash
        body = [f"  (no summary: {type(e).__name__}: {e})"]
    return [head] + body
