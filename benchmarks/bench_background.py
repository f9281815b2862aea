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
    probe = me.load(ROOT / "docs/examples/majority.toml", overlap=ov, steps=20_000)
    g = system_of(probe, specialise=False)
    y = np.array(integrate_description(probe, None, None, g)[1].y[-1])  # compiles / loads the generic loop
    t0 = time.perf_counter()
    g.gd_advance(y, 20_000, 0.2, 7, None)
    us = (time.perf_counter() - t0) / 20_000 * 1e6
    steps = int(a.seconds / (us * 1e-6))
    desc = me.load(ROOT / "docs/examples/majority.toml", overlap=ov, steps=steps)
    print(f"majority.toml, overlap {ov:.6f} (never compiled), {steps} GD steps; generic loop ~{us:.2f} us a step")
    t0 = time.perf_counter()
    gen = integrate_description(desc, None, None, system_of(desc, specialise=False))[1]
    t_gen = time.perf_counter() - t0
    auto = system_of(desc)
    t0 = time.perf_counter()
    traj = integrate_description(desc, None, None, auto)[1]
    t_auto = time.perf_counter() - t0
    equal = np.array_equal(np.asarray(gen.y[-1]), np.asarray(traj.y[-1]))
    print(f"  generic loop alone:      {t_gen:7.2f} s")
    print(f"  default (auto):          {t_auto:7.2f} s  ({t_auto / t_gen:.2f} of the generic run)")
    if auto.switched_at is None:
        print("  the run ended in the generic loop (no switch: too short for --after plus the compile)")
    else:
        k = auto.switched_at
        before = t_gen * k / steps
        after_us = (t_auto - before) / max(1, steps - k) * 1e6  # the steps after the switch, roughly
        print(f"  switched at step {k} of {steps} (~{before:.1f} s in); after it ~{after_us:.2f} us a step "
              f"against the generic {t_gen / steps * 1e6:.2f} ({after_us / (t_gen / steps * 1e6):.2f})")
    print(f"  final states equal bit for bit: {equal}")


if __name__ == "__main__":
    main()
