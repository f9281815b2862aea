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

Stage ends (the run's ``stage_ends`` attribute) are drawn as vertical dashed
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
    from ...core.guard import validate_mixture_run

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


def _stage_intervals(run) -> list[tuple[int, float, float, bool]]:
    """(stage, t_start, t_end, ended) for every stage that has records or an end."""
    t = np.asarray(run["t"], dtype=float)
    stage = np.asarray(run["stage"])
    ends = {int(e["stage"]): float(e["t"]) for e in (run.attrs.get("stage_ends") or [])}
    present = sorted(set(int(s) for s in np.unique(stage)) | set(ends))
    out, start = [], float(t[0]) if t.size else 0.0
    for s in present:
        if s in ends:
            end, ended = ends[s], True
        else:
            sel = t[stage == s]
            end, ended = (float(sel[-1]) if sel.size else start), False
        out.append((s, start, end, ended))
        start = end
    return out


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


class _Axes:
    """Shared x-axis handling: the time mask (log scale drops t <= 0), stage
    boundaries and stage labels."""

    def __init__(self, run, logx: bool):
        self.run = run
        self.logx = logx
        t = np.asarray(run["t"], dtype=float)
        self.mask = t > 0 if logx else np.ones(t.shape, bool)
        if not self.mask.any():
            self.mask = np.ones(t.shape, bool)
            self.logx = False
        self.t = t[self.mask]
        self.intervals = _stage_intervals(run)
        self.names = _stage_names(run)
        self.rows = 0  # rows of stage labels used above a panel

    def y(self, arr):
        return np.asarray(arr, dtype=float)[self.mask]

    def decorate(self, ax, label_stages: bool = True):
        lo, hi = float(self.t[0]), float(self.t[-1])
        if self.logx:
            ax.set_xscale("log")
        if hi > lo:
            ax.set_xlim(lo, hi)
        ax.set_xlabel("t (log scale)" if self.logx else "t")
        tol = 1e-9 * max(1.0, abs(hi))
        ends = [(s, e) for s, _, e, ended in self.intervals if ended]
        for s, e in ends:
            if lo < e < hi - tol:
                ax.axvline(e, color="0.35", linestyle="--", linewidth=0.9, zorder=0)
        if not label_stages or not self.intervals:
            return
        fig = ax.get_figure()
        width_pt = ax.get_position().width * fig.get_figwidth() * 72.0
        x_lo, x_hi = (np.log10(lo), np.log10(hi)) if self.logx else (lo, hi)
        span = (x_hi - x_lo) or 1.0
        rows_end: list[float] = []  # right edge (axes fraction) of the last label in each row
        for s, a, b, ended in self.intervals:
            a, b = max(a, lo), min(b, hi)
            if b < a:
                continue
            mid = float(np.sqrt(a * b)) if self.logx and a > 0 else 0.5 * (a + b)
            text = f"stage {s}: {self.names.get(s, '?')}" if len(self.intervals) > 1 else self.names.get(s, "")
            if not ended:
                text += " (not ended)"
            xm = ((np.log10(mid) if self.logx else mid) - x_lo) / span
            half = 0.5 * len(text) * 8 * 0.6 / width_pt + 0.01  # fontsize 8, ~0.6 em per character
            xm = float(np.clip(xm, half, 1.0 - half)) if 2 * half < 1.0 else 0.5  # keep labels over the panel
            row = next((r for r, e in enumerate(rows_end) if xm - half > e), len(rows_end))
            if row == len(rows_end):
                rows_end.append(xm + half)
            else:
                rows_end[row] = xm + half
            ax.text(xm, 1.01 + 0.055 * row, text, transform=ax.transAxes, ha="center", va="bottom", fontsize=8,
                    color="0.25", clip_on=False)
        self.rows = max(self.rows, len(rows_end))

    def title(self, ax, text: str, **kw):
        """Panel title placed above the stage labels."""
        ax.set_title(text, pad=5 + 14 * self.rows, **kw)


def _finish(fig, run, out: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.suptitle(_title(run), fontsize=10)
    fig.tight_layout()
    from meanfield.core.io import save_figure

    save_figure(fig, out, dpi=110)
    plt.close(fig)
    return out


def _legend(ax, n_entries: int):
    ax.legend(fontsize=7, ncol=2 if n_entries > 8 else 1, loc="best", framealpha=0.85)


def _neurons(run, X: _Axes, out: Path) -> Path:
    import matplotlib.pyplot as plt

    feats = _features(run)
    heads = [str(h) for h in run["heads"]]
    st = _feature_style(feats)
    w = np.asarray(run["w"], dtype=float)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6), sharey=True)
    for h, ax in enumerate(axes):
        for j, f in enumerate(feats):
            ax.plot(X.t, X.y(w[:, h, j]), label=f"w{heads[h]}[{f}]", **st[f])
        ax.axhline(0, color="0.7", lw=0.6, zorder=0)
        X.decorate(ax)
        X.title(ax, f"head {heads[h]}: neuron alignment")
        ax.set_ylabel(f"$\\tilde w_{{{heads[h]}}}[f] = f^\\top w_{{{heads[h]}}}$")
        _legend(ax, len(feats))
    return _finish(fig, run, out)


