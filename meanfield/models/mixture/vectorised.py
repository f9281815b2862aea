"""Trajectory-vectorised CPU batch of the mixture's exact GD map (structure of arrays).

The per-trajectory batch (``meanfield.models.mixture.batched``, one
trajectory after the other on each thread) runs the scalar kernels of
``kernels.py``: a state of 104 numbers (K = 2) goes through short loops of
length P = 4 or L = 3, too short for SIMD. Here W trajectories (a block of
lanes) advance together and every array carries the lane as its LAST,
contiguous axis: the state is ``Y[entry, lane]``, the gradients
``G[h, a, b, lane]``, and so on, so that every inner loop runs over lanes and
numba / LLVM emits vector instructions for it (AVX2 here: 4 doubles).

Compile-time constants. :func:`batch_kernel` rebuilds the functions of this
module over a copy of its globals in which the block width ``LANES``, the
sample set's shape (``NS``, ``NL``, ``NP``) and tables (``ROW``, ``CS``,
``VR``, ``SV``: which score and neuron entries each token of each sample reads,
with which signs) and the exp of the softmax and of the logistic loss (``EXP``) are constants: the loops
over the L keys of a query are then unrolled inside the loop over lanes,
which stays the innermost loop (loop bodies are kept small enough for LLVM
to unroll them: larger ones stop the vectoriser).

The arithmetic is the scalar kernels'. Each lane performs the operations of
``kernels.gd_advance_into`` in the same order (no ``fastmath``: nothing is
reordered or contracted into FMAs). With ``EXP = exp_libm`` (the C library's
exp: those loops stay scalar; ``EXACT`` then keeps the scalar kernels'
divisions) a lane's results equal the per-trajectory batch's bit for bit
(``tests/test_mixture_vectorised.py``). The default
(``batched.advance(vector_exp=True)``) differs in two places, both within
rounding: exp by ``meanfield.core.lane_exp.exp_lane``, straight-line arithmetic that vectorises
(its polynomial in explicit fused multiply-adds), within one ulp of the C
library's; and each softmax's sum is divided once, its reciprocal then
multiplying the numerators (forward and backward pass) instead of one
division each (divisions were a third of the backward pass). Results agree
with the per-trajectory batch to rounding (<= 1e-13 relative in the tests).
Two changes of evaluation that do not change a bit:
the softmax numerators exp(z - max) and their sums are computed once per
state in the forward pass and reused by the backward pass (which recomputed
the same numbers), and a sample/head whose loss coefficient is 0 adds
0 * (finite) = 0 to the gradient instead of being skipped; and the logistic
loss log(1 + exp(-z)) and its derivative 1 / (1 + exp(z)) of a margin z
share one exp(-|z|) (by ``EXP``, in a loop over lanes), which is the exp
each of ``activations.softplus_neg`` / ``sigmoid_neg`` takes on its own
branch (``softplus_neg_e`` / ``sigmoid_neg_e`` given it). ``log1p`` (the loss) stays a call of the C library
(where numba uses Intel's SVML, ``numba.config.USING_SVML``, LLVM may vectorise it in blocks of 8 or more
lanes: the loss's last bit, never the state, could then differ between widths; not the case here).

Loop shapes. Every sum over the P features or the L keys is a loop inside the
loop over lanes (unrolled: NP and NL are constants), so that its terms stay in
registers; the forward, backward and update passes are compiled with numba's
``noalias`` flag (:class:`_NoAlias`: their array arguments never overlap), so
that no loop over lanes carries a run-time overlap check (those checks cost as
much as a 16-lane loop's arithmetic).

The step/record logic is ``meanfield.core.batched.gd_trajectory``'s, per lane:
stages of given lengths with their modes and stop criteria, records every
``every[b]`` steps and at the points ``pts[b]``, a record at the same (step, t)
as the previous one replacing it (the record writer is
``core.batched.record_into``, compiled here for a lane's column; the per-lane
control, ``meanfield.core.lane_driver``, is the engine's lanes' too, compiled
inline into each build), divergence (non-finite, above ``max_abs``: ``accept_step``'s checks, for
every lane at once) stopping that lane only. Lanes may differ in everything
the per-trajectory batch allows (eta, ReLU'(0), max_abs, stage lengths,
modes, criteria, record grids); a lane that has finished idles until its
block does.

Entry point: :func:`batch_kernel` (a drop-in replacement of
``batched.mix_gd_batch_cpu``, same arguments) that ``batched.advance`` runs
on the CPU for method gd, at the block width :func:`width_for` picks. Method
rk4 runs in the same lanes (``vectorised_rk4``: its right-hand side calls
:func:`soa_forward` / :func:`soa_backward` of a :func:`build`); the CUDA
backend keeps the per-trajectory drivers.
"""

