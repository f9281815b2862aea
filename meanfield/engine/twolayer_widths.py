"""Finite against infinite width for a two-layer description with wide heads (``meanfield model width-sweep``).

A wide bilinear head (:mod:`meanfield.engine.twolayer_wide`) has the same
Gram map at every width m; m enters only through the start: Q_0 = omega^2 I
at infinite width, the Gram of one draw of W_Q, W_K (iid N(0, omega^2/m)) at
finite m. So a finite-width run here is the exact dynamics of the network
with those weights (the explicit torch network equals it to 1e-10,
``tests/test_twolayer_wide.py``), and the sweep measures what the width does:
per (m, seed) the sup over the records of the largest entry difference of
every block (and of the loss) against the infinite-width run, the mean over
seeds per width, and the exponent of its decay in m (``meanfield.core.widths``:
the fit, its interval, the figure and the files the one-layer sweep writes).
The narrow blocks start where the description says at every (m, seed); seed
s draws the wide weights of head (k, h) from ``default_rng((s, k, h))`` (what
``[init] seed = s`` does).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path

import numpy as np

from ..core.config import as_int
from ..core.errors import ConfigError
from .twolayer_wide import initial_gram

__all__ = ["width_sweep", "at_width"]


def at_width(desc, width, seed: int = 0):
    """``desc`` with every wide head at ``width`` (an int or inf), its Gram drawn with ``seed``.

    Parameters
    ----------
    desc : TwoLayerDescription
    width : int or float
        m, or ``math.inf``.
    seed : int

    Returns
    -------
    TwoLayerDescription

    Example
    -------
    >>> from meanfield.engine.twolayer_desc import twolayer_from_dict
    >>> raw = {"model": {"class": "twolayer"}, "data": {"d": 2, "L": 2},
    ...        "layers": [{"heads": [{"width": 3, "omega": 0.5}]}], "training": {"steps": 2}}
    >>> d = at_width(twolayer_from_dict(raw), math.inf)
    >>> float(d.theta0[0]), d.net.layers[0][0].width
    (0.25, inf)
    """
    net = desc.net
    layers = tuple(tuple(dataclasses.replace(hd, width=width) if hd.width is not None else hd for hd in hs)
                   for hs in net.layers)
    net2 = dataclasses.replace(net, layers=layers)
    theta = np.array(desc.theta0, dtype=np.float64)
    blocks = dict(net2.blocks)
    for k, h, hd in net2.heads:
        if hd.width is None:
            continue
        for b, sd in (("Q", (int(seed), k, h)), ("QV", (int(seed), k, h, 1))):  # the description's seed streams
            name = f"layer{k + 1}.head{h + 1}.{b}"
            if name not in blocks:
                continue
            i, D = net2.offset(name), blocks[name][0] // 2
            theta[i:i + 4 * D * D] = initial_gram(D, hd.omega, width, seed=sd).ravel()
    return dataclasses.replace(desc, net=net2, theta0=theta)


def _errors(desc, r, r_inf) -> dict:
    """Per block (and the loss): the largest entry difference at each record."""
    th, ti = np.asarray(r["theta"]), np.asarray(r_inf["theta"])
    n = min(len(th), len(ti))
    out, i = {}, 0
    for name, shape in desc.net.blocks:
        k = int(np.prod(shape))
        out[name] = np.abs(th[:n, i:i + k] - ti[:n, i:i + k]).max(axis=1) if k else np.zeros(n)
        i += k
    out["loss"] = np.abs(np.asarray(r["loss"])[:n] - np.asarray(r_inf["loss"])[:n])
    return out


def width_sweep(desc, widths, seeds: int, out, progress: bool = True, log=print, force: bool = False) -> dict:
    """The two-layer width sweep: every (m, seed) against infinite width (see the module docstring).

    Parameters
    ----------
    desc : TwoLayerDescription
        With at least one wide head (``width`` on a bilinear head).
    widths : iterable of int
        The widths m (three or more for the exponent's interval).
    seeds : int
        Seeds 0..seeds-1 per width.
    out : str or Path
        The ``.h5`` file; ``.json`` and ``.png`` beside it.
    progress : bool
        Progress lines.
    log : callable
        Where the summary lines go.
    force : bool
        Go past the time estimate.

    Returns
    -------
    dict
        The summary (``errors`` per quantity and width, ``exponent`` of the lead Gram, ``files``).

    Raises
    ------
    ConfigError
        No wide head, bad widths or seeds, a run beyond the time rule.

    Example
    -------
    >>> from meanfield.engine.twolayer_desc import load_twolayer      # doctest: +SKIP
    >>> s = width_sweep(load_twolayer("docs/examples/wide_twolayer.toml"), [4, 16, 64], 2, "runs/w.h5")  # doctest: +SKIP
    """
    from ..core.limits import check_size
    from ..core.sweep import Progress
    from ..core.errors import raise_if_signalled
    from ..core.widths import (exponent_verdict, fit_exponent, sup_errors, write_interrupted, write_outputs,
                               written_on_signal)
    from .twolayer_run import check_steps_time, run

    out = Path(out)
    if out.suffix not in (".h5", ".hdf5"):
        raise ConfigError(f"out: must end in .h5 or .hdf5, got {str(out)!r}")
    wide = [b for b, _ in desc.net.blocks if b.endswith(".Q") or b.endswith(".QV")]
    if not wide:
        raise ConfigError("width: no head of this two-layer description is wide (give a bilinear head or a value "
                          "matrix width = m or \"inf\"): its dynamics do not depend on a width")
    widths = sorted({as_int("widths", m, lo=1) for m in widths})
    if not widths:
        raise ConfigError("widths: give positive integers, e.g. --widths 4,16,64")
    seeds = as_int("seeds", seeds, lo=1)
    from .twolayer_wide import check_width

    for name, shape in desc.net.blocks:  # the largest width's draw must fit (--widths 1e9)
        if name in wide:
            check_width(shape[0] // 2, widths[-1], "widths")
    est = check_steps_time(at_width(desc, math.inf), force=True)
    runs = len(widths) * seeds + 1
    check_size({"seconds": est["seconds"] * runs}, "size", force,
               f" ({desc.name}: {runs} runs of {est['steps']:.3g} GD steps)")
    t0 = time.perf_counter()
    ident = {"format": "meanfield-width-sweep", "format_version": 1, "system": "twolayer", "model": desc.name,
             "config": json.dumps(desc.raw, sort_keys=True, default=str)}
    log(f"[width-sweep] {desc.name}: infinite width ...")
    quantities = [b for b, _ in desc.net.blocks] + ["loss"]
    finished: list = []
    r_inf = None

    def interrupted():  # like a run: a valid file with everything finished so far
        t = None if r_inf is None else np.asarray(r_inf["t"])
        write_interrupted(out, ident, widths, seeds, t, finished, len(widths) * seeds, quantities)

    with written_on_signal(interrupted):
        r_inf = run(at_width(desc, math.inf))
        bar = Progress(len(widths) * seeds, label="width-sweep", quiet=not progress)
        for m in widths:
            for s in range(seeds):
                dm = at_width(desc, m, s)
                r = run(dm)
                finished.append({"width": m, "seed": s, "status": r.attrs["status"], "err_t": _errors(dm, r, r_inf)})
                bar.update(1)
                raise_if_signalled()  # a run that caught the signal itself returned: stop here
        sup = sup_errors(finished, widths, quantities)
        # a block that the width never reaches (e.g. a one-lag softmax, whose weight gets no gradient) has error 0
        fits = {q: fit_exponent(widths, sup[q]) for q in quantities if np.nanmin(sup[q]) > 0}
        lead = wide[0]
        if lead not in fits:  # the wide head's Gram itself never differs: nothing to fit
            fits[lead] = {"exponent": None, "exponent_ci": None, "r2": None}
        statuses = [r["status"] for r in finished]
        summary = {"model": desc.name, "widths": widths, "seeds": seeds, "quantities": quantities, "lead": lead,
                   "errors": {q: np.nanmean(sup[q], axis=1).tolist() for q in quantities},
                   "errors_min": {q: np.nanmin(sup[q], axis=1).tolist() for q in quantities},
                   "errors_max": {q: np.nanmax(sup[q], axis=1).tolist() for q in quantities},
                   "kinks": [], "infinite_width_status": r_inf.attrs["status"],
                   "finite_width_statuses": {s: statuses.count(s) for s in set(statuses)},
                   "finite_width": "the exact Gram map from one draw of W_Q, W_K per (m, seed)"}
        summary.update(exponent_verdict(fits, lead))
        summary["message"] = summary["message"].replace("no kink is crossed; ", "")
        same = [q for q in quantities if q not in fits]
        for q in same:
            summary["exponents"][q] = None
        if same:
            summary["message"] += f"; equal at every width (no dependence on m): {', '.join(same)}"
        summary["elapsed_s"] = time.perf_counter() - t0
        data = {"widths": np.array(widths), "seeds": np.arange(seeds), "t": np.asarray(r_inf["t"]),
                "sup_error": {q.replace(".", "_"): sup[q] for q in quantities}}
        attrs = {**ident, "status": "complete" if all(s == "complete" for s in statuses + [r_inf.attrs["status"]])
                 else "incomplete", "message": summary["message"],
                 "exponent": summary["exponent"] if summary["exponent"] is not None else math.nan,
                 "summary": json.dumps(summary)}
        res = write_outputs(out, summary, attrs, data, quantities=[q for q in quantities if q not in same],
                            lead=lead, xlabel="width m of the wide heads",
                            title=f"{desc.name}: finite vs infinite width ({seeds} seeds)", title_fontsize=10,
                            legend_fontsize=7, integer_ticks=True)
        log(f"[width-sweep] {summary['message']}")
        return res
