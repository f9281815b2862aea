"""us per trajectory-step of the mixture's batched rk4 (K = 2, L = 3), lanes vs lanes=False, one thread.

Not a test: ``PYTHONPATH=. python benchmarks/bench_rk4_lanes.py [B] [steps]`` (default B = 10000, 100 steps).
Each path runs once to compile (or load numba's cache), then is timed (best of ``REPS``).
"""

from __future__ import annotations

import sys
import time

import numba

from meanfield.models.mixture import batched
from meanfield.models.mixture.config import make_config

REPS = 2


def main(B: int = 10000, steps: int = 100) -> None:
    numba.set_num_threads(1)
    cfgs = [make_config(method="rk4", K=2, L=3, steps=steps, eta=0.1, dt=0.1, omega=0.05 + 0.1 * (b % 7) / 7,
                        record_every=steps) for b in range(B)]
    y0s = None
    small = cfgs[:64]
    for name, kw in (("lanes=False (per trajectory)", dict(lanes=False)), ("lanes (vector exp)", {}),
                     ("lanes, vector_exp=False", dict(vector_exp=False))):
        batched.advance(small, y0s, **kw)  # compile / load
        best = float("inf")
        for _ in range(REPS):
            t0 = time.perf_counter()
            res = batched.advance(cfgs, y0s, **kw)
            best = min(best, time.perf_counter() - t0)
        assert int(res.step[0, res.n_records[0] - 1]) == steps
        print(f"{name:32s} B = {B}, {steps} steps: {best:.3f} s, {best / (B * steps) * 1e6:.3f} us per "
              f"trajectory-step")


if __name__ == "__main__":
    main(*[int(a) for a in sys.argv[1:]])
