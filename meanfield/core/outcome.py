"""What happened in a run, in a few lines: printed by every ``run`` verb at its end.

:func:`outcome_lines` reads a run file (a described model's engine run:
``meanfield model run`` / ``particles``, or a paper's, through the reader its
plug-in registered in ``meanfield.core.hooks``) and says: the status; how each
stage ended (its criterion fired, or it ran to its cap, and then whether a
criterion was set that never fired, with the value it reached); the final
loss and margins (:func:`final_lines`) or what the paper's reader reports;
the detected stage times (where the model has consistent and inconsistent
samples to detect them from). :func:`stage_lines`, :func:`final_lines` and
:func:`criterion_value` are the pieces a reader builds its lines from.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np


def _consistent(run):
    """The samples' consistency flags (bool array), or None where the file has none
    (a general description without a ``consistent`` flag)."""
    samples = run["samples"]
    if "consistent" not in samples:
        return None
    return np.asarray(samples["consistent"]).astype(bool)


def criterion_value(name: str, run, i: int = -1) -> float | None:
    """The last recorded value of a margin or loss criterion (a run file with ``loss``, ``margin`` and
    the samples' ``consistent`` flags), where the file has it."""
    if name == "loss":
        return float(run["loss"][i])
    m = np.asarray(run["margin"][i])
    c = _consistent(run)
    if name == "min_margin":
        return float(m.min())
    if c is None:
        return None
    if name == "consistent_margin" and c.any():
        return float(m[c].min())
    if name == "inconsistent_margin" and (~c).any():
        return float(m[~c].min())
    return None


def stage_lines(run, crits: list, names: list, value) -> list[str]:
    """How each stage ended: its criterion fired, or it ran to its cap (and the
    criterion that never fired, with the value ``value(name, run, i)`` it reached)."""
    lines = []
    ends = run.attrs.get("stage_ends") or []
    unit = "step"
    for e in ends:
        k = int(e.get("stage", 0))
        crit = crits[k - 1] if 0 < k <= len(crits) else None
        name = names[k - 1] if 0 < k <= len(names) else str(k)
        where = f"step {int(e.get('step', 0))}, t = {float(e.get('t', math.nan)):.6g}"
        if e.get("reason") == "criterion":
            lines.append(f"  stage {k} ({name}): " + (f"criterion {crit}" if crit else "its criterion")
                         + f" fired at {where}")
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


def _loss_kind(run) -> str | None:
    """The loss of an engine run file's description (``logistic``, ``squared``,
    ``cross_entropy``), or None where the file does not say."""
    import json

    d = run.attrs.get("description")
    try:
        d = json.loads(d) if isinstance(d, (str, bytes)) else d
        return d.get("loss") if isinstance(d, dict) else None
    except (TypeError, ValueError):
        return None


def final_lines(run, times_always: bool = True) -> list[str]:
    """Final loss and margins, and the detected stage times (a run file with ``loss`` and ``margin``)."""
    lines = []
    if len(run["t"]):
        m = np.asarray(run["margin"][-1])
        c = _consistent(run)
        parts = [f"loss {float(run['loss'][-1]):.6g}"]
        if m.size and _loss_kind(run) == "squared":  # a regression: the margin is minus the worst residual
            parts.append(f"largest residual max|f - y| {-float(m.min()):.4g}")
        elif m.size:
            parts.append(f"min margin {float(m.min()):.4g}")
        if c is not None and c.shape == m.shape and c.any():
            parts.append(f"consistent {float(m[c].min()):.4g}")
        if c is not None and c.shape == m.shape and (~c).any():
            parts.append(f"inconsistent {float(m[~c].min()):.4g}")
        lines.append(f"  final (t = {float(run['t'][-1]):.6g}): " + ", ".join(parts))
    times, reached = [], False
    for k in ("T1", "T2", "T_loss"):
        v = run.attrs.get(k)
        if v is not None:
            v = float(v)
            reached = reached or math.isfinite(v)
            times.append(f"{k} = {v:.6g}" if math.isfinite(v) else f"{k} never reached")
    # a general description without consistent / inconsistent samples has no stage times to detect
    if times and (times_always or reached or _consistent(run) is not None):
        lines.append("  stage times: " + ", ".join(times))
    return lines


def _config_stages(run) -> tuple[list, list]:
    """(criteria, names) of a run file's stages from its config alone: ``criterion`` for one stage
    (``simultaneous``), ``stage_criteria`` for several (``stage k``)."""
    cfg = run.config or {}
    n = max([int(e.get("stage", 1)) for e in (run.attrs.get("stage_ends") or [])] or [1])
    if n == 1:
        return [cfg.get("criterion")], ["simultaneous"]
    sc = cfg.get("stage_criteria")
    crits = (list(sc) if isinstance(sc, (list, tuple)) else [])[:n]
    return crits + [None] * (n - len(crits)), [f"stage {k + 1}" for k in range(n)]


def engine_lines(run, stages=None) -> list[str]:
    """A general description's run (``meanfield model run`` / ``particles``).
    ``stages``: (name, criterion text or None) per stage, from the
    description (the run file keeps only the run knobs); without it the
    knobs' ``criterion`` is taken for a one-stage run."""
    if stages is None:
        params = (run.config or {}).get("parameters") or {}
        n = max([int(e.get("stage", 1)) for e in (run.attrs.get("stage_ends") or [])] or [1])
        stages = [(f"stage {k + 1}" if n > 1 else "simultaneous", params.get("criterion") if n == 1 else None)
                  for k in range(n)]
    names = [str(nm) for nm, _ in stages]
    crits = [c for _, c in stages]
    return stage_lines(run, crits, names, criterion_value) + final_lines(run, times_always=False)


def criterion_text(crit) -> str | None:
    """A parsed criterion (name, op, threshold) as the user wrote it: ``loss<=0.01``."""
    if crit is None:
        return None
    if isinstance(crit, str):
        return crit
    name, op, thr = crit
    return f"{name}{op}{float(thr):g}"


def width_sweep_lines(summary: dict) -> list[str]:
    """A width sweep's outcome (``model width-sweep``): the infinite-width run's
    status, the finite-width runs' statuses, the lead quantity's sup error at
    the smallest and largest width, the exponent or why there is none."""
    fin = summary.get("finite_width_statuses") or {}
    widths = list(summary.get("widths") or [])
    lines = [f"outcome: infinite-width run {summary.get('infinite_width_status', '?')}; "
             f"{sum(fin.values())} finite-width runs: " + (", ".join(f"{v} {k}" for k, v in sorted(fin.items())) or "none")]
    lead = summary.get("lead")
    err = (summary.get("errors") or {}).get(lead) if lead else None
    if err and widths:
        lines.append(f"  sup error of {lead}: {float(err[0]):.3g} at m = {widths[0]}, "
                     f"{float(err[-1]):.3g} at m = {widths[-1]}")
    if summary.get("exponent") is not None:
        ci = summary.get("exponent_ci")
        from .widths import TWO_POINTS

        ci_s = f" (95% CI {float(ci[0]):.3f} .. {float(ci[1]):.3f})" if ci else f" ({TWO_POINTS})"
        lines.append(f"  {lead} error ~ m^{float(summary['exponent']):.3f}{ci_s}")
    else:
        kinks = summary.get("kinks") or []
        n_split = sum(1 for k in kinks if isinstance(k, dict) and k.get("split"))
        lines.append(f"  no exponent: {n_split} ReLU kink(s) of the infinite-width run split the finite-width runs "
                     "(message above)" if n_split else "  no exponent (message above)")
    if summary.get("elapsed_s") is not None:
        lines.append(f"  elapsed {float(summary['elapsed_s']):.3g} s")
    return lines


def outcome_lines(path, stages=None) -> list[str]:
    """A few lines saying what happened in the run file at ``path``: every
    ``run`` verb ends with them. A paper's run file gets its plug-in's lines
    (the reader's ``outcome_lines``, ``meanfield.core.hooks.run_reader``), a
    described model's run :func:`engine_lines`; ``stages``: an engine run's
    (name, criterion) per stage."""
    from .io import read_run

    run = read_run(Path(path))
    status = run.attrs.get("status", "?")
    head = f"outcome: {status}"
    system = run.attrs.get("system")
    from .hooks import run_reader  # a paper's run files: the reader its plug-in registered

    reader = run_reader(system) if isinstance(system, str) and system != "engine" else None
    try:
        if getattr(reader, "outcome_lines", None) is not None:
            body = reader.outcome_lines(run)
        elif system == "engine":
            body = engine_lines(run, stages)
        else:  # a file of no registered system: its stages (the config's criteria) and final numbers
            body = stage_lines(run, *_config_stages(run), criterion_value) + final_lines(run)
    except (KeyError, IndexError, ValueError, TypeError) as e:  # an unusual file: say so, never crash
        body = [f"  (no summary: {type(e).__name__}: {e})"]
    return [head] + body