from __future__ import annotations

import functools
import math
import types
import zlib

import numpy as np
from numba import njit

from ...core import batched as core_batched
from ...core import lane_driver
from ...core.activations import relu_prime, sigmoid_neg_e, softplus_neg_e
from ...core.lane_exp import exp_lane, exp_libm  # the two choices of EXP (:func:`build`)
from ...core.lanes import source_tag
from ...core.lanes import NoAlias as _NoAlias  # numba's pipeline with the noalias flag (for :data:`_NO_ALIAS`)

#: lanes per block (a compile-time constant of each build, :func:`batch_kernel`; 64: the widest of WIDTHS)
LANES = 64


# The kernels below are compiled per block width and sample set (:func:`batch_kernel`): these module
# globals are compile-time constants there (the values here are the K = 2, L = 3 set's shape, so that the
# module's own functions type-check; they are never run with them).
NS, NL, NP = 8, 3, 4  # samples, tokens, features (P = 2K)
EXACT = False  # True: the scalar kernels' divisions (bit for bit with EXP = exp_libm); False: reciprocals
EXP = exp_lane  # the exp (softmax, logistic loss): exp_lane (vectorised) or exp_libm (the C library's)
#: per (sample s, head h, query l): the score rows of the L keys (S_h[idx_i, idx_l]), the signs
#: sgn_i sgn_l; per (s, h): the rows of w~_h[idx_i]; per s: the signs sgn_i and the features idx_i
ROW = ((((0, 0, 0),) * 3,) * 2,) * 8
CS = (((1.0, 1.0, 1.0),) * 3,) * 8
VR = (((0, 0, 0),) * 2,) * 8
SV = ((1.0, 1.0, 1.0),) * 8
IDX = ((0, 0, 0),) * 8


def tables(idx: np.ndarray, sgn: np.ndarray, P: int) -> dict:
    """The constant tables ROW, CS, VR, SV, IDX of a sample set (see the module globals).

    Parameters
    ----------
    idx, sgn : numpy.ndarray
        (n, L) feature index and sign of each token (``data.sample_set``).
    P : int
        Features (2K).

    Returns
    -------
    dict
        name -> nested tuple, and NS, NL, NP.

    Examples
    --------
    >>> from meanfield.models.mixture.data import sample_set
    >>> s = sample_set(2, 3)
    >>> tables(s.idx, s.sgn, s.P)["NL"]
    3
    """
    n, L = idx.shape
    n2 = P * P
    ii = [[int(v) for v in r] for r in idx]
    ss = [[float(v) for v in r] for r in sgn]
    row = tuple(tuple(tuple(tuple(h * n2 + ii[s][i] * P + ii[s][l] for i in range(L)) for l in range(L))
                      for h in range(2)) for s in range(n))
    cs = tuple(tuple(tuple(ss[s][i] * ss[s][l] for i in range(L)) for l in range(L)) for s in range(n))
    vr = tuple(tuple(tuple(6 * n2 + h * P + ii[s][i] for i in range(L)) for h in range(2)) for s in range(n))
    return dict(NS=n, NL=L, NP=P, ROW=row, CS=cs, VR=vr, SV=tuple(tuple(r) for r in ss),
                IDX=tuple(tuple(r) for r in ii))


