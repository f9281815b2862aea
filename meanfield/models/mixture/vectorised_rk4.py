"""Trajectory-vectorised CPU batch of the mixture's fixed-step RK4 of the flow (structure of arrays).

The lanes of ``meanfield.models.mixture.vectorised`` (state ``Y[entry, lane]``, every inner loop over lanes,
compiled per block width and sample set) for method rk4. Two pieces:

* :func:`soa_rhs`: out = the flow's right-hand side of every lane, the operations of
  ``kernels.flow_rhs_into`` in its order: the forward and backward passes are ``vectorised.soa_forward`` /
  ``soa_backward`` (not written again), then the first-order terms of the update (:func:`soa_flow_update`:
  ``attention_update_into`` with eta = 1 and exact=False, and -dLoss/dw~), or zeros where a lane's stage does
  not train a block;
* :func:`rk4_batch_soa`: ``core.batched.rk4_trajectory``'s logic per lane: step dt[b], stages of time
  stage_len[b, s] (the last step of a stage shortened to land on its end, the same while condition), a
  right-hand side at each stage start (final_loss), four more a step (k2, k3, k4 and f1 at the new state),
  the checks in its order (a non-finite new state, then a non-finite f1: code 2; then an entry above max_abs:
  code 3), records every ``every[b]`` steps and at each stage end (the record writer of the gd lanes,
  ``core.batched.record_into``; a lane's start, stop and stage end: ``core.lane_driver``'s), end_step /
  end_t / end_reason as rk4_trajectory writes them. A lane that
  has finished idles until its block does; the right-hand sides of a stage start run for the whole block
  (rare: once a stage).

With the C library's exp (``vector_exp=False``: ``EXACT``) a lane equals the per-trajectory rk4 batch
(``batched.advance(lanes=False)``, ``mix_rk4_batch_cpu``) bit for bit; with the vectorised exp (the default)
to rounding (tests/test_mixture_vectorised_rk4.py). Entry point: :func:`rk4_kernel` (the arguments of
``core.batched.batch_cpu``), built over a copy of the namespace of ``vectorised.build`` (the same constants,
the same compiled forward and backward passes), each function cached on disk under its own qualified name.
"""

from __future__ import annotations

import functools
import types

import numpy as np
from numba import njit

from . import vectorised
from .vectorised import (LANES, NL, NP, NS, _NoAlias, lane_begin, lane_fail, lane_record_into,  # noqa: F401
                         lane_stage_end, soa_backward, soa_forward)


@njit(cache=True, nogil=True)
def soa_flow_update(Y, OUT, G, DW, t_att, t_w):
    """OUT = the flow's right-hand side given G, DW (``kernels.flow_rhs_into`` after its backward pass: the
    first-order terms of ``attention_update_into`` times -1, and -DW), zeros where a lane's stage does not
    train a block (t_att, t_w: (W,) booleans)."""
    n2 = NP * NP
    for h in range(2):
        So = h * n2
        Ao = 2 * n2 + h * n2
        Bo = 4 * n2 + h * n2
        for a in range(NP):
            for b in range(NP):
                i0 = So + a * NP + b
                i1 = Ao + a * NP + b
                i2 = Bo + a * NP + b
                for w in range(LANES):
                    d = 0.0
                    for c in range(NP):
                        d += Y[Ao + a * NP + c, w] * G[h, c, b, w] + G[h, a, c, w] * Y[Bo + c * NP + b, w]
                    OUT[i0, w] = -1.0 * d if t_att[w] else 0.0
                for w in range(LANES):
                    d = 0.0
                    for c in range(NP):
                        d += G[h, a, c, w] * Y[So + b * NP + c, w] + Y[So + a * NP + c, w] * G[h, b, c, w]
                    OUT[i1, w] = -1.0 * d if t_att[w] else 0.0
                for w in range(LANES):
                    d = 0.0
                    for c in range(NP):
                        d += G[h, c, a, w] * Y[So + c * NP + b, w] + Y[So + c * NP + a, w] * G[h, c, b, w]
                    OUT[i2, w] = -1.0 * d if t_att[w] else 0.0
    wof = 6 * n2
    for h in range(2):
        for a in range(NP):
            r = wof + h * NP + a
            for w in range(LANES):
                OUT[r, w] = -DW[h, a, w] if t_w[w] else 0.0


