"""``make bench``: every speed figure of issue 27 in one run, with ratios against the peers.

    python benchmarks/run_all.py [--quick | --smoke] [--B 10000] [--steps 1000] [--out FILE]

Measured in one process, one after the other, so that ratios mean something
on a shared machine (the load average before and after is printed). One core:
numba, XLA and torch are set to one thread each before any work.
The problem is the issue's: the mixture K = 2, L = 3 (8 samples, state of 104
numbers), the exact GD map, infinite-width init (omega in [1e-3, 0.3], eta in
{0.1, 0.25, 0.5} per trajectory), records at the start and the end only.

1. Batched: B trajectories x steps, microseconds per trajectory-step, for
   ``mixture.batched.advance`` (the reference, 1.00), the vectorised mixture
   path, ``engine.run_batch`` on the mixture description, ``jax.vmap`` of the
   reduced map and of the explicit width-64 network (on min(B, 1000)
   trajectories), with the largest difference of the final losses to the
   reference (the network's are another init: not compared).
2. B in {10, 100, 1000, 10^4}: the package against ``jax.vmap`` of the reduced map.
3. One trajectory, one step: the mixture fast path, the engine's generic
   path, ``lax.scan`` of the reduced map (JAX), eager PyTorch m = 64.
4. A 100-point omega grid: the default ``mixture sweep`` (chunks of batched
   trajectories, ``meanfield.core.ensemble``) against ``--per-point`` (one run
   and one run file per point, one worker), both the command run in this
   process, and the batched kernel alone (the bound). (A per-point pool
   would fork after JAX's threads started: not measured here.)
5. The induction full-batch gradient (``benchmarks/bench_induction.py``'s size).
6. First use: ``meanfield warm``, then ``mixture run --steps 100`` and ``model
   run incontext --steps 10 / 50`` each in new processes
   (``benchmarks/bench_first_use.py``), wall and CPU seconds.
7. ``twolayer``: the two-layer class's generic gradient (pattern and direct paths) against the induction
   hand kernels on the same 10^4 sequences (``benchmarks/bench_twolayer.py``; issue 24: within 2x).

A peer whose library is missing is reported as skipped, never a failure
(the peers are the optional ``bench`` extra: ``pip install 'meanfield[bench]'``).
The table goes to stdout and to ``benchmarks/results/latest.md`` (``--out``).
``--smoke`` runs every section at toy sizes in seconds (CI runs it: the
numbers mean nothing there, the code paths do).
Targets are printed as PASS / MISS (not met), never asserted.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (str(ROOT), str(ROOT / "benchmarks")):
    if p not in sys.path:
        sys.path.insert(0, p)

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

K, L = 2, 3
M_NET = 64
SIZES = {  # B, steps, B list of section 2 (steps), single-step steps, sweep points/steps, induction N
    "full": dict(B=10_000, steps=1000, Bs=(10, 100, 1000, 10_000), steps2=1000, single=20_000, points=100,
                 sweep_steps=1000, induction_N=10_000, reps=3),
    "quick": dict(B=10_000, steps=100, Bs=(10, 100, 1000, 10_000), steps2=100, single=5000, points=100,
                  sweep_steps=200, induction_N=10_000, reps=2),
    "smoke": dict(B=8, steps=3, Bs=(2, 4), steps2=3, single=5, points=3, sweep_steps=5, induction_N=50, reps=1,
                  smoke=True),
}


def load() -> str:
    la = os.getloadavg()
    return f"load average {la[0]:.2f} / {la[1]:.2f} / {la[2]:.2f} (1 / 5 / 15 min) on {os.cpu_count()} cores"


CPU = {"last": 0.0}  # the CPU time of this process during the fastest repeat of the last best() call


def best(fn, reps: int) -> float:
    """The fastest wall time of ``reps`` calls; its CPU time (this process, every thread) in CPU["last"]:
    on a shared machine the CPU time shows what the work itself cost while other processes held the cores."""
    out = np.inf
    for i in range(reps):
        t = time.perf_counter()
        c = time.process_time()
        fn()
        w = time.perf_counter() - t
        if i == 0:
            CPU["first_wall"] = w
        if w < out:
            out, CPU["last"] = w, time.process_time() - c
    return out


def problem(B: int, steps: int):
    """B infinite-width mixture configs (the issue's mix) and their initial states."""
    from meanfield.models.mixture.config import make_config
    from meanfield.models.mixture.init import initial_state

    omegas = np.geomspace(1e-3, 0.3, 16)
    cfgs = [make_config(K=K, L=L, steps=steps, record_every=steps, omega=float(omegas[b % 16]),
                        eta=[0.1, 0.25, 0.5][(b // 16) % 3]) for b in range(B)]
    return cfgs, np.stack([initial_state(c) for c in cfgs])


class Table:
    def __init__(self, title: str, ref: str | None = None):
        self.title, self.ref, self.rows = title, ref, []

    def add(self, name: str, us: float | None, note: str = "", cpu: float | None = None):
        """A row: wall ``us`` (the ratio column's), ``cpu`` the CPU-time figure of the same repeat."""
        self.rows.append((name, us, note, cpu))
        print(f"  {name}: " + ("skipped" if us is None else f"{us:.3f} us")
              + ("" if cpu is None else f" (CPU time {cpu:.3f} us)") + (f"  ({note})" if note else ""), flush=True)

    def ref_us(self):
        return next((r[1] for r in self.rows if r[0] == self.ref), None) if self.ref else None

    def ref_cpu(self):
        return next((r[3] for r in self.rows if r[0] == self.ref), None) if self.ref else None

    def markdown(self) -> str:
        r, rc = self.ref_us(), self.ref_cpu()
        head = "| path | us (wall) | " + (f"vs {self.ref} |" if r else "") + " us (CPU time) | " + \
            ("CPU ratio |" if rc else "") + " note |"
        lines = [f"### {self.title}", "", head, "|---|---|" + ("---|" if r else "") + "---|" + ("---|" if rc else "")
                 + "---|"]
        for n, u, note, c in self.rows:
            if u is None:
                lines.append(f"| {n} | skipped |" + (" |" if r else "") + " |" + (" |" if rc else "") + f" {note} |")
            else:
                cs = "" if c is None else f"{c:.3f}"
                cr = "" if (c is None or not rc) else f"{c / rc:.2f}"
                lines.append(f"| {n} | {u:.3f} |" + (f" {u / r:.2f} |" if r else "") + f" {cs} |"
                             + (f" {cr} |" if rc else "") + f" {note} |")
        return "\n".join(lines) + "\n"


def _peer(tab: Table, name: str, fn):
    """Run a peer measurement fn() -> (us, note[, cpu us]); a missing library is a skipped row."""
    from peers import Skipped

    try:
        r = fn()
    except Skipped as e:
        tab.add(name, None, f"skipped: {e}")
        return None
    tab.add(name, r[0], r[1], r[2] if len(r) > 2 else None)
    return r[0]


# ------------------------------------------------------------------ 1 + 2: batched


def mixture_batched(cfgs, Y0, reps, **kw):
    """batched.advance on the CPU (``kw``: lanes, vector_exp; the default: the vectorised lanes)."""
    from meanfield.models.mixture import batched

    res = None

    def go():
        nonlocal res
        res = None  # the previous repeat's outputs freed first: a repeat reuses their memory (steady state)
        res = batched.advance(cfgs, list(Y0), "cpu", **kw)

    t = best(go, reps)
    assert np.all(res.code == 0), "a benchmark trajectory diverged"
    return t, res


def final_losses(cfgs, Y):
    from meanfield.models.mixture import kernels
    from meanfield.models.mixture.data import sample_set

    s = sample_set(K, L)
    out = np.empty(len(Y))
    u, mg = np.empty((s.n, 2)), np.empty(s.n)
    for b, y in enumerate(Y):
        out[b] = kernels.forward(np.ascontiguousarray(y), s.P, s.idx, s.sgn, s.y, s.weight, u, mg)
    return out


_JR: dict = {}


def _jax_reduced(s):
    """peers.jax_reduced, built once per process (its jitted functions keep their compiled shapes)."""
    import peers

    if "f" not in _JR:
        _JR["f"] = peers.jax_reduced(s)
    return _JR["f"]


def jax_reduced_batch(Y0, etas, steps, reps):
    import peers
    from meanfield.models.mixture.data import sample_set

    _, _, run_b = _jax_reduced(sample_set(K, L))
    out = None

    def go():
        nonlocal out
        y, loss = run_b(Y0, etas, steps)
        out = (np.asarray(y.block_until_ready()), np.asarray(loss))

    run_b(Y0, etas, steps)[0].block_until_ready()  # compile at this shape
    return best(go, reps), out


def section_batched(sz, lines) -> dict:
    B, steps, reps = sz["B"], sz["steps"], sz["reps"]
    print(f"\n1. batched: {B} trajectories x {steps} exact GD steps (us per trajectory-step, one core)")
    cfgs, Y0 = problem(B, steps)
    etas = np.array([c.eta for c in cfgs])
    ts = B * steps
    tab = Table(f"1. {B} trajectories x {steps} steps, K = {K}, L = {L}: us per trajectory-step",
                "mixture.batched.advance")
    for kw in ({}, {"lanes": False}, {"vector_exp": False}):
        mixture_batched(cfgs[:64], Y0[:64], 1, **kw)  # compile / cache (a 64-lane block)
    t_old, res_old = mixture_batched(cfgs, Y0, reps, lanes=False)
    c_old = CPU["last"]
    t_ref, res = mixture_batched(cfgs, Y0, reps)
    c_ref = CPU["last"]
    t_vx, res_vx = mixture_batched(cfgs, Y0, reps, vector_exp=False)
    c_vx = CPU["last"]
    ref_loss = final_losses(cfgs, res.y[np.arange(B), res.n_records - 1])

    def dmax(r):  # relative to each trajectory's largest entry
        return float(np.max(np.abs(r.y - res_old.y).max(axis=(1, 2)) / np.abs(res_old.y).max(axis=(1, 2))))

    tab.add("mixture.batched.advance", t_ref / ts * 1e6,
            f"vectorised lanes and exp (default); max relative |state - per-trajectory path| {dmax(res):.1e}",
            c_ref / ts * 1e6)
    tab.add("mixture.batched.advance(lanes=False)", t_old / ts * 1e6, "the per-trajectory path (before issue 27)",
            c_old / ts * 1e6)
    tab.add("mixture.batched.advance(vector_exp=False)", t_vx / ts * 1e6,
            f"lanes, the C library's exp; max |state - per-trajectory path| {dmax(res_vx):.1e} (0: bit for bit)",
            c_vx / ts * 1e6)
    from meanfield.models.mixture.config import make_config

    every = 10  # the "records every 10": the loop writes a record each 10 steps
    cfg_rec = [make_config(K=K, L=L, steps=steps, record_every=every, omega=c.omega, eta=c.eta) for c in cfgs]
    mixture_batched(cfg_rec[:64], Y0[:64], 1)
    t_rec, res_rec = mixture_batched(cfg_rec, Y0, max(reps, 3))  # the first repeat touches new memory (below)
    c_rec, first_rec = CPU["last"], CPU["first_wall"]
    last = np.arange(B)
    same = np.array_equal(res_rec.y[last, res_rec.n_records - 1], res.y[last, res.n_records - 1])
    mb = res_rec.y.nbytes / 2**20
    buf = np.empty_like(res_rec.y)
    buf.fill(0.0)  # touched once: what follows writes memory the process holds
    t_fill = best(lambda: buf.fill(1.0), 3)
    del buf
    tab.add(f"mixture.batched.advance, records every {every} steps", t_rec / ts * 1e6,
            f"{int(res_rec.n_records[0])} records a trajectory; final state bit for bit the default's: {same}; "
            f"writing {mb:.0f} MB once (numpy's fill) costs {t_fill / ts * 1e6:.3f} us a trajectory-step; "
            f"the first repeat {first_rec / ts * 1e6:.3f} us: its record buffer is memory "
            f"this process never held before (the OS's first touch of new pages)", c_rec / ts * 1e6)
    out = {"rec_us": t_rec / ts * 1e6,
           "ref_us": t_ref / ts * 1e6, "old_us": t_old / ts * 1e6, "vx_us": t_vx / ts * 1e6,
           "ref_cpu": c_ref / ts * 1e6, "old_cpu": c_old / ts * 1e6, "vx_cpu": c_vx / ts * 1e6}

    import meanfield.engine as me
    from meanfield.engine import batched as eb

    desc = me.load(str(ROOT / "meanfield/models/mixture.toml"), K=K, L=L, steps=steps, eta=0.5)
    Ye = eb.initial_states(desc, seeds=list(range(B)))  # infinite width: every row the description's init
    me.run_batch(desc, y0s=Ye[:2], eta=etas[:2])
    br = None

    def go():
        nonlocal br
        br = me.run_batch(desc, y0s=Ye, eta=etas)

    t_eng = best(go, reps)
    c_eng = CPU["last"]
    # the same trajectories (the description's omega) on the mixture path, first 16: their final losses
    from meanfield.models.mixture.config import make_config

    k = min(B, 16)
    c16 = [make_config(K=K, L=L, steps=steps, record_every=steps, eta=float(e)) for e in etas[:k]]
    from meanfield.models.mixture import batched as mb

    r16 = mb.advance(c16, None, "cpu")
    d = float(np.max(np.abs(br.loss[:k] - final_losses(c16, r16.y[np.arange(k), r16.n_records - 1]))))
    tab.add("engine.run_batch", t_eng / ts * 1e6, f"the mixture's registered batch fast path; max |final loss - "
            f"mixture path| {d:.1e} (first {k}; the description's omega)", c_eng / ts * 1e6)
    out["engine_us"] = t_eng / ts * 1e6
    out["engine_cpu"] = c_eng / ts * 1e6
    bg = None

    def go_generic():
        nonlocal bg
        bg = me.run_batch(desc, y0s=Ye, eta=etas, fast=False, specialise=False)

    me.run_batch(desc, y0s=Ye[:64], eta=etas[:64], fast=False, specialise=False)  # the lanes compiled or loaded
    t_gen = best(go_generic, reps)
    c_gen = CPU["last"]
    dg = float(np.max(np.abs(bg.loss - br.loss)))
    tab.add("engine.run_batch(fast=False)", t_gen / ts * 1e6, "the engine's generic batch in lanes (the default of "
            f"fast=False: lane kernels generated from the scalar kernels); max |final loss - fast path| {dg:.1e}",
            c_gen / ts * 1e6)
    out["engine_generic_us"] = t_gen / ts * 1e6
    bv = None

    def go_vexp():
        nonlocal bv
        bv = me.run_batch(desc, y0s=Ye, eta=etas, fast=False, specialise=False, vector_exp=True)

    me.run_batch(desc, y0s=Ye[:64], eta=etas[:64], fast=False, specialise=False, vector_exp=True)  # compiled / loaded
    t_gv = best(go_vexp, reps)
    c_gv = CPU["last"]
    dv = float(np.max(np.abs(bv.y - bg.y) / np.maximum(np.max(np.abs(bg.y), axis=1, keepdims=True), 1e-300)))
    tab.add("engine.run_batch(fast=False, vector_exp=True)", t_gv / ts * 1e6, "the generic batch in lanes with "
            f"exp by core.lane_exp.exp_lane (vectorises; within an ulp); max |state - libm lanes| / max |state| "
            f"{dv:.1e}", c_gv / ts * 1e6)
    out["engine_generic_vexp_us"] = t_gv / ts * 1e6
    bp = None

    def go_per():
        nonlocal bp
        bp = me.run_batch(desc, y0s=Ye, eta=etas, fast=False, specialise=False, lanes=False)

    me.run_batch(desc, y0s=Ye[:2], eta=etas[:2], fast=False, specialise=False, lanes=False)
    t_per = best(go_per, reps)
    tab.add("engine.run_batch(fast=False, lanes=False, specialise=False)", t_per / ts * 1e6,
            "the generic batch one trajectory after another (before the lanes); the lanes' state equal to it: "
            f"{np.array_equal(bp.y, bg.y)}", CPU["last"] / ts * 1e6)
    out["engine_per_us"] = t_per / ts * 1e6
    bs = None

    def go_spec():
        nonlocal bs
        bs = me.run_batch(desc, y0s=Ye, eta=etas, fast=False, specialise=True)

    me.run_batch(desc, y0s=Ye[:2], eta=etas[:2], fast=False, specialise=True)  # compiled or loaded
    t_sp = best(go_spec, reps)
    tab.add("engine.run_batch(fast=False, specialise=True)", t_sp / ts * 1e6,
            "the generic batch, each trajectory through the loop compiled for the description (not in lanes); "
            f"bit for bit the per-trajectory generic batch: {np.array_equal(bs.y, bp.y)}", CPU["last"] / ts * 1e6)

    def jr():
        t, (y, loss) = jax_reduced_batch(Y0, etas, steps, reps)
        c = CPU["last"]
        return t / ts * 1e6, f"max |final loss - reference| {float(np.max(np.abs(loss - ref_loss))):.1e}", c / ts * 1e6

    out["jax_us"] = _peer(tab, "jax.vmap of the reduced map", jr)

    def jn():
        import peers
        from meanfield.models.mixture.data import sample_set

        s = sample_set(K, L)
        Bn = min(B, 1000)
        E, WK, WQ, w = peers.network_init(s, M_NET, Bn)
        _, run_b = peers.jax_network(s, E)
        run_b(WK, WQ, w, etas[:Bn], steps)[3].block_until_ready()
        t = best(lambda: run_b(WK, WQ, w, etas[:Bn], steps)[3].block_until_ready(), reps)
        return t / (Bn * steps) * 1e6, f"m = {M_NET}, on {Bn} trajectories", CPU["last"] / (Bn * steps) * 1e6

    _peer(tab, f"jax.vmap of the explicit network m={M_NET}", jn)
    lines.append(tab.markdown())
    return out


def section_Bs(sz, lines) -> dict:
    steps, reps = sz["steps2"], sz["reps"]
    print(f"\n2. B trajectories x max({steps}, 1e5 / B) steps: the package against jax.vmap of the reduced map")
    tab_rows = []
    out = {}
    for B in sz["Bs"]:
        steps = sz["steps2"] if sz.get("smoke") else max(sz["steps2"], min(10_000, 100_000 // B))  # >= 1e5 per B
        cfgs, Y0 = problem(B, steps)
        etas = np.array([c.eta for c in cfgs])
        for kw in ({}, {"lanes": False}, {"vector_exp": False}):  # this B's block width compiled / loaded
            mixture_batched(cfgs[:min(B, 300)], Y0[:min(B, 300)], 1, **kw)
        t_pkg, _ = mixture_batched(cfgs, Y0, reps)
        c_pkg = CPU["last"] / (B * steps) * 1e6
        t_old, _ = mixture_batched(cfgs, Y0, reps, lanes=False)
        t_vx, _ = mixture_batched(cfgs, Y0, reps, vector_exp=False)
        try:
            t_jax = jax_reduced_batch(Y0, etas, steps, reps)[0]
            c_jax = CPU["last"] / (B * steps) * 1e6
        except Exception as e:  # a missing jax: skipped
            from peers import Skipped

            if not isinstance(e, Skipped):
                raise
            t_jax = c_jax = None
        u_p, u_o, u_x = (x / (B * steps) * 1e6 for x in (t_pkg, t_old, t_vx))
        u_j = None if t_jax is None else t_jax / (B * steps) * 1e6
        out[B] = (u_p, u_j, c_pkg, c_jax)
        print(f"  B = {B}: package {u_p:.3f} us (per-trajectory path {u_o:.3f}, C library exp {u_x:.3f}), jax.vmap "
              + ("skipped" if u_j is None else f"{u_j:.3f} us"), flush=True)
        tab_rows.append(f"| {B} x {steps} | {u_p:.3f} | {u_o:.3f} | {u_x:.3f} | "
                        + ("skipped | - | - |" if u_j is None else f"{u_j:.3f} | {u_j / u_p:.2f} | {c_jax / c_pkg:.2f} |"))
    lines.append("### 2. us per trajectory-step against B (mixture.batched.advance vs jax.vmap of the reduced map)\n\n"
                 "| B x steps | package (default) | per-trajectory path | lanes, C library exp | jax.vmap | jax / package | "
                 "same in CPU time |\n|---|---|---|---|---|---|---|\n" + "\n".join(tab_rows) + "\n")
    return out


# ------------------------------------------------------------------ 3: one trajectory


def section_single(sz, lines) -> dict:
    from meanfield.models.mixture import kernels
    from meanfield.models.mixture.config import make_config
    from meanfield.models.mixture.data import sample_set
    from meanfield.models.mixture.family import mixture_description
    from meanfield.models.mixture.init import initial_state

    n, reps = sz["single"], max(3, sz["reps"])
    print(f"\n3. one trajectory, {n} steps (us per step)")
    s = sample_set(K, L)
    cfg = make_config({}, K=K, L=L)
    y0 = initial_state(cfg)
    tab = Table(f"3. one trajectory, one exact GD step (us; {n} steps per call)", "mixture fast path (kernels.gd_advance)")

    def fast():
        y = y0.copy()
        kernels.gd_advance(y, n, 0.5, s.P, s.idx, s.sgn, s.y, s.weight, s.consistent, 1.0, True, True, 0, 1, 0.0,
                           np.inf)

    fast()
    t_fast = best(fast, reps) / n * 1e6
    c_fast = CPU["last"] / n * 1e6
    tab.add("mixture fast path (kernels.gd_advance)", t_fast, "", c_fast)
    from meanfield.engine.reduce import initial_state as eng_init
    from meanfield.engine.system import system_of

    desc = mixture_description(make_config({}, K=K, L=L))
    system = system_of(desc, specialise=False)  # the generic loop, whatever is cached
    ye = eng_init(desc)
    system.gd_advance(ye.copy(), 2, 0.5, 3, None)
    t_eng = best(lambda: system.gd_advance(ye.copy(), n, 0.5, 3, None), reps) / n * 1e6
    c_eng = CPU["last"] / n * 1e6
    tab.add("engine generic path (system_of(desc, specialise=False))", t_eng,
            "one compiled kernel for every description (the default where no specialised loop is ready)", c_eng)
    t0 = time.perf_counter()
    spec = system_of(desc, specialise=True)  # the same kernels, the description's arrays compiled in
    ys = ye.copy()
    spec.gd_advance(ys, 2, 0.5, 3, None)
    first = time.perf_counter() - t0
    yg = ye.copy()
    system.gd_advance(yg, 2, 0.5, 3, None)
    assert np.array_equal(ys, yg)
    t_sp = best(lambda: spec.gd_advance(ye.copy(), n, 0.5, 3, None), reps) / n * 1e6
    c_sp = CPU["last"] / n * 1e6
    tab.add("engine generic path, specialised (system_of(desc, specialise=True))", t_sp,
            f"the same kernels with the description's arrays as constants; first call {first:.1f} s "
            "(compile or load from the cache); bit for bit the generic loop's state", c_sp)
    auto = system_of(desc)  # the default, specialise="auto": the loop just compiled is ready
    auto.gd_advance(ye.copy(), 2, 0.5, 3, None)
    took = auto._loops.get(0) not in (None, False)
    t_auto = best(lambda: auto.gd_advance(ye.copy(), n, 0.5, 3, None), reps) / n * 1e6
    c_auto = CPU["last"] / n * 1e6
    tab.add("engine default (system_of(desc), specialise=\"auto\")", t_auto,
            "the specialised loop where one is ready (compiled before, in this process or on disk), else the "
            f"generic loop; here: {'the specialised loop' if took else 'the generic loop'}", c_auto)

    def jscan():
        import peers

        _, run, _ = _jax_reduced(s)
        run(y0, 0.5, n)[0].block_until_ready()
        w = best(lambda: run(y0, 0.5, n)[0].block_until_ready(), reps) / n * 1e6
        return w, "jit of the scanned map", CPU["last"] / n * 1e6

    _peer(tab, "jax lax.scan of the reduced map", jscan)

    def torch_eager():
        import peers

        torch = peers._torch()
        torch.set_num_threads(1)
        E, WK, WQ, w = peers.network_init(s, M_NET, 1)
        step = peers.torch_network(s, E)
        prm = [torch.tensor(a[0], requires_grad=True) for a in (WK, WQ, w)]
        k = max(2, min(200, n))
        step(prm, 0.5)
        w = best(lambda: [step(prm, 0.5) for _ in range(k)], reps) / k * 1e6
        return w, f"m = {M_NET}, autograd", CPU["last"] / k * 1e6

    _peer(tab, f"PyTorch eager explicit network m={M_NET}", torch_eager)
    lines.append(tab.markdown())
    return {"fast_us": t_fast, "engine_us": t_eng, "fast_cpu": c_fast, "engine_cpu": c_eng, "spec_us": t_sp,
            "spec_cpu": c_sp, "spec_first_s": first, "auto_us": t_auto, "auto_cpu": c_auto, "auto_took": took}


# ------------------------------------------------------------------ 4: sweeps


def _cli(argv) -> tuple[float, float, int]:
    """``meanfield ARGV`` in this process (``meanfield.cli.main``: the parser, the checks, the work, the files;
    a new process's start-up is left out, the same for every path): (wall s, CPU s, exit code). The ensemble's
    config memo is cleared first: a new command starts without it."""
    import contextlib
    import io

    from meanfield.cli import main
    from meanfield.core import ensemble

    ensemble._MEMO.clear()
    t, c = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(io.StringIO()):
        rc = main(argv)
    return time.perf_counter() - t, time.process_time() - c, rc


def section_sweep(sz, lines) -> dict:
    """The default ``mixture sweep`` (chunks of batched trajectories) against ``--per-point`` (one run and one
    run file per point), both the command in this process; the batched kernel alone as the bound."""
    n, steps = sz["points"], sz["sweep_steps"]
    reps = max(2, sz["reps"])
    print(f"\n4. a {n}-point omega grid, {steps} GD steps a point: mixture sweep (chunked default) vs --per-point")
    grid = ["mixture", "sweep", "--param", f"omega=1e-3:0.3:log:{n}", "--steps", str(steps), "--record-every",
            str(steps), "--quiet"]
    tmp = Path(tempfile.mkdtemp(prefix="mf_bench_"))
    rows, out = [], {}
    try:
        _cli(grid[:3] + ["omega=0.1,0.2"] + grid[4:] + ["--out", str(tmp / "warm")])  # kernels loaded
        _cli(grid[:3] + ["omega=0.1,0.2"] + grid[4:] + ["--per-point", "--workers", "1", "--out", str(tmp / "warm1")])
        best_w, best_c = math.inf, math.inf
        for r in range(reps):
            w, c, rc = _cli(grid + ["--out", str(tmp / f"chunked{r}")])
            assert rc == 0, rc
            if w < best_w:
                best_w, best_c = w, c
        import h5py

        with h5py.File(tmp / "chunked0" / "sweep.h5") as f:
            assert int(f.attrs["n_done"]) == n and f.attrs["status"] == "complete"
            loss_ch = f["loss_end"][()]
        w_pp, c_pp, rc = _cli(grid + ["--per-point", "--workers", "1", "--out", str(tmp / "points")])
        assert rc == 0, rc
        idx = json.loads((tmp / "points" / "sweep.json").read_text())
        loss_pp = np.array([e["result"]["loss_end"] for e in idx["points"]])
        dl = float(np.max(np.abs(loss_pp - loss_ch)))
        # the bound: the batched kernel alone on the same 100 configs (mixture.batched.advance)
        from meanfield.models.mixture import batched
        from meanfield.models.mixture.config import make_config

        cfgs = [make_config(K=K, L=L, steps=steps, record_every=steps, omega=float(o))
                for o in np.geomspace(1e-3, 0.3, n)]
        batched.advance(cfgs, None, "cpu")
        w_k = best(lambda: batched.advance(cfgs, None, "cpu"), reps)
        c_k = CPU["last"]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    ratio, ratio_cpu = w_pp / best_w, c_pp / best_c
    print(f"  default (chunked) {best_w:.3f} s (CPU {best_c:.3f} s); --per-point --workers 1 {w_pp:.2f} s (CPU "
          f"{c_pp:.2f} s): {ratio:.1f}x (CPU {ratio_cpu:.1f}x); "
          f"kernel alone {w_k:.3f} s (CPU {c_k:.3f} s)")
    lines.append(
        f"### 4. {n}-point sweep, {steps} steps a point (`meanfield mixture sweep`, the command in this process)\n\n"
        "| path | wall s | per point (ms) | CPU s | vs chunked (wall) | vs chunked (CPU) |\n|---|---|---|---|---|---|\n"
        f"| default: chunks of batched trajectories (in this process; numba threads, here {os.cpu_count()}) | {best_w:.3f} | "
        f"{best_w / n * 1e3:.2f} | {best_c:.3f} | 1.00 | 1.00 |\n"
        f"| --per-point --workers 1 (one run and run file per point) | {w_pp:.2f} | {w_pp / n * 1e3:.1f} | "
        f"{c_pp:.2f} | {w_pp / best_w:.1f} | {c_pp / best_c:.1f} |\n"
        f"| the batched kernel alone (mixture.batched.advance of the {n} configs) | {w_k:.3f} | "
        f"{w_k / n * 1e3:.2f} | {c_k:.3f} | {w_k / best_w:.2f} | {c_k / best_c:.2f} |\n"
        f"\nratio per point / chunked: {ratio:.1f}x wall, {ratio_cpu:.1f}x CPU; max |loss_end chunked - per point| "
        f"{dl:.1e}; the kernel alone bounds it at {w_pp / w_k:.1f}x wall, {c_pp / c_k:.1f}x CPU\n")
    out.update(sweep_ratio=ratio, sweep_ratio_cpu=ratio_cpu, sweep_bound=w_pp / w_k, sweep_bound_cpu=c_pp / c_k,
               sweep_dloss=dl)
    return out


# ------------------------------------------------------------------ 5: induction


def section_induction(sz, lines) -> dict:
    import induction_hand_kernels as Kn  # the retired hand kernels: a peer, measured in the same run
    from bench_induction import L as IL, PA, H, Dd, M, d
    from meanfield.engine.twolayer_net import loss_grad, prepare
    from meanfield.models.induction import data as D
    from meanfield.models.induction import generic as G
    from meanfield.models.induction import model as Mo

    N = sz["induction_N"]
    print(f"\n5. induction full-batch gradient on {N} sequences (L = {IL}): the engine's generic network "
          f"(what every induction run trains on) and the retired hand kernels")
    arch = Mo.Arch(d, H, M, Dd)
    theta = Mo.init_params(arch, 2.0, 0.0, 1.0, 1.0) + 0.3 * np.random.default_rng(0).standard_normal(arch.n_params)
    ds = D.generate(N, d, IL, PA, 1.0, seed=1)
    net, th = G.net_of(arch, IL), G.to_generic(theta, arch)
    y, p = np.eye(d)[ds.tokens[:, IL]], np.full(N, 1.0 / N)
    prep = prepare(net, ds.tokens)
    loss_grad(th, net, ds.tokens, y, p, prep=prep)
    t = best(lambda: loss_grad(th, net, ds.tokens, y, p, prep=prep), max(3, 3 * sz["reps"]))
    c = CPU["last"]
    b = Kn.Batch(ds.tokens, arch, "pattern")
    grad = np.zeros(arch.n_params)
    cap = Kn.log_cap_of(1e-300)
    Kn.loss_grad(theta, *b.args(), cap, True, grad)
    tk = best(lambda: Kn.loss_grad(theta, *b.args(), cap, True, grad), max(3, 3 * sz["reps"]))
    ck = CPU["last"]
    print(f"  generic {t * 1e3:.2f} ms (CPU time {c * 1e3:.2f} ms); retired hand kernels {tk * 1e3:.2f} ms "
          f"(CPU {ck * 1e3:.2f} ms); ratio generic / hand {t / tk:.2f}")
    lines.append(f"### 5. induction gradient ({N} sequences, L = {IL})\n\nthe engine's generic network (every "
                 f"induction run): {t * 1e3:.2f} ms wall, {c * 1e3:.2f} ms CPU time; the retired hand kernels "
                 f"(benchmarks/induction_hand_kernels.py): {tk * 1e3:.2f} ms wall, {ck * 1e3:.2f} ms CPU; "
                 f"generic / hand = {t / tk:.2f} (the fastest repeats)\n")
    return {"induction_ms": t * 1e3, "induction_cpu_ms": c * 1e3, "induction_hand_ms": tk * 1e3,
            "induction_ratio": t / tk}


# ------------------------------------------------------------------ 6: first use


def section_first_use(sz, lines) -> dict:
    """Cold start (issue 27 item 6): ``meanfield warm`` in a new process (this environment's numba cache: it
    compiles what is missing, loads the rest), then each after-warm command in new processes
    (``benchmarks/bench_first_use.py``): wall and CPU seconds, best and median, beside numba's own floor."""
    import subprocess

    import bench_first_use as F

    smoke = bool(sz.get("smoke"))
    print("\n6. first use: new processes after meanfield warm (wall and CPU s)")
    t0 = time.perf_counter()
    if not smoke:  # the smoke size leaves the cache as it is (CI has compiled the kernels before)
        subprocess.run([sys.executable, "-m", "meanfield", "-q", "warm"], check=True, capture_output=True,
                       cwd=ROOT, timeout=3600)
    t_warm = time.perf_counter() - t0
    cmds = [F.AFTER_WARM[-1]] if smoke else F.AFTER_WARM
    if smoke:
        cmds = [("mixture --steps 2", [a if a != "100" else "2" for a in cmds[0][1]], cmds[0][2])]
    r = F.after_warm(None, 1 if smoke else max(3, sz["reps"]), commands=cmds, fill=not smoke)
    rows, out = [], {}
    for k, v in r.items():
        if not isinstance(v, dict):
            continue
        lab = k.rsplit(" (", 1)[0]
        t = next((t for name, _a, t in cmds if name == lab), None)
        rows.append(f"| {k.replace(' (after)', '')} | {v['wall_best']:.2f} | {v['wall_median']:.2f} | "
                    f"{v['cpu_best']:.2f} | {v['cpu_median']:.2f} | " + ("" if t is None else f"< {t:g} s") + " |")
        if t is not None:
            out[lab] = (v["wall_median"], v["cpu_median"], t)
    la = r["load_start"], r["load_end"]
    lines.append("### 6. first use: each command in a new process after `meanfield warm` (s)\n\n"
                 + ("" if smoke else f"`meanfield warm` (this environment's cache) took {t_warm:.1f} s first. ")
                 + f"Load average {la[0][0]:.1f} at the start, {la[1][0]:.1f} at the end, {os.cpu_count()} cores.\n\n"
                 "| command | wall best | wall median | CPU best | CPU median | target |\n|---|---|---|---|---|---|\n"
                 + "\n".join(rows) + "\n")
    return out
# ------------------------------------------------------------------ 6: two-layer generic path


def section_twolayer(sz, lines) -> dict:
    from bench_twolayer import measure

    N = sz["induction_N"]
    print(f"\n7. two-layer generic gradient against the induction hand kernels ({N} sequences, L = 100)")
    out = []
    r = measure(N, max(2, sz["reps"]), log=lambda s: (print(s), out.append(s)))
    lines.append(f"### 7. two-layer generic gradient ({N} sequences, L = 100)\n\n" + "\n".join(f"    {s}" for s in out)
                 + "\n")
    return r


# ------------------------------------------------------------------ main


def verdicts(res: dict, smoke: bool) -> list[str]:
    def v(ok):
        return "PASS" if ok else "MISS"

    out = []
    b = res.get("batched", {})
    if b:
        out.append(f"batched mixture {b['ref_us']:.3f} us per trajectory-step (target <= 1.0): {v(b['ref_us'] <= 1.0)}; "
                   f"{b['old_us'] / b['ref_us']:.2f}x faster than the per-trajectory path ({b['old_us']:.3f} us); "
                   f"lanes with the C library's exp {b['vx_us']:.3f} us; with records every 10 steps "
                   f"{b['rec_us']:.3f} us ({b['rec_us'] / b['ref_us']:.2f}x the loop without records)")
        out.append(f"engine.run_batch / mixture batched {b['engine_us'] / b['ref_us']:.2f} (target <= 1.2): "
                   f"{v(b['engine_us'] / b['ref_us'] <= 1.2)}; in CPU time {b['engine_cpu'] / b['ref_cpu']:.2f} "
                   f"(one ensemble path: the mixture's registered batch fast path; the generic batch in lanes "
                   f"{b['engine_generic_us'] / b['ref_us']:.2f}, with vector_exp "
                   f"{b.get('engine_generic_vexp_us', float('nan')) / b['ref_us']:.2f}, one trajectory after another "
                   f"{b['engine_per_us'] / b['ref_us']:.2f})")
        out.append(f"batched mixture in CPU time: {b['ref_cpu']:.3f} us (per-trajectory path {b['old_cpu']:.3f}: "
                   f"{b['old_cpu'] / b['ref_cpu']:.2f}x; C library exp {b['vx_cpu']:.3f}); the wall figures include "
                   f"waiting for the cores other processes held")
    Bs = res.get("Bs", {})
    faster = [f"B={B}: jax/package {uj / up:.2f} (CPU time {cj / cp:.2f})" for B, (up, uj, cp, cj) in Bs.items()
              if uj is not None]
    if faster:
        ok = all(uj > up for up, uj, _, _ in Bs.values() if uj is not None)
        out.append(f"faster than jax.vmap of the reduced map at every B ({', '.join(faster)}): {v(ok)}")
    s = res.get("single", {})
    if s:
        r = s["engine_us"] / s["fast_us"]
        rs = s["spec_us"] / s["fast_us"]
        ra = s["auto_us"] / s["fast_us"]
        out.append(f"engine generic step / fast step, the generic loop (no specialised loop ready: a description's "
                   f"first runs, and a long run's first 10 s before its loop compiled in the background takes over: "
                   f"benchmarks/bench_background.py) {r:.2f} (target <= 1.3): {v(r <= 1.3)}; in CPU time "
                   f"{s['engine_cpu'] / s['fast_cpu']:.2f}")
        out.append(f"engine generic step / fast step, the specialised loop (`specialise=True`: the same kernels "
                   f"compiled once per description, first call here {s['spec_first_s']:.1f} s) {rs:.2f} (target "
                   f"<= 1.3): {v(rs <= 1.3)}; in CPU time {s['spec_cpu'] / s['fast_cpu']:.2f}")
        out.append(f"engine generic step / fast step, the default (`specialise=\"auto\"`) once that loop is compiled "
                   f"({'it ran the specialised loop' if s['auto_took'] else 'it ran the generic loop'}) {ra:.2f} "
                   f"(target <= 1.3): {v(ra <= 1.3)}; in CPU time {s['auto_cpu'] / s['fast_cpu']:.2f}")
    if "sweep" in res:
        r, w = res["sweep"], res["sweep"]["sweep_ratio"]
        out.append(f"chunked (the default mixture sweep) / per-point sweep {w:.1f}x (target >= 50x): {v(w >= 50)}; "
                   f"in CPU time {r['sweep_ratio_cpu']:.1f}x; the batched kernel alone allows at most "
                   f"{r['sweep_bound']:.1f}x (CPU {r['sweep_bound_cpu']:.1f}x); equal losses to {r['sweep_dloss']:.1e}")
    if "induction" in res:
        t = res["induction"]["induction_ms"]
        out.append(f"induction gradient {t:.2f} ms (target <= 25 ms): {v(t <= 25)}; CPU time "
                   f"{res['induction']['induction_cpu_ms']:.2f} ms")
    for lab, (w, c, t) in res.get("first_use", {}).items():
        out.append(f"first use after warm, {lab}: {w:.2f} s wall, {c:.2f} s CPU (median; target < {t:g} s): "
                   f"{v(w < t)} in wall time, {v(c < t)} in CPU time")
    tl = res.get("twolayer", {})
    if "error" in tl:
        out.append(f"two-layer generic gradient differs from the induction kernels by {tl['error']:.2e}: FAIL")
    elif tl:
        out.append(f"two-layer generic gradient (auto) / induction kernels {tl['ratio']:.2f} (issue 24: target <= 2): "
                   f"{v(tl['ratio'] <= 2)}; {tl['auto_ms']:.1f} ms against {tl['kernels_ms']:.1f} ms, CPU time ratio "
                   f"{tl['ratio_cpu']:.2f}; direct path {tl['ratio_direct']:.1f}x")
    if smoke:
        out = [x + " (smoke sizes: meaningless)" for x in out]
    return out


SECTIONS = {"batched": section_batched, "Bs": section_Bs, "single": section_single, "sweep": section_sweep,
            "induction": section_induction, "first_use": section_first_use,
            "twolayer": section_twolayer}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="fewer steps (a few minutes)")
    g.add_argument("--smoke", action="store_true", help="toy sizes, every code path (seconds; CI)")
    ap.add_argument("--B", type=int, help="trajectories of section 1")
    ap.add_argument("--steps", type=int, help="steps of sections 1 and 2")
    ap.add_argument("--only", default=",".join(SECTIONS), help=f"sections to run (of {','.join(SECTIONS)})")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/latest.md"))
    a = ap.parse_args(argv)
    sz = dict(SIZES["smoke" if a.smoke else "quick" if a.quick else "full"])
    if a.B:
        sz["B"] = a.B
    if a.steps:
        sz["steps"] = sz["steps2"] = a.steps
    only = [x for x in a.only.split(",") if x]
    for x in only:
        if x not in SECTIONS:
            print(f"run_all: --only: sections are {', '.join(SECTIONS)}; got {x!r}", file=sys.stderr)
            return 2
    import numba

    numba.set_num_threads(1)
    t0 = time.perf_counter()
    la0 = load()
    head = (f"machine: {platform.machine()}, python {platform.python_version()}, numpy {np.__version__}, "
            f"numba {numba.__version__}; one thread (numba, XLA, torch); {la0} at the start")
    print(head, flush=True)
    lines = ["# make bench (benchmarks/run_all.py)", "", head, ""]
    res = {}
    for x in only:
        ts = time.perf_counter()
        res[x] = SECTIONS[x](sz, lines)
        print(f"  (section {x}: {time.perf_counter() - ts:.1f} s)", flush=True)
    la1 = load()
    tail = verdicts(res, a.smoke)
    print("\nacceptance (issue 27):")
    for t in tail:
        print("  " + t)
    print(f"{la1} at the end; total {time.perf_counter() - t0:.0f} s")
    lines += ["## Acceptance (issue 27)", ""] + [f"- {t}" for t in tail] + ["", f"{la1} at the end; total "
                                                                              f"{time.perf_counter() - t0:.0f} s", ""]
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines))
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
