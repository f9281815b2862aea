"""Benchmark of the finite-width particle sampler (``meanfield.models.mixture.particles``).

GD steps per second of explicit full-batch GD on W_K, W_Q (2 heads x m x d)
and w, for K = 2, L = 3, at m = 16 (per-step overhead), 1e3, 1e4, 1e5 with
d = 2K + 1 and at m = 1e4 with d = 256, and the ratio to the reduced system's steps per second
(``kernels.gd_advance`` through ``run.MixtureSystem``), everything measured in
this one process so that the ratios mean something on a noisy machine.

Each case: finite-width config (omega = 0.1, eta = 0.5, zero neurons,
ReLU'(0) = 1, seed 0), simultaneous training, no criterion, max_abs = inf;
``steps`` GD steps from the initial state in one ``gd_advance`` call, best of
``repeats`` (each repeat from the same initial weights). At d = 2K + 1 the
steps write two sets of weights in turn (the first two steps of a repeat also
allocate them); at d = 256 (>= 4P) the wide weights are updated in place.
The sampler is the engine's numpy network (``meanfield.engine.oracle``
through ``meanfield.engine.finite``: logits and gradients through the m x P
products W E, cost O(m d P) a step); its threads are BLAS's
(OPENBLAS_NUM_THREADS). Sanity: after the timed steps the projected particle
state is compared with the reduced GD map run from the same initial state.
Old numbers (the numba sampler this replaced, 2 threads, quiet machine,
reduced step 3.2 us): m = 1e3 / 1e4 / 1e5: 5800 / 860 / 80 steps/s (54x / 360x
/ 3900x the reduced step), m = 1e4, d = 256: 110 steps/s (2800x).

Usage:  .venv/bin/python benchmarks/bench_particles.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

K, L = 2, 3
# (m, d, steps, repeats) for the full and the quick run
CASES_FULL = [(16, 5, 4000, 3), (1_000, 5, 2000, 3), (10_000, 5, 300, 3), (100_000, 5, 40, 3), (10_000, 256, 30, 3)]
CASES_QUICK = [(16, 5, 1000, 2), (1_000, 5, 300, 2), (10_000, 5, 50, 2), (100_000, 5, 6, 2), (10_000, 256, 10, 2)]


def _cfg(m: int, steps: int):
    from meanfield.models.mixture.config import make_config

    return make_config({}, K=K, L=L, width=m, seed=0, steps=steps)


def bench_reduced(steps: int = 20000, repeats: int = 5) -> float:
    """Steps per second of the reduced GD map (finite-width init, m = 1000)."""
    from meanfield.models.mixture.init import initial_state
    from meanfield.models.mixture.run import MixtureSystem
    from meanfield.models.mixture.data import sample_set

    cfg = _cfg(1000, steps)
    system = MixtureSystem(sample_set(K, L), cfg.relu_prime_at_zero, np.inf)
    y0 = initial_state(cfg)
    system.gd_advance(y0.copy(), 2, cfg.eta, (True, True), None)  # compile / load outside the timing
    best = np.inf
    for _ in range(repeats):
        y = y0.copy()
        t = time.perf_counter()
        system.gd_advance(y, steps, cfg.eta, (True, True), None)
        best = min(best, time.perf_counter() - t)
    return steps / best


def bench_particles(m: int, d: int, steps: int, repeats: int) -> dict:
    from meanfield.models.mixture import particles
    from meanfield.models.mixture.data import sample_set
    from meanfield.models.mixture.run import MixtureSystem

    cfg = _cfg(m, steps)
    samples = sample_set(K, L)
    best = np.inf
    for _ in range(repeats):
        system = particles.make_particles(cfg, d)
        y = system.projection()
        y0 = y.copy()
        t = time.perf_counter()
        done, code = system.gd_advance(y, steps, cfg.eta, (True, True), None)
        best = min(best, time.perf_counter() - t)
    # sanity: the reduced GD map from the projected initial state
    y_red = y0
    MixtureSystem(samples, cfg.relu_prime_at_zero, np.inf).gd_advance(y_red, steps, cfg.eta, (True, True), None)
    err = float(np.max(np.abs(y - y_red)) / np.max(np.abs(y_red)))
    return dict(m=m, d=d, steps=steps, rate=steps / best, done=done, code=code, err=err,
                mem_mb=4 * m * d * 8 / 2**20)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer steps and repeats")
    args = ap.parse_args(argv)
    cases = CASES_QUICK if args.quick else CASES_FULL

    t_start = time.perf_counter()
    print(f"meanfield particle sampler benchmark ({'quick' if args.quick else 'full'} run), K={K}, L={L}")
    print(f"python {platform.python_version()}, numpy {np.__version__}, {os.cpu_count()} CPUs, "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}")
    red = bench_reduced(4000 if args.quick else 20000, 3 if args.quick else 5)
    print(f"reduced GD map (kernels.gd_advance): {red:,.0f} steps/s ({1e6 / red:.2f} us/step)")
    print()
    hdr = (f"{'m':>7} {'d':>4} {'weights MB':>10} {'steps':>6} {'steps/s':>10} {'ms/step':>9} "
           f"{'ns/entry':>10} {'reduced/particles':>18} {'rel err vs reduced':>19}")
    print(hdr)
    print("-" * len(hdr))
    rows = []
    for m, d, steps, rep in cases:
        r = bench_particles(m, d, steps, rep)
        rows.append(r)
        print(f"{m:>7} {d:>4} {r['mem_mb']:>10.1f} {steps:>6} {r['rate']:>10.1f} "
              f"{1e3 / r['rate']:>9.3f} {1e9 / r['rate'] / (4 * m * d):>10.3f} {red / r['rate']:>17,.0f}x "
              f"{r['err']:>19.1e}")
        assert r["done"] == steps and r["code"] == 0
    print(f"\nns/entry: time per step per weight entry (4 m d entries: W_K, W_Q of 2 heads)")
    print(f"total benchmark time {time.perf_counter() - t_start:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