@njit(cache=True, nogil=True)
def soa_rhs(Y, OUT, lab, weight, r0, t_att, t_w, U, MG, XM, E, DEN, G, DW, pr, v1, v2, v3, loss):
    """OUT = the flow's right-hand side of every lane at Y, loss (W,) the loss there
    (``kernels.flow_rhs_into`` per lane: forward, backward, update terms)."""
    soa_forward(Y, lab, weight, U, MG, XM, E, DEN, v1, v2, loss)
    soa_backward(Y, lab, weight, r0, U, MG, XM, E, DEN, G, DW, pr, v1, v2, v3)
    soa_flow_update(Y, OUT, G, DW, t_att, t_w)


@njit(cache=True, nogil=True)
def lane_top(w, b, Y, tv, tend, st, nstep, need, move, live, t_att, t_w, n_stages, stage_len, stage_mode,
             rec_t, rec_step, rec_stage, rec_y, n_rec, status, stop_stage, end_step, end_t, end_reason):
    """Lane w (trajectory b) at the top of ``rk4_trajectory``'s while loop: move[w] when the condition holds;
    else the stage's end (its record and stage end), then the next stage (need[w]: its first right-hand side)
    or the lane's end (live[w] False)."""
    t = tv[w]
    te = tend[w]
    if t < te * (1.0 - 1e-15) and te - t > 1e-14 * max(1.0, abs(te)):
        move[w] = True
        return
    move[w] = False
    s = st[w]
    if not lane_stage_end(b, w, s, t, nstep[w], 0, Y, n_stages, rec_t, rec_step, rec_stage, rec_y, n_rec, status,
                          stop_stage, end_step, end_t, end_reason):
        live[w] = False
        return
    st[w] = s + 1
    tend[w] = t + stage_len[b, s + 1]
    t_att[w] = stage_mode[b, s + 1, 1] != 0
    t_w[w] = stage_mode[b, s + 1, 0] != 0
    need[w] = True


