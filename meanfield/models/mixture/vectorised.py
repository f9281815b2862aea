"""Trajectory-vectorised CPU batch of the mixture's exact GD map (structure of arrays).

The per-trajectory batch (``meanfield.models.mixture.batched``, one
trajectory after the other on each thread) runs the scalar kernels of
``kernels.py``: a state of 104 numbers (K = 2) goes through short loops of
length P = 4 or L = 3, too short for SIMD. Here W trajectories (a block of
lanes) advance together and every array carries the lane as its LAST,
contiguous axis: the state is ``Y[entry, lane]``, the gradients
``G[h, a, b, lane]``, and so on, so that every inner loop runs over lanes and
numba / LLVM emits vector instructions for it.

Exactly the previous arithmetic. Each lane performs the operations of
``kernels.gd_advance_into`` in the same order (no ``fastmath``: nothing is
reordered or contracted), so a lane's results equal the per-trajectory
batch's bit for bit (``tests/test_mixture_vectorised.py``). Two changes of
evaluation that do not change a bit: the softmax numerators exp(z - max) and
their sums are computed once per state in the forward pass and reused by the
backward pass (which recomputed the same numbers), and a sample/head whose
loss coefficient is 0 adds 0 * (finite) = 0 to the gradient instead of being
skipped. ``exp``, ``log1p`` stay calls of the C library (per lane: no vector
math library is assumed).

The step/record logic is ``meanfield.core.batched.gd_trajectory``'s, per lane:
stages of given lengths with their modes and stop criteria, records every
``every[b]`` steps and at the points ``pts[b]``, a record at the same (step, t)
as the previous one replacing it, divergence (non-finite, above ``max_abs``)
stopping that lane only. Lanes may differ in everything the per-trajectory
batch allows (eta, ReLU'(0), max_abs, stage lengths, modes, criteria, record
grids); a lane that has finished idles until its block does.

Entry point: :func:`gd_batch_soa`, the drop-in replacement of
``batched.mix_gd_batch_cpu`` (same arguments) that ``batched.advance`` runs on
the CPU for method gd. Method rk4 and the CUDA backend keep the
per-trajectory drivers.
"""

from __future__ import annotations

import functools
import math
import types

import numpy as np
from numba import njit

from ...core.activations import relu_prime, sigmoid_neg, softplus_neg

#: lanes per block (measured: benchmarks/run_all.py; the block's scratch stays in the L1/L2 cache)
LANES = 64


_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01  # fdlibm's split of ln 2: k * _LN2_HI is exact for |k| < 2^11
_LN2_LO = 1.90821492927058770002e-10
_MAGIC = 6755399441055744.0  # 1.5 * 2^52: x + _MAGIC rounds x to an integer held in the low mantissa bits
_MAGIC_BITS = 0x4338000000000000
#: Taylor coefficients 1/j! of exp on |r| <= ln2 / 2 (degree 13: truncation below 1e-17 relative)
_C = (1.0, 1.0, 0.5, 1.0 / 6, 1.0 / 24, 1.0 / 120, 1.0 / 720, 1.0 / 5040, 1.0 / 40320, 1.0 / 362880,
      1.0 / 3628800, 1.0 / 39916800, 1.0 / 479001600, 1.0 / 6227020800)


