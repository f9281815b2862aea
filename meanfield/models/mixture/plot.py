"""Figures and a markdown summary of one mixture run file (the paper's Figure 1).

:func:`plot_run` reads a run file written by :mod:`meanfield.models.mixture.run` and
writes PNG figures against time t:

- ``neurons.png``: neuron alignments w~_h[f] = f^T w_h for every feature f
  (c_k solid, v_k dashed), one panel per head (+, -);
- ``scores_query_v1.png`` / ``scores_query_c1.png``: the scores
  S_h[a, q] = a^T W_Kh^T W_Qh q with the QUERY q = v1 (resp. c1) fixed, for every
  KEY feature a, one panel per head;
- ``loss_margins.png``: the population loss (log y axis) and the smallest
  margin y f(X) over the consistent and over the inconsistent samples;
- ``self_scores.png``: a few query self-scores B_h = E^T W_Q^T W_Q E and key
  self-scores A_h = E^T W_K^T W_K E, one panel per head.

The panels are the engine's generic ones (``meanfield.engine.plot.plot_panels``):
this module only says which (:data:`PANELS`, registered for the system
``mixture`` by ``plugin``), with the paper's labels, stage names and feature
styles. Stage ends (the run's ``stage_ends`` attribute) are drawn as vertical dashed
lines and every stage is labelled above the panels. With ``logx=True`` the
time axis is logarithmic and the record at t = 0 is left out.

:func:`summary_markdown` returns a short markdown summary of the same file.
This module has no command-line code; figures are closed after saving.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...core.io import read_run

__all__ = ["plot_run", "summary_markdown", "FIGURES"]

FIGURES = ("neurons.png", "scores_query_v1.png", "scores_query_c1.png", "loss_margins.png", "self_scores.png")

_REQUIRED = ("features", "t", "stage", "loss", "w", "S", "A", "B", "margin", "samples")


# ----------------------------------------------------------------------------- loading

def _load(path):
    """Read and check a mixture run file. FileNotFoundError if missing,
    ValueError if it is not a (non-empty) mixture run file."""
    path = Path(path)
    try:
        run = read_run(path)
    except OSError as e:  # h5py: not an HDF5 file at all
        if not path.exists():
            raise
        raise ValueError(f"{path}: not a readable HDF5 run file ({e})") from e
    system = run.attrs.get("system")
    if system != "mixture":
        raise ValueError(f"{path}: not a mixture run file (system attribute {system!r})")
    missing = [k for k in _REQUIRED if k not in run]
    if missing:
        raise ValueError(f"{path}: mixture run file lacks dataset(s) {', '.join(missing)}")
    from .schema import validate_mixture_run

    validate_mixture_run(run, path)  # shapes and the config attribute; names the wrong field
    return run


def _features(run) -> list[str]:
    return [str(f) for f in run["features"]]


def _stage_names(run) -> dict[int, str]:
    schedule = run.attrs.get("schedule")
    if schedule == "three-stage":
        stage3 = (run.config or {}).get("stage3", "neurons")
        return {1: "neurons", 2: "attention", 3: "neurons" if stage3 == "neurons" else "neurons + attention"}
    return {1: str(schedule or "training")}


def _end_index(run, stage_no: int, t_end: float) -> int:
    """Index of the record that holds the state at the end of ``stage_no``."""
    t = np.asarray(run["t"], dtype=float)
    stage = np.asarray(run["stage"])
    tol = 1e-9 * max(1.0, abs(t_end))
    idx = np.nonzero((stage == stage_no) & (t <= t_end + tol))[0]
    if idx.size:
        return int(idx[-1])
    idx = np.nonzero(t <= t_end + tol)[0]
    return int(idx[-1]) if idx.size else 0


def _min_margins(run) -> tuple[np.ndarray | None, np.ndarray | None]:
    m = np.asarray(run["margin"], dtype=float)
    cons = np.asarray(run["samples"]["consistent"]).astype(bool)
    mc = m[:, cons].min(axis=1) if cons.any() else None
    mi = m[:, ~cons].min(axis=1) if (~cons).any() else None
    return mc, mi


def _fmt(x) -> str:
    x = float(x)
    if not np.isfinite(x):
        return str(x)
    return f"{x + 0.0:.4g}"  # + 0.0 turns -0 into 0


def _config_line(run) -> str:
    a, c = run.attrs, run.config or {}
    width = c.get("width")
    parts = [f"K={a.get('K')}", f"L={a.get('L')}", f"omega={_fmt(a.get('omega'))}", f"eta={_fmt(a.get('eta'))}",
             f"method={a.get('method')}", f"schedule={a.get('schedule')}",
             f"width={'inf' if width is None else width}"]
    for key in ("neuron_init", "relu_prime_at_zero"):
        if key in c:
            parts.append(f"{key}={c[key]}")
    if a.get("schedule") == "three-stage":
        parts.append(f"stage_steps={tuple(c.get('stage_steps', ()))}" if a.get("method") == "gd"
                     else f"stage_times={tuple(c.get('stage_times') or ())}")
        if any(c.get("stage_criteria") or ()):
            parts.append(f"stage_criteria={tuple(c.get('stage_criteria'))}")
    else:
        parts.append(f"steps={c.get('steps')}" if a.get("method") == "gd" else f"t_end={c.get('t_end')}")
        if c.get("criterion"):
            parts.append(f"criterion={c.get('criterion')}")
    return ", ".join(parts)


# ----------------------------------------------------------------------------- summary

def summary_markdown(path) -> str:
    """A short markdown summary of a mixture run file: config, status and
    message, every stage end (step, time, reason) with the loss and the
    smallest consistent / inconsistent margins there and at the last record,
    and the final neuron alignments per head."""
    run = _load(path)
    a = run.attrs
    lines = [f"## Mixture run `{Path(path).name}`", "",
             f"- config: {_config_line(run)}",
             f"- status: **{a.get('status')}**: {a.get('message')}"]
    t = np.asarray(run["t"], dtype=float)
    if t.size == 0:
        lines += ["- the file holds no records", ""]
        return "\n".join(lines)
    step = np.asarray(run["step"]) if "step" in run else np.full(t.shape, -1)
    loss = np.asarray(run["loss"], dtype=float)
    mc, mi = _min_margins(run)
    names = _stage_names(run)

    def margins(i):
        return (_fmt(mc[i]) if mc is not None else "n/a", _fmt(mi[i]) if mi is not None else "n/a")

    lines += ["", "| stage end | reason | step | t | loss | min margin consistent | min margin inconsistent |",
              "|---|---|---|---|---|---|---|"]
    ends = a.get("stage_ends") or []
    for e in ends:
        s = int(e["stage"])
        i = _end_index(run, s, float(e["t"]))
        note = "" if abs(t[i] - float(e["t"])) <= 1e-9 * max(1.0, abs(t[i])) else f" (record at t={_fmt(t[i])})"
        c_, i_ = margins(i)
        lines.append(f"| {s} ({names.get(s, '?')}) | {e.get('reason')} | {e.get('step')} | {_fmt(e['t'])}{note} "
                     f"| {_fmt(loss[i])} | {c_} | {i_} |")
    c_, i_ = margins(-1)
    lines.append(f"| last record | {a.get('status')} | {int(step[-1])} | {_fmt(t[-1])} | {_fmt(loss[-1])} "
                 f"| {c_} | {i_} |")
    if not ends:
        lines.append("")
        lines.append("No stage ended (no stage_ends recorded).")

    feats = _features(run)
    heads = [str(h) for h in run["heads"]] if "heads" in run else ["+", "-"]
    w = np.asarray(run["w"], dtype=float)[-1]
    lines += ["", f"Final neuron alignments w~_h[f] = f^T w_h (t = {_fmt(t[-1])}):", "",
              "| head | " + " | ".join(feats) + " |", "|---" * (len(feats) + 1) + "|"]
    for h, name in enumerate(heads):
        lines.append(f"| {name} | " + " | ".join(f"{w[h, j] + 0.0:.3f}" for j in range(len(feats))) + " |")
    lines.append("")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- figures

def _title(run) -> str:
    a, c = run.attrs, run.config or {}
    width = "$\\infty$" if c.get("width") is None else c.get("width")
    return (f"K={a.get('K')}, L={a.get('L')}, $\\omega$={_fmt(a.get('omega'))}, $\\eta$={_fmt(a.get('eta'))}, "
            f"{a.get('schedule')} ({a.get('method')}, width {width}); status: {a.get('status')}")


def _feature_style(feats: list[str]):
    """Colour by group k, solid for c_k and dashed for v_k."""
    import matplotlib.pyplot as plt

    K = len(feats) // 2
    cmap = plt.get_cmap("tab10" if K <= 10 else "tab20")
    styles = {}
    for j, f in enumerate(feats):
        k = j % K
        lw = 1.2 + (1.8 * (K - 1 - k) / (K - 1) if K > 1 else 0.0)  # group 1 widest: coinciding curves stay visible
        styles[f] = dict(color=cmap(k % cmap.N), linestyle="-" if f.startswith("c") else "--", linewidth=lw)
    return styles


#: the mixture's run figures, drawn by the engine's generic panels (``meanfield.engine.plot.plot_panels``)
#: and registered for the system "mixture" (``plugin``: ``register_run_panels``)
def _panels():
    from ...engine.plot import HeadPanels, Lines, LossMargins, RunPanels

    picks = [("B", "v1", "v1", "tab:blue", "-"), ("B", "v1", "v2", "tab:orange", "-"),
             ("B", "c1", "v1", "tab:green", "-"), ("B", "c1", "c1", "tab:purple", "-"),
             ("A", "v1", "v1", "tab:blue", "--"), ("A", "v1", "v2", "tab:orange", "--"),
             ("A", "c1", "v1", "tab:green", "--"), ("A", "c1", "c1", "tab:purple", "--")]

    def scores(q):
        return HeadPanels(f"scores_query_{q}", (Lines("S", ("*", q), "S{head}[{f}," + q + "]"),),
                          "head {head}: scores with query " + q,
                          f"S[key, query] = key$^\\top W_K^\\top W_Q$ query  (query {q})", ylabel_size=9)

    figures = (
        HeadPanels("neurons", (Lines("w", ("*",), "w{head}[{f}]"),), "head {head}: neuron alignment",
                   "$\\tilde w_{{{head}}}[f] = f^\\top w_{{{head}}}$"),
        scores("v1"), scores("c1"),
        LossMargins("loss_margins", "consistent"),
        HeadPanels("self_scores", tuple(Lines(M, (r, c), M + "{head}[" + f"{r},{c}]",
                                              dict(color=col, linestyle=ls, lw=1.4)) for M, r, c, col, ls in picks),
                   "head {head}: self-scores (B query solid, A key dashed)",
                   "$B = E^\\top W_Q^\\top W_Q E$,  $A = E^\\top W_K^\\top W_K E$", ylabel_size=9, title_size=10),
    )
    return RunPanels(figures, title=_title, stage_names=_stage_names, feature_style=_feature_style)


PANELS = _panels()


def plot_run(path, out_dir, logx: bool = False, fmt: str = "png") -> list[Path]:
    """Write the figures of one mixture run file into ``out_dir`` (created if
    needed) and return their paths, in the order of :data:`FIGURES`.

    ``logx=True``: logarithmic time axis; the t = 0 record is left out.
    ``fmt``: ``png`` (default), or ``pdf`` / ``svg`` (vector, for papers).
    Raises FileNotFoundError for a missing file and ValueError for a file that
    is not a mixture run file or holds no records. The figures are the
    registered panels of the system (``meanfield.engine.registry.run_panels``)
    drawn by ``meanfield.engine.plot.plot_panels``."""
    run = _load(path)
    if np.asarray(run["t"]).size == 0:
        raise ValueError(f"{path}: the run file holds no records; nothing to plot")
    from ...engine import registry
    from ...engine.plot import plot_panels

    return plot_panels(run, registry.run_panels("mixture"), out_dir, logx=logx, fmt=fmt)