@njit(cache=True, nogil=True)
def rk4_batch_soa(b0, b1, Y0, dt, max_abs, n_stages, stage_len, crit_kind, crit_op, crit_thr, every, pts, n_pts,
                  data, dims, rec_t, rec_step, rec_stage, rec_y, n_rec, status, stop_stage, end_step, end_t,
                  end_reason, final_loss, Yout):
    """Trajectories b0 <= b < b1 under fixed-step RK4 in blocks of :data:`LANES` lanes (the arguments and
    outputs of ``core.batched.batch_cpu`` for method rk4; crit_*, pts, n_pts unused, as there)."""
    P, idx, sgn, lab, weight, consistent, r0, stage_mode = data
    n = NS
    ny = Y0.shape[1]
    Wm = LANES
    Y, Y1, YS = np.empty((ny, Wm)), np.empty((ny, Wm)), np.empty((ny, Wm))
    F0, F1, K2, K3, K4 = (np.empty((ny, Wm)), np.empty((ny, Wm)), np.empty((ny, Wm)), np.empty((ny, Wm)),
                          np.empty((ny, Wm)))
    U = np.empty((n, 2, Wm))
    MG = np.empty((n, Wm))
    XM = np.empty((n, Wm))
    E = np.empty((n, 2, NL, NL, Wm))
    DEN = np.empty((n, 2, NL, Wm))
    G = np.empty((2, P, P, Wm))
    DW = np.empty((2, P, Wm))
    pr = np.empty((NL, Wm))
    v1, v2, v3, loss, loss1 = np.empty(Wm), np.empty(Wm), np.empty(Wm), np.empty(Wm), np.empty(Wm)
    hmax, r0v, mabv = np.empty(Wm), np.empty(Wm), np.empty(Wm)
    H, HH, H6 = np.zeros(Wm), np.zeros(Wm), np.zeros(Wm)
    tv, tend = np.zeros(Wm), np.zeros(Wm)
    st = np.zeros(Wm, np.int64)
    nstep = np.zeros(Wm, np.int64)
    code = np.zeros(Wm, np.int64)
    nfy = np.zeros(Wm, np.bool_)
    nff = np.zeros(Wm, np.bool_)
    big = np.zeros(Wm, np.bool_)
    ok = np.zeros(Wm, np.bool_)
    t_att = np.zeros(Wm, np.bool_)
    t_w = np.zeros(Wm, np.bool_)
    need = np.zeros(Wm, np.bool_)
    move = np.zeros(Wm, np.bool_)
    live = np.zeros(Wm, np.bool_)
    for blk in range(b0, b1, Wm):
        W = min(Wm, b1 - blk)
        for w in range(W):
            b = blk + w
            hmax[w] = dt[b]
            r0v[w] = r0[b]
            mabv[w] = max_abs[b]
            tv[w] = 0.0
            nstep[w] = 0
            st[w] = 0
            move[w] = False
            need[w] = False
            live[w] = lane_begin(b, w, Y, Y0, n_stages, rec_t, rec_step, rec_stage, rec_y, n_rec, status, stop_stage)
            if live[w]:
                tend[w] = tv[w] + stage_len[b, 0]
                t_att[w] = stage_mode[b, 0, 1] != 0
                t_w[w] = stage_mode[b, 0, 0] != 0
                need[w] = True
        for w in range(W, Wm):  # padding lanes of the last block: a copy of lane 0, never recorded
            for i in range(ny):
                Y[i, w] = Y[i, 0]
            hmax[w] = hmax[0]
            r0v[w] = r0v[0]
            mabv[w] = mabv[0]
            t_att[w] = t_att[0]
            t_w[w] = t_w[0]
            live[w] = False
            move[w] = False
            need[w] = False
        n_live = 0
        for w in range(W):
            n_live += live[w]
        while n_live > 0:
            # stage starts: final_loss[b] = rhs(y, f0), then the while condition (an empty stage ends at once)
            n_need = 0
            for w in range(W):
                n_need += need[w]
            while n_need > 0:
                soa_rhs(Y, K2, lab, weight, r0v, t_att, t_w, U, MG, XM, E, DEN, G, DW, pr, v1, v2, v3, loss)
                n_need = 0
                for w in range(W):
                    if not need[w]:
                        continue
                    need[w] = False
                    b = blk + w
                    for i in range(ny):
                        F0[i, w] = K2[i, w]
                    final_loss[b] = loss[w]
                    lane_top(w, b, Y, tv, tend, st, nstep, need, move, live, t_att, t_w, n_stages, stage_len,
                             stage_mode, rec_t, rec_step, rec_stage, rec_y, n_rec, status, stop_stage, end_step,
                             end_t, end_reason)
                    n_need += need[w]
            n_move = 0
            for w in range(W):
                n_move += move[w]
            if n_move > 0:
                for w in range(W):
                    if move[w]:
                        h = min(hmax[w], tend[w] - tv[w])
                        H[w] = h
                        HH[w] = 0.5 * h
                        H6[w] = h / 6.0
                for i in range(ny):
                    for w in range(Wm):
                        YS[i, w] = Y[i, w] + HH[w] * F0[i, w]
                soa_rhs(YS, K2, lab, weight, r0v, t_att, t_w, U, MG, XM, E, DEN, G, DW, pr, v1, v2, v3, loss)
                for i in range(ny):
                    for w in range(Wm):
                        YS[i, w] = Y[i, w] + HH[w] * K2[i, w]
                soa_rhs(YS, K3, lab, weight, r0v, t_att, t_w, U, MG, XM, E, DEN, G, DW, pr, v1, v2, v3, loss)
                for i in range(ny):
                    for w in range(Wm):
                        YS[i, w] = Y[i, w] + H[w] * K3[i, w]
                soa_rhs(YS, K4, lab, weight, r0v, t_att, t_w, U, MG, XM, E, DEN, G, DW, pr, v1, v2, v3, loss)
                for i in range(ny):
                    for w in range(Wm):
                        Y1[i, w] = Y[i, w] + H6[w] * (F0[i, w] + 2.0 * K2[i, w] + 2.0 * K3[i, w] + K4[i, w])
                soa_rhs(Y1, F1, lab, weight, r0v, t_att, t_w, U, MG, XM, E, DEN, G, DW, pr, v1, v2, v3, loss1)
                # rk4_trajectory's checks, every lane at once: a non-finite y1, else a non-finite f1 (code 2),
                # else an entry of y1 above max_abs (code 3)
                for w in range(Wm):
                    nfy[w] = False
                    nff[w] = False
                    big[w] = False
                for i in range(ny):
                    for w in range(Wm):
                        v = Y1[i, w]
                        f = F1[i, w]
                        nfy[w] = nfy[w] or not (v - v == 0.0)
                        nff[w] = nff[w] or not (f - f == 0.0)
                        big[w] = big[w] or abs(v) > mabv[w]
                for w in range(Wm):
                    code[w] = 2 if (nfy[w] or nff[w]) else (3 if big[w] else 0)
                    ok[w] = move[w] and code[w] == 0
                for i in range(ny):  # (selects, not branches: vectorised; padding lanes never move)
                    for w in range(Wm):
                        Y[i, w] = Y1[i, w] if ok[w] else Y[i, w]
                        F0[i, w] = F1[i, w] if ok[w] else F0[i, w]
                for w in range(W):
                    if not move[w]:
                        continue
                    b = blk + w
                    if code[w] != 0:  # the last accepted state stays: record it, stop the lane
                        move[w] = False
                        live[w] = False
                        lane_fail(b, w, code[w], tv[w], nstep[w], st[w] + 1, Y, rec_t, rec_step, rec_stage, rec_y,
                                  n_rec, status, stop_stage)
                        continue
                    tv[w] = tv[w] + H[w]
                    nstep[w] += 1
                    final_loss[b] = loss1[w]
                    ev = every[b]
                    if ev > 0 and nstep[w] % ev == 0:
                        if not lane_record_into(b, tv[w], nstep[w], st[w] + 1, Y[:, w], rec_t, rec_step, rec_stage,
                                               rec_y, n_rec, status):
                            move[w] = False
                            live[w] = False
                            continue
                    lane_top(w, b, Y, tv, tend, st, nstep, need, move, live, t_att, t_w, n_stages, stage_len,
                             stage_mode, rec_t, rec_step, rec_stage, rec_y, n_rec, status, stop_stage, end_step,
                             end_t, end_reason)
            n_live = 0
            for w in range(W):
                n_live += live[w]
        for w in range(W):
            b = blk + w
            for i in range(ny):
                Yout[b, i] = Y[i, w]