@njit(cache=True, nogil=True)
def lanes_exp(X, out, Tf, Ti, K1, K2):
    """out[w] = exp(X[w]) for the LANES lanes, in loops LLVM vectorises (no
    library call): x = k ln 2 + r (k = round(x / ln 2), Cody-Waite), a degree-13
    Taylor polynomial of exp(r), times 2^k as two exact powers of two (so that
    results below 2^-1022 are subnormal, as the C library's). Within a few ulp
    of ``math.exp`` (not bit for bit); exp(0) = 1 exactly; NaN stays NaN,
    x < -746 gives 0, x > 709.78 inf. ``Tf`` (float64) and ``Ti`` (its int64
    view), ``K1``, ``K2`` (int64 arrays, viewed as float64 by the caller's
    :func:`lanes_exp_scratch`) are scratch."""
    for w in range(LANES):
        x = X[w]
        x = -746.0 if x < -746.0 else (710.0 if x > 710.0 else x)
        Tf[w] = x * _LOG2E + _MAGIC
    for w in range(LANES):
        k = Ti[w] - _MAGIC_BITS
        k1 = k >> 1
        K1[w] = (k1 + 1023) << 52
        K2[w] = (k - k1 + 1023) << 52
    F1 = K1.view(np.float64)
    F2 = K2.view(np.float64)
    for w in range(LANES):
        x = X[w]
        xc = -746.0 if x < -746.0 else (710.0 if x > 710.0 else x)
        kf = Tf[w] - _MAGIC
        r = (xc - kf * _LN2_HI) - kf * _LN2_LO
        p = _C[13]
        p = p * r + _C[12]
        p = p * r + _C[11]
        p = p * r + _C[10]
        p = p * r + _C[9]
        p = p * r + _C[8]
        p = p * r + _C[7]
        p = p * r + _C[6]
        p = p * r + _C[5]
        p = p * r + _C[4]
        p = p * r + _C[3]
        p = p * r + _C[2]
        p = p * r + _C[1]
        p = p * r + _C[0]
        v = p * F1[w] * F2[w]
        v = 0.0 if x < -745.2 else v
        v = math.inf if x > 709.79 else v
        out[w] = x if x != x else v


@njit(cache=True, nogil=True)
def soa_forward(Y, W, P, idx, sgn, lab, weight, U, MG, E, DEN, Z, mx, acc, num, f, loss, vexp, xs):
    """Forward pass of W lanes: U (n, 2, W), margins MG (n, W), loss (W,);
    keeps the softmax numerators E (n, 2, L, L, W) and sums DEN (n, 2, L, W).
    ``vexp``: the softmax's exp by :func:`lanes_exp` (vectorised, within an
    ulp) instead of ``math.exp``; ``xs``: its scratch (X, Tf, Ti, K1, K2)."""
    X, Tf, Ti, K1, K2 = xs
    n, L = idx.shape
    n2 = P * P
    for w in range(LANES):
        loss[w] = 0.0
    for s in range(n):
        for w in range(LANES):
            f[w] = 0.0
        for h in range(2):
            So = h * n2
            wo = 6 * n2 + h * P
            for w in range(LANES):
                acc[w] = 0.0
            for l in range(L):
                for w in range(LANES):
                    mx[w] = -math.inf
                for i in range(L):  # (one array written per inner loop: LLVM vectorises them)
                    c = sgn[s, i] * sgn[s, l]
                    row = So + idx[s, i] * P + idx[s, l]
                    for w in range(LANES):
                        Z[i, w] = c * Y[row, w]
                    for w in range(LANES):
                        z = Z[i, w]
                        mx[w] = z if z > mx[w] else mx[w]
                for i in range(L):
                    if vexp:
                        for w in range(LANES):
                            X[w] = Z[i, w] - mx[w]
                        lanes_exp(X, E[s, h, l, i], Tf, Ti, K1, K2)
                    else:
                        for w in range(LANES):
                            E[s, h, l, i, w] = math.exp(Z[i, w] - mx[w])
                for w in range(LANES):
                    DEN[s, h, l, w] = 0.0
                    num[w] = 0.0
                for i in range(L):
                    si = sgn[s, i]
                    r = wo + idx[s, i]
                    for w in range(LANES):
                        DEN[s, h, l, w] += E[s, h, l, i, w]
                    for w in range(LANES):
                        num[w] += E[s, h, l, i, w] * si * Y[r, w]
                for w in range(LANES):
                    acc[w] += num[w] / DEN[s, h, l, w]
            sh = 1.0 - 2.0 * h
            for w in range(LANES):
                U[s, h, w] = acc[w] / L
            for w in range(LANES):
                u = U[s, h, w]
                f[w] = f[w] + sh * u if u > 0.0 else f[w]
        for w in range(LANES):
            MG[s, w] = lab[s] * f[w]
        for w in range(LANES):
            loss[w] += weight[s] * softplus_neg(MG[s, w])


