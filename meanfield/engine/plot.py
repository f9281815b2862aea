"""Figures of a general engine run file: loss, margins and the reduced variables of every head.

Every line is labelled: the loss, each sample's margin by the sample's name
from the description, each state entry by its name (``W[h,v1,v2]``,
``S[+,c1,v1]``, the names of :attr:`meanfield.Run.entries`). Beyond
:data:`LEGEND_MAX` lines in one panel the legend would hide the data, so the
panel keeps the :data:`LEGEND_MAX` entries that move most, labelled, and
says in its title how many it leaves out (``meanfield.open_run(path).plot(
entries=[...])`` draws any others). Axes carry their units: time is
gradient-flow time t (steps x eta for GD).

:func:`engine_figures` returns the matplotlib Figures (tests read their
artists); :func:`plot_engine_run` writes them as PNGs.

A paper's run files (named arrays, time first, then the head) get the
panels the paper registered (:class:`RunPanels`, ``registry.register_run_panels``),
drawn by :func:`plot_panels`: per-head panels of labelled lines
(:class:`HeadPanels` of :class:`Lines`), the loss beside the smallest margin
of two sample groups (:class:`LossMargins`), stage ends as dashed lines and
every stage labelled above the panels. The one run-plot module: no paper
draws its own axes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

#: the most labelled lines in one panel
LEGEND_MAX = 16


def _labelled(ax, t, series: np.ndarray, labels: list[str], title: str) -> None:
    """Draw ``series`` (T, n) with one legend label each (entries equal at
    every record, by symmetry, as one line: ``A[+,c1,c1] (= 3 more)``);
    above LEGEND_MAX distinct lines, the LEGEND_MAX that move most (the title
    says how many are left out)."""
    series = np.asarray(series, dtype=float).reshape(len(t), -1)
    groups: dict = {}  # entries equal at every record (symmetry) draw as one line
    for i in range(series.shape[1]):
        groups.setdefault((np.round(series[:, i], 12) + 0.0).tobytes(), []).append(i)  # + 0.0: -0 == 0
    reps = [g[0] for g in groups.values()]
    labels = [labels[g[0]] + (f" (= {len(g) - 1} more)" if len(g) > 1 else "") for g in groups.values()]
    series = series[:, reps]
    n = series.shape[1]
    idx = list(range(n))
    if n > LEGEND_MAX:
        moved = np.nanmax(series, axis=0) - np.nanmin(series, axis=0)
        idx = sorted(np.argsort(-moved, kind="stable")[:LEGEND_MAX])
        title += f" ({LEGEND_MAX} of {n} distinct that move most)"
    for i in idx:
        ax.plot(t, series[:, i], lw=0.9, label=labels[i])
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=6, ncol=2 if len(idx) > 8 else 1, loc="upper left")  # "best" is slow on long runs


def engine_figures(r) -> list[tuple[str, object]]:
    """The figures of an engine run, every line labelled.

    Parameters
    ----------
    r : meanfield.Run
        an engine run (:func:`meanfield.open_run` of an engine run file, or
        :func:`meanfield.run`).

    Returns
    -------
    list of (str, matplotlib.figure.Figure)
        (file stem, figure): ``loss`` (loss and every sample's margin) and
        ``variables_<head>`` (every reduced variable of the head, one panel
        each).

    Examples
    --------
    >>> figs = engine_figures(meanfield.open_run("runs/incontext.h5"))   # doctest: +SKIP
    >>> [name for name, _ in figs]                                       # doctest: +SKIP
    ['loss', 'variables_h']
    """
    import matplotlib.pyplot as plt

    from ..core.run import time_label

    t = np.asarray(r["t"], dtype=float)
    xl = time_label(r)
    out = []
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    loss = np.asarray(r["loss"], dtype=float)
    ax[0].plot(t, loss, label="loss")
    if loss.size and np.all(loss > 0):
        ax[0].set_yscale("log")
    ax[0].set_xlabel(xl)
    d = r.attrs.get("description")
    kind = d.get("loss") if isinstance(d, dict) and isinstance(d.get("loss"), str) else "training"
    ax[0].set_ylabel(f"{kind} loss")
    ax[0].legend(fontsize=8, loc="upper right")
    ax[0].set_title("loss", fontsize=9)
    margin = np.asarray(r["margin"], dtype=float) if "margin" in r else np.empty((len(t), 0))
    smp = r.get("samples") or {}
    names = [str(x) for x in np.ravel(smp.get("names", []))] if isinstance(smp, dict) else []
    mlab = [f"margin of {names[i]}" if i < len(names) else f"margin of sample {i + 1}"
            for i in range(margin.reshape(len(t), -1).shape[1])]
    if margin.size:
        _labelled(ax[1], t, margin, mlab, "margins y_i f(x_i)")
    ax[1].set_xlabel(xl)
    ax[1].set_ylabel("margin (output units)")
    fig.tight_layout()
    out.append(("loss", fig))
    entries = r.entries
    X = r.states
    feats = [str(x) for x in r["features"]] if "features" in r else []
    for head, group in (r.get("variables") or {}).items():
        panels = [k for k, v in group.items() if np.asarray(v).ndim >= 1 and np.asarray(v).shape[0] == len(t)]
        if not panels:
            continue
        fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 4), squeeze=False)
        for a, nm in zip(axes[0], panels):
            cols = [i for i, e in enumerate(entries) if e.startswith(f"{nm}[{head},") or e == f"{nm}[{head}]"]
            if not cols:  # not a state entry: label by flat index
                v = np.asarray(group[nm]).reshape(len(t), -1)
                _labelled(a, t, v, [f"{nm}[{head},{j}]" for j in range(v.shape[1])], f"{head}: {nm}")
            else:
                _labelled(a, t, X[:, cols], [entries[i] for i in cols], f"{head}: {nm}")
            a.set_xlabel(xl)
            a.set_ylabel(f"{nm} (reduced variable)")
        fig.suptitle(f"{r.attrs.get('model', '')} head {head} (features {', '.join(feats)})", fontsize=9)
        fig.tight_layout()
        out.append((f"variables_{head}", fig))
    return out


def _write(figs, out: Path) -> list[Path]:
    import matplotlib.pyplot as plt

    from ..core.io import save_figure  # the one figure writer (atomic: a full disk is one line naming the file)

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for name, fig in figs:
        try:
            files.append(save_figure(fig, out / f"{name}.png", dpi=110))
        finally:
            plt.close(fig)
    return files


def plot_generic_run(r, out: Path) -> list[Path]:
    """``run.png``: :meth:`meanfield.Run.plot` (the loss and the state entries
    that move most, labelled) of a run file of a system without figures of
    its own (e.g. an induction run given to ``meanfield model plot``).

    Parameters
    ----------
    r : meanfield.Run
    out : Path

    Returns
    -------
    list of Path

    Example
    -------
    >>> plot_generic_run(meanfield.open_run("runs/induction.h5"), Path("figs"))   # doctest: +SKIP
    """
    import matplotlib

    matplotlib.use("Agg")
    return _write([("run", r.plot())], out)


def plot_engine_run(r, path: Path, out: Path) -> list[Path]:
    """Write :func:`engine_figures` of the run file ``path`` as PNGs into ``out``.

    Parameters
    ----------
    r : meanfield.Run
        the run file, opened.
    path : Path
        its path (for the titles).
    out : Path
        the folder (created).

    Returns
    -------
    list of Path

    Examples
    --------
    >>> plot_engine_run(meanfield.open_run(p), p, Path("figs"))   # doctest: +SKIP
    """
    import matplotlib

    matplotlib.use("Agg")
    return _write(engine_figures(r), out)


# ---------------------------------------------------------------- registered panels (a paper's run figures)
#
# A paper whose run files keep named arrays (time first, then the head) registers
# which figures it wants (:class:`RunPanels`, ``meanfield.engine.registry.register_run_panels``);
# :func:`plot_panels` draws them: one panel per head of labelled lines, or the loss
# beside the smallest margin of named sample groups, with the stage ends as dashed
# lines and every stage labelled above the panels (``logx``: log time, t = 0 left out).

from dataclasses import dataclass, field  # noqa: E402
from typing import Any, Callable  # noqa: E402


@dataclass(frozen=True)
class Lines:
    """Lines of one per-head panel: ``dataset[:, head, *index]`` of a run file.

    ``index`` holds feature names or ``"*"`` (one line per feature, styled by the
    :attr:`RunPanels.feature_style` of that feature); ``label`` is formatted with
    ``head`` and ``f`` (the ``"*"`` feature); ``style`` fixes the line style.
    """

    dataset: str
    index: tuple
    label: str
    style: dict | None = None


@dataclass(frozen=True)
class HeadPanels:
    """A figure of one panel per head: ``lines`` drawn against t, ``title`` (formatted with ``head``) and ``ylabel``."""

    stem: str
    lines: tuple
    title: str
    ylabel: str
    ylabel_size: float | None = None
    title_size: float | None = None
    zero_line: bool = True


@dataclass(frozen=True)
class LossMargins:
    """A figure of the loss (log scale) and the smallest margin over the sample groups
    ``samples[group]`` True and False (``labels``: the two groups' names)."""

    stem: str
    group: str
    labels: tuple = ("consistent", "inconsistent")


@dataclass(frozen=True)
class RunPanels:
    """The run figures a paper registers for its system (``register_run_panels``).

    ``figures``: :class:`HeadPanels` / :class:`LossMargins`; ``title(run)`` the
    suptitle; ``stage_names(run)`` {stage number: name}; ``feature_style(features)``
    {feature: matplotlib line style}; ``heads``: the heads' names when the file has no
    ``heads`` dataset.
    """

    figures: tuple
    title: Callable[[Any], str] | None = None
    stage_names: Callable[[Any], dict] | None = None
    feature_style: Callable[[list], dict] | None = None
    heads: tuple = field(default=("+", "-"))


def stage_intervals(run) -> list[tuple[int, float, float, bool]]:
    """(stage, t_start, t_end, ended) of every stage of a run file that has records or an end.

    Parameters
    ----------
    run : Run
        ``meanfield.core.io.read_run`` of a file with ``t``, ``stage`` and the ``stage_ends`` attribute.

    Returns
    -------
    list of tuple

    Example
    -------
    >>> stage_intervals(read_run("run.h5"))  # doctest: +SKIP
    [(1, 0.0, 5.0, True), (2, 5.0, 20.0, True)]
    """
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


class _TimeAxes:
    """Shared x-axis handling: the time mask (log scale drops t <= 0), stage boundaries and labels."""

    def __init__(self, run, logx: bool, names: dict):
        self.logx = logx
        t = np.asarray(run["t"], dtype=float)
        self.mask = t > 0 if logx else np.ones(t.shape, bool)
        if not self.mask.any():
            self.mask = np.ones(t.shape, bool)
            self.logx = False
        self.t = t[self.mask]
        self.intervals = stage_intervals(run)
        self.names = names
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
        for s, _, e, ended in self.intervals:
            if ended and lo < e < hi - tol:
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


def _head_panels(run, X, spec: HeadPanels, panels: RunPanels, feats, heads, styles):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(heads), figsize=(6 * len(heads), 4.6), sharey=True, squeeze=False)
    ix = {f: j for j, f in enumerate(feats)}
    n = 0
    for h, ax in enumerate(axes[0]):
        n = 0
        for ln in spec.lines:
            data = np.asarray(run[ln.dataset], dtype=float)
            for f in (feats if "*" in ln.index else [None]):
                idx = tuple(ix[f if x == "*" else x] for x in ln.index)
                style = dict(ln.style) if ln.style is not None else dict(styles[f])
                ax.plot(X.t, X.y(data[(slice(None), h) + idx]), label=ln.label.format(head=heads[h], f=f), **style)
                n += 1
        if spec.zero_line:
            ax.axhline(0, color="0.7", lw=0.6, zorder=0)
        X.decorate(ax)
        kw = {"fontsize": spec.title_size} if spec.title_size else {}
        X.title(ax, spec.title.format(head=heads[h]), **kw)
        kw = {"fontsize": spec.ylabel_size} if spec.ylabel_size else {}
        ax.set_ylabel(spec.ylabel.format(head=heads[h]), **kw)
        ax.legend(fontsize=7, ncol=2 if n > 8 else 1, loc="best", framealpha=0.85)
    return fig


def _loss_margins(run, X, spec: LossMargins):
    import matplotlib.pyplot as plt

    loss = X.y(run["loss"])
    m = np.asarray(run["margin"], dtype=float)
    grp = np.asarray(run["samples"][spec.group]).astype(bool)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.6))
    pos = np.where(np.isfinite(loss) & (loss > 0), loss, np.nan)
    ax1.plot(X.t, pos, color="k", lw=1.4, label="population loss")
    if np.isfinite(pos).any():
        ax1.set_yscale("log")
    X.decorate(ax1)
    X.title(ax1, "loss")
    ax1.set_ylabel("loss (log scale)")
    ax1.legend(fontsize=8)
    for sel, name, col in ((grp, spec.labels[0], "tab:blue"), (~grp, spec.labels[1], "tab:red")):
        if sel.any():
            ax2.plot(X.t, X.y(m[:, sel].min(axis=1)), color=col, lw=1.4,
                     label=f"min over {int(sel.sum())} {name} samples")
    ax2.axhline(0, color="0.5", lw=0.8, zorder=0)
    X.decorate(ax2)
    X.title(ax2, "margins")
    ax2.set_ylabel("min margin $y f(X)$")
    ax2.legend(fontsize=8, loc="best")
    return fig


