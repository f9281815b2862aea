"""Benchmark of first use: what a new user waits for, in new processes (issue 25).

Each command runs in a fresh ``python -m meanfield`` process with its own
``NUMBA_CACHE_DIR``, so nothing is shared with the caller:

1. cold: an empty cache, ``model run incontext --steps 10`` and
   ``mixture run --steps 10`` (they compile their kernels; the first prints
   "compiling kernels, about N s, once");
2. ``meanfield warm`` into another empty cache (every kernel family);
3. after warm: the same two commands in new processes with that cache
   (target: ``model run incontext --steps 10`` under 3 s), and a second
   time (the steady state of a warm cache);
4. the floor: ``python -c "import meanfield.cli"`` (interpreter, numpy,
   h5py start-up), for the ratio warm / floor.

Timings on a shared, loaded machine are noisy: the ratios inside one run
(cold / warm, warm / floor) are the numbers to compare across machines.
Results are printed and written as JSON (``--json``); the numbers measured
when this was added are in ``benchmarks/first_use.md``.

Usage:  .venv/bin/python benchmarks/bench_first_use.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

INCONTEXT = ["model", "run", "incontext", "--steps", "10", "--quiet", "--out", "{tmp}/ic.h5"]
MIXTURE = ["mixture", "run", "--steps", "10", "--quiet", "--out", "{tmp}/mix.h5"]
TARGET_S = 3.0


CPU = {}  # command label -> CPU seconds (user + sys) of the child: what a loaded machine does not inflate


def _timed(args, cache: Path | None, tmp: Path, label: str | None = None) -> tuple[float, str]:
    env = dict(os.environ) if cache is None else dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    import resource

    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "meanfield", *[a.replace("{tmp}", str(tmp)) for a in args]],
                       capture_output=True, text=True, env=env, cwd=tmp, timeout=3600)
    dt = time.perf_counter() - t0
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if label:
        CPU[label] = (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(args)}: exit {r.returncode}: {r.stderr.strip()[-300:]}")
    return dt, r.stderr


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=None)
    ap.add_argument("--warm-only", action="store_true",
                    help="only the after-warm runs, with this environment's numba cache (already warm: run "
                         "`meanfield warm` first), three times each")
    a = ap.parse_args(argv)
    res = {"machine": f"{platform.machine()}, {os.cpu_count()} cores", "load": os.getloadavg()[0]}
    if a.warm_only:
        with tempfile.TemporaryDirectory(prefix="mf-first-use-") as d:
            d = Path(d)
            for i in range(3):
                res[f"after_warm_incontext_s_{i}"], err = _timed(INCONTEXT, None, d, f"after_warm_incontext_cpu_{i}")
                res["notice"] = "compiling kernels, about" in err
            for i in range(2):
                res[f"after_warm_mixture_s_{i}"], _ = _timed(MIXTURE, None, d, f"after_warm_mixture_cpu_{i}")
        res.update({f"{k}_s": v for k, v in CPU.items()})
        res["load_end"] = os.getloadavg()[0]
        best = min(res[f"after_warm_incontext_s_{i}"] for i in range(3))
        for k, v in res.items():
            print(f"{k:34s} {v:.2f}" if isinstance(v, float) else f"{k:34s} {v}")
        print(f"target: model run incontext --steps 10 after warm < {TARGET_S:g} s: "
              f"{'PASS' if best < TARGET_S else 'MISS'} (best {best:.2f} s wall; load average {res['load']:.1f})")
        if a.json:
            Path(a.json).write_text(json.dumps(res, indent=2))
        return 0
    with tempfile.TemporaryDirectory(prefix="mf-first-use-") as d:
        d = Path(d)
        cold, hot = d / "cold", d / "hot"
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import meanfield.cli"], check=True)
        res["floor_s"] = time.perf_counter() - t0
        res["cold_incontext_s"], err = _timed(INCONTEXT, cold, d, "cold_incontext_cpu")
        res["cold_notice"] = "compiling kernels, about" in err
        res["cold_mixture_s"], _ = _timed(MIXTURE, d / "cold2", d)
        res["warm_s"], _ = _timed(["warm"], hot, d)
        res["after_warm_incontext_s"], err = _timed(INCONTEXT, hot, d, "after_warm_incontext_cpu")
        res["after_warm_notice"] = "compiling kernels, about" in err
        res["after_warm_mixture_s"], _ = _timed(MIXTURE, hot, d)
        res["again_incontext_s"], _ = _timed(INCONTEXT, hot, d)
    res.update({f"{k}_s": v for k, v in CPU.items()})
    res["ratio_cold_over_warm"] = res["cold_incontext_s"] / res["after_warm_incontext_s"]
    res["ratio_warm_over_floor"] = res["after_warm_incontext_s"] / res["floor_s"]
    ok = res["after_warm_incontext_s"] < TARGET_S
    for k, v in res.items():
        print(f"{k:26s} {v:.2f}" if isinstance(v, float) else f"{k:26s} {v}")
    print(f"target: model run incontext --steps 10 after warm < {TARGET_S:g} s: {'PASS' if ok else 'MISS'} "
          f"(load average {res['load']:.1f})")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
