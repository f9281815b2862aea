"""Benchmark of the induction-head hand kernels, retired from the package (``benchmarks/induction_hand_kernels.py``).

Every induction run now trains on the engine's generic two-layer network (issue 24); this benchmark keeps
the hand kernels' own figures, and ``benchmarks/bench_twolayer.py`` / ``run_all.py`` section 5 set the
generic network beside them in one run.

Measured in one process, on one core (the kernels are serial):

1. one full-batch gradient (loss + gradient, ``kernels.loss_grad``) on
   10,000 sequences, L = 100, d = 3, pa = {1, 2}, H = 3, D = 2, window M = 3,
   at the default init plus noise; both kernel paths (pattern tables, the
   default here, and direct); and one GD step (``kernels.gd_advance``, many
   steps per call, per step);
2. the plain-numpy oracle (``model.loss_and_grad``) on a subset of the
   sequences, scaled linearly to 10,000, and the ratio oracle / kernel
   (the oracle's cost is linear in the number of sequences);
3. generating the 10,000 sequences (tokens only, and with kernels), and the
   one-off pattern-code precomputation of a data set.

Targets (reported PASS / MISS, never asserted): gradient <= 50 ms,
generation < 1 s. Times are the fastest of several repeats (the median is
shown too): other processes on a shared machine only ever add time.

Usage:  .venv/bin/python benchmarks/bench_induction.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

N, L, d, PA, H, Dd, M = 10_000, 100, 3, (1, 2), 3, 2, 3
TARGET_GRAD_MS = 50.0
TARGET_GEN_S = 1.0


def _times(fn, repeats):
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return min(out), statistics.median(out)


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats and a smaller oracle subset")
    args = ap.parse_args(argv)
    reps = 3 if args.quick else 10
    n_oracle = 20 if args.quick else 100

    import numba

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import induction_hand_kernels as Kn  # the retired hand kernels (what every induction run used before)
    from meanfield.models.induction import data as D
    from meanfield.models.induction import model as Mo

    print(f"meanfield induction benchmark ({'quick' if args.quick else 'full'} run)")
    print(f"python {platform.python_version()}, numpy {np.__version__}, numba {numba.__version__}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    print(f"problem: N={N} sequences, L={L}, d={d}, pa={set(PA)}, H={H}, D={Dd}, window M={M}")
    print()

    # warm-up / compile outside the timings
    t = time.perf_counter()
    D.generate(4, d, L, PA, 1.0, seed=0, kernels=True)
    arch = Mo.Arch(d, H, M, Dd)
    small = D.generate(4, d, L, PA, 1.0, seed=0).tokens
    theta = Mo.init_params(arch, 2.0, 0.0, 1.0, 1.0) + 0.3 * np.random.default_rng(0).standard_normal(arch.n_params)
    for path in ("pattern", "direct"):
        b = Kn.Batch(small, arch, path)
        Kn.batch_loss_grad(theta, b)
        Kn.gd_advance(theta.copy(), 1, np.ones(3), *b.args(), Kn.log_cap_of(1e-300), 0, 1, 0.0, np.inf)
    print(f"warm-up (numba compile or cache load): {time.perf_counter() - t:.2f} s")
    print()

    # 3. generation
    gen_best, gen_med = _times(lambda: D.generate(N, d, L, PA, 1.0, seed=1), reps)
    genk_best, genk_med = _times(lambda: D.generate(N, d, L, PA, 1.0, seed=1, kernels=True), reps)
    ds = D.generate(N, d, L, PA, 1.0, seed=1)
    code_best, _ = _times(lambda: Kn.Batch(ds.tokens, arch, "pattern"), reps)

    # 1. kernel gradient
    res = {}
    for path in ("pattern", "direct"):
        b = Kn.Batch(ds.tokens, arch, path)
        grad = np.zeros(arch.n_params)
        cap = Kn.log_cap_of(1e-300)
        res[path] = _times(lambda: Kn.loss_grad(theta, *b.args(), cap, True, grad), reps)
    b = Kn.Batch(ds.tokens, arch)
    nstep = 5 if args.quick else 20
    y0 = theta.copy()
    rates = np.array([0.1, 0.1, 0.1])

    def steps():
        y = y0.copy()
        Kn.gd_advance(y, nstep, rates, *b.args(), Kn.log_cap_of(1e-300), 0, 1, 0.0, np.inf)

    gd_best, gd_med = _times(steps, max(2, reps // 3))
    # gd_advance evaluates nstep + 1 gradients (the last one for the final loss / criterion)
    gd_best /= nstep + 1
    gd_med /= nstep + 1

    # 2. oracle on a subset, scaled
    sub = ds.tokens[:n_oracle]
    o_best, o_med = _times(lambda: Mo.loss_and_grad(theta, sub, arch), 1 if args.quick else 3)
    scale = N / n_oracle
    lo, go = Mo.loss_and_grad(theta, sub, arch)
    lk, gk, _ = Kn.batch_loss_grad(theta, Kn.Batch(sub, arch))
    err = max(abs(lo - lk), float(np.max(np.abs(go - gk))))

    kb = res["pattern"][0]
    print("1. one full-batch loss + gradient (kernels.loss_grad), best / median of "
          f"{reps} repeats")
    print(f"   pattern path (default): {kb * 1e3:8.2f} ms / {res['pattern'][1] * 1e3:8.2f} ms   "
          f"target <= {TARGET_GRAD_MS:g} ms: {_verdict(kb * 1e3 <= TARGET_GRAD_MS)}")
    print(f"   direct path:            {res['direct'][0] * 1e3:8.2f} ms / {res['direct'][1] * 1e3:8.2f} ms")
    print(f"   one GD step (kernels.gd_advance, {nstep} steps per call): {gd_best * 1e3:8.2f} ms / "
          f"{gd_med * 1e3:8.2f} ms per gradient evaluation")
    print()
    print(f"2. numpy oracle (model.loss_and_grad) on {n_oracle} sequences: {o_best:.3f} s "
          f"-> {o_best * scale:.1f} s scaled to {N}")
    print(f"   ratio oracle / kernel (pattern): {o_best * scale / kb:,.0f}x   "
          f"(direct: {o_best * scale / res['direct'][0]:,.0f}x); max |oracle - kernel| on the subset: {err:.1e}")
    print()
    print(f"3. generating {N} sequences (numba, seeded): tokens {gen_best * 1e3:.1f} ms (median "
          f"{gen_med * 1e3:.1f}), with kernels {genk_best * 1e3:.1f} ms (median {genk_med * 1e3:.1f})   "
          f"target < {TARGET_GEN_S:g} s: {_verdict(max(gen_best, genk_best) < TARGET_GEN_S)}")
    print(f"   pattern codes of the data set (one-off per data set): {code_best * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
