"""A long first run of a description never compiled before: the default (``specialise="auto"``) against the
generic loop alone (meanfield.engine.background).

    python benchmarks/bench_background.py [--seconds 60] [--after 10]

The description is docs/examples/majority.toml with an overlap no process has used (so no specialised loop
is in numba's cache: a description's first run). One run of about ``--seconds`` seconds in the generic loop
alone (``specialise=False``), then the same run with the default: it starts in the generic loop, after
``--after`` seconds there (``background.AFTER_S``) a child process compiles the description's loop, and the run
goes on in it from the next chunk on. Prints both wall times, when the switch came, us per step before and
after it, and whether the two final states are equal bit for bit (they must be: the same kernels).
"""

from __future__ import annotations

import argparse
import math
import random
import time
from pathlib import Path

import numpy as np

import meanfield.engine as me
from meanfield.engine import background
from meanfield.engine.system import integrate_description, system_of

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="length of the run in the generic loop (s)")
    ap.add_argument("--after", type=float, default=background.AFTER_S,
                    help="seconds in the generic loop before the background compile (background.AFTER_S)")
    a = ap.parse_args()
    if not (a.seconds > 0 and a.after >= 0):
        raise SystemExit("bench_background: --seconds > 0 and --after >= 0")
    background.AFTER_S = a.after
    ov = 0.3 + random.random() * 1e-3
    probe = me.load(ROOT / "docs/examples/majority.toml", overlap=ov, steps=200_000)
    integrate_description(probe, None, None, system_of(probe, specialise=False))  # compiles / loads the generic loop
    us = math.inf
    for _ in range(3):  # the best of three: the run's length is set from it
        t0 = time.perf_counter()
        integrate_description(probe, None, None, system_of(probe, specialise=False))
        us = min(us, (time.perf_counter() - t0) / 200_000 * 1e6)
    steps = int(a.seconds / (us * 1e-6))
    desc = me.load(ROOT / "docs/examples/majority.toml", overlap=ov, steps=steps)
    print(f"majority.toml, overlap {ov:.6f} (never compiled), {steps} GD steps; generic loop ~{us:.2f} us a step")
    t0 = time.perf_counter()
    gen = integrate_description(desc, None, None, system_of(desc, specialise=False))[1]
    t_gen = time.perf_counter() - t0
    auto = system_of(desc, background=True)  # as a single run builds it (meanfield.engine.runs.run)
    seen = {}
    step = auto.gd_advance

    def timed(*args):  # the wall time at the switch
        out = step(*args)
        if auto.switched_at is not None and "t" not in seen:
            seen["t"] = time.perf_counter()
        return out

    auto.gd_advance = timed
    t0 = time.perf_counter()
    traj = integrate_description(desc, None, None, auto)[1]
    t_auto = time.perf_counter() - t0
    equal = np.array_equal(np.asarray(gen.y[-1]), np.asarray(traj.y[-1]))
    print(f"  generic loop alone:      {t_gen:7.2f} s  ({t_gen / steps * 1e6:.2f} us a step)")
    print(f"  default (auto):          {t_auto:7.2f} s  ({t_auto / t_gen:.2f} of the generic run)")
    if auto.switched_at is None:
        print("  the run ended in the generic loop (no switch: too short for --after plus the compile)")
    else:
        k, ts = auto.switched_at, seen["t"] - t0
        before = ts / k * 1e6
        after = (t_auto - ts) / max(1, steps - k) * 1e6
        print(f"  switched at step {k} of {steps}, {ts:.1f} s in; {before:.2f} us a step before it (the generic "
              f"loop, the child compiling alongside), {after:.2f} after it ({after / before:.2f})")
    print(f"  final states equal bit for bit: {equal}")


if __name__ == "__main__":
    main()
