"""Parallel speedup of a sweep: the same 64-point grid with 1 worker and with
every core (fresh output folders), measured in one run.

    .venv/bin/python benchmarks/bench_sweep.py [--points 64] [--steps 40000]

Target (issue 3): >= 1.7x on 2 cores. Printed, not asserted.
"""

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from meanfield.core.sweep import SweepSpec, run_sweep


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=int, default=64)
    ap.add_argument("--steps", type=int, default=40000)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    a = ap.parse_args()
    n = a.points
    params = {"omega": [float(x) for x in __import__("numpy").geomspace(1e-3, 0.3, n)]}
    base = {"steps": a.steps, "record_every": 100}
    # warm the numba cache so neither timing includes compilation
    run_sweep(SweepSpec(base, {"omega": [0.1]}, Path(tempfile.mkdtemp()) / "warm"), workers=1, progress=False)
    times = {}
    for w in (1, a.workers):
        d = Path(tempfile.mkdtemp())
        t0 = time.perf_counter()
        idx = run_sweep(SweepSpec(base, params, d / "sw"), workers=w, progress=False)
        times[w] = time.perf_counter() - t0
        assert idx["n_done"] == n
        shutil.rmtree(d)
    print(f"sweep of {n} points ({a.steps} GD steps each, K=2 L=3), machine has {os.cpu_count()} cores")
    print(f"  1 worker : {times[1]:8.2f} s  ({n / times[1]:.2f} points/s)")
    print(f"  {a.workers} workers: {times[a.workers]:8.2f} s  ({n / times[a.workers]:.2f} points/s)")
    sp = times[1] / times[a.workers]
    print(f"  speedup  : {sp:.2f}x   (target >= 1.7x on 2 cores: {'PASS' if sp >= 1.7 else 'MISS'})")
    # the same grid as one numba-threaded batch in this process (--batched)
    import numba

    tb = {}
    for th in (1, numba.config.NUMBA_NUM_THREADS):
        numba.set_num_threads(th)
        d = Path(tempfile.mkdtemp())
        t0 = time.perf_counter()
        run_sweep(SweepSpec(base, params, d / "sw"), progress=False, batched=True)
        tb[th] = time.perf_counter() - t0
        shutil.rmtree(d)
    print(f"  batched, 1 thread : {tb[1]:8.2f} s;  {numba.config.NUMBA_NUM_THREADS} threads: "
          f"{tb[numba.config.NUMBA_NUM_THREADS]:8.2f} s;  speedup {tb[1] / tb[numba.config.NUMBA_NUM_THREADS]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
