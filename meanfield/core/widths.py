"""Width-sweep analysis shared by the mixture's and the engine's width sweeps.

``meanfield mixture width-sweep`` (``meanfield.models.mixture.widths``) and
``meanfield model width-sweep`` (``meanfield.engine.finite``) both compare
finite-width runs with the infinite-width one; the generic pieces live here:
:func:`kink_events` (where a pre-activation sits at the ReLU kink in the
infinite-width run), :func:`kink_splits` (whether finite-width runs land on
the other side of it), :func:`fit_exponent` (the error exponent with a 95%
confidence interval), :func:`sup_errors`, :func:`kink_split_message` and
:func:`exponent_verdict` (the summary's errors and verdict),
:func:`write_outputs` (HDF5, JSON, figure), :func:`write_interrupted` (the file of
an interrupted sweep) and :func:`figure`.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import numpy as np

from .errors import is_signal
from .io import write_h5_atomic


def kink_events(t: np.ndarray, u: np.ndarray, tol_rel: float = 1e-9, heads=("+", "-")) -> list[dict]:
    """Intervals of records where |u[:, i, h]| <= tol (tol = tol_rel x max(1, max |u|)).
    Returns dicts sample, head (``heads[h]``: "+"/"-" for the mixture), i_start, i_end, t_start, t_end."""
    tol = tol_rel * max(1.0, float(np.max(np.abs(u))) if u.size else 1.0)
    out = []
    near = np.abs(u) <= tol
    for i in range(u.shape[1]):
        for h in range(u.shape[2]):
            m = near[:, i, h]
            if not m.any():
                continue
            d = np.diff(np.r_[0, m.astype(np.int8), 0])
            for a, b in zip(np.flatnonzero(d == 1), np.flatnonzero(d == -1) - 1):
                out.append({"sample": int(i), "head": heads[h], "i_start": int(a), "i_end": int(b),
                            "t_start": float(t[a]), "t_end": float(t[b])})
    return out


def fit_exponent(widths, errors) -> dict:
    """Least-squares slope of log(error) on log(m) over every (m, seed) point,
    with a 95% confidence interval (Student t on the slope's standard error).

    With exactly two widths the slope is the line through the two mean
    log-errors and there is no interval (``exponent_ci`` None, ``two_points``
    True): two points fix a line, and the scatter over seeds at two widths
    says nothing about whether the error follows a power law.

    Parameters
    ----------
    widths : list of int
    errors : list of arrays
        the errors of each width's seeds.

    Returns
    -------
    dict
        ``exponent``, ``exponent_ci`` ([lo, hi] or None), ``r2``, ``two_points``.

    Examples
    --------
    >>> fit_exponent([10, 1000], [[1.0, 1.0], [0.1, 0.1]])["exponent"], fit_exponent([10, 1000], [[1.0], [0.1]])["exponent_ci"]
    (-0.5, None)
    """
    from scipy import stats

    x = np.log(np.repeat(np.asarray(widths, float), [len(e) for e in errors]))
    y = np.log(np.concatenate([np.asarray(e, float) for e in errors]))
    ok = np.isfinite(y)
    x, y = x[ok], y[ok]
    ux = np.unique(x)
    if len(ux) < 2:
        return {"exponent": None, "exponent_ci": None, "r2": None, "two_points": False}
    if len(ux) == 2:
        m0, m1 = (float(np.mean(y[x == u])) for u in ux)
        return {"exponent": (m1 - m0) / float(ux[1] - ux[0]), "exponent_ci": None, "r2": None, "two_points": True}
    r = stats.linregress(x, y)
    q = stats.t.ppf(0.975, len(x) - 2)
    return {"exponent": float(r.slope), "exponent_ci": [float(r.slope - q * r.stderr), float(r.slope + q * r.stderr)],
            "r2": float(r.rvalue**2), "two_points": False}


#: what a width sweep of two widths says instead of an interval
TWO_POINTS = "two widths: two points fix a line, so no interval (give three or more widths for a 95% CI)"


def exponent_text(name: str, fit: dict) -> str:
    """``S ~ m^-0.512 (95% CI [-0.6, -0.4])``, or the two-point line without an interval.

    Parameters
    ----------
    name : str
    fit : dict
        :func:`fit_exponent`'s result (exponent not None).

    Returns
    -------
    str

    Examples
    --------
    >>> exponent_text("S", fit_exponent([10, 1000], [[1.0], [0.1]]))
    'sup-norm error of S ~ m^-0.500 (two widths: two points fix a line, so no interval (give three or more widths for a 95% CI))'
    """
    if fit.get("exponent_ci") is None:
        return f"sup-norm error of {name} ~ m^{fit['exponent']:.3f} ({TWO_POINTS})"
    return "sup-norm error of {} ~ m^{:.3f} (95% CI [{:.3f}, {:.3f}])".format(name, fit["exponent"],
                                                                           *fit["exponent_ci"])


def kink_splits(events, res, r0: float, describe) -> list[dict]:
    """Per kink event of the infinite-width run (``events``): how many
    finite-width runs (``res``, each with ``sides[k]`` = (entries > 0,
    entries < 0) of event k) put the pre-activation on each side, and
    ``split``: some run lands on the side ReLU'(0) = ``r0`` does not pick (r0
    1: negative, 0: positive, else either), or runs land on both sides;
    ``description`` of the sample from ``describe(sample index)``. Shared by
    the mixture's and the engine's width sweeps."""
    kinks = []
    for k, e in enumerate(events):
        plus = sum(r["sides"][k][0] > 0 for r in res)
        minus = sum(r["sides"][k][1] > 0 for r in res)
        other = {1.0: minus, 0.0: plus}.get(r0, plus + minus)
        split = bool(other > 0 or (plus > 0 and minus > 0))
        kinks.append({"sample": e["sample"], "head": e["head"], "t_start": e["t_start"], "t_end": e["t_end"],
                      "split": split, "runs_positive": int(plus), "runs_negative": int(minus),
                      "description": describe(e["sample"])})
    return kinks


def sup_errors(res, widths, quantities) -> dict:
    """Per quantity the (width x seed) sup-over-time errors of finite-width runs.

    Parameters
    ----------
    res : list of dict
        The finite-width runs, each with ``width`` and ``err_t`` (quantity -> error per record).
    widths : list of int
        The widths, in the rows' order.
    quantities : iterable of str
        The quantities.

    Returns
    -------
    dict
        quantity -> array (len(widths), runs per width); NaN for a run without records.

    Examples
    --------
    >>> res = [{"width": 4, "err_t": {"S": np.array([0.1, 0.3])}}, {"width": 8, "err_t": {"S": np.array([0.2])}}]
    >>> sup_errors(res, [4, 8], ["S"])["S"].tolist()
    [[0.3], [0.2]]
    """
    return {q: np.array([[float(np.max(r["err_t"][q])) if len(r["err_t"][q]) else np.nan
                          for r in res if r["width"] == m] for m in widths]) for q in quantities}


def kink_split_message(split_events, fix: str) -> str:
    """The width sweep's verdict when finite-width runs cross a kink of the infinite-width run.

    Parameters
    ----------
    split_events : list of dict
        The :func:`kink_splits` entries with ``split`` set (the first six are named).
    fix : str
        What to do about it (the system's tie-breaking init).

    Returns
    -------
    str

    Examples
    --------
    >>> e = {"sample": 0, "description": "g1y1", "head": "+", "t_start": 0.0, "t_end": 2.0}
    >>> m = kink_split_message([e], "fix: break the tie")
    >>> "(sample 0 (g1y1) head + t in [0, 2])" in m, m.endswith("reported; fix: break the tie")
    (True, True)
    """
    names = "; ".join(f"sample {k['sample']} ({k['description']}) head {k['head']} t in "
                      f"[{k['t_start']:.6g}, {k['t_end']:.6g}]" for k in split_events[:6])
    more = f" and {len(split_events) - 6} more" if len(split_events) > 6 else ""
    return (f"finite-width runs land on the other side of {len(split_events)} ReLU kink(s) of the "
            f"infinite-width run ({names}{more}): the finite-width trajectories leave the "
            f"infinite-width one by O(1) for every m, so no convergence exponent is reported; {fix}")


def exponent_verdict(fits: dict, lead: str) -> dict:
    """The width sweep's exponent entries when no kink is crossed.

    Parameters
    ----------
    fits : dict
        quantity -> :func:`fit_exponent` result.
    lead : str
        The quantity whose exponent is the sweep's (``exponent``, ``exponent_ci``, the message).

    Returns
    -------
    dict
        ``exponent``, ``exponent_ci``, ``exponents`` (quantity -> exponent, ci, r2) and ``message``.

    Examples
    --------
    >>> v = exponent_verdict({"S": fit_exponent([10, 1000], [[1.0], [0.1]])}, "S")
    >>> round(v["exponent"], 3), v["message"].startswith("no kink is crossed; sup-norm error of S")
    (-0.5, True)
    """
    f = fits[lead]
    return {"exponent": f["exponent"], "exponent_ci": f["exponent_ci"],
            "exponents": {q: {"exponent": g["exponent"], "ci": g["exponent_ci"], "r2": g["r2"]}
                          for q, g in fits.items()},
            "message": ("no kink is crossed; " + exponent_text(lead, f) if f["exponent"] is not None
                        else "no kink is crossed; too few widths to fit an exponent")}


def write_outputs(out: Path, summary: dict, attrs: dict, data: dict, **figure_kw) -> dict:
    """Write a width sweep (the mixture's and the engine's,
    ``meanfield.engine.finite``): the HDF5 file ``out`` (atomic), the summary
    as JSON next to it (atomic) and the figure (:func:`figure` with
    ``figure_kw``) as PNG; returns ``summary`` with ``files`` listing the three."""
    js, png = out.with_suffix(".json"), out.with_suffix(".png")
    tmps = [p.with_name(p.name + f".tmp-{os.getpid()}") for p in (js, png)]
    before = _identity(out)
    complete = False
    try:
        write_h5_atomic(out, attrs, data)  # a signal during its write is raised once the file is renamed in place
        complete = True
        tmps[0].write_text(json.dumps(summary, indent=1))
        os.replace(tmps[0], js)
        figure(summary, tmps[1], **figure_kw)
        os.replace(tmps[1], png)
    except BaseException as e:  # no half-written JSON or figure, whatever stopped them
        for p in tmps:
            p.unlink(missing_ok=True)
        complete = complete or _identity(out) not in (None, before)  # (a new file at out: the complete one)
        if complete and isinstance(e, (KeyboardInterrupt, SystemError)) and is_signal(e):
            raise CompleteInterrupt(f"interrupted after {out} was written complete") from e
        raise
    summary["files"] = [str(out), str(js), str(png)]
    return summary


def _identity(path: Path):
    """(inode, mtime) of the file at ``path``, None if there is none: an atomic write puts a new one there."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


class CompleteInterrupt(KeyboardInterrupt):
    """A signal once a width sweep's complete ``.h5`` stands (during its write,
    held until the file is whole, or while the JSON or figure is written): the
    sweep stops and keeps that file, rather than replacing it with an
    interrupted one."""


@contextlib.contextmanager
def written_on_signal(write):
    """Run the block; when a signal stops it (a KeyboardInterrupt, or a
    SystemError while one is pending: ``core.errors.is_signal``), call
    ``write()`` (the sweep's interrupted file, everything finished so far)
    and raise KeyboardInterrupt, whichever form the signal came in. A
    :class:`CompleteInterrupt` (the complete file already stands) and every
    other error pass through untouched.

    Parameters
    ----------
    write : callable
        Writes the interrupted file; called with no arguments.

    Returns
    -------
    context manager

    Example
    -------
    >>> with written_on_signal(lambda: print("interrupted file written")):
    ...     pass  # the sweep's work
    """
    try:
        yield
    except (KeyboardInterrupt, SystemError) as e:  # SystemError: the signal landed as a numba kernel returned
        if not is_signal(e) or isinstance(e, CompleteInterrupt):
            raise
        write()
        raise KeyboardInterrupt(str(e)) from e


def write_interrupted(out: Path, attrs: dict, widths, seeds: int, t, finished: list, n_jobs: int,
                      quantities) -> Path:
    """The file of an interrupted width sweep (status ``interrupted``), the
    mixture's and the engine's: the infinite-width record times (when that
    run finished) and, per finished finite-width run, its width, seed, status
    and sup-norm errors. Written at once (no figure, no JSON), well within
    the 2 s a signal allows.

    Parameters
    ----------
    out : Path
        The sweep's ``.h5`` path (written atomically).
    attrs : dict
        The file's identifying attrs (format, system, config, ...); ``status``
        and ``message`` are added.
    widths : iterable of int
        The widths asked for.
    seeds : int
        Seeds per width.
    t : array or None
        Record times of the infinite-width run (None: it did not finish).
    finished : list of dict
        The finite-width results so far (``width``, ``seed``, ``status``,
        ``err_t``: quantity -> error over time); interrupted ones are left out.
    n_jobs : int
        How many finite-width runs the sweep has (0: not started).
    quantities : iterable of str
        The quantities whose sup errors are kept.

    Returns
    -------
    Path
        ``out``.

    Example
    -------
    >>> write_interrupted(Path("w.h5"), {"format": "meanfield-width-sweep"}, [4, 8], 2, None, [], 0,
    ...                   ["S"])  # doctest: +SKIP
    """
    done = [r for r in finished if r is not None and r.get("status") != "interrupted"]
    data = {"widths": np.array(sorted(set(int(m) for m in widths))), "seeds": np.arange(seeds),
            "t": np.asarray(t if t is not None else [], dtype=float),
            "done_width": np.array([int(r["width"]) for r in done], dtype=np.int64),
            "done_seed": np.array([int(r["seed"]) for r in done], dtype=np.int64),
            "done_status": np.array([str(r["status"]) for r in done], dtype=object),
            "done_sup_error": {q: np.array([float(np.max(r["err_t"][q])) if np.size(r["err_t"][q]) else np.nan
                                            for r in done]) for q in quantities}}
    where = "during the infinite-width run" if t is None or not n_jobs else (
        f"after {len(done)} of {n_jobs} finite-width runs")
    attrs = dict(attrs, status="interrupted",
                 message=f"interrupted (SIGINT/SIGTERM) {where}; rerun the command for the full sweep")
    return write_h5_atomic(out, attrs, data)


def figure(summary: dict, path: Path, quantities=None, lead: str = "S", xlabel: str = "attention width m",
           title_prefix: str = "", title: str | None = None, title_fontsize=None, legend_fontsize=8,
           integer_ticks: bool = False) -> Path:
    """The width-sweep figure: mean sup-norm error of each of ``quantities``
    against m (bars: min-max over seeds), the fitted m^exponent of ``lead``
    and m^-1/2 for reference; the title says when kinks are crossed. ``quantities``:
    default every quantity of ``summary["errors"]``, in order."""
    if quantities is None:
        quantities = tuple(summary["errors"])
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    m = np.array(summary["widths"], float)
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for q in quantities:
        e = np.array(summary["errors"][q])
        lo = e - np.array(summary["errors_min"][q])
        hi = np.array(summary["errors_max"][q]) - e
        ax.errorbar(m, e, yerr=[lo, hi], marker="o", capsize=3, label=f"{q}")
    if summary["exponent"] is not None:
        e0 = summary["errors"][lead][0]
        ax.plot(m, e0 * (m / m[0]) ** summary["exponent"], "k--", lw=1,
                label=f"fit {lead}: m^{summary['exponent']:.3f}")
        ax.plot(m, e0 * (m / m[0]) ** -0.5, ":", color="gray", lw=1, label="m^-1/2")
    ax.set_xscale("log")
    ax.set_yscale("log")
    if integer_ticks:
        ax.set_xticks(m)
        ax.set_xticklabels([str(int(x)) for x in m])
        ax.minorticks_off()
    ax.set_xlabel(xlabel)
    ax.set_ylabel("sup over t of |finite - infinite|")
    n_split = sum(k["split"] for k in summary["kinks"])
    if title is None:
        title = f"finite vs infinite width (mean; bars: min-max over {summary['seeds']} seeds)"
    ax.set_title(f"{title_prefix}{n_split} kink(s) crossed: no exponent" if n_split else title,
                 color="C3" if n_split else "k", **({} if title_fontsize is None else {"fontsize": title_fontsize}))
    ax.legend(fontsize=legend_fontsize)
    fig.tight_layout()
    fig.savefig(path, dpi=120, format="png")
    plt.close(fig)
    return path
