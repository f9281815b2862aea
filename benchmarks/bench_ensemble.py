"""Chunked ensembles (``meanfield.core.ensemble``) against today's one-task-per-point sweep.

One grid of short K=2, L=3 trajectories (1000 exact GD steps, records every
10 steps, width m = 64 sampled inits): omega (50 log-spaced values in
[1e-3, 0.3]) x eta (20 values in [0.1, 2]) x seed (100) = 10^5 points,
through

  (a) ``meanfield.core.sweep.run_sweep``, one process task and one run file per
      point, every core: measured on a subset (``--subset`` points of the same
      grid) and its rate extrapolated to the whole grid (said so in the output);
  (b) ``meanfield.core.ensemble.solve``, chunks of batched trajectories in local
      worker processes (default chunk size from the timed probe);
  (c) the same on a 2-worker dask ``LocalCluster`` (``scheduler="local:2"``).

Every time is wall time of the whole call (planning, probe, pool / cluster
start, writing chunk files and the reduce to sweep.h5). Printed: trajectories
per second of each, (b)/(a) (target >= 50x) and (c)/(b) per core (target
>= 0.8), and the peak memory of the reduce step (a fresh process reading the
chunk files into sweep.h5: growth of its peak RSS during the reduce and the
tracemalloc peak) at 10^4 and 10^5 points (target: flat). Targets are
reported PASS / MISS, never asserted.

Usage:  .venv/bin/python benchmarks/bench_ensemble.py [--points 100000] [--subset 200] [--keep DIR]
            [--cluster-points N]  (run (c) on fewer points, e.g. 10000 on a busy machine; said so in the output)
(``--points`` scales the seed axis: 10^5 -> 100 seeds; 10^4 -> 10.)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

BASE = {"K": 2, "L": 3, "steps": 1000, "record_every": 10, "width": 64}
OMEGA = [float(x) for x in np.geomspace(1e-3, 0.3, 50)]
ETA = [float(x) for x in np.linspace(0.1, 2.0, 20)]

REDUCE_CHILD = """
import json, resource, sys, tracemalloc
from meanfield.core.ensemble import reduce
import h5py, numpy
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
tracemalloc.start()
r = reduce(sys.argv[1])
peak = tracemalloc.get_traced_memory()[1]
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"rss_growth_kib": after - before, "rss_peak_kib": after, "tracemalloc_peak": peak,
                  "n_done": r["n_done"]}))