@njit(cache=True, nogil=True)
def soa_forward(Y, lab, weight, U, MG, XM, E, DEN, ACC, F, loss):
    """Forward pass of the block: U (n, 2, W), margins MG (n, W), loss (W,);
    keeps the softmax numerators E (n, 2, L, L, W) and sums DEN (n, 2, L, W).
    Scratch ACC, F (W,). Per lane the operations of ``kernels.forward_into``
    in its order; one loop over lanes per (sample, head, query)."""
    for w in range(LANES):
        loss[w] = 0.0
    for s in range(NS):
        sv = SV[s]
        for w in range(LANES):
            F[w] = 0.0
        for h in range(2):
            vr = VR[s][h]
            for w in range(LANES):
                ACC[w] = 0.0
            for l in range(NL):
                rows = ROW[s][h][l]
                cs = CS[s][l]
                for w in range(LANES):  # (loop bodies small enough for LLVM to unroll the L keys: vectorised)
                    mx = -math.inf
                    for i in range(NL):
                        z = cs[i] * Y[rows[i], w]
                        mx = z if z > mx else mx
                    for i in range(NL):
                        E[s, h, l, i, w] = cs[i] * Y[rows[i], w] - mx
                for i in range(NL):
                    for w in range(LANES):
                        E[s, h, l, i, w] = EXP(E[s, h, l, i, w])
                for w in range(LANES):
                    den = 0.0
                    num = 0.0
                    for i in range(NL):
                        e = E[s, h, l, i, w]
                        den += e
                        num += e * sv[i] * Y[vr[i], w]
                    if EXACT:
                        DEN[s, h, l, w] = den
                        ACC[w] += num / den
                    else:  # one division per softmax: its reciprocal, which the backward pass reuses
                        rd = 1.0 / den
                        DEN[s, h, l, w] = rd
                        ACC[w] += num * rd
            sh = 1.0 - 2.0 * h
            for w in range(LANES):
                u = ACC[w] / NL
                U[s, h, w] = u
                F[w] = F[w] + sh * u if u > 0.0 else F[w]
        ls = lab[s]
        for w in range(LANES):
            MG[s, w] = ls * F[w]
        for w in range(LANES):  # exp(-|margin|): the one exp of the logistic loss and of its derivative
            XM[s, w] = EXP(-abs(MG[s, w]))
        ws = weight[s]
        for w in range(LANES):
            loss[w] += ws * softplus_neg_e(MG[s, w], XM[s, w])


@njit(cache=True, nogil=True)
def soa_backward(Y, lab, weight, r0, U, MG, XM, E, DEN, G, DW, pr, vbar, gs, coef):
    """G = dLoss/dS (2, P, P, W) and DW = dLoss/dw~ (2, P, W) from the forward pass's U, MG, E, DEN.
    Per lane the operations of ``kernels.backward_into`` in its order; the token features, rows and signs
    are this build's constants (IDX, VR, SV)."""
    for h in range(2):
        for a in range(NP):
            for w in range(LANES):
                DW[h, a, w] = 0.0
            for b in range(NP):
                for w in range(LANES):
                    G[h, a, b, w] = 0.0
    for s in range(NS):
        sv = SV[s]
        ix = IDX[s]
        for w in range(LANES):
            gs[w] = sigmoid_neg_e(MG[s, w], XM[s, w])
        for h in range(2):
            vr = VR[s][h]
            for w in range(LANES):
                coef[w] = -weight[s] * gs[w] * lab[s] * (1.0 - 2.0 * h) * relu_prime(U[s, h, w], r0[w]) / NL
            for l in range(NL):
                sl = sv[l]
                bq = ix[l]
                for w in range(LANES):
                    den = DEN[s, h, l, w]
                    vb = 0.0
                    for i in range(NL):
                        p = E[s, h, l, i, w] / den if EXACT else E[s, h, l, i, w] * den
                        pr[i, w] = p
                        vb += p * sv[i] * Y[vr[i], w]
                    vbar[w] = vb
                for i in range(NL):
                    si = sv[i]
                    a = ix[i]
                    r = vr[i]
                    for w in range(LANES):
                        G[h, a, bq, w] += coef[w] * pr[i, w] * (si * Y[r, w] - vbar[w]) * si * sl
                    for w in range(LANES):
                        DW[h, a, w] += coef[w] * pr[i, w] * si


