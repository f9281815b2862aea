"""Finite width against infinite width: width sweeps with kink detection.

``meanfield mixture width-sweep --widths 64,256,1024 --seeds 4 [run options]
--out FILE.h5`` runs the infinite-width reduced dynamics once and, for every
(m, seed), the reduced dynamics from the sampled finite-width init on the same
record grid; it reports per width the sup-over-time error of S, A, B, w~ and
the loss (mean and spread over seeds) and a fitted error exponent with a 95%
confidence interval, and writes ``FILE.h5``, ``FILE.json`` and ``FILE.png``.

Kinks (see the spec's "Kinks" section). While the infinite-width run is
recorded, every (sample, head) whose pre-activation u_j(X) stays within a
tolerance of 0 over an interval of records is a *kink event*. The infinite
width takes ReLU'(0) = ``relu_prime_at_zero`` there; a finite width has
u = +-tiny and takes ReLU' = 1 or 0. When the finite-width runs land on the
other side of the kink (or on different sides from each other), the
finite-width trajectories leave the infinite-width one by O(1) whatever m is,
so no convergence exponent is reported; the report names the events and the
fix (a tie-breaking neuron init).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from ...core.config import ConfigError
from ...core.sweep import Progress, map_points
from ...core.widths import (exponent_text, exponent_verdict, figure, fit_exponent, kink_events,  # noqa: F401
                             kink_split_message, kink_splits, sup_errors, write_outputs, written_on_signal)
from .config import MixtureConfig, make_config
from .observables import observables
from .run import run as run_traj
from .run import samples_of

QUANTITIES = ("S", "A", "B", "w", "loss")
TIE_BREAK_HINT = ("use a tie-breaking neuron init, e.g. --neuron-init const:0.01,0.01,...,0,0 (small equal positive "
                  "c-components for both heads), so that no pre-activation sits at the ReLU kink")


def _observe(cfg: MixtureConfig):
    traj = run_traj(cfg)
    arr = traj.arrays()
    obs = observables(samples_of(cfg), arr["y"])
    return traj, arr, obs


def _finite_job(job):
    """Worker: one finite-width run; errors against the infinite-width records
    and the sides of its pre-activations in each kink event."""
    cfg_dict, inf, events, with_particles = job[:4]
    cfg = make_config(cfg_dict)
    t0 = time.perf_counter()
    if len(job) > 4:  # a trajectory computed elsewhere (batched backend)
        traj = job[4]
        arr = traj.arrays()
        obs = observables(samples_of(cfg), arr["y"])
    else:
        traj, arr, obs = _observe(cfg)
    pdiff = None
    if with_particles:  # cross-check: the explicit network, trained independently, projected
        from .particles import run_particles

        ptraj = run_particles(cfg)
        py = ptraj.arrays()["y"]
        n = min(len(py), len(arr["y"]))
        scale = np.maximum(np.abs(arr["y"][:n]).max(axis=1, keepdims=True), 1e-300)
        pdiff = float(np.max(np.abs(py[:n] - arr["y"][:n]) / scale)) if n else math.nan
    T = min(len(arr["t"]), len(inf["t"]))
    if T and not np.allclose(arr["t"][:T], inf["t"][:T], rtol=1e-12, atol=1e-12):
        raise RuntimeError("finite- and infinite-width record grids differ")
    err_t = {}
    for q in QUANTITIES:
        d = np.abs(obs[q][:T] - inf[q][:T])
        err_t[q] = d.reshape(T, -1).max(axis=1) if d.ndim > 1 else d
    sides = []
    for e in events:
        i1 = min(e["i_end"], T - 1)
        h = 0 if e["head"] == "+" else 1
        uu = obs["u"][e["i_start"]:i1 + 1, e["sample"], h]
        sides.append([int(np.sum(uu > 0)), int(np.sum(uu < 0)), int(np.sum(uu == 0))])
    return {"width": cfg.width, "seed": cfg.seed, "status": traj.status, "n_records": T, "particles_rel_diff": pdiff,
            "err_t": err_t, "sides": sides, "elapsed_s": time.perf_counter() - t0}


def _write_interrupted(out: Path, cfg_inf, widths, seeds: int, t, finished: list, n_jobs: int) -> Path:
    """The file of an interrupted width sweep (core.widths.write_interrupted)."""
    from ...core.widths import write_interrupted

    attrs = {"format": "meanfield-width-sweep", "format_version": 1, "system": "mixture",
             "config": json.dumps(cfg_inf.to_dict(), sort_keys=True)}
    return write_interrupted(out, attrs, widths, seeds, t, finished, n_jobs, QUANTITIES)


def width_sweep(base: dict, widths: list[int], seeds: int, out: Path, tol_rel: float = 1e-9,
                workers: int | None = None, executor=None, progress: bool = True, log=print,
                particles_up_to: int = 0, backend: str = "cpu") -> dict:
    """Run the sweep and write ``out`` (.h5), ``out.json`` and ``out.png``; returns the summary.
    ``particles_up_to``: for widths m <= this, also train the explicit network
    (the particle sampler) from the same init and report its largest relative
    deviation from the reduced finite-width run (a cross-check: ~1e-15).
    ``backend``: ``cpu`` (one process per run through the executor) or
    ``cuda`` / ``auto`` (every finite-width run as one batch on the GPU when
    one is present; the errors are then computed here)."""
    out = Path(out)
    if out.suffix not in (".h5", ".hdf5"):
        raise ConfigError(f"out: must end in .h5 or .hdf5, got {str(out)!r}")
    if not widths or any(m < 1 for m in widths):
        raise ConfigError(f"widths: give positive integers, got {widths}")
    if seeds < 1:
        raise ConfigError(f"seeds: must be >= 1, got {seeds}")
    base = dict(base)
    base.pop("width", None)
    base.pop("seed", None)
    if not any(k in base for k in ("record_every", "record_log", "record_dt")):
        base["record_every"] = 1 if base.get("method", "gd") == "gd" else None
        if base["record_every"] is None:
            base.pop("record_every")
    cfg_inf = make_config(base)
    if cfg_inf.dense:
        raise ConfigError("feature_gram/n_train/n_neurons: width-sweep covers the paper's data (orthonormal "
                          "features, one neuron per head)")
    widths = sorted(set(int(m) for m in widths))
    t0 = time.perf_counter()
    log(f"[width-sweep] infinite width, {cfg_inf.method}, {cfg_inf.schedule} ...")
    with written_on_signal(lambda: _write_interrupted(out, cfg_inf, widths, seeds, None, [], 0)):
        traj_inf, arr_inf, obs_inf = _observe(cfg_inf)
    if traj_inf.status == "interrupted":  # the infinite-width run caught the signal
        _write_interrupted(out, cfg_inf, widths, seeds, arr_inf["t"], [], 0)
        raise KeyboardInterrupt
    events = kink_events(arr_inf["t"], obs_inf["u"], tol_rel)
    inf = {"t": arr_inf["t"], **{q: obs_inf[q] for q in QUANTITIES}}
    if particles_up_to and cfg_inf.method != "gd":
        raise ConfigError("particles_up_to: the particle cross-check needs method gd")
    jobs = [(replace(cfg_inf, width=m, seed=s).to_dict(), inf, events, m <= particles_up_to)
            for m in widths for s in range(seeds)]
    log(f"[width-sweep] {len(jobs)} finite-width runs (widths {widths}, {seeds} seeds), "
        f"{len(events)} kink events at infinite width ...")
    bar = Progress(len(jobs), label="width-sweep", quiet=not progress)
    from .batched import check_batchable, resolve_backend, run_batch

    if resolve_backend(backend) == "cuda":
        cfgs = [make_config(j[0]) for j in jobs]
        for c in cfgs:
            check_batchable(c, "cuda")
        with written_on_signal(lambda: _write_interrupted(out, cfg_inf, widths, seeds, arr_inf["t"], [], len(jobs))):
            trajs = run_batch(cfgs, "cuda")
            res = [_finite_job(j + (tr,)) for j, tr in zip(jobs, trajs)]
        bar.update(len(jobs), force=True)
    else:
        finished: list = []

        def got(i, r):
            finished.append(r)
            if r.get("status") == "interrupted":  # a run in this process caught the signal
                raise KeyboardInterrupt

        # like a run: a valid file with every finite-width run done so far
        with written_on_signal(lambda: _write_interrupted(out, cfg_inf, widths, seeds, arr_inf["t"], finished,
                                                          len(jobs))):
            res = map_points(_finite_job, jobs, executor=executor, workers=workers, progress=bar, on_result=got)

    # every run is done: a signal while the verdict and the files are made leaves them all
    with written_on_signal(lambda: _write_interrupted(out, cfg_inf, widths, seeds, arr_inf["t"], res, len(jobs))):
        kinks = kink_splits(events, res, cfg_inf.relu_prime_at_zero, lambda i: samples_of(cfg_inf).describe(i))
        split_events = [k for k in kinks if k["split"]]

        sup = sup_errors(res, widths, QUANTITIES)
        fits = {q: fit_exponent(widths, sup[q]) for q in QUANTITIES}
        statuses = [r["status"] for r in res]
        summary = {
            "widths": widths, "seeds": seeds,
            "errors": {q: sup[q].mean(axis=1).tolist() for q in QUANTITIES},
            "errors_std": {q: sup[q].std(axis=1).tolist() for q in QUANTITIES},
            "errors_min": {q: sup[q].min(axis=1).tolist() for q in QUANTITIES},
            "errors_max": {q: sup[q].max(axis=1).tolist() for q in QUANTITIES},
            "exponent": None, "exponent_ci": None, "exponents": {},
            "kinks": kinks, "kink_tolerance_rel": tol_rel,
            "infinite_width_status": traj_inf.status,
            "particles_max_rel_diff": {str(m): max(r["particles_rel_diff"] for r in res if r["width"] == m)
                                       for m in widths if m <= particles_up_to},
            "finite_width_statuses": {s: statuses.count(s) for s in set(statuses)},
        }
        if split_events:
            summary["message"] = kink_split_message(split_events, f"fix: {TIE_BREAK_HINT}")
            summary["exponents"] = {q: None for q in QUANTITIES}
        else:
            summary.update(exponent_verdict(fits, "S"))
        summary["elapsed_s"] = time.perf_counter() - t0

        data = {
            "widths": np.array(widths), "seeds": np.arange(seeds), "t": arr_inf["t"],
            "sup_error": {q: sup[q] for q in QUANTITIES},
            "error_t": {q: np.array([[r["err_t"][q] for r in res if r["width"] == m] for m in widths])
                        if len({r["n_records"] for r in res}) == 1 else np.zeros(0) for q in QUANTITIES},
            "infinite": {q: obs_inf[q] for q in QUANTITIES + ("u", "margin")},
        }
        attrs = {"format": "meanfield-width-sweep", "format_version": 1, "system": "mixture",
                 "config": json.dumps(cfg_inf.to_dict(), sort_keys=True),
                 "status": "complete" if all(s == "complete" for s in statuses + [traj_inf.status]) else "incomplete",
                 "message": summary["message"], "kinks": json.dumps(kinks),
                 "kink_split": int(bool(split_events)),
                 "exponent": summary["exponent"] if summary["exponent"] is not None else math.nan,
                 "summary": json.dumps(summary)}
        return write_outputs(out, summary, attrs, data, quantities=QUANTITIES)
