"""The engine's generic GD batch in lanes vs one trajectory after another (meanfield.engine.run_batch, fast=False).

    python benchmarks/bench_engine_lanes.py [--B 10000] [--steps 100] [--K 2] [--L 3] [--threads 1]
                                            [--widths 4,8,16]

B trajectories of the mixture description (seeds 0..B-1 at infinite width, eta from 0.3 to 0.7) through
``run_batch(desc, ..., fast=False, lanes=False, specialise=False)`` (the per-trajectory drivers over the
generic scalar kernels), the same with ``specialise="auto"`` (the loop compiled for the description, where
numba's cache holds one: ``meanfield.engine.specialise``) and
``run_batch(desc, ..., fast=False)`` (the lanes, ``meanfield.engine.lanes_batch``, at the width it picks),
the same with ``vector_exp=True`` (``math.exp`` in the lanes by ``meanfield.core.lane_exp.exp_lane``),
and the lane batch at the block widths of ``--widths``; prints us per trajectory-step and whether the two
paths' final states and losses are equal (best of ``--reps`` runs each); for reference, the mixture's hand-written lanes
(``meanfield.models.mixture.batched.advance``, the C library's exp and the vectorised exp) on the same
batch size. Compile time is excluded (a warm-up call of each first).
"""

from __future__ import annotations

import argparse
import time

import numba
import numpy as np

import meanfield.engine as me
from meanfield.core import batched as core_batched
from meanfield.engine import batched, lanes_batch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--B", type=int, default=10000)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--K", type=int, default=2)
    ap.add_argument("--L", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3, help="timed runs of each path (the best is printed)")
    ap.add_argument("--widths", default="8,16,32,64")
    ap.add_argument("--no-mixture", action="store_true", help="skip the mixture's own lanes (the reference)")
    ap.add_argument("--method", default="gd", choices=("gd", "rk4"), help="rk4: dt = eta, stage time steps * 0.5")
    a = ap.parse_args()
    numba.set_num_threads(a.threads)
    desc = me.load("meanfield/models/mixture.toml", K=a.K, L=a.L, steps=a.steps, eta=0.5, method=a.method)
    etas = np.linspace(0.3, 0.7, a.B)
    Y0 = batched.initial_states(desc, seeds=list(range(a.B)), widths=None)
    me.run_batch(desc, y0s=Y0[:40], eta=etas[:40], fast=False, lanes=False)  # compile / load the caches
    me.run_batch(desc, y0s=Y0[:40], eta=etas[:40], fast=False)
    t_ref, ref = _best(a.reps, lambda: me.run_batch(desc, y0s=Y0, eta=etas, fast=False, lanes=False))
    t_gen, _ = _best(a.reps, lambda: me.run_batch(desc, y0s=Y0, eta=etas, fast=False, lanes=False,
                                                  specialise=False))
    t_lanes, got = _best(a.reps, lambda: me.run_batch(desc, y0s=Y0, eta=etas, fast=False))
    me.run_batch(desc, y0s=Y0[:40], eta=etas[:40], fast=False, vector_exp=True)
    t_vx, got_vx = _best(a.reps, lambda: me.run_batch(desc, y0s=Y0, eta=etas, fast=False, vector_exp=True))
    us = 1e6 / float(ref.steps.sum())  # per trajectory-step (rk4: the solver steps each trajectory took)
    same = np.array_equal(ref.y, got.y) and np.array_equal(ref.loss, got.loss)
    bits = ref.y.tobytes() == got.y.tobytes() and ref.loss.tobytes() == got.loss.tobytes()
    print(f"mixture K={a.K} L={a.L}, method {a.method}: {a.B} trajectories, {int(ref.steps.sum())} trajectory-steps "
          f"in all, {numba.get_num_threads()} thread(s)")
    print(f"  run_batch(fast=False, lanes=False, specialise=False): {t_gen:.3f} s  ({t_gen * us:.3f} us per "
          f"trajectory-step)")
    print(f"  run_batch(fast=False, lanes=False) (specialise='auto': the specialised loop where one is cached): "
          f"{t_ref:.3f} s  ({t_ref * us:.3f} us per trajectory-step)")
    print(f"  run_batch(fast=False) (lanes, width {lanes_batch.width_for(a.B, a.threads)}): {t_lanes:.3f} s  "
          f"({t_lanes * us:.3f} us per trajectory-step)  ratios {t_gen / t_lanes:.2f}x, {t_ref / t_lanes:.2f}x")
    print(f"  equal (==): {same}; bit for bit: {bits}")
    rel = float(np.max(np.abs(got_vx.y - ref.y) / np.maximum(np.max(np.abs(ref.y), axis=1, keepdims=True), 1e-300)))
    print(f"  run_batch(fast=False, vector_exp=True) (lanes, exp_lane): {t_vx:.3f} s  ({t_vx * us:.3f} us per "
          f"trajectory-step)  {t_lanes / t_vx:.2f}x the C library's exp; max |state - per-trajectory| / "
          f"max |state| {rel:.1e}")
    # the lane batch at other widths (the same arguments as run_batch passes; one compile serves every width's
    # lane kernels, each width compiles its driver)
    if a.method == "rk4":  # (the widths' and the mixture's timings below are of method gd)
        return
    for w in [int(x) for x in a.widths.split(",") if x]:
        fn = lanes_batch.batch_kernel(w)
        args = _args(desc, Y0, etas)
        fn(0, 8, *_args(desc, Y0[:8], etas[:8]))
        t, _ = _best(a.reps, lambda: core_batched.run_cpu(fn, a.B, args))
        print(f"  lanes, width {w:2d}: {t * us:.3f} us per trajectory-step; final states == "
              f"{np.array_equal(args[-1], ref.y)}")


    if not a.no_mixture:
        from meanfield.models.mixture import batched as mix_batched
        from meanfield.models.mixture.config import make_config

        cfgs = [make_config(K=a.K, L=a.L, steps=a.steps, eta=float(e), record_every=a.steps) for e in etas]
        for name, kw in (("C library's exp", dict(vector_exp=False)), ("vectorised exp, its default", {})):
            mix_batched.advance(cfgs[:64], None, **kw)
            t, _ = _best(a.reps, lambda: mix_batched.advance(cfgs, None, **kw))
            print(f"  the mixture's own lanes ({name}): {t * us:.3f} us per trajectory-step")