@njit(cache=True, nogil=True)
def soa_update(Y, NEW, G, DW, eta, t_att, t_w, T, D):
    """NEW = the exact GD map of each lane (``kernels.attention_update_into``
    with exact=True and the neuron step), or the unchanged blocks where a lane's
    stage does not train them (t_att, t_w: (W,) booleans); scratch T (3, P, P, W), D (6, W).
    Each sum over the P features is one loop inside the loop over lanes (unrolled: NP is a constant), its
    terms in the scalar kernel's order."""
    n2 = NP * NP
    for h in range(2):
        So = h * n2
        Ao = 2 * n2 + h * n2
        Bo = 4 * n2 + h * n2
        for c in range(NP):
            for b in range(NP):
                for w in range(LANES):
                    t = 0.0
                    for e in range(NP):
                        t += Y[So + e * NP + c, w] * G[h, e, b, w]
                    T[0, c, b, w] = t
                for w in range(LANES):
                    t = 0.0
                    for e in range(NP):
                        t += Y[Bo + c * NP + e, w] * G[h, b, e, w]
                    T[1, c, b, w] = t
                for w in range(LANES):
                    t = 0.0
                    for e in range(NP):
                        t += Y[Ao + c * NP + e, w] * G[h, e, b, w]
                    T[2, c, b, w] = t
        for a in range(NP):
            for b in range(NP):
                i0 = So + a * NP + b
                i1 = Ao + a * NP + b
                i2 = Bo + a * NP + b
                # first order: S: A G + G B ; A: G S^T + S G^T ; B: G^T S + S^T G; second order: S: G S^T G ;
                # A: G B G^T ; B: G^T A G
                for w in range(LANES):
                    d1 = 0.0
                    for c in range(NP):
                        d1 += Y[Ao + a * NP + c, w] * G[h, c, b, w] + G[h, a, c, w] * Y[Bo + c * NP + b, w]
                    d2 = 0.0
                    for c in range(NP):
                        d2 += G[h, a, c, w] * T[0, c, b, w]
                    e = eta[w]
                    NEW[i0, w] = Y[i0, w] - e * d1 + e * e * d2 if t_att[w] else Y[i0, w]
                for w in range(LANES):
                    d1 = 0.0
                    for c in range(NP):
                        d1 += G[h, a, c, w] * Y[So + b * NP + c, w] + Y[So + a * NP + c, w] * G[h, b, c, w]
                    d2 = 0.0
                    for c in range(NP):
                        d2 += G[h, a, c, w] * T[1, c, b, w]
                    e = eta[w]
                    NEW[i1, w] = Y[i1, w] - e * d1 + e * e * d2 if t_att[w] else Y[i1, w]
                for w in range(LANES):
                    d1 = 0.0
                    for c in range(NP):
                        d1 += G[h, c, a, w] * Y[So + c * NP + b, w] + Y[So + c * NP + a, w] * G[h, c, b, w]
                    d2 = 0.0
                    for c in range(NP):
                        d2 += G[h, c, a, w] * T[2, c, b, w]
                    e = eta[w]
                    NEW[i2, w] = Y[i2, w] - e * d1 + e * e * d2 if t_att[w] else Y[i2, w]
    wof = 6 * n2
    for h in range(2):
        for a in range(NP):
            r = wof + h * NP + a
            for w in range(LANES):
                NEW[r, w] = Y[r, w] - eta[w] * DW[h, a, w] if t_w[w] else Y[r, w]


