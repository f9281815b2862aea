"""Benchmark: the rank-m projection of finite-width population runs (``meanfield.engine.lowrank``).

One run of exact population GD steps of ``meanfield/models/icl_saddles.toml``
(d = 4, N = 32, five separate rank-one heads, N = 10 stacked columns per head,
the authors' random init) three ways, measured in this one process (best of
``repeats`` of ``steps`` steps): without projection (what the engine did
before; its state leaves rank one), projected with the warm start (one
subspace-iteration step from the previous basis, Rayleigh-Ritz; the shipped
path) and projected by a full eigen-decomposition every step (the generic
path the warm start must beat by > 2x to be kept; tests/test_icl_engine.py
holds the two equal to 1e-12). Ratios printed.

Usage:  .venv/bin/python benchmarks/bench_lowrank.py [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    import meanfield.engine as me
    from meanfield.engine.population import PopulationSystem
    from meanfield.models.icl import saddles

    steps, repeats = (500, 3) if a.quick else (4000, 5)
    desc = me.load(str(ROOT / "meanfield/models/icl_saddles.toml"), steps=10)
    y0 = saddles.paper_init(desc, "random", 0.05, 0)
    sysm = PopulationSystem(desc)
    m = sysm.rank_m

    def best(kind):
        out = []
        for _ in range(repeats):
            sysm.rank_m = 0 if kind == "none" else m
            sysm._basis = None
            y = y0.copy()
            sysm.gd_advance(y, 2, 0.25, 3, None)  # compiled, basis set
            if kind == "full":
                sysm._rank_scratch()[1][:] = False  # no warm start: each call's first step is a full eigh
                t0 = time.perf_counter()
                for _ in range(steps):
                    sysm._rank_scratch()[1][:] = False
                    sysm.gd_advance(y, 1, 0.25, 3, None)
                out.append(time.perf_counter() - t0)
                continue
            t0 = time.perf_counter()
            for _ in range(steps):  # one call per step in all three, so they share the per-call overhead
                sysm.gd_advance(y, 1, 0.25, 3, None)
            out.append(time.perf_counter() - t0)
        return min(out) / steps * 1e6

    t = {k: best(k) for k in ("none", "warm", "full")}
    print(f"icl_saddles, width {m}, {len(desc.model.heads)} heads: us per GD step (one call per step, best of "
          f"{repeats} x {steps})")
    for k, v in t.items():
        print(f"  {k:>5}: {v:9.1f}")
    print(f"  warm start vs full eigen-decomposition: {t['full'] / t['warm']:.1f}x faster; "
          f"projection overhead (warm / none): {t['warm'] / t['none']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