@njit(cache=True, nogil=True)
def soa_backward(Y, W, P, idx, sgn, lab, weight, r0, U, MG, E, DEN, G, DW, pr, vbar, gs, coef):
    """G = dLoss/dS (2, P, P, W) and DW = dLoss/dw~ (2, P, W) from the forward pass's U, MG, E, DEN."""
    n, L = idx.shape
    n2 = P * P
    for h in range(2):
        for a in range(P):
            for w in range(LANES):
                DW[h, a, w] = 0.0
            for b in range(P):
                for w in range(LANES):
                    G[h, a, b, w] = 0.0
    for s in range(n):
        for w in range(LANES):
            gs[w] = sigmoid_neg(MG[s, w])
        for h in range(2):
            wo = 6 * n2 + h * P
            for w in range(LANES):
                coef[w] = -weight[s] * gs[w] * lab[s] * (1.0 - 2.0 * h) * relu_prime(U[s, h, w], r0[w]) / L
            for l in range(L):
                sl = sgn[s, l]
                bq = idx[s, l]
                for w in range(LANES):
                    vbar[w] = 0.0
                for i in range(L):
                    si = sgn[s, i]
                    r = wo + idx[s, i]
                    for w in range(LANES):
                        pr[i, w] = E[s, h, l, i, w] / DEN[s, h, l, w]
                    for w in range(LANES):
                        vbar[w] += pr[i, w] * si * Y[r, w]
                for i in range(L):
                    si = sgn[s, i]
                    a = idx[s, i]
                    r = wo + a
                    for w in range(LANES):
                        G[h, a, bq, w] += coef[w] * pr[i, w] * (si * Y[r, w] - vbar[w]) * si * sl
                    for w in range(LANES):
                        DW[h, a, w] += coef[w] * pr[i, w] * si


@njit(cache=True, nogil=True)
def soa_update(Y, NEW, W, P, G, DW, eta, t_att, t_w, T, D):
    """NEW = the exact GD map of each lane (``kernels.attention_update_into``
    with exact=True and the neuron step), or the unchanged blocks where a lane's
    stage does not train them (t_att, t_w: (W,) booleans); scratch T (3, P, P, W), D (6, W)."""
    n2 = P * P
    for h in range(2):
        So = h * n2
        Ao = 2 * n2 + h * n2
        Bo = 4 * n2 + h * n2
        for c in range(P):
            for b in range(P):
                for w in range(LANES):
                    T[0, c, b, w] = 0.0
                    T[1, c, b, w] = 0.0
                    T[2, c, b, w] = 0.0
                for e in range(P):
                    for w in range(LANES):
                        T[0, c, b, w] += Y[So + e * P + c, w] * G[h, e, b, w]
                    for w in range(LANES):
                        T[1, c, b, w] += Y[Bo + c * P + e, w] * G[h, b, e, w]
                    for w in range(LANES):
                        T[2, c, b, w] += Y[Ao + c * P + e, w] * G[h, e, b, w]
        for a in range(P):
            for b in range(P):
                for w in range(LANES):
                    D[0, w] = 0.0
                    D[1, w] = 0.0
                    D[2, w] = 0.0
                    D[3, w] = 0.0
                    D[4, w] = 0.0
                    D[5, w] = 0.0
                for c in range(P):  # first order: S: A G + G B ; A: G S^T + S G^T ; B: G^T S + S^T G
                    for w in range(LANES):
                        D[0, w] += Y[Ao + a * P + c, w] * G[h, c, b, w] + G[h, a, c, w] * Y[Bo + c * P + b, w]
                    for w in range(LANES):
                        D[1, w] += G[h, a, c, w] * Y[So + b * P + c, w] + Y[So + a * P + c, w] * G[h, b, c, w]
                    for w in range(LANES):
                        D[2, w] += G[h, c, a, w] * Y[So + c * P + b, w] + Y[So + c * P + a, w] * G[h, c, b, w]
                for c in range(P):  # second order: S: G S^T G ; A: G B G^T ; B: G^T A G
                    for w in range(LANES):
                        D[3, w] += G[h, a, c, w] * T[0, c, b, w]
                    for w in range(LANES):
                        D[4, w] += G[h, a, c, w] * T[1, c, b, w]
                    for w in range(LANES):
                        D[5, w] += G[h, c, a, w] * T[2, c, b, w]
                i0 = So + a * P + b
                i1 = Ao + a * P + b
                i2 = Bo + a * P + b
                for w in range(LANES):
                    NEW[i0, w] = Y[i0, w] - eta[w] * D[0, w] + eta[w] * eta[w] * D[3, w] if t_att[w] else Y[i0, w]
                for w in range(LANES):
                    NEW[i1, w] = Y[i1, w] - eta[w] * D[1, w] + eta[w] * eta[w] * D[4, w] if t_att[w] else Y[i1, w]
                for w in range(LANES):
                    NEW[i2, w] = Y[i2, w] - eta[w] * D[2, w] + eta[w] * eta[w] * D[5, w] if t_att[w] else Y[i2, w]
    wof = 6 * n2
    for h in range(2):
        for a in range(P):
            r = wof + h * P + a
            for w in range(LANES):
                NEW[r, w] = Y[r, w] - eta[w] * DW[h, a, w] if t_w[w] else Y[r, w]