def _best(reps, fn):
    """(the shortest wall time of ``reps`` calls of fn, its last result)."""
    best, out = float("inf"), None
    for _ in range(max(1, reps)):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def _args(desc, Y0, etas):
    """``run_batch``'s arguments of the CPU loop for these initial states (no records)."""
    from meanfield.core import integrate
    from meanfield.engine import kernels
    from meanfield.engine.packed import mode_of, pack

    tr = desc.training
    pk = pack(desc)
    lay = pk.lay
    B, ny = Y0.shape
    nst = len(tr.stages)
    T = batched.record_capacity(desc, float(etas.min()), 0)
    outs = core_batched.new_outputs(B, T, ny, nst)

    def rows(x):
        return np.array(np.broadcast_to(x, (B,) + np.shape(x)))

    crit = [integrate.criterion_args(s.criterion, kernels.CRITERIA) for s in tr.stages]
    data = (lay.hi, lay.hf, lay.qv, lay.Gr, lay.grp, pk.Gam, pk.nzi, pk.nzc, pk.nzn, pk.cnt, pk.last, pk.leff,
            pk.target, pk.weight, int(pk.kind), float(pk.r0), pk.consistent,
            rows(np.array([mode_of(s.train, tr.normalise) for s in tr.stages], np.int64)))
    head = [np.ascontiguousarray(Y0), np.ascontiguousarray(etas), np.full(B, float(tr.max_abs)),
            np.full(B, nst, np.int64), rows(np.array([int(s.length) for s in tr.stages], np.int64)),
            rows(np.array([c[0] for c in crit], np.int64)), rows(np.array([c[1] for c in crit], np.int64)),
            rows(np.array([c[2] for c in crit], np.float64)), np.zeros(B, np.int64), np.zeros((B, 1), np.int64),
            np.zeros(B, np.int64)]
    return head + [data, (pk.R, pk.C, lay.Nmax)] + outs


if __name__ == "__main__":
    main()
