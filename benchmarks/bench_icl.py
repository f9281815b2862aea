"""Benchmark: one exact population GD step against one sampled SGD step (issue 22).

The exact step: the engine's GD map on the closed-form Gaussian population loss
(``meanfield.engine.population.PopulationSystem.gd_advance``) at d = 5,
N = 32, H = 4 linear-attention heads with separate rank-one keys and queries
and a value vector each (``meanfield/models/icl_saddles.toml`` with d = 5 and
four of its heads), from the description's finite-width init.
The sampled step it replaces: the same network written in PyTorch (W_K, W_Q
(H, P), v (H, P); yhat = sum_h v_h^T (1/N) sum_i z_i z_i^T k_h q_h^T z_q, the
query not a key), one SGD step (forward, backward, update) on a batch of 1024
freshly drawn prompts (drawing them is not timed), loss (1/2) mean (yhat - y_q)^2.

Both are measured in this one process (best of ``repeats`` of ``steps`` steps)
and the ratio printed; torch's threads are left at their default. A missing
torch (the optional `bench` extra: pip install meanfield[bench]) is reported
as skipped.

Usage:  .venv/bin/python benchmarks/bench_icl.py [--quick]
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

D, N, H, BATCH = 5, 32, 4, 1024


def description():
    """icl_saddles.toml at d = 5 with its first four heads."""
    from meanfield.engine.description import description_from_dict, read_raw

    raw = read_raw(ROOT / "meanfield" / "models" / "icl_saddles.toml")
    raw["heads"] = raw["heads"][:H]
    return description_from_dict(raw, {"d": D, "N": N, "cov": "1", "eta": 0.05}, source="bench_icl")


def bench_exact(steps: int, repeats: int) -> float:
    """Seconds per exact population GD step."""
    from meanfield.engine.population import PopulationSystem
    from meanfield.engine.reduce import initial_state

    desc = description()
    sys_ = PopulationSystem(desc)
    y0 = initial_state(desc)
    mode = 15
    y = y0.copy()
    sys_.gd_advance(y, 1, 0.05, mode, None)  # compile / warm up
    best = np.inf
    for _ in range(repeats):
        y = y0.copy()
        t0 = time.perf_counter()
        done, code = sys_.gd_advance(y, steps, 0.05, mode, None)
        dt = time.perf_counter() - t0
        if code != 0 or done != steps:
            raise RuntimeError(f"exact run stopped: code {code} after {done} steps")
        best = min(best, dt / steps)
    return best


def bench_torch(steps: int, repeats: int):
    """Seconds per SGD step of the PyTorch network on BATCH fresh prompts, or None without torch."""
    try:
        import torch
    except ImportError:
        return None
    from meanfield.engine.gaussian import GaussianPrompts

    law = GaussianPrompts(D, N, np.eye(D), np.eye(D), 0.0)
    rng = np.random.default_rng(0)
    P = D + 1
    g = torch.Generator().manual_seed(0)
    K = (0.05 * torch.randn(H, P, generator=g, dtype=torch.float64)).requires_grad_()
    Q = (0.05 * torch.randn(H, P, generator=g, dtype=torch.float64)).requires_grad_()
    V = (0.05 * torch.randn(H, P, generator=g, dtype=torch.float64)).requires_grad_()
    batches = []
    for _ in range(steps):
        Z, yq = law.tokens(BATCH, rng)
        batches.append((torch.from_numpy(Z), torch.from_numpy(yq)))

    def step(Z, yq):
        ctx, zq = Z[:, :-1, :], Z[:, -1, :]
        G = torch.einsum("nia,nib->nab", ctx, ctx) / N                 # (1/N) sum_i z_i z_i^T
        yhat = torch.einsum("ha,nab,hb,hc,nc->n", V, G, K, Q, zq)      # sum_h v_h^T G k_h q_h^T z_q
        loss = 0.5 * torch.mean((yhat - yq) ** 2)
        loss.backward()
        with torch.no_grad():
            for w in (K, Q, V):
                w -= 0.05 * w.grad
                w.grad.zero_()
        return loss

    step(*batches[0])
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        for Z, yq in batches:
            step(Z, yq)
        best = min(best, (time.perf_counter() - t0) / steps)
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer steps and repeats")
    a = ap.parse_args(argv)
    steps, repeats = (20, 2) if a.quick else (200, 5)
    te = bench_exact(steps * 10, repeats)
    print(f"exact population GD step (d = {D}, N = {N}, H = {H} separate rank-one heads): {te * 1e6:.1f} us")
    ts = bench_torch(steps, repeats)
    if ts is None:
        print("pytorch SGD step: skipped (torch is not installed; pip install meanfield[bench])")
        return 0
    print(f"pytorch SGD step on {BATCH} sampled prompts: {ts * 1e6:.1f} us")
    print(f"ratio sampled / exact: {ts / te:.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