@njit(cache=True, nogil=True)
def lane_criterion(kind, loss, MG, consistent, DW, w):
    """``kernels.criterion_of`` of lane w."""
    if kind == 1:
        return loss
    if kind == 5:
        s = 0.0
        for h in range(DW.shape[0]):
            for a in range(DW.shape[1]):
                s += DW[h, a, w] * DW[h, a, w]
        return math.sqrt(s)
    v = math.inf
    for s in range(MG.shape[0]):
        if kind == 4 or (kind == 2 and consistent[s]) or (kind == 3 and not consistent[s]):
            if MG[s, w] < v:
                v = MG[s, w]
    return v


@njit(cache=True, nogil=True)
def lane_record(b, t, step, stage, Y, w, rec_t, rec_step, rec_stage, rec_y, n_rec, status):
    """``core.batched.record_into`` of lane w (trajectory b) of the block state Y."""
    n = n_rec[b]
    if n > 0 and rec_step[b, n - 1] == step and rec_t[b, n - 1] == t:
        n -= 1
    elif n >= rec_t.shape[1]:
        status[b] = 4
        return False
    rec_t[b, n] = t
    rec_step[b, n] = step
    rec_stage[b, n] = stage
    for i in range(Y.shape[0]):
        rec_y[b, n, i] = Y[i, w]
    n_rec[b] = n + 1
    return True