"""


def cpu_seconds() -> float:
    """CPU time of this process and of its finished (waited-for) descendants."""
    import resource

    t = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        t += r.ru_utime + r.ru_stime
    return t


def axes(n_points: int) -> dict:
    seeds = max(1, n_points // (len(OMEGA) * len(ETA)))
    return {"omega": OMEGA, "eta": ETA, "seed": list(range(seeds))}


def reduce_memory(folder: Path) -> dict:
    r = subprocess.run([sys.executable, "-c", REDUCE_CHILD, str(folder)], capture_output=True, text=True,
                       cwd=ROOT, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=int, default=100_000)
    ap.add_argument("--subset", type=int, default=300, help="points of (a), extrapolated")
    ap.add_argument("--keep", default=None, help="keep the sweep folders here")
    ap.add_argument("--cluster-points", type=int, default=None,
                    help="run (c) on this many points of the grid (fewer seeds; default: all); when it is a tenth "
                         "of --points its sweep is also the 10^4-point input of the reduce-memory measurement")
    a = ap.parse_args()
    from meanfield.core.ensemble import EnsembleProblem, solve
    from meanfield.core.sweep import SweepSpec, run_sweep

    ncpu = os.cpu_count() or 1
    work = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="bench_ensemble_"))
    work.mkdir(parents=True, exist_ok=True)
    ax = axes(a.points)
    prob = EnsembleProblem(BASE, axes=ax)
    N = prob.size
    load0 = os.getloadavg()
    print(f"grid: omega {len(OMEGA)} x eta {len(ETA)} x seed {len(ax['seed'])} = {N} trajectories, K=2 L=3, "
          f"1000 GD steps, record_every 10, width 64; {ncpu} cores; load average at start "
          f"{load0[0]:.1f} (other work on the machine slows every number below)")

    # (a) one task per point, on a subset of the same grid
    ns, ne = min(len(ax["seed"]), 10), min(len(ETA), 10)
    no = min(len(OMEGA), max(1, -(-a.subset // (ns * ne))))
    sub = {"omega": OMEGA[:no], "eta": [str(x) for x in ETA[:ne]], "seed": [str(s) for s in range(ns)]}
    n_a = len(sub["omega"]) * len(sub["eta"]) * len(sub["seed"])
    run_sweep(SweepSpec(BASE, {"omega": [0.1]}, work / "warm"), workers=1, progress=False)  # numba cache warm
    t0, c0 = time.perf_counter(), cpu_seconds()
    idx = run_sweep(SweepSpec(BASE, sub, work / "a"), workers=ncpu, progress=False)
    ta, ca = time.perf_counter() - t0, cpu_seconds() - c0
    assert idx["n_done"] == n_a
    rate_a = n_a / ta
    print(f"(a) one task per point, {ncpu} processes: {n_a} points (a subset of the grid) in {ta:.1f} s = "
          f"{rate_a:.1f} trajectories/s; extrapolated to {N} points: {N / rate_a / 3600:.2f} h; "
          f"{ca / n_a * 1e3:.1f} CPU-ms per trajectory")
    shutil.rmtree(work / "a", ignore_errors=True)

    # (b) chunks of batched trajectories, local processes
    t0, c0 = time.perf_counter(), cpu_seconds()
    rb = solve(prob, work / "b", workers=ncpu, progress=True)
    tb, cb = time.perf_counter() - t0, cpu_seconds() - c0
    assert rb.status == "complete" and rb.n_done == N, rb
    rate_b = N / tb
    print(f"(b) chunked, {ncpu} local processes: {N} points in {tb:.1f} s = {rate_b:.1f} trajectories/s "
          f"({rb.n_chunks} chunks of {rb.chunk_size}; probe {rb.seconds_per_trajectory * 1e3:.2f} ms per "
          f"trajectory on one thread); {cb / N * 1e3:.2f} CPU-ms per trajectory")

    # (c) a 2-worker dask LocalCluster
    rate_c = None
    try:
        import distributed  # noqa: F401
    except ImportError:
        print("(c) skipped: dask.distributed is not installed (pip install 'meanfield[dask]')")
    else:
        probc = EnsembleProblem(BASE, axes=axes(a.cluster_points or N))
        Nc = probc.size
        t0, c0 = time.perf_counter(), cpu_seconds()
        rc = solve(probc, work / "c", scheduler="local:2", chunk_size=rb.chunk_size, progress=True)
        tc, cc = time.perf_counter() - t0, cpu_seconds() - c0
        assert rc.status == "complete" and rc.n_done == Nc, rc
        rate_c = Nc / tc
        print(f"(c) chunked, dask LocalCluster of 2 one-thread workers: {Nc} points" +
              (f" (the first {len(axes(Nc)['seed'])} seeds of the grid)" if Nc < N else "") +
              f" in {tc:.1f} s = {rate_c:.1f} trajectories/s (same chunk size); {cc / Nc * 1e3:.2f} CPU-ms per "
              f"trajectory")

    ratio = rate_b / rate_a
    print(f"(b)/(a) = {ratio:.1f}x  (target >= 50x: {'PASS' if ratio >= 50 else 'MISS'}; (a) extrapolated from "
          f"{n_a} points)")
    print(f"  in CPU time per trajectory (less sensitive to other load on the machine): (a)/(b) = "
          f"{(ca / n_a) / (cb / N):.1f}x")
    if rate_c is not None:
        per_core = (rate_c / 2) / (rate_b / ncpu)
        print(f"(c)/(b) per core = {per_core:.2f}  (2 workers vs {ncpu} processes; target >= 0.8: "
              f"{'PASS' if per_core >= 0.8 else 'MISS'})")
        print(f"  in CPU time per trajectory: (b)/(c) = {(cb / N) / (cc / Nc):.2f} (CPU time of the cluster's "
              f"worker processes counts once they have exited)")

    # reduce memory at 10^4 vs 10^5 points
    small = EnsembleProblem(BASE, axes=axes(max(1, N // 10)))
    if rate_c is not None and Nc == small.size:
        m_small = reduce_memory(work / "c")  # the cluster's sweep is the small grid
    else:
        solve(small, work / "small", workers=ncpu, progress=False)
        m_small = reduce_memory(work / "small")
    m_big = reduce_memory(work / "b")
    for n, m in ((small.size, m_small), (N, m_big)):
        print(f"reduce of {n} points: peak RSS grew by {m['rss_growth_kib'] / 1024:.1f} MiB (peak "
              f"{m['rss_peak_kib'] / 1024:.0f} MiB incl. imports), tracemalloc peak "
              f"{m['tracemalloc_peak'] / 2**20:.2f} MiB")
    grow = m_big["tracemalloc_peak"] / max(1, m_small["tracemalloc_peak"])
    print(f"reduce memory, {N} vs {small.size} points: tracemalloc peak x{grow:.2f} for x{N / small.size:.0f} "
          f"points (target flat, < 2x: {'PASS' if grow < 2 else 'MISS'})")
    load1 = os.getloadavg()
    print(f"load average at the end {load1[0]:.1f}")
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