def _scores(run, X: _Axes, query: str, out: Path) -> Path:
    import matplotlib.pyplot as plt

    feats = _features(run)
    heads = [str(h) for h in run["heads"]]
    st = _feature_style(feats)
    S = np.asarray(run["S"], dtype=float)
    q = feats.index(query)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6), sharey=True)
    for h, ax in enumerate(axes):
        for a, f in enumerate(feats):
            ax.plot(X.t, X.y(S[:, h, a, q]), label=f"S{heads[h]}[{f},{query}]", **st[f])
        ax.axhline(0, color="0.7", lw=0.6, zorder=0)
        X.decorate(ax)
        X.title(ax, f"head {heads[h]}: scores with query {query}")
        ax.set_ylabel(f"S[key, query] = key$^\\top W_K^\\top W_Q$ query  (query {query})", fontsize=9)
        _legend(ax, len(feats))
    return _finish(fig, run, out)


def _loss_margins(run, X: _Axes, out: Path) -> Path:
    import matplotlib.pyplot as plt

    loss = X.y(run["loss"])
    mc, mi = _min_margins(run)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.6))
    pos = np.where(np.isfinite(loss) & (loss > 0), loss, np.nan)
    ax1.plot(X.t, pos, color="k", lw=1.4, label="population loss")
    if np.isfinite(pos).any():
        ax1.set_yscale("log")
    X.decorate(ax1)
    X.title(ax1, "loss")
    ax1.set_ylabel("loss (log scale)")
    ax1.legend(fontsize=8)
    n_c = int(np.asarray(run["samples"]["consistent"]).astype(bool).sum())
    n_i = int(len(run["samples"]["consistent"]) - n_c)
    if mc is not None:
        ax2.plot(X.t, X.y(mc), color="tab:blue", lw=1.4, label=f"min over {n_c} consistent samples")
    if mi is not None:
        ax2.plot(X.t, X.y(mi), color="tab:red", lw=1.4, label=f"min over {n_i} inconsistent samples")
    ax2.axhline(0, color="0.5", lw=0.8, zorder=0)
    X.decorate(ax2)
    X.title(ax2, "margins")
    ax2.set_ylabel("min margin $y f(X)$")
    ax2.legend(fontsize=8, loc="best")
    return _finish(fig, run, out)


def _self_scores(run, X: _Axes, out: Path) -> Path:
    import matplotlib.pyplot as plt

    feats = _features(run)
    heads = [str(h) for h in run["heads"]]
    A = np.asarray(run["A"], dtype=float)
    B = np.asarray(run["B"], dtype=float)
    ix = {f: j for j, f in enumerate(feats)}
    # (matrix name, array, row, col, colour, style)
    picks = [("B", B, "v1", "v1", "tab:blue", "-"), ("B", B, "v1", "v2", "tab:orange", "-"),
             ("B", B, "c1", "v1", "tab:green", "-"), ("B", B, "c1", "c1", "tab:purple", "-"),
             ("A", A, "v1", "v1", "tab:blue", "--"), ("A", A, "v1", "v2", "tab:orange", "--"),
             ("A", A, "c1", "v1", "tab:green", "--"), ("A", A, "c1", "c1", "tab:purple", "--")]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6), sharey=True)
    for h, ax in enumerate(axes):
        for name, M, r, c, col, ls in picks:
            ax.plot(X.t, X.y(M[:, h, ix[r], ix[c]]), color=col, linestyle=ls, lw=1.4,
                    label=f"{name}{heads[h]}[{r},{c}]")
        ax.axhline(0, color="0.7", lw=0.6, zorder=0)
        X.decorate(ax)
        X.title(ax, f"head {heads[h]}: self-scores (B query solid, A key dashed)", fontsize=10)
        ax.set_ylabel("$B = E^\\top W_Q^\\top W_Q E$,  $A = E^\\top W_K^\\top W_K E$", fontsize=9)
        _legend(ax, len(picks))
    return _finish(fig, run, out)


def plot_run(path, out_dir, logx: bool = False, fmt: str = "png") -> list[Path]:
    """Write the figures of one mixture run file into ``out_dir`` (created if
    needed) and return their paths, in the order of :data:`FIGURES`.

    ``logx=True``: logarithmic time axis; the t = 0 record is left out.
    ``fmt``: ``png`` (default), or ``pdf`` / ``svg`` (vector, for papers).
    Raises FileNotFoundError for a missing file and ValueError for a file that
    is not a mixture run file or holds no records."""
    run = _load(path)
    if np.asarray(run["t"]).size == 0:
        raise ValueError(f"{path}: the run file holds no records; nothing to plot")
    import matplotlib

    matplotlib.use("Agg")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    X = _Axes(run, logx)
    return [
        _neurons(run, X, out_dir / f"neurons.{fmt}"),
        _scores(run, X, "v1", out_dir / f"scores_query_v1.{fmt}"),
        _scores(run, X, "c1", out_dir / f"scores_query_c1.{fmt}"),
        _loss_margins(run, X, out_dir / f"loss_margins.{fmt}"),
        _self_scores(run, X, out_dir / f"self_scores.{fmt}"),
    ]
