"""Benchmark of batched trajectories (``meanfield.models.mixture.batched``).

Trajectory-steps per second (one exact GD step of one trajectory = one
trajectory-step) for batches of B in {1, 64, 1024, 16384} independent
trajectories of the K=2, L=3 mixture (simultaneous schedule, a sweep-like mix
of omega in [1e-3, 0.3], eta in {0.1, 0.25, 0.5}, infinite and finite widths
m in {64, 256} with their seeds), on

* the CPU backend with 1 thread and with every thread
  (``numba.set_num_threads``), and the parallel efficiency
  (speedup / threads);
* the CUDA backend when a GPU is present (not the simulator);
* for reference, the unbatched path: ``kernels.gd_advance`` on one trajectory
  at a time (what ``meanfield.models.mixture.run.run`` calls).

Fewer steps per trajectory for larger B (about ``--work`` trajectory-steps per
measurement, at least 40 steps), records only at the start and the end. Times
are best of ``--repeats`` and include packing the batch and copying records
(what ``run_batch`` pays), not building configs or initial states.

Target (reported PASS / MISS, never asserted): at B = 16384 the CPU batch with
every thread reaches >= 1.7x the trajectory-steps/s of the same batch on one
thread (on a 2-core machine). A calibration (an embarrassingly parallel
prange loop, before and after) shows what parallelism the machine offered
during the run. The column "cores" is this process's CPU time
over wall time (1 thread / every thread): on a machine shared with other
work it shows how many cores the run actually got.

Usage:  .venv/bin/python benchmarks/bench_batched.py [--quick] [--work N] [--repeats R]
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

BATCHES = (1, 64, 1024, 16384)
TARGET_SPEEDUP = 1.7


def configs(B: int, steps: int):
    from meanfield.models.mixture.config import make_config
    from meanfield.models.mixture.init import initial_state

    rng = np.random.default_rng(B)
    omegas = np.geomspace(1e-3, 0.3, 16)
    cfgs = []
    for b in range(B):
        width = [None, 64, 256][b % 3]
        cfgs.append(make_config(steps=steps, record_every=steps, omega=float(omegas[b % 16]),
                                eta=[0.1, 0.25, 0.5][(b // 3) % 3], width=width, seed=int(rng.integers(1 << 30))))
    return cfgs, [initial_state(c) for c in cfgs]


def time_batch(cfgs, y0s, backend: str, repeats: int) -> tuple[float, float]:
    """(best wall time, CPU time of this process during that repeat)."""
    from meanfield.models.mixture import batched

    best = (np.inf, 0.0)
    for _ in range(repeats):
        t0 = time.perf_counter()
        c0 = time.process_time()
        res = batched.advance(cfgs, y0s, backend)
        wall = time.perf_counter() - t0
        if wall < best[0]:
            best = (wall, time.process_time() - c0)
        assert np.all(res.code == 0), "a benchmark trajectory diverged"
    return best


def calibrate(n_threads: int) -> float:
    """Speedup of an embarrassingly parallel numba prange loop (no memory
    traffic) on every thread over one thread: what this machine gives a
    perfectly parallel code right now (about n_threads when idle)."""
    import numba
    from numba import njit, prange

    @njit(parallel=True)
    def spin(n, out):
        for b in prange(out.shape[0]):
            s = 0.0
            for i in range(n):
                s += np.sin(i * 1e-3 + b)
            out[b] = s

    out = np.zeros(64 * n_threads)
    spin(10, out)
    best = {}
    for th in (1, n_threads):
        numba.set_num_threads(th)
        best[th] = min(_timed(spin, 400_000, out) for _ in range(3))
    numba.set_num_threads(n_threads)
    return best[1] / best[n_threads]


def _timed(f, *a) -> float:
    t0 = time.perf_counter()
    f(*a)
    return time.perf_counter() - t0


def time_unbatched(cfgs, y0s, repeats: int) -> float:
    """One trajectory at a time through kernels.gd_advance (the run() path)."""
    from meanfield.models.mixture import kernels
    from meanfield.models.mixture.data import sample_set

    s = sample_set(2, 3)
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        for c, y0 in zip(cfgs, y0s):
            y = y0.copy()
            kernels.gd_advance(y, c.steps, c.eta, s.P, s.idx, s.sgn, s.y, s.weight, s.consistent, 1.0, True, True,
                               0, 1, 0.0, c.max_abs)
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="less work per measurement (about 4x faster)")
    ap.add_argument("--work", type=float, default=4e5, help="trajectory-steps per measurement (default 4e5)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    work = args.work / 4 if args.quick else args.work
    reps = 2 if args.quick else args.repeats

    import numba

    from meanfield.models.mixture import batched

    n_threads = numba.get_num_threads()
    gpu = batched.cuda_available()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} logical cores, "
          f"numba {numba.__version__} with {n_threads} threads (threading layer "
          f"{numba.config.THREADING_LAYER}), GPU: {'yes' if gpu else 'no'}")
    t0 = time.perf_counter()
    c, y = configs(4, 3)
    batched.advance(c, y, "cpu")  # compile (or load the cache)
    if gpu:
        batched.advance(c, y, "cuda")
    print(f"warm-up (compile or cache load): {time.perf_counter() - t0:.1f} s")
    cal0 = calibrate(n_threads)
    print(f"calibration: a perfectly parallel prange loop runs {cal0:.2f}x faster on {n_threads} threads than on 1 "
          f"(about {n_threads} on an idle machine)\n", flush=True)

    rows = []
    for B in BATCHES:
        steps = max(40, int(work // B))
        cfgs, y0s = configs(B, steps)
        ts = B * steps
        numba.set_num_threads(1)
        t1, c1 = time_batch(cfgs, y0s, "cpu", reps)
        numba.set_num_threads(n_threads)
        tn, cn = time_batch(cfgs, y0s, "cpu", reps)
        tg = time_batch(cfgs, y0s, "cuda", reps)[0] if gpu else None
        k = max(1, min(B, 64))  # unbatched reference on up to 64 trajectories
        tu = time_unbatched(cfgs[:k], y0s[:k], reps) * B / k
        rows.append((B, steps, ts / tu, ts / t1, ts / tn, (ts / tg) if tg else None, t1 / tn, c1 / t1, cn / tn))
        r = rows[-1]
        print(f"B={B:6d} steps={steps:7d}: unbatched {r[2]:.3g}, cpu 1 thread {r[3]:.3g}, cpu {n_threads} threads "
              f"{r[4]:.3g}" + (f", cuda {r[5]:.3g}" if gpu else "") + " trajectory-steps/s; cores obtained "
              f"{r[7]:.2f} (1 thread), {r[8]:.2f} ({n_threads} threads)", flush=True)

    print("\ntrajectory-steps per second (K=2, L=3, exact GD map, simultaneous)")
    head = f"{'B':>6} {'steps':>7} {'unbatched':>11} {'cpu 1 thr':>11} {f'cpu {n_threads} thr':>11} "
    head += f"{'speedup':>8} {'efficiency':>10} {'cores':>9}" + (f" {'cuda':>11}" if gpu else "")
    print(head)
    print("-" * len(head))
    for B, steps, ru, r1, rn, rg, sp, k1, kn in rows:
        line = (f"{B:6d} {steps:7d} {ru:11.4g} {r1:11.4g} {rn:11.4g} {sp:7.2f}x {sp / n_threads:10.0%} "
                f"{k1:4.2f}/{kn:4.2f}")
        if gpu:
            line += f" {rg:11.4g}"
        print(line)
    cal1 = calibrate(n_threads)
    cal = (cal0 + cal1) / 2
    sp = rows[-1][6]
    verdict = "PASS" if sp >= TARGET_SPEEDUP else "MISS"
    print(f"\nparallel speedup at B={rows[-1][0]} on {n_threads} threads: {sp:.2f}x "
          f"(target >= {TARGET_SPEEDUP}x) {verdict}; parallel efficiency {sp / n_threads:.0%}")
    print(f"calibration (perfectly parallel loop) before / after: {cal0:.2f}x / {cal1:.2f}x; the batch reaches "
          f"{sp / cal:.0%} of what this machine gave a perfectly parallel code")
    k1, kn = rows[-1][7], rows[-1][8]
    print(f"cores obtained (process CPU time / wall time): {k1:.2f} on 1 thread, {kn:.2f} on {n_threads} threads"
          + ("; the machine is busy: other processes hold cores, so the speedup measures them too"
             if kn < 0.9 * n_threads else ""))
    B, steps, r1, rn = rows[-1][0], rows[-1][1], rows[-1][3], rows[-1][4]
    w1, wn = 1e6 * k1 / r1, 1e6 * kn / rn
    print(f"CPU time per trajectory-step at B={B}: {w1:.2f} us on 1 thread, {wn:.2f} us on {n_threads} threads "
          f"(parallel work overhead {wn / w1 - 1:+.0%})")
    print(f"(per step: cpu 1 thread {1e6 / rows[-1][3]:.2f} us, unbatched {1e6 / rows[-1][2]:.2f} us; "
          f"total {time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