_KERNELS = (soa_flow_update, soa_rhs, lane_top, rk4_batch_soa)


@functools.lru_cache(maxsize=None)
def _rk4_kernel(lanes: int, vector_exp: bool, key: bytes, P: int, n: int, L: int):
    ns = dict(vectorised.build(lanes, vector_exp, key, P, n, L))
    tag = ns["TAG"]
    for f in _KERNELS:
        py = f.py_func
        name = py.__name__
        fn = types.FunctionType(py.__code__, ns, name + tag, py.__defaults__, None)
        fn.__qualname__ = name + tag
        extra = {"pipeline_class": _NoAlias} if f is soa_flow_update else {}
        ns[name] = njit(cache=True, nogil=True, **extra)(fn)
    return ns["rk4_batch_soa"]


def rk4_kernel(lanes: int, idx: np.ndarray, sgn: np.ndarray, P: int, vector_exp: bool = True):
    """:func:`rk4_batch_soa` compiled for blocks of ``lanes`` lanes and one sample set.

    The constants (block width, the sample set's tables, the exp) are those of
    ``vectorised.batch_kernel``; the functions of this module are rebuilt over
    a copy of that build's namespace (so that they call its compiled forward
    and backward passes), each cached on disk under its own qualified name.

    Parameters
    ----------
    lanes : int
        Trajectories per block.
    idx, sgn : numpy.ndarray
        The sample set's (n, L) token features and signs (``data.sample_set``).
    P : int
        Features (2K).
    vector_exp : bool
        The exp by ``meanfield.core.lane_exp.exp_lane`` (to rounding) or by ``math.exp``
        (bit for bit with the per-trajectory rk4 batch).

    Returns
    -------
    numba dispatcher
        The batch loop, with the arguments of ``core.batched.batch_cpu``.

    Examples
    --------
    >>> from meanfield.models.mixture import vectorised_rk4
    >>> from meanfield.models.mixture.data import sample_set
    >>> s = sample_set(2, 3)
    >>> k = vectorised_rk4.rk4_kernel(8, s.idx, s.sgn, s.P)
    >>> k is vectorised_rk4.rk4_kernel(8, s.idx, s.sgn, s.P)
    True
    """
    n, L = idx.shape
    key = np.ascontiguousarray(idx, np.int64).tobytes() + np.ascontiguousarray(sgn, np.float64).tobytes()
    return _rk4_kernel(int(lanes), bool(vector_exp), key, int(P), int(n), int(L))