@njit(cache=True, nogil=True)
def _next_target(b, step, end, ev, j, pts, n_pts):
    """(target, j): the next stop of trajectory b at ``step`` (the top of ``gd_trajectory``'s loop)."""
    target = end
    if ev > 0:
        nxt = (step // ev + 1) * ev
        if nxt < target:
            target = nxt
    while j < n_pts[b] and pts[b, j] <= step:
        j += 1
    if j < n_pts[b] and pts[b, j] < target:
        target = pts[b, j]
    return target, j


@njit(cache=True, nogil=True)
def gd_batch_soa(b0, b1, Y0, eta, max_abs, n_stages, stage_len, crit_kind, crit_op, crit_thr, every, pts, n_pts,
                 data, dims, rec_t, rec_step, rec_stage, rec_y, n_rec, status, stop_stage, end_step, end_t,
                 end_reason, final_loss, Yout):
    """Trajectories b0 <= b < b1 in blocks of :data:`LANES` lanes (the
    arguments and outputs of ``core.batched.batch_cpu`` for method gd;
    ``data`` has a last entry more: ``vexp``, see :func:`soa_forward`)."""
    P, idx, sgn, lab, weight, consistent, r0, stage_mode, vexp = data
    n, L = idx.shape
    ny = Y0.shape[1]
    Wm = LANES
    Y = np.empty((ny, Wm))
    NEW = np.empty((ny, Wm))
    U = np.empty((n, 2, Wm))
    MG = np.empty((n, Wm))
    E = np.empty((n, 2, L, L, Wm))
    DEN = np.empty((n, 2, L, Wm))
    G = np.empty((2, P, P, Wm))
    DW = np.empty((2, P, Wm))
    T = np.empty((3, P, P, Wm))
    Dsc = np.empty((6, Wm))
    Z = np.empty((L, Wm))
    pr = np.empty((L, Wm))
    v1, v2, v3, v4, loss = np.empty(Wm), np.empty(Wm), np.empty(Wm), np.empty(Wm), np.empty(Wm)
    etv, r0v = np.empty(Wm), np.empty(Wm)
    Tf = np.empty(Wm)
    xs = (np.empty(Wm), Tf, Tf.view(np.int64), np.empty(Wm, np.int64), np.empty(Wm, np.int64))
    t_att = np.zeros(Wm, np.bool_)
    t_w = np.zeros(Wm, np.bool_)
    move = np.zeros(Wm, np.bool_)
    live = np.zeros(Wm, np.bool_)
    # per-lane control (gd_trajectory's locals)
    st = np.zeros(Wm, np.int64)  # stage index s
    step = np.zeros(Wm, np.int64)
    end = np.zeros(Wm, np.int64)
    target = np.zeros(Wm, np.int64)
    jj = np.zeros(Wm, np.int64)
    for blk in range(b0, b1, Wm):
        W = min(Wm, b1 - blk)
        for w in range(W):
            b = blk + w
            for i in range(ny):
                Y[i, w] = Y0[b, i]
            etv[w] = eta[b]
            r0v[w] = r0[b]
            n_rec[b] = 0
            status[b] = 0
            stop_stage[b] = 0
            step[w] = 0
            jj[w] = 0
            st[w] = 0
            live[w] = lane_record(b, 0.0, 0, 1, Y, w, rec_t, rec_step, rec_stage, rec_y, n_rec, status)
            if live[w] and n_stages[b] == 0:
                live[w] = False
            if live[w]:
                end[w] = stage_len[b, 0]
                target[w], jj[w] = _next_target(b, 0, end[w], every[b], 0, pts, n_pts)
        for w in range(W, Wm):  # padding lanes of the last block: a copy of lane 0, never recorded
            for i in range(ny):
                Y[i, w] = Y[i, 0]
            etv[w] = etv[0]
            r0v[w] = r0v[0]
            live[w] = False
        n_live = 0
        for w in range(W):
            n_live += live[w]
        while n_live > 0:
            soa_forward(Y, Wm, P, idx, sgn, lab, weight, U, MG, E, DEN, Z, v1, v2, v3, v4, loss, vexp, xs)
            soa_backward(Y, Wm, P, idx, sgn, lab, weight, r0v, U, MG, E, DEN, G, DW, pr, v1, v2, v3)
            # each live lane: the decisions of gd_advance_into / gd_trajectory at this evaluated state
            for w in range(W):
                move[w] = False
                if not live[w]:
                    continue
                b = blk + w
                while True:
                    s = st[w]
                    code = -1
                    if not math.isfinite(loss[w]):
                        code = 2
                    elif crit_kind[b, s] != 0:
                        c = lane_criterion(crit_kind[b, s], loss[w], MG, consistent, DW, w)
                        op = crit_op[b, s]
                        if (op > 0 and c >= crit_thr[b, s]) or (op < 0 and c <= crit_thr[b, s]):
                            code = 1
                    if code == -1 and step[w] == target[w]:
                        code = 0
                    if code == -1:
                        move[w] = True
                        t_att[w] = stage_mode[b, s, 1] != 0
                        t_w[w] = stage_mode[b, s, 0] != 0
                        break
                    # the end of a gd_stage call: gd_trajectory's handling
                    final_loss[b] = loss[w]
                    t = step[w] * etv[w]
                    sidx = s + 1
                    if code == 2:
                        live[w] = False
                        if lane_record(b, t, step[w], sidx, Y, w, rec_t, rec_step, rec_stage, rec_y, n_rec, status):
                            status[b] = code
                            stop_stage[b] = sidx
                        break
                    if code == 1 or step[w] >= end[w]:
                        if not lane_record(b, t, step[w], sidx, Y, w, rec_t, rec_step, rec_stage, rec_y, n_rec,
                                           status):
                            live[w] = False
                            break
                        end_step[b, s] = step[w]
                        end_t[b, s] = t
                        end_reason[b, s] = code
                        stop_stage[b] = sidx
                        if s + 1 >= n_stages[b]:
                            live[w] = False
                            break
                        st[w] = s + 1
                        end[w] = step[w] + stage_len[b, s + 1]
                    else:
                        ev = every[b]
                        if (ev > 0 and step[w] % ev == 0) or (jj[w] < n_pts[b] and step[w] == pts[b, jj[w]]):
                            if not lane_record(b, t, step[w], sidx, Y, w, rec_t, rec_step, rec_stage, rec_y, n_rec,
                                               status):
                                live[w] = False
                                break
                    target[w], jj[w] = _next_target(b, step[w], end[w], every[b], jj[w], pts, n_pts)
            n_move = 0
            for w in range(W):
                n_move += move[w]
            if n_move > 0:
                soa_update(Y, NEW, Wm, P, G, DW, etv, t_att, t_w, T, Dsc)
                for w in range(W):  # the new state's checks, per moving lane
                    if not move[w]:
                        continue
                    b = blk + w
                    code = 0
                    for i in range(ny):
                        v = NEW[i, w]
                        if not math.isfinite(v):
                            code = 2
                            break
                        if abs(v) > max_abs[b]:
                            code = 3
                            break
                    if code != 0:  # the last accepted state stays: record it, stop the lane
                        move[w] = False
                        live[w] = False
                        final_loss[b] = loss[w]
                        sidx = st[w] + 1
                        if lane_record(b, step[w] * etv[w], step[w], sidx, Y, w, rec_t, rec_step, rec_stage, rec_y,
                                       n_rec, status):
                            status[b] = code
                            stop_stage[b] = sidx
                for i in range(ny):
                    for w in range(W):
                        if move[w]:
                            Y[i, w] = NEW[i, w]
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


# ------------------------------------------------------------------ block widths

#: the block widths compiled: (smallest batch that uses it, lanes), widest first. Measured (CPU time per
#: trajectory-step, one thread): B = 100: 64 lanes 3.0 us, 8 lanes 3.7, per trajectory 4.7; B = 10: 8 lanes
#: 5.5, 4 lanes 4.6, per trajectory 4.8 (below 16 trajectories the per-trajectory loop is kept)
WIDTHS = ((48, 64), (16, 8))


@functools.lru_cache(maxsize=None)
def batch_kernel(lanes: int):
    """:func:`gd_batch_soa` compiled for blocks of ``lanes`` lanes.

    The loops' trip count is a compile-time constant: the functions of this
    module are rebuilt over a copy of its globals with ``LANES = lanes``,
    each cached on disk under its own qualified name (``..._w<lanes>``).

    Parameters
    ----------
    lanes : int
        Trajectories per block (64 is the module's own :data:`LANES`).

    Returns
    -------
    numba dispatcher
        The batch loop, with the arguments of ``core.batched.batch_cpu``.

    Examples
    --------
    >>> from meanfield.models.mixture import vectorised
    >>> vectorised.batch_kernel(64) is vectorised.gd_batch_soa
    True
    """
    if lanes == LANES:
        return gd_batch_soa
    ns = dict(globals())
    ns["LANES"] = lanes
    for f in (lanes_exp, soa_forward, soa_backward, soa_update, gd_batch_soa):
        py = f.py_func
        fn = types.FunctionType(py.__code__, ns, f"{py.__name__}_w{lanes}", py.__defaults__, None)
        fn.__qualname__ = f"{py.__name__}_w{lanes}"
        ns[py.__name__] = njit(cache=True, nogil=True)(fn)
    return ns["gd_batch_soa"]


def kernel_for(B: int):
    """The batch kernel for B trajectories (one thread's share).

    Parameters
    ----------
    B : int
        Trajectories the kernel will advance.

    Returns
    -------
    numba dispatcher or None
        :func:`batch_kernel` of the widest block of :data:`WIDTHS` whose
        threshold B reaches; None below every threshold (the per-trajectory
        loop is as fast there).

    Examples
    --------
    >>> from meanfield.models.mixture import vectorised
    >>> vectorised.kernel_for(4) is None
    True
    """
    for lo, w in WIDTHS:
        if B >= lo:
            return batch_kernel(w)
    return None
