"""``meanfield mixture|model sweep-plot``: lines and heatmaps of an ensemble's ``sweep.h5`` (any system).

Lines: ``--x AXIS --y OUTPUT [--hue AXIS]`` plots OUTPUT against a grid axis,
one line per value of the hue axis. ``--select AXIS=V1,V2`` keeps only
these values of an axis (repeatable). Heatmap: ``--x AXIS --y AXIS --z
OUTPUT``. Every other axis is aggregated (``--agg mean|median|min|max``,
NaN = never reached / not run left out); the figure says which. Positive
axes spanning a decade or more are drawn on a log scale.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np

from .config import ConfigError

AGGS = {"mean": np.nanmean, "median": np.nanmedian, "min": np.nanmin, "max": np.nanmax}


def _read(path: Path):
    import h5py

    from .ensemble import SWEEP_FORMAT

    if not path.exists():
        raise ConfigError(f"sweep: no such file {str(path)!r}")
    try:
        f = h5py.File(path, "r")
    except OSError:
        raise ConfigError(f"sweep: {str(path)!r} is not an HDF5 file") from None
    if f.attrs.get("format") != SWEEP_FORMAT:
        f.close()
        raise ConfigError(f"sweep: {str(path)!r} is not a chunked sweep file (sweep.h5 of `mixture sweep --chunked` or `model sweep --chunked`)")
    return f


def _axis(f, name):
    v = f["axes"][name][()]
    if v.dtype == object:
        v = np.array([x.decode() if isinstance(x, bytes) else str(x) for x in v], dtype=object)
    return v


def _positions(vals):
    """(positions, log scale?, tick labels or None) of axis values."""
    if vals.dtype == object:
        return np.arange(len(vals), dtype=float), False, [str(v) for v in vals]
    v = vals.astype(float)
    fin = v[np.isfinite(v)]
    log = bool(fin.size > 1 and np.all(fin > 0) and fin.max() / fin.min() >= 10)
    if not np.all(np.isfinite(v)):  # e.g. width inf: categorical
        return np.arange(len(v), dtype=float), False, [f"{x:g}" for x in v]
    return v, log, None


def _pick(name: str, vals: np.ndarray, wanted: list[str]) -> np.ndarray:
    """Indices of the axis values named in ``wanted`` (numbers match to 1e-9 relative)."""
    out = []
    for w in wanted:
        if vals.dtype == object:
            hit = [i for i, v in enumerate(vals) if str(v) == w.strip()]
        else:
            try:
                fw = float(w)
            except ValueError:
                hit = []
            else:
                hit = [i for i, v in enumerate(vals.astype(float)) if v == fw or abs(v - fw) <= 1e-9 * abs(fw)]
        if not hit:
            shown = ", ".join(str(v) if vals.dtype == object else f"{v:g}" for v in vals[:12])
            raise ConfigError(f"select: {name} has no value {w.strip()!r}; values: {shown}"
                              + (" ..." if len(vals) > 12 else ""))
        out += hit
    return np.array(sorted(set(out)))


def sweep_plot(path: str | Path, x: str, y: str, z: str | None = None, hue: str | None = None,
               agg: str = "mean", out: str | Path | None = None, select: list[str] | None = None) -> Path:
    """Write the figure; returns its path. ``select``: ``NAME=V1,V2`` items
    keeping only these values of an axis. Bad names: one-line ConfigError."""
    path = Path(path)
    if agg not in AGGS:
        raise ConfigError(f"agg: one of {', '.join(AGGS)}, got {agg!r}")
    with _read(path) as f:
        axes = json.loads(f.attrs["axes"])
        fields = [k for k in f.keys() if k not in ("axes", "records") and f[k].ndim == len(axes)]
        for nm, val in (("x", x), ("hue", hue)):
            if val is not None and val not in axes:
                raise ConfigError(f"{nm}: a grid axis of this sweep, one of {', '.join(axes)}; got {val!r}")
        heat = y in axes
        if heat:
            if z is None or z not in fields:
                raise ConfigError(f"z: with --y an axis ({y}), --z names the output of the heatmap, one of "
                                  f"{', '.join(fields)}; got {z!r}")
            if hue is not None:
                raise ConfigError("hue: not with a heatmap (--y is an axis)")
            if y == x:
                raise ConfigError(f"y: a different axis than x ({x})")
            what = z
        else:
            if y not in fields:
                raise ConfigError(f"y: an output ({', '.join(fields)}) or, for a heatmap, an axis "
                                  f"({', '.join(axes)}); got {y!r}")
            if z is not None:
                raise ConfigError("z: only with a heatmap (--y an axis)")
            if hue == x:
                raise ConfigError(f"hue: a different axis than x ({x})")
            what = y
        data = f[what][()].astype(float)
        keep = [x, y] if heat else [x] + ([hue] if hue else [])
        vals = {k: _axis(f, k) for k in keep}
        for item in select or []:
            name, eq, spec = item.partition("=")
            name = name.strip()
            if not eq or name not in axes:
                raise ConfigError(f"select: expected AXIS=V1,V2,... with AXIS one of {', '.join(axes)}; got {item!r}")
            av = _axis(f, name)
            idx = _pick(name, av, spec.split(","))
            data = np.take(data, idx, axis=axes.index(name))
            if name in vals:
                vals[name] = av[idx]
        status = f.attrs.get("status", "")
        n_points = int(f.attrs.get("n_points", data.size))
    data = np.where(data == -1, np.nan, data) if what == "steps_end" else data
    other = [a for a in axes if a not in keep]
    red = tuple(axes.index(a) for a in other)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        arr = AGGS[agg](data, axis=red) if red else data
    kept_order = [a for a in axes if a in keep]
    arr = np.moveaxis(arr, [kept_order.index(k) for k in keep], list(range(len(keep))))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    px, logx, tx = _positions(vals[x])
    if heat:
        py, logy, ty = _positions(vals[y])
        im = ax.pcolormesh(_edges(px, logx), _edges(py, logy), np.ma.masked_invalid(arr.T), shading="flat")
        fig.colorbar(im, ax=ax, label=z)
        if logy:
            ax.set_yscale("log")
        if ty is not None:
            ax.set_yticks(py, ty)
        ax.set_ylabel(y)
    else:
        if hue:
            for j, hv in enumerate(vals[hue]):
                ax.plot(px, arr[:, j], marker="o", ms=3, label=f"{hue} = {hv:g}" if not isinstance(hv, str) else
                        f"{hue} = {hv}")
            ax.legend(fontsize=8)
        else:
            other_s = f"{agg} over {', '.join(other)}" if other else "each point"
            ax.plot(px, arr, marker="o", ms=3, label=f"{y} ({other_s})")
            ax.legend(fontsize=8)
        ax.set_ylabel(y)
    if logx:
        ax.set_xscale("log")
    if tx is not None:
        ax.set_xticks(px, tx)
    ax.set_xlabel(x)
    note = f"{agg} over {', '.join(other)}" if other else "no aggregation"
    if select:
        note += "; " + "; ".join(select)
    ax.set_title(f"{path.name}: {what} ({note}; NaN left out); {n_points} points, {status}", fontsize=9)
    fig.tight_layout()
    if out is None:
        out = path.with_name(f"{path.stem}_{what}_vs_{x}" + (f"_{y}" if heat else "") + ".png")
    out = Path(out)
    if out.suffix.lower() not in (".png", ".pdf", ".svg"):
        plt.close(fig)
        raise ConfigError(f"out: a .png, .pdf or .svg file, got {str(out)!r}")
    out.parent.mkdir(parents=True, exist_ok=True)
    from .io import save_figure

    save_figure(fig, out, dpi=120)
    plt.close(fig)
    return out


def _edges(p, log):
    """Cell edges around the centres p (geometric midpoints on a log axis)."""
    p = np.asarray(p, float)
    if p.size == 1:
        return np.array([p[0] / 2, p[0] * 2]) if log else np.array([p[0] - 0.5, p[0] + 0.5])
    q = np.log(p) if log else p
    mid = (q[1:] + q[:-1]) / 2
    e = np.concatenate([[q[0] - (mid[0] - q[0])], mid, [q[-1] + (q[-1] - mid[-1])]])
    return np.exp(e) if log else e
