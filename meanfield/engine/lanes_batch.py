"""The engine's generic GD batch in lanes: W trajectories of one description advanced together.

``run_batch(desc, ..., fast=False)`` on the CPU with method gd (the default;
``lanes=False``: the per-trajectory drivers of ``meanfield.core.batched``)
runs :func:`lane_gd_batch`: blocks of :func:`width_for` trajectories, each
block's state ``Y[entry, lane]`` stepped by the lane kernels that
``meanfield.engine.lanes`` generates from the scalar kernels' own source
(loss and gradients, the GD map, the stop criteria). Blocks are split over
threads as every CPU batch (``core.batched.run_cpu``: contiguous slices, the
loop releases the GIL).

The step/record logic is ``core.batched.gd_trajectory``'s over
``kernels.eng_gd_advance_into``'s, per lane: its per-lane control is
``meanfield.core.lane_driver``'s (compiled inline here, as in the mixture's
lanes, ``meanfield.models.mixture.vectorised.gd_batch_soa``; each driver calls
its own system's passes): stages of given lengths with
their masks and stop criteria (the criterion checked at every evaluated
state, before the step), records every ``every[b]`` steps and at the points
``pts[b]`` and at stage ends (the record writer is ``core.batched.record_into``,
compiled for a lane's column), a lane whose loss is not finite or whose new
state fails ``activations.accept_step`` (non-finite, above ``max_abs``)
stopped with its last accepted state and its status. Lanes may differ in
eta, max_abs, stage lengths, masks and criteria: the update runs once per
distinct mask among the lanes that step, the criterion once per kind in use.
A lane that has finished idles until its block does; the padding lanes of
the last block copy lane 0 and are never recorded.

Results equal the per-trajectory batch's (``==``: bit for bit but for the
sign of zero entries, ``meanfield.engine.lanes``; ``tests/test_engine_lanes.py``).
The width changes no bit of a lane: every lane performs its own operations.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import njit

from ..core import batched as core_batched
from ..core import lane_driver
from ..core.activations import accept_step
from ..core.lanes import NoAlias, source_tag

#: seconds the lane kernels and a width's driver take to compile the first time (cold cache, 2 loaded cores)
COMPILE_S = 50

#: the block width for a thread's share of trajectories: (smallest share, lanes), widest first; a share below
#: the last threshold runs the per-trajectory drivers (0 lanes: one lane costs about twice a scalar trajectory,
#: a block's fixed cost is spread over too few). The width changes no lane's result (each lane performs its own
#: operations; the sign of a zero entry aside), only the speed: mixture K = 2, L = 3, one thread of the loaded
#: 2-core machine (benchmarks/bench_engine_lanes.py, 2026-12-07, best of 3), us per trajectory-step, 10^4
#: trajectories x 100 steps: width 8 3.3, 16 2.5, 32 1.96, 64 1.84; 2000 steps of B = 1 / 2 / 3 / 5
#: trajectories: per trajectory 6.5 / 9.5 / 6.2 / 6.2 (generic loop), one block of 1 lane 14.1 (B = 1), of 2
#: 10.0 (B = 2), of 4 10.3 (B = 3), of 8 5.4 (B = 5)
WIDTHS = ((64, 64), (32, 32), (16, 16), (8, 8))

# bound per build (:func:`batch_kernel`): the lane kernels of ``meanfield.engine.lanes.module()`` and their rows
LANES = 8
ROWS = 1
R_LOSS = 0
R_CRIT = 0
LOSS_GRADS = None
UPDATE = None
CRITERION = None
lane_record_into = None  # core.batched.record_into compiled for a lane's column
_next_target = None  # core.batched.next_target, compiled with the driver
lane_begin = lane_fail = lane_stage_end = lane_crit_met = lane_gd_decide = None  # core.lane_driver's, compiled with the driver


@njit(cache=True, nogil=True, inline="always")
def lane_criterion_of(kind, w, loss, cargs):
    """The value of stop criterion ``kind`` of lane w: row ``kind`` of the block's criteria (cargs[0], (6, W),
    computed once per kind in use); the hook of ``core.lane_driver.lane_gd_decide``."""
    return cargs[0][kind, w]


@njit(cache=True, nogil=True)
def lane_scratch(n, L, P, H, R, C, Nmax, ny, Wm, rows):
    """The lane kernels' scratch of a block of Wm lanes (zeros): u, margin, zb, f, df, G, gflat, T, p, v, om,
    tk, Xm, Ym, tmp, pa, lka, LS, in the order ``eng_loss_grads_lanes`` / ``eng_update_lanes`` take them
    (:func:`lane_gd_batch`, ``lanes_rk4.lane_rk4_batch``)."""
    return (np.zeros((n, H, R, Wm)), np.zeros((n, Wm)), np.zeros((H, P, Wm)), np.zeros((C, Wm)),
            np.zeros((C, Wm)), np.zeros((H, Nmax, Nmax, Wm)), np.zeros((ny, Wm)), np.zeros((P, Wm)),
            np.zeros((L, Wm)), np.zeros((L, Wm)), np.zeros((P, Wm)), np.zeros((P, Wm)),
            np.zeros((Nmax, Nmax, Wm)), np.zeros((Nmax, Nmax, Wm)), np.zeros((P, P, Wm)),
            np.zeros((H, L, L, Wm)), np.zeros((H, L)), np.zeros((rows, Wm)))


@njit(cache=True, nogil=True, pipeline_class=NoAlias)
def lane_screen(NEW, mab, bad):
    """bad[w] = 1.0 where an entry of lane w's new state NEW[:, w] is not finite or above mab[w] in absolute
    value (a screen: ``accept_step`` then decides those lanes), else 0.0; loops over lanes, vectorised."""
    for w in range(NEW.shape[1]):
        bad[w] = 0.0
    for i in range(NEW.shape[0]):
        for w in range(NEW.shape[1]):
            x = NEW[i, w]
            bad[w] = 1.0 if not (abs(x) <= mab[w] and x - x == 0.0) else bad[w]


@njit(cache=True, nogil=True, pipeline_class=NoAlias)
def lane_take(Y, NEW, move):
    """Y[:, w] = NEW[:, w] where move[w] != 0 (a select, not a branch: vectorised)."""
    for i in range(Y.shape[0]):
        for w in range(Y.shape[1]):
            Y[i, w] = NEW[i, w] if move[w] != 0.0 else Y[i, w]


def lane_gd_batch(b0, b1, Y0, eta, max_abs, n_stages, stage_len, crit_kind, crit_op, crit_thr, every, pts, n_pts,
                  data, dims, rec_t, rec_step, rec_stage, rec_y, n_rec, status, stop_stage, end_step, end_t,
                  end_reason, final_loss, Yout):
    """Trajectories b0 <= b < b1 in blocks of ``LANES`` lanes (the arguments and outputs of
    ``core.batched.batch_cpu`` with the engine's ``data``, ``dims``; a template, compiled by
    :func:`batch_kernel`)."""
    hi, hf, qv, Gr, grp, Gam, nzi, nzc, nzn, cnt, last, leff, target_, weight, kind, r0, consistent, stage_mode = data
    R, C, Nmax = dims
    n, L = nzn.shape
    P = qv.shape[1]
    H = hi.shape[0]
    ny = Y0.shape[1]
    Wm = LANES
    Y = np.zeros((ny, Wm))
    NEW = np.zeros((ny, Wm))
    NEW1 = np.zeros((ny, Wm))
    u, margin, zb, f, df, G, gflat, T, p, v, om, tk, Xm, Ym, tmp, pa, lka, LS = lane_scratch(n, L, P, H, R, C, Nmax,
                                                                                           ny, Wm, ROWS)
    loss = np.zeros(Wm)
    crit = np.zeros((6, Wm))
    etv = np.zeros(Wm)
    mabv = np.zeros(Wm)
    mode_w = np.zeros(Wm, np.int64)
    bad = np.zeros(Wm)
    movef = np.zeros(Wm)
    move = np.zeros(Wm, np.bool_)
    live = np.zeros(Wm, np.bool_)
    need = np.zeros(6, np.bool_)
    st = np.zeros(Wm, np.int64)
    step = np.zeros(Wm, np.int64)
    end = np.zeros(Wm, np.int64)
    target = np.zeros(Wm, np.int64)
    jj = np.zeros(Wm, np.int64)
    cargs = (crit,)  # what lane_criterion_of reads
    for blk in range(b0, b1, Wm):
        W = min(Wm, b1 - blk)
        for c in range(6):
            need[c] = False
        for w in range(W):
            b = blk + w
            etv[w] = eta[b]
            mabv[w] = max_abs[b]
            step[w] = 0
            jj[w] = 0
            st[w] = 0
            for s in range(n_stages[b]):
                need[crit_kind[b, s]] = True
            live[w] = lane_begin(b, w, Y, Y0, n_stages, rec_t, rec_step, rec_stage, rec_y, n_rec, status, stop_stage)
            if live[w]:
                end[w] = stage_len[b, 0]
                target[w], jj[w] = _next_target(b, 0, end[w], every[b], 0, pts, n_pts)
        for w in range(W, Wm):  # padding lanes of the last block: a copy of lane 0, never recorded
            for i in range(ny):
                Y[i, w] = Y[i, 0]
            etv[w] = etv[0]
            mabv[w] = mabv[0]
            live[w] = False
        n_live = 0
        for w in range(W):
            n_live += live[w]
        while n_live > 0:
            LOSS_GRADS(Y, hi, hf, qv, nzi, nzc, nzn, cnt, last, leff, target_, weight, kind, r0, True, u, margin, zb,
                       f, df, G, gflat, T, p, v, om, tk, pa, lka, LS)
            for w in range(Wm):
                loss[w] = LS[R_LOSS, w]
            for c in range(1, 6):
                if need[c]:
                    CRITERION(c, loss, margin, consistent, hi, hf, Gam, gflat, LS)
                    for w in range(Wm):
                        crit[c, w] = LS[R_CRIT, w]
            # each live lane: the decisions of eng_gd_advance_into / gd_trajectory at this evaluated state
            for w in range(W):
                move[w] = False
                if not live[w]:
                    continue
                b = blk + w
                k = crit_kind[b, st[w]]  # a lane that steps on (the common case) does not enter lane_gd_decide
                go = step[w] != target[w] and math.isfinite(loss[w]) and (
                    k == 0 or not lane_crit_met(k, w, loss[w], cargs, crit_op[b, st[w]], crit_thr[b, st[w]]))
                if not go:
                    final_loss[b] = loss[w]  # (gd_trajectory's at the end of a gd_stage call)
                    go = lane_gd_decide(b, w, loss[w], cargs, Y, etv, st, step, end, target, jj, live, n_stages,
                                        stage_len, crit_kind, crit_op, crit_thr, every, pts, n_pts, rec_t, rec_step,
                                        rec_stage, rec_y, n_rec, status, stop_stage, end_step, end_t, end_reason)
                if go:
                    move[w] = True
                    mode_w[w] = stage_mode[b, st[w]]
            first = -1
            for w in range(W):
                if move[w] and first < 0:
                    first = w
            if first >= 0:
                m0 = mode_w[first]
                UPDATE(Y, NEW, hi, hf, Gr, grp, Gam, G, gflat, etv, m0, True, Xm, Ym, tmp, LS)
                for w in range(first + 1, W):  # lanes in a stage of another mask: the update once per mask
                    m = mode_w[w]
                    if move[w] and m != m0:
                        done = False
                        for w2 in range(first + 1, w):
                            if move[w2] and mode_w[w2] == m:
                                done = True
                        if not done:
                            UPDATE(Y, NEW1, hi, hf, Gr, grp, Gam, G, gflat, etv, m, True, Xm, Ym, tmp, LS)
                            for w2 in range(w, W):
                                if move[w2] and mode_w[w2] == m:
                                    for i in range(ny):
                                        NEW[i, w2] = NEW1[i, w2]
                lane_screen(NEW, mabv, bad)  # a lane whose new state may fail the guard: accept_step decides
                for w in range(W):
                    if not (move[w] and bad[w] != 0.0):
                        continue
                    code = accept_step(Y[:, w], NEW[:, w], mabv[w])  # the one divergence guard, on the lane's column
                    if code == 0:
                        move[w] = False  # (accept_step took the new state itself)
                        step[w] += 1
                        continue
                    b = blk + w
                    move[w] = False
                    live[w] = False
                    final_loss[b] = loss[w]
                    lane_fail(b, w, code, step[w] * etv[w], step[w], st[w] + 1, Y, rec_t, rec_step, rec_stage,
                              rec_y, n_rec, status, stop_stage)
                for w in range(Wm):
                    movef[w] = 1.0 if move[w] else 0.0
                lane_take(Y, NEW, movef)  # padding lanes never move
                for w in range(W):
                    if move[w]:
                        step[w] += 1
            n_live = 0
            for w in range(W):
                n_live += live[w]
        for w in range(W):
            b = blk + w
            for i in range(ny):
                Yout[b, i] = Y[i, w]


def lane_bytes(n: int, L: int, P: int, H: int, R: int, C: int, Nmax: int, ny: int) -> int:
    """Bytes of one lane's scratch in a block (the arrays :func:`lane_gd_batch` and ``lanes_rk4`` allocate per
    lane: the state and its copies, the per-sequence outputs u (n, H, R) and margins, the gradients, the
    attention); a block of W lanes on each of T threads holds W T times this.

    Parameters
    ----------
    n, L, P, H, R, C, Nmax, ny : int
        Sequences and positions of the data, features, heads, value rows, outputs, the largest Gram block and
        the state size (``meanfield.engine.packed.pack``'s).

    Returns
    -------
    int
        An upper bound of the bytes.

    Examples
    --------
    >>> lane_bytes(10, 3, 4, 2, 1, 1, 8, 100) > 8 * (10 * 2 * 1)
    True
    """
    return 8 * (12 * ny + n * (H * R + 1) + 3 * H * Nmax * Nmax + H * L * L + P * (P + H + 3) + 2 * L + 2 * C
                + 256)  # the last: the lane scratch rows of the generated kernels' locals and the per-lane control


#: the most bytes of lane scratch a thread's block may hold (above it a narrower block, or none)
LANE_SCRATCH_BYTES = 256 * 2**20


def width_for(B: int, threads: int = 1, per_lane: int = 0) -> int:
    """The block width for B trajectories on ``threads`` threads: the widest of :data:`WIDTHS` whose
    threshold a thread's share reaches and whose scratch (``per_lane`` bytes a lane, :func:`lane_bytes`)
    fits :data:`LANE_SCRATCH_BYTES`; 0 (no lanes: the per-trajectory drivers) when none does.

    Parameters
    ----------
    B : int
        Trajectories of the batch.
    threads : int
        Threads sharing it (contiguous slices, ``core.batched.run_cpu``).
    per_lane : int
        Bytes of one lane's scratch (0: not limited).

    Returns
    -------
    int

    Examples
    --------
    >>> width_for(3), width_for(100), width_for(20, threads=2), width_for(100, per_lane=2**23)
    (0, 64, 8, 32)
    """
    share = B // max(1, min(B, threads))
    for lo, w in WIDTHS:
        if share >= lo and w * per_lane <= LANE_SCRATCH_BYTES:
            return w
    return 0


@functools.lru_cache(maxsize=None)
def batch_kernel(lanes: int, vector_exp: bool = False):
    """:func:`lane_gd_batch` compiled for blocks of ``lanes`` lanes over the generated lane kernels
    (``meanfield.engine.lanes.module()``), cached on disk under a name carrying the width and a checksum
    of the lane kernels and of this file.

    Parameters
    ----------
    lanes : int
        Trajectories per block.
    vector_exp : bool
        Over the lane kernels with ``math.exp`` by ``meanfield.core.lane_exp.exp_lane``
        (``meanfield.engine.lanes.module(vector_exp=True)``: to rounding); False: the C library's exp.

    Returns
    -------
    numba dispatcher
        The batch loop, with the arguments of ``core.batched.batch_cpu``.

    Examples
    --------
    >>> k = batch_kernel(4)  # doctest: +SKIP
    >>> k is batch_kernel(4)  # doctest: +SKIP
    True
    """
    from .lanes import module

    mod = module(bool(vector_exp))
    ns = dict(globals())
    ns.update(LANES=int(lanes), ROWS=mod.ROWS, R_LOSS=mod.RET_eng_loss_grads[0], R_CRIT=mod.RET_eng_criterion[0],
              LOSS_GRADS=mod.eng_loss_grads_lanes, UPDATE=mod.eng_update_lanes, CRITERION=mod.eng_criterion_lanes)
    from ..core import activations

    # the driver; record_into, next_target; the per-lane control; accept_step
    files = (__file__, core_batched.__file__, lane_driver.__file__, activations.__file__)
    me = source_tag(*files)
    tag = f"_w{int(lanes)}_{mod.TAG}_{me}"
    cpu = njit(cache=True, nogil=True)
    ns["_next_target"] = core_batched.instantiate(core_batched.next_target, ns, "_next_target", cpu, tag)
    ns["lane_record_into"] = core_batched.instantiate(core_batched.record_into, ns, "lane_record_into", cpu, tag)
    lane_driver.instantiate_into(ns, njit(cache=True, nogil=True, inline="always"), tag)
    fn = core_batched.instantiate(lane_gd_batch, ns, "lane_gd_batch", cpu, tag)
    from ..core.guard import first_use_notice

    first_use_notice(mod.eng_loss_grads_lanes, mod.eng_update_lanes, seconds=COMPILE_S, echo=True)  # (a width's
    return fn  # driver alone compiles in a few seconds: no notice)