@njit(cache=True, nogil=True)
def lane_criterion_of(kind, w, loss, cargs):
    """``kernels.criterion_of`` of lane w (cargs: the margins MG, the samples' consistency, DW; the hook of
    ``core.lane_driver.lane_gd_decide``)."""
    MG, consistent, DW = cargs
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


#: the one record writer of every batch (``meanfield.core.batched.record_into``), compiled here for a lane's
#: column ``Y[:, w]`` of the block state
lane_record_into = core_batched.instantiate(core_batched.record_into, globals(), "lane_record_into",
                                            njit(cache=True, nogil=True))


#: the next stop of a lane (``core.batched.next_target``, gd_trajectory's loop top), compiled here
_next_target = core_batched.instantiate(core_batched.next_target, globals(), "_next_target",
                                        njit(cache=True, nogil=True))

#: the per-lane control of every lane driver (``core.lane_driver``: lane_begin, lane_fail, lane_stage_end,
#: lane_crit_met, lane_gd_decide), inlined into the drivers; :func:`build` compiles them anew over each
#: build's namespace
_INLINE = njit(cache=True, nogil=True, inline="always")
lane_driver.instantiate_into(globals(), _INLINE, "_mixture")


@njit(cache=True, nogil=True)
def gd_batch_soa(b0, b1, Y0, eta, max_abs, n_stages, stage_len, crit_kind, crit_op, crit_thr, every, pts, n_pts,
                 data, dims, rec_t, rec_step, rec_stage, rec_y, n_rec, status, stop_stage, end_step, end_t,
                 end_reason, final_loss, Yout):
    """Trajectories b0 <= b < b1 in blocks of :data:`LANES` lanes (the
    arguments and outputs of ``core.batched.batch_cpu`` for method gd; the
    sample set's shape and tables are this build's constants, see
    :func:`batch_kernel`)."""
    P, idx, sgn, lab, weight, consistent, r0, stage_mode = data
    n = NS
    ny = Y0.shape[1]
    Wm = LANES
    Y = np.empty((ny, Wm))
    NEW = np.empty((ny, Wm))
    U = np.empty((n, 2, Wm))
    MG = np.empty((n, Wm))
    XM = np.empty((n, Wm))
    E = np.empty((n, 2, NL, NL, Wm))
    DEN = np.empty((n, 2, NL, Wm))
    G = np.empty((2, P, P, Wm))
    DW = np.empty((2, P, Wm))
    T = np.empty((3, P, P, Wm))
    Dsc = np.empty((6, Wm))
    pr = np.empty((NL, Wm))
    v1, v2, v3, loss = np.empty(Wm), np.empty(Wm), np.empty(Wm), np.empty(Wm)
    etv, r0v, mabv = np.empty(Wm), np.empty(Wm), np.empty(Wm)
    nf = np.empty(Wm, np.int64)
    ma = np.empty(Wm, np.int64)
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
    cargs = (MG, consistent, DW)  # what lane_criterion_of reads
    for blk in range(b0, b1, Wm):
        W = min(Wm, b1 - blk)
        for w in range(W):
            b = blk + w
            etv[w] = eta[b]
            r0v[w] = r0[b]
            mabv[w] = max_abs[b]
            step[w] = 0
            jj[w] = 0
            st[w] = 0
            live[w] = lane_begin(b, w, Y, Y0, n_stages, rec_t, rec_step, rec_stage, rec_y, n_rec, status, stop_stage)
            if live[w]:
                end[w] = stage_len[b, 0]
                target[w], jj[w] = _next_target(b, 0, end[w], every[b], 0, pts, n_pts)
        for w in range(W, Wm):  # padding lanes of the last block: a copy of lane 0, never recorded
            for i in range(ny):
                Y[i, w] = Y[i, 0]
            etv[w] = etv[0]
            r0v[w] = r0v[0]
            mabv[w] = mabv[0]
            live[w] = False
        n_live = 0
        for w in range(W):
            n_live += live[w]
        while n_live > 0:
            soa_forward(Y, lab, weight, U, MG, XM, E, DEN, v1, v2, loss)
            soa_backward(Y, lab, weight, r0v, U, MG, XM, E, DEN, G, DW, pr, v1, v2, v3)
            # each live lane: the decisions of gd_advance_into / gd_trajectory at this evaluated state
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
                    s = st[w]
                    t_att[w] = stage_mode[b, s, 1] != 0
                    t_w[w] = stage_mode[b, s, 0] != 0
            n_move = 0
            for w in range(W):
                n_move += move[w]
            if n_move > 0:
                soa_update(Y, NEW, G, DW, etv, t_att, t_w, T, Dsc)
                for w in range(Wm):  # the new state's checks (accept_step's), every lane at once: the first
                    nf[w] = ny       # non-finite row and the first finite row above max_abs
                    ma[w] = ny
                for i in range(ny):
                    for w in range(Wm):
                        v = NEW[i, w]
                        fin = v - v == 0.0
                        nf[w] = i if (nf[w] == ny and not fin) else nf[w]
                        ma[w] = i if (ma[w] == ny and fin and abs(v) > mabv[w]) else ma[w]
                for w in range(W):
                    if not move[w]:
                        continue
                    b = blk + w
                    code = 0 if nf[w] == ma[w] else (2 if nf[w] < ma[w] else 3)
                    if code != 0:  # the last accepted state stays: record it, stop the lane
                        move[w] = False
                        live[w] = False
                        final_loss[b] = loss[w]
                        lane_fail(b, w, code, step[w] * etv[w], step[w], st[w] + 1, Y, rec_t, rec_step, rec_stage,
                                  rec_y, n_rec, status, stop_stage)
                for i in range(ny):  # (a select, not a branch: vectorised; padding lanes never move)
                    for w in range(Wm):
                        Y[i, w] = NEW[i, w] if move[w] else Y[i, w]
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

