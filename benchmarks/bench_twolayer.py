"""Benchmark: the two-layer class's generic gradient against the induction system's hand kernels.

The induction system's copier-selector-classifier TF(M, H, d, D) written as a
generic two-layer network (``meanfield.engine.twolayer_net``: H rpe heads
with lag windows 1..M, token values, normalisation, the selector over subsets
of at most D heads, the attention read-out, the nll loss with the same log(0)
guard), against ``meanfield.models.induction.kernels`` (numba, pattern path)
on the same 10,000 sequences of length L = 100 (d = 3, pa = {1, 2}, H = 3,
D = 2, M = 3): one full-batch loss + gradient each, the fastest of a few
repeats, in one run; the two gradients are checked equal first (1e-10).
Prints the ratio generic / kernels: the kernels stay a fast path only while
it is above 2 (docs/engine.md, "Two-layer attention").

Usage:  .venv/bin/python benchmarks/bench_twolayer.py [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from meanfield.engine.twolayer_net import Head, Net, loss_grad  # noqa: E402
from meanfield.models.induction import kernels, model  # noqa: E402
from meanfield.models.induction.data import generate  # noqa: E402


def generic_net(d, L, H, M, D) -> Net:
    """TF(M, H, d, D) as a generic two-layer network (lags 1..M per head)."""
    heads = tuple(Head("rpe", (1, M), softmax=True, normalise=True, value="token") for _ in range(H))
    return Net(d, L, (heads,), selector=D, readout="attention")


def to_generic(theta_ind, arch) -> np.ndarray:
    """The induction vector [c, w, a] in the generic order [w_1, ..., w_H, c, a]."""
    c, w, a = model.unpack(theta_ind, arch)
    return np.concatenate([np.ravel(w), c, [a]])


def best(fn, repeats):
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1,000 sequences, one repeat")
    args = ap.parse_args(argv)
    N, L, d, pa, H, D, M = (1_000 if args.quick else 10_000), 100, 3, (1, 2), 3, 2, 3
    reps = 1 if args.quick else 3
    data = generate(N, d=d, L=L, pa=pa, alpha=1.0, seed=0)
    tokens = np.asarray(getattr(data, "tokens", data), dtype=np.int64)
    arch = model.Arch(d=d, H=H, M=M, D=D)
    rng = np.random.default_rng(0)
    theta_ind = model.init_params(arch, 2.0, 0.0, 1.0, 1.0) + rng.normal(0, 0.1, arch.n_params)
    net = generic_net(d, L, H, M, D)
    theta = to_generic(theta_ind, arch)
    y, p = np.eye(d)[tokens[:, L]], np.full(N, 1.0 / N)
    batch = kernels.Batch(tokens, arch)
    lk, gk, _ = kernels.batch_loss_grad(theta_ind, batch)  # compiles once
    lg, gg = loss_grad(theta, net, tokens, y, p)
    err = max(abs(lg - lk), float(np.abs(gg - to_generic(gk, arch)).max()))
    print(f"N = {N}, L = {L}, d = {d}, H = {H}, M = {M}, D = {D}: loss {lk:.12g}; |generic - kernels| = {err:.2e}")
    if err > 1e-10:
        print("FAIL: the generic gradient differs from the induction kernels")
        return 1
    tk = best(lambda: kernels.batch_loss_grad(theta_ind, batch), reps)
    tg = best(lambda: loss_grad(theta, net, tokens, y, p), reps)
    print(f"induction kernels (numba, {batch.path} path): {tk * 1e3:9.1f} ms per gradient")
    print(f"generic two-layer (twolayer_net):      {tg * 1e3:9.1f} ms per gradient")
    ratio = tg / tk
    print(f"ratio generic / kernels = {ratio:.1f}  ({'within' if ratio <= 2 else 'NOT within'} 2x: the hand kernels "
          f"{'could go' if ratio <= 2 else 'stay as the fast path'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
