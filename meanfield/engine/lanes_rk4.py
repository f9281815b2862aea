"""The engine's generic RK4 batch in lanes (method rk4, the CPU): W trajectories' flows stepped together.

The flow's right-hand side of a block is the lane kernels of
``meanfield.engine.lanes`` (``eng_loss_grads``, then ``eng_update`` with
``exact`` False: the scalar kernels' own source, as ``kernels.flow_rhs`` and
the batch hook ``eng_rhs_stage`` compute it), evaluated at one point per lane
each round; the step logic is ``core.batched.rk4_trajectory``'s per lane (as
the mixture's lanes mirror it, ``meanfield.models.mixture.vectorised_rk4``; a lane's start, stop and stage
end by ``meanfield.core.lane_driver``, the scratch by ``lanes_batch.lane_scratch``):
stages of time ``stage_len``, the last step of a stage shortened to land on
its end, each step's stages k2, k3, k4 and the new state's right-hand side
in its operation order, a non-finite new state or right-hand side (status 2)
or an entry above ``max_abs`` (status 3) stopping that lane with its last
accepted state, records every ``every[b]`` steps and at stage ends. A lane is
in one of five phases (the stage start's right-hand side, k2, k3, k4, the new
state's); every round evaluates each live lane's point, the update once per
stage mask in use. Equal to the per-trajectory rk4 batch (``==``: bit for bit
but for the sign of zero entries, ``tests/test_engine_lanes.py``).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import njit

from ..core import batched as core_batched
from ..core import lane_driver
from ..core.lanes import source_tag
from .lanes_batch import lane_scratch

# bound per build (:func:`rk4_kernel`), as in ``lanes_batch``
LANES = 8
ROWS = 1
R_LOSS = 0
LOSS_GRADS = None
UPDATE = None
lane_record_into = None
lane_begin = lane_fail = lane_stage_end = None  # core.lane_driver's, compiled with the driver


def lane_rk4_batch(b0, b1, Y0, dt, max_abs, n_stages, stage_len, crit_kind, crit_op, crit_thr, every, pts, n_pts,
                   data, dims, rec_t, rec_step, rec_stage, rec_y, n_rec, status, stop_stage, end_step, end_t,
                   end_reason, final_loss, Yout):
    """Trajectories b0 <= b < b1 in blocks of ``LANES`` lanes under RK4 of the flow (the arguments and
    outputs of ``core.batched.batch_cpu``; crit_*, pts, n_pts unused, as in ``rk4_trajectory``)."""
    hi, hf, qv, Gr, grp, Gam, nzi, nzc, nzn, cnt, last, leff, target_, weight, kind, r0, consistent, stage_mode = data
    R, C, Nmax = dims
    n, L = nzn.shape
    P = qv.shape[1]
    H = hi.shape[0]
    ny = Y0.shape[1]
    Wm = LANES
    Y, E, OUT, OUT1 = np.zeros((ny, Wm)), np.zeros((ny, Wm)), np.zeros((ny, Wm)), np.zeros((ny, Wm))
    f0, k2, k3, k4, y1 = np.zeros((ny, Wm)), np.zeros((ny, Wm)), np.zeros((ny, Wm)), np.zeros((ny, Wm)), np.zeros((ny, Wm))
    u, margin, zb, f, df, G, gflat, T, p, v, om, tk, Xm, Ym, tmp, pa, lka, LS = lane_scratch(n, L, P, H, R, C, Nmax,
                                                                                           ny, Wm, ROWS)
    one = np.ones(Wm)
    lossv = np.zeros(Wm)
    t = np.zeros(Wm)
    t_end = np.zeros(Wm)
    h = np.zeros(Wm)
    st = np.zeros(Wm, np.int64)
    nstep = np.zeros(Wm, np.int64)
    phase = np.zeros(Wm, np.int64)
    mode_w = np.zeros(Wm, np.int64)
    live = np.zeros(Wm, np.bool_)
    for blk in range(b0, b1, Wm):
        W = min(Wm, b1 - blk)
        for w in range(W):
            b = blk + w
            t[w] = 0.0
            nstep[w] = 0
            st[w] = 0
            phase[w] = 0
            live[w] = lane_begin(b, w, Y, Y0, n_stages, rec_t, rec_step, rec_stage, rec_y, n_rec, status, stop_stage)
            if live[w]:
                t_end[w] = t[w] + stage_len[b, 0]
        for w in range(W, Wm):  # padding lanes: a copy of lane 0, never recorded
            for i in range(ny):
                Y[i, w] = Y[i, 0]
            live[w] = False
        n_live = 0
        for w in range(W):
            n_live += live[w]
        while n_live > 0:
            first = -1
            for w in range(Wm):  # each lane's point (a finished or padding lane: its state, unused)
                ph = phase[w] if live[w] else 0
                if live[w]:
                    mode_w[w] = stage_mode[blk + w, st[w]]
                    if first < 0:
                        first = w
                hh = 0.5 * h[w]
                for i in range(ny):
                    if ph == 0:
                        E[i, w] = Y[i, w]
                    elif ph == 1:
                        E[i, w] = Y[i, w] + hh * f0[i, w]
                    elif ph == 2:
                        E[i, w] = Y[i, w] + hh * k2[i, w]
                    elif ph == 3:
                        E[i, w] = Y[i, w] + h[w] * k3[i, w]
                    else:
                        E[i, w] = y1[i, w]
            LOSS_GRADS(E, hi, hf, qv, nzi, nzc, nzn, cnt, last, leff, target_, weight, kind, r0, True, u, margin, zb,
                       f, df, G, gflat, T, p, v, om, tk, pa, lka, LS)
            for w in range(Wm):
                lossv[w] = LS[R_LOSS, w]
            m0 = mode_w[first]
            UPDATE(E, OUT, hi, hf, Gr, grp, Gam, G, gflat, one, m0, False, Xm, Ym, tmp, LS)
            for w in range(first + 1, W):  # lanes in a stage of another mask: the right-hand side once per mask
                m = mode_w[w]
                if live[w] and m != m0:
                    done = False
                    for w2 in range(first + 1, w):
                        if live[w2] and mode_w[w2] == m:
                            done = True
                    if not done:
                        UPDATE(E, OUT1, hi, hf, Gr, grp, Gam, G, gflat, one, m, False, Xm, Ym, tmp, LS)
                        for w2 in range(w, W):
                            if live[w2] and mode_w[w2] == m:
                                for i in range(ny):
                                    OUT[i, w2] = OUT1[i, w2]
            for w in range(W):
                if not live[w]:
                    continue
                b = blk + w
                ph = phase[w]
                code = 0
                nxt = False  # the top of rk4_trajectory's while loop (a new step or the stage's end)
                if ph == 0:
                    for i in range(ny):
                        f0[i, w] = OUT[i, w]
                    final_loss[b] = lossv[w]
                    nxt = True
                elif ph == 1:
                    for i in range(ny):
                        k2[i, w] = OUT[i, w]
                    phase[w] = 2
                elif ph == 2:
                    for i in range(ny):
                        k3[i, w] = OUT[i, w]
                    phase[w] = 3
                elif ph == 3:
                    h6 = h[w] / 6.0
                    for i in range(ny):
                        k4[i, w] = OUT[i, w]
                        y1[i, w] = Y[i, w] + h6 * (f0[i, w] + 2.0 * k2[i, w] + 2.0 * k3[i, w] + k4[i, w])
                        if not math.isfinite(y1[i, w]):
                            code = 2
                    phase[w] = 4
                else:
                    for i in range(ny):
                        if not math.isfinite(OUT[i, w]):
                            code = 2
                    if code == 0:
                        for i in range(ny):
                            if abs(y1[i, w]) > max_abs[b]:
                                code = 3
                    if code == 0:
                        t[w] = t[w] + h[w]
                        nstep[w] += 1
                        for i in range(ny):
                            Y[i, w] = y1[i, w]
                            f0[i, w] = OUT[i, w]
                        final_loss[b] = lossv[w]
                        ev = every[b]
                        if ev > 0 and nstep[w] % ev == 0:
                            if not lane_record_into(b, t[w], nstep[w], st[w] + 1, Y[:, w], rec_t, rec_step, rec_stage,
                                                    rec_y, n_rec, status):
                                live[w] = False
                                continue
                        nxt = True
                if code != 0:  # the last accepted state stays: record it, stop the lane
                    live[w] = False
                    lane_fail(b, w, code, t[w], nstep[w], st[w] + 1, Y, rec_t, rec_step, rec_stage, rec_y, n_rec,
                              status, stop_stage)
                    continue
                if nxt:
                    te = t_end[w]
                    if t[w] < te * (1.0 - 1e-15) and te - t[w] > 1e-14 * max(1.0, abs(te)):
                        h[w] = min(dt[b], te - t[w])
                        phase[w] = 1
                        continue
                    s = st[w]
                    if not lane_stage_end(b, w, s, t[w], nstep[w], 0, Y, n_stages, rec_t, rec_step, rec_stage, rec_y,
                                          n_rec, status, stop_stage, end_step, end_t, end_reason):
                        live[w] = False
                        continue
                    st[w] = s + 1
                    t_end[w] = t[w] + stage_len[b, s + 1]
                    phase[w] = 0
            n_live = 0
            for w in range(W):
                n_live += live[w]
        for w in range(W):
            b = blk + w
            for i in range(ny):
                Yout[b, i] = Y[i, w]


@functools.lru_cache(maxsize=None)
def rk4_kernel(lanes: int, vector_exp: bool = False):
    """:func:`lane_rk4_batch` compiled for blocks of ``lanes`` lanes over the generated lane kernels,
    cached on disk under a name carrying the width and checksums (as ``lanes_batch.batch_kernel``).

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
    >>> k = rk4_kernel(4)  # doctest: +SKIP
    """
    from ..core import activations
    from ..core.guard import first_use_notice
    from .lanes import module
    from .lanes_batch import COMPILE_S

    mod = module(bool(vector_exp))
    ns = dict(globals())
    ns.update(LANES=int(lanes), ROWS=mod.ROWS, R_LOSS=mod.RET_eng_loss_grads[0], LOSS_GRADS=mod.eng_loss_grads_lanes,
              UPDATE=mod.eng_update_lanes)
    from . import lanes_batch

    # the driver; lane_scratch (lanes_batch); record_into; the per-lane control; accept_step
    files = (__file__, lanes_batch.__file__, core_batched.__file__, lane_driver.__file__, activations.__file__)
    me = source_tag(*files)
    tag = f"_w{int(lanes)}_{mod.TAG}_{me}"
    cpu = njit(cache=True, nogil=True)
    ns["lane_record_into"] = core_batched.instantiate(core_batched.record_into, ns, "lane_record_into", cpu, tag)
    lane_driver.instantiate_into(ns, njit(cache=True, nogil=True, inline="always"), tag,
                                 names=("lane_begin", "lane_fail", "lane_stage_end"))
    fn = core_batched.instantiate(lane_rk4_batch, ns, "lane_rk4_batch", cpu, tag)
    first_use_notice(mod.eng_loss_grads_lanes, mod.eng_update_lanes, seconds=COMPILE_S, echo=True)
    return fn