#: the block widths compiled: (smallest share of a thread that uses it, lanes), widest first; every batch of
#: method gd on the CPU runs in lanes (``lanes=False``: the per-trajectory loop, run.run's bits), so that a
#: trajectory's bits depend on its config alone, not on the batch, its chunking or the threads. Every width gives
#: a lane the same bits (the same operations in the same order: tests/test_mixture_vectorised.py), so the
#: width is a matter of speed only. Measured (one thread, 2 * 10^4 or 10^4 steps, 2026-12-07,
#: docs/performance.md), us per trajectory-step, per-trajectory loop / lanes: B = 1: 4.09 / 3.09 (1 lane);
#: B = 2: 4.06 / 2.80 (1 lane; 8 lanes 5.39); B = 4: 4.11 / 2.36 (8 lanes; 1 lane 2.78); B = 8: 4.00 / 1.23
#: (8 lanes; 16 lanes 1.79); B = 10: 4.08 / 1.37 (16 lanes; two blocks of 8 about 2.0); B = 64: 0.75 (64)
WIDTHS = ((48, 64), (9, 16), (4, 8), (1, 1))

_KERNELS = (soa_forward, soa_backward, soa_update, lane_record_into, gd_batch_soa)
#: the passes whose array arguments never overlap (every call passes distinct arrays gd_batch_soa allocates)
_NO_ALIAS = (soa_forward, soa_backward, soa_update)


@functools.lru_cache(maxsize=None)
def _batch_kernel(lanes: int, vector_exp: bool, key: bytes, P: int, n: int, L: int):
    return build(lanes, vector_exp, key, P, n, L)["gd_batch_soa"]


