"""Benchmark: the symmetry-reduced dynamics (orbit variables) against the full one.

Everything in one run, in one process, so that the ratios mean something:

1. microseconds per exact GD step: ``kernels.gd_advance`` (full flat state)
   against ``symmetry.red_gd_advance`` (orbit variables), both numba loops of
   many steps per call from the default initial state (infinite width,
   omega = 0.1, zero neurons, relu'(0) = 1, simultaneous, eta = 0.5), best of
   several repeats; plus, for K = 2, L = 3, the sympy-generated reduced map
   (``derivations/generated/mixture_K2_L3_sym.py``) and the sympy-generated full map
   (``mixture_K2_L3.py``) looped inside numba;
2. microseconds per flow right-hand side evaluation (numba loops over a fixed
   state taken 200 steps into the GD run);
3. a check that the two trajectories agree (sup over the timed steps of
   |embed(z) - y|) and the group order / counts.

Usage:  .venv/bin/python benchmarks/bench_symmetry.py [--quick]
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

ETA = 0.5
R0 = 1.0
# (K, L, GD steps per call, repeats, rhs evaluations per call)
CASES_FULL = [(2, 3, 20000, 9, 20000), (3, 4, 4000, 7, 4000), (4, 4, 1000, 5, 1000)]
CASES_QUICK = [(2, 3, 4000, 3, 4000), (3, 4, 800, 3, 800), (4, 4, 200, 3, 200)]


def _setup(K, L):
    from meanfield.models.mixture import symmetry
    from meanfield.models.mixture.config import make_config
    from meanfield.models.mixture.data import sample_set
    from meanfield.models.mixture.init import initial_state

    cfg = make_config({}, K=K, L=L, eta=ETA, relu_prime_at_zero=R0)
    t = time.perf_counter()
    red = symmetry.reduce(cfg)
    t_group = time.perf_counter() - t
    return cfg, sample_set(K, L), initial_state(cfg), red, t_group


def _best(fn, repeats):
    times = []
    out = None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), float(np.median(times)), out


def _njit_loops():
    from numba import njit

    @njit(cache=False)
    def gd_loop(f, z, n, eta, r0):
        for _ in range(n):
            z = f(z, eta, r0)
        return z

    @njit(cache=False)
    def rhs_loop(f, z, n, r0):
        acc = 0.0
        for _ in range(n):
            acc += f(z, r0)[0]
        return acc

    return gd_loop, rhs_loop


def bench_case(K, L, steps, repeats, nrhs):
    from meanfield.models.mixture import kernels, symmetry

    cfg, s, y0, red, t_group = _setup(K, L)
    R = red.reduction
    args = (s.P, s.idx, s.sgn, s.y, s.weight)

    def full_gd(n, y):
        return kernels.gd_advance(y, n, ETA, *args, s.consistent, R0, True, True, 0, 1, 0.0, np.inf)

    def red_gd(n, z):
        return symmetry.red_gd_advance(z, n, ETA, R._args, s.consistent, R0, True, True, 0, 1, 0.0, np.inf)

    full_gd(2, y0.copy())  # compile / load outside the timing
    red_gd(2, red.z0.copy())
    bf, mf, yT = _best(lambda: (lambda y: (full_gd(steps, y), y)[1])(y0.copy()), repeats)
    br, mr, zT = _best(lambda: (lambda z: (red_gd(steps, z), z)[1])(red.z0.copy()), repeats)
    err = float(np.max(np.abs(R.embed(zT) - yT)))

    # rhs at a state 200 steps in
    y = y0.copy()
    full_gd(200, y)
    z = R.project(y)
    out_f = np.empty_like(y)
    out_r = np.empty(R.n)

    from numba import njit

    @njit(cache=False)
    def full_rhs_loop(y, out, n, P, idx, sgn, lab, weight):
        acc = 0.0
        for _ in range(n):
            acc += kernels.flow_rhs(y, out, P, idx, sgn, lab, weight, 1.0, True, True)
        return acc

    @njit(cache=False)
    def red_rhs_loop(z, out, n, a):
        acc = 0.0
        for _ in range(n):
            acc += symmetry.red_flow_rhs(z, out, a, 1.0, True, True)
        return acc

    full_rhs_loop(y, out_f, 2, *args)
    red_rhs_loop(z, out_r, 2, R._args)
    bfr, _, _ = _best(lambda: full_rhs_loop(y, out_f, nrhs, *args), repeats)
    brr, _, _ = _best(lambda: red_rhs_loop(z, out_r, nrhs, R._args), repeats)
    rhs_err = float(np.max(np.abs(R.project(out_f) - out_r)))
    return dict(K=K, L=L, n=s.n, N=R.N, nred=R.n, order=red.group.order, structure=red.group.structure(),
                t_group=t_group, steps=steps, repeats=repeats, full_us=bf / steps * 1e6, red_us=br / steps * 1e6,
                full_med=mf / steps * 1e6, red_med=mr / steps * 1e6, err=err,
                full_rhs_us=bfr / nrhs * 1e6, red_rhs_us=brr / nrhs * 1e6, rhs_err=rhs_err)


def bench_generated(steps, repeats):
    """K = 2, L = 3: the sympy-generated full and reduced maps, looped inside numba."""
    from meanfield.engine.codegen import load_generated

    gen = ROOT / "derivations" / "generated"
    full = load_generated(gen / "mixture_K2_L3.py")
    redm = load_generated(gen / "mixture_K2_L3_sym.py")
    cfg, s, y0, red, _ = _setup(2, 3)
    gd_loop, _ = _njit_loops()
    gd_loop(full.gd_map, y0.copy(), 2, ETA, R0)
    gd_loop(redm.gd_map, red.z0.copy(), 2, ETA, R0)
    bf, _, yT = _best(lambda: gd_loop(full.gd_map, y0.copy(), steps, ETA, R0), repeats)
    br, _, zT = _best(lambda: gd_loop(redm.gd_map, red.z0.copy(), steps, ETA, R0), repeats)
    return dict(full_us=bf / steps * 1e6, red_us=br / steps * 1e6,
                err=float(np.max(np.abs(red.reduction.embed(zT) - yT))))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer steps and repeats")
    args = ap.parse_args(argv)
    cases = CASES_QUICK if args.quick else CASES_FULL
    import numba

    t0 = time.perf_counter()
    print(f"meanfield symmetry-reduction benchmark ({'quick' if args.quick else 'full'} run)")
    print(f"python {platform.python_version()}, numpy {np.__version__}, numba {numba.__version__}, "
          f"{os.cpu_count()} CPUs, {platform.machine()}")
    print(f"default configuration: infinite width, omega=0.1, zero neurons, uniform p, eta={ETA}, relu'(0)={R0:g}, "
          f"simultaneous")
    print()
    rows = [bench_case(*c) for c in cases]
    print("1. exact GD map, numba loop of many steps per call (best of the repeats; median in brackets)")
    hdr = (f"{'K':>2} {'L':>2} {'samples':>7} {'group':>12} {'vars full':>9} {'reduced':>7} {'steps':>6} "
           f"{'full us/step':>17} {'reduced us/step':>17} {'speedup':>8} {'|embed(z)-y|':>13}")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        print(f"{r['K']:>2} {r['L']:>2} {r['n']:>7} {r['structure'] + ' ' + str(r['order']):>12} {r['N']:>9} "
              f"{r['nred']:>7} {r['steps']:>6} {r['full_us']:>8.3f} ({r['full_med']:>6.3f}) "
              f"{r['red_us']:>8.3f} ({r['red_med']:>6.3f}) {r['full_us'] / r['red_us']:>7.2f}x {r['err']:>13.1e}")
    print()
    print("2. flow right-hand side, numba loop of evaluations at a fixed state (200 GD steps in)")
    hdr = f"{'K':>2} {'L':>2} {'full us/eval':>13} {'reduced us/eval':>16} {'speedup':>8} {'|proj(f)-f_red|':>16}"
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        print(f"{r['K']:>2} {r['L']:>2} {r['full_rhs_us']:>13.3f} {r['red_rhs_us']:>16.3f} "
              f"{r['full_rhs_us'] / r['red_rhs_us']:>7.2f}x {r['rhs_err']:>16.1e}")
    print()
    g = bench_generated(cases[0][2], cases[0][3])
    print("3. K=2 L=3, sympy-generated code (derivations/generated), GD map looped inside numba")
    print(f"   full mixture_K2_L3.py {g['full_us']:.3f} us/step, reduced mixture_K2_L3_sym.py "
          f"{g['red_us']:.3f} us/step: speedup {g['full_us'] / g['red_us']:.2f}x  (|embed(z)-y| = {g['err']:.1e})")
    print()
    print("summary: speedup of the reduced system (GD step / rhs evaluation)")
    for r in rows:
        print(f"   K={r['K']} L={r['L']}: {r['N']} -> {r['nred']} variables, GD {r['full_us'] / r['red_us']:.2f}x, "
              f"rhs {r['full_rhs_us'] / r['red_rhs_us']:.2f}x  (group search {r['t_group']:.2f} s)")
    print(f"\ntotal benchmark time {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
