"""The mixture's two chunked-ensemble adapters, measured in one run: its own (``system="mixture"``:
``meanfield.models.mixture.ensemble.MIXTURE``, the hand batched kernel and the one-pass numba summary kernel)
against the engine's generic one on the same model (``meanfield.engine.sweep.ModelEnsemble`` of
``meanfield/models/mixture.toml``: the engine's batched kernel and the run file's own observables per
trajectory).

One grid of K=2, L=3 trajectories (``--steps`` exact GD steps, width m = ``--width`` sampled inits (0:
infinite width), records every 10 steps): omega (5 values) x eta (4) x seed (``--seeds``), through
``meanfield.core.ensemble.solve`` with one worker in this process and one chunk, each adapter once on a small
grid first (numba caches), then timed. Printed: trajectories per second of each, their ratio (the developers'
rule keeps a hand path only where it is > 2x faster) and the largest difference of the end losses (the same
trajectories: equal to rounding). docs/layout.md ("Ensembles: two adapters") says why both stay for now.

Usage:  .venv/bin/python benchmarks/bench_ensemble_adapters.py [--seeds 10] [--steps 1000] [--width 16]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _problem(system, seeds: int, steps: int, width):
    from meanfield.core.ensemble import EnsembleProblem

    base = {"K": 2, "L": 3, "width": width, "steps": steps, "record_every": 10, "schedule": "simultaneous"}
    axes = {"omega": [float(x) for x in np.geomspace(0.01, 0.3, 5)], "eta": [0.25, 0.5, 0.75, 1.0],
            "seed": list(range(seeds))}
    return EnsembleProblem(base=base, axes=axes, outputs=("loss_end", "min_margin_end"), system=system)


def _solve(system, seeds, steps, width, out):
    from meanfield.core.ensemble import solve

    prob = _problem(system, seeds, steps, width)
    t0 = time.perf_counter()
    res = solve(prob, out, workers=1, chunk_size=prob.size, progress=False)
    dt = time.perf_counter() - t0
    with h5py.File(Path(out) / "sweep.h5", "r") as f:
        loss = np.asarray(f["loss_end"]).ravel()
    return res, dt, loss


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--width", type=int, default=16, help="attention width m of the sampled inits (0: infinite width)")
    args = ap.parse_args()
    from meanfield.engine.sweep import ModelEnsemble

    systems = {"mixture adapter (hand kernels)": "mixture",
               "engine adapter (ModelEnsemble)": ModelEnsemble(ROOT / "meanfield" / "models" / "mixture.toml")}
    width = args.width or None
    tmp = Path(tempfile.mkdtemp(prefix="bench_ens_adapters_"))
    try:
        rates, losses = {}, {}
        for name, system in systems.items():
            _solve(system, 1, 20, width, tmp / f"warm_{len(rates)}")  # compile / load the numba caches
            res, dt, loss = _solve(system, args.seeds, args.steps, width, tmp / f"run_{len(rates)}")
            rates[name] = res.n_done / dt
            losses[name] = loss
            print(f"{name}: {res.n_done} trajectories in {dt:.2f} s = {rates[name]:.1f} traj/s ({res.status})")
        ra, rb = rates.values()
        la, lb = losses.values()
        print(f"ratio mixture / engine = {ra / rb:.2f}x  (the rule keeps a hand path where > 2x: "
              f"{'PASS' if ra / rb > 2 else 'MISS'})")
        print(f"max |loss_end difference| = {np.nanmax(np.abs(la - lb)):.3g} over {la.size} points")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