@functools.lru_cache(maxsize=None)
def build(lanes: int, vector_exp: bool, key: bytes, P: int, n: int, L: int) -> dict:
    """The namespace of one build (width, exp, sample set; ``key``: :func:`batch_kernel`'s): the constants and
    the kernels of this module compiled over them (``vectorised_rk4`` adds its own to a copy)."""
    tab = tables(np.frombuffer(key, np.int64)[: n * L].reshape(n, L),
                 np.frombuffer(key, np.float64)[n * L:].reshape(n, L), P)
    ns = dict(globals())
    ns.update(tab)
    ns["LANES"] = lanes
    ns["EXP"] = exp_lane if vector_exp else exp_libm
    ns["EXACT"] = not vector_exp
    from ...core import activations, lane_exp
    from ...core import lanes as core_lanes

    # numba's cache checks only the defining file: the files this build's code inlines are in its name too
    me = source_tag(__file__, __file__.replace("vectorised.py", "vectorised_rk4.py"), core_batched.__file__,
                    lane_driver.__file__, lane_exp.__file__, activations.__file__, core_lanes.__file__)
    tag = f"_w{lanes}{'v' if vector_exp else 'x'}_n{n}L{L}P{P}_{zlib.crc32(key):08x}_{me}"
    for f in _KERNELS:
        py = f.py_func
        name = py.__name__
        fn = types.FunctionType(py.__code__, ns, name + tag, py.__defaults__, None)
        fn.__qualname__ = name + tag
        extra = {"pipeline_class": _NoAlias} if f in _NO_ALIAS else {}
        ns[name] = njit(cache=True, nogil=True, **extra)(fn)
    lane_driver.instantiate_into(ns, _INLINE, tag)
    ns["TAG"] = tag
    return ns


def batch_kernel(lanes: int, idx: np.ndarray, sgn: np.ndarray, P: int, vector_exp: bool = True):
    """:func:`gd_batch_soa` compiled for blocks of ``lanes`` lanes and one sample set.

    The block width, the sample set's tables (:func:`tables`: the rows and
    signs of every score and neuron entry the forward and backward passes
    read) and the exp (softmax, loss) are compile-time constants: the functions of
    this module are rebuilt over a copy of its globals holding them, each
    cached on disk under its own qualified name (width, exp, shape and a
    checksum of the tables). Every loop over lanes is then a straight loop
    LLVM vectorises.

    Parameters
    ----------
    lanes : int
        Trajectories per block.
    idx, sgn : numpy.ndarray
        The sample set's (n, L) token features and signs (``data.sample_set``).
    P : int
        Features (2K).
    vector_exp : bool
        The exp of the softmax and the loss by :func:`exp_lane` (vectorised; within an ulp of
        the C library's) or by ``math.exp`` (then the block equals the
        per-trajectory batch bit for bit, but its softmax loops are scalar).

    Returns
    -------
    numba dispatcher
        The batch loop, with the arguments of ``core.batched.batch_cpu``.

    Examples
    --------
    >>> from meanfield.models.mixture import vectorised
    >>> from meanfield.models.mixture.data import sample_set
    >>> s = sample_set(2, 3)
    >>> k = vectorised.batch_kernel(8, s.idx, s.sgn, s.P)
    >>> k is vectorised.batch_kernel(8, s.idx, s.sgn, s.P)
    True
    """
    n, L = idx.shape
    key = np.ascontiguousarray(idx, np.int64).tobytes() + np.ascontiguousarray(sgn, np.float64).tobytes()
    return _batch_kernel(int(lanes), bool(vector_exp), key, int(P), int(n), int(L))


def width_for(B: int, threads: int = 1) -> int:
    """The block width for a batch of B trajectories on ``threads`` threads.

    Parameters
    ----------
    B : int
        Trajectories of the batch.
    threads : int
        Threads sharing it (``core.batched.run_cpu``: contiguous slices).

    Returns
    -------
    int
        The widest block of :data:`WIDTHS` whose threshold a thread's share
        reaches (the last one for any smaller share).

    Examples
    --------
    >>> from meanfield.models.mixture import vectorised
    >>> vectorised.width_for(3), vectorised.width_for(10), vectorised.width_for(10, threads=2)
    (1, 16, 8)
    """
    share = B // max(1, min(B, threads))
    for lo, w in WIDTHS:
        if share >= lo:
            return w
    return WIDTHS[-1][1]
