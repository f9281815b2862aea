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
    import io

    import matplotlib.pyplot as plt

    from ..core.io import write_bytes_atomic

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for name, fig in figs:
        f = out / f"{name}.png"
        buf = io.BytesIO()
        fig.savefig(buf, dpi=110, format="png")
        plt.close(fig)
        write_bytes_atomic(f, buf.getbuffer())  # a full disk: one line naming f, no partial file
        files.append(f)
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
