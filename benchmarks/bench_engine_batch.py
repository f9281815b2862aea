"""Batched engine runs vs one run per trajectory (meanfield.engine.run_batch).

    python benchmarks/bench_engine_batch.py [--B 32] [--steps 1000] [--K 2] [--L 3]

Runs B trajectories of the mixture description (infinite width, seeds do not
matter there, so the step sizes eta vary from 0.3 to 0.7) once with
``run_batch`` on the CPU (trajectories split over numba.get_num_threads() threads) and
once as B unbatched ``meanfield.engine.run`` calls, and once with the
generic batch kernels (``fast=False``; ``run_batch`` runs the mixture on its
registered batch fast path), checks that the generic batch equals the single
runs bit for bit and the fast path them to rounding, and prints the wall
times. Compile time is excluded (one warm-up call each).
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numba
import numpy as np

import meanfield.engine as me
from meanfield.engine import batched, runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--B", type=int, default=32)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--K", type=int, default=2)
    ap.add_argument("--L", type=int, default=3)
    a = ap.parse_args()
    desc = me.load("meanfield/models/mixture.toml", K=a.K, L=a.L, steps=a.steps, eta=0.5)
    etas = np.linspace(0.3, 0.7, a.B)
    Y0 = batched.initial_states(desc, seeds=list(range(a.B)))
    me.run_batch(desc, y0s=Y0[:1], eta=etas[:1])  # compile / load the cache
    me.run_batch(desc, y0s=Y0[:1], eta=etas[:1], fast=False)
    t0 = time.perf_counter()
    br = me.run_batch(desc, y0s=Y0, eta=etas)
    t_batch = time.perf_counter() - t0
    t0 = time.perf_counter()
    bg = me.run_batch(desc, y0s=Y0, eta=etas, fast=False)
    t_gen = time.perf_counter() - t0
    single = []
    t0 = time.perf_counter()
    for b in range(a.B):
        tr = dataclasses.replace(desc.training, eta=float(etas[b]), record_every=a.steps)
        single.append(runs.run(dataclasses.replace(desc, training=tr), y0=Y0[b]).y[-1])
    t_single = time.perf_counter() - t0
    same = all(np.array_equal(single[b], bg.y[b]) for b in range(a.B))
    dev = max(float(np.abs(single[b] - br.y[b]).max()) for b in range(a.B))
    us = 1e6 / (a.B * a.steps)
    print(f"mixture K={a.K} L={a.L}: {a.B} trajectories x {a.steps} GD steps, {numba.get_num_threads()} threads")
    print(f"  run_batch (fast path):    {t_batch:.3f} s  ({t_batch * us:.2f} us per trajectory-step)")
    print(f"  run_batch(fast=False):    {t_gen:.3f} s  ({t_gen * us:.2f} us per trajectory-step)")
    print(f"  {a.B} single runs:          {t_single:.3f} s  ({t_single * us:.2f} us per trajectory-step)")
    print(f"  speed-up {t_single / t_batch:.2f}x (generic batch {t_single / t_gen:.2f}x); generic batch == single "
          f"runs bit for bit: {same}; fast path max |state - single| {dev:.1e}")


if __name__ == "__main__":
    main()