def _default_style(feats) -> dict:
    import matplotlib.pyplot as plt

    cmap = plt.get_cmap("tab10")
    return {f: dict(color=cmap(j % cmap.N)) for j, f in enumerate(feats)}


def plot_panels(run, panels: RunPanels, out_dir, logx: bool = False, fmt: str = "png") -> list[Path]:
    """Write the registered figures ``panels`` of a run file (opened) into ``out_dir``, in their order.

    Parameters
    ----------
    run : Run
        ``meanfield.core.io.read_run`` of a file with ``t``, ``stage``, ``features``
        and the datasets the panels name (time first, then the head).
    panels : RunPanels
        What to draw (a paper's registration, ``meanfield.engine.registry.run_panels``).
    out_dir : Path
        The folder (created).
    logx : bool
        Logarithmic time axis (the t = 0 record left out).
    fmt : str
        ``png``, ``pdf`` or ``svg``.

    Returns
    -------
    list of Path

    Example
    -------
    >>> plot_panels(read_run(p), registry.run_panels("mixture"), Path("figs"))  # doctest: +SKIP
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..core.io import save_figure

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    feats = [str(f) for f in run["features"]]
    heads = [str(h) for h in run["heads"]] if "heads" in run else list(panels.heads)
    styles = (panels.feature_style or _default_style)(feats)
    X = _TimeAxes(run, logx, panels.stage_names(run) if panels.stage_names else {1: "training"})
    files = []
    for spec in panels.figures:
        fig = (_loss_margins(run, X, spec) if isinstance(spec, LossMargins)
               else _head_panels(run, X, spec, panels, feats, heads, styles))
        try:
            if panels.title is not None:
                fig.suptitle(panels.title(run), fontsize=10)
            fig.tight_layout()
            files.append(save_figure(fig, out_dir / f"{spec.stem}.{fmt}", dpi=110))
        finally:
            plt.close(fig)
    return files
