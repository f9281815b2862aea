"""Generic numba kernels of the engine: loss, dLoss/d(read blocks), the exact GD map and the flow.

One kernel for every description in the class, parametrised by the packed
arrays of :func:`meanfield.engine.reduce.layout` (integer head table ``hi``,
float head table ``hf``, fixed query vectors ``qv``, the Gram metric of each
head's wide objects ``Gr`` and their parameter group ``grp``) and the data:
tokens stored sparsely (token i of sequence s has ``nzn[s, i]`` non-zero
coefficients ``nzc[s, i, :]`` on the features ``nzi[s, i, :]``; a signed
feature costs one entry instead of P), counts ``cnt``, last query position
``last``, token count ``leff``, targets (n, C), weights. Compiled once, cached on disk
(``@portable``: ``numba.njit(cache=True)``, and the same Python source can be
compiled for the GPU by ``meanfield.core.activations.compile_portable``).

Forward pass per sequence s and head k (``docs/engine.md``): for every query
(mean: position l with weight c_l / L_eff; last: the last position with
c > 0; fixed: the vector ``qv[k]``) the logits z_i = scale x_i^T S x_q with
S = Q_k[K, Q] (separate) or W~ (merged), attention p_i = c_i e^{z_i} / sum
(softmax) or c_i z_i / L_keys (linear), zbar_k = sum_q w_q sum_i p_i x_i;
outputs u = v . zbar with v the value vector (neuron / linear: w~; matrix:
R_c = Q_k[r_c, V]; token: u_c = zbar_c); out_c = a_k (1/n) sum_q phi(u) with
phi = relu for neurons; f = sum_k out. Loss: logistic (margin y f), squared
(1/2 |f - y|^2; margin -max_c |f_c - y_c|), cross_entropy (logsumexp(f) - f_y;
margin f_y - max_{c != y} f_c), weighted sum over sequences.

Backward: G_k = dLoss/dQ_k (the read blocks; entries independent), the
narrow gradients ``gflat`` (W~, w~, a at their state offsets). GD map on
each head's Gram: Xm = Ghat Gamma_r D (D: the trained wide objects),
Q' = (I - eta Xm)^T Q (I - eta Xm); narrow: w~' = w~ - eta lr Gamma g,
W~' = W~ - eta Gamma G_W Gamma, a' = a - eta dLoss/da. Flow: the eta-linear
part. ``mode`` is a bit mask of the trained groups: 1 attention, 2 values,
4 readout, 8 signs. Rates per group (``meanfield.engine.rates``): ``Gr`` then
holds Gamma_r H / eta (each wide object's columns times its rate over eta) and
``hf`` columns 3, 4, 5 the same factor for W~, w~ and a (1 by default).

Speed without new arithmetic: the GD map skips the exact zeros of
Ghat = G + G^T (non-zero only on the read pairs' blocks, e.g.
[[0, G_S], [G_S^T, 0]] for keys/queries) and of the block-diagonal Gr (one
entry per row when Gamma = I), accumulating each entry over the same terms in
the same order, so the state is bit for bit the plain triple loops' (for
finite states); a query with one feature reads S[a, b] c_b where a key needs
it instead of forming the P-vector T = S x_q (the mixture's signed one-hot
tokens); attention is written straight into ``pa``.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
from numba import njit

from ..core.activations import portable, relu_prime, sigmoid_neg_e, softplus_neg_e
from ..core.activations import accept_step

#: this file's sha1 as imported: ``meanfield.engine.specialise`` parses its source and refuses a file changed since
SOURCE_SHA1 = hashlib.sha1(Path(__file__).read_bytes()).hexdigest()

CRITERIA = {"loss": 1, "consistent_margin": 2, "inconsistent_margin": 3, "min_margin": 4, "grad_w": 5}


def _hot(fn):
    """A per-sequence helper: registered as ``@portable`` (so other targets
    compile it with the rest) and, on the CPU, inlined into its caller
    (``njit(inline="always")``): the helpers are called a few times per
    sequence and head, where a call with a dozen array arguments costs more
    than the arithmetic. The inlined tree is compiled once, inside
    :func:`eng_loss_grads` (cached on disk)."""
    portable(fn)
    return njit(inline="always")(fn)


def _root(fn):
    """The per-step functions (the root of the inlined tree :func:`eng_loss_grads`,
    the update, the criterion, the GD loop): registered as
    ``@portable``; on the CPU compiled without numba's reference counting
    (``_nrt=False``: it allocates nothing), because inlining keeps an
    incref/decref pair per array argument of every inlined helper call, inside
    the loops over sequences and queries (half of the time otherwise); and with
    ``error_model="numpy"``: no zero-division check before each division (the loops
    vectorise), a zero divisor gives a non-finite value and the run stops as diverged."""
    portable(fn)
    return njit(cache=True, _nrt=False, error_model="numpy")(fn)


@_hot
def eng_attend(y, hi, hf, qv, nzi, nzc, nzn, cnt, last, s, k, P, l, T, pa, j):
    """Attention pa[k, j, :] (L,) of head k, sequence s, for query j at
    position l (l < 0: the fixed query vector); returns the key count L_keys.
    Scratch T (P,)."""
    L = nzn.shape[1]
    if hi[k, 1] == 0:
        base = hi[k, 8] + hi[k, 9] * hi[k, 7] + hi[k, 10]
        stride = hi[k, 7]
    else:
        base = hi[k, 13]
        stride = P
    oneq = l >= 0 and nzn[s, l] == 1
    ob = 0
    oc = 0.0
    if oneq:
        # a one-feature query: T[a] = S[a, b] c_b, read where needed (below)
        ob = base + nzi[s, l, 0]
        oc = nzc[s, l, 0]
    else:
        for a in range(P):
            acc = 0.0
            ra = base + a * stride
            if l >= 0:
                for z in range(nzn[s, l]):
                    acc += y[ra + nzi[s, l, z]] * nzc[s, l, z]
            else:
                for b in range(P):
                    acc += y[ra + b] * qv[k, b]
            T[a] = acc
    scale = hf[k, 0]
    excl = -1
    if hi[k, 2] == 1 and hi[k, 3] == 0:
        excl = last[s]
    boff = hi[k, 17] if l >= 0 else -1
    lim = L  # keys i < lim: a causal mask (column 16) keeps i <= l (meanfield.engine.positions)
    if hi[k, 16] == 1 and l >= 0:
        lim = l + 1
    lk = 0.0
    if hi[k, 0] == 0:
        mx = -math.inf
        for i in range(L):
            if cnt[s, i] > 0.0 and i != excl and i < lim:
                z = 0.0
                if oneq:
                    for t in range(nzn[s, i]):
                        z += nzc[s, i, t] * (y[ob + nzi[s, i, t] * stride] * oc)
                else:
                    for t in range(nzn[s, i]):
                        z += nzc[s, i, t] * T[nzi[s, i, t]]
                z *= scale
                if boff >= 0:  # a relative positional bias b[l - i] (column 17: its offset; 18: L - 1)
                    z += y[boff + l - i + hi[k, 18]]
                pa[k, j, i] = z
                if z > mx:
                    mx = z
        den = 0.0
        for i in range(L):
            if cnt[s, i] > 0.0 and i != excl and i < lim:
                e = cnt[s, i] * math.exp(pa[k, j, i] - mx)
                pa[k, j, i] = e
                den += e
                lk += cnt[s, i]
            else:
                pa[k, j, i] = 0.0
        for i in range(L):
            pa[k, j, i] /= den
    else:
        for i in range(L):
            if cnt[s, i] > 0.0 and i != excl and i < lim:
                lk += cnt[s, i]
        for i in range(L):
            if cnt[s, i] > 0.0 and i != excl and i < lim:
                z = 0.0
                if oneq:
                    for t in range(nzn[s, i]):
                        z += nzc[s, i, t] * (y[ob + nzi[s, i, t] * stride] * oc)
                else:
                    for t in range(nzn[s, i]):
                        z += nzc[s, i, t] * T[nzi[s, i, t]]
                if boff >= 0:
                    pa[k, j, i] = cnt[s, i] * (scale * z + y[boff + l - i + hi[k, 18]]) / lk
                else:
                    pa[k, j, i] = cnt[s, i] * scale * z / lk
            else:
                pa[k, j, i] = 0.0
    return lk


@_hot
def eng_nqueries(hi, L, k):
    if hi[k, 2] == 0:
        return L
    return 1


@_hot
def eng_query(hi, cnt, last, leff, s, k, j):
    """(position, weight) of query j of head k on sequence s (position -1: fixed vector; weight 0: skip)."""
    if hi[k, 2] == 0:
        if cnt[s, j] > 0.0:
            return j, cnt[s, j] / leff[s]
        return j, 0.0
    if hi[k, 2] == 1:
        return last[s], 1.0
    return -1, 1.0


@_hot
def eng_head_forward(y, hi, hf, qv, nzi, nzc, nzn, cnt, last, leff, s, k, P, zb, T, pa, lka):
    """zb[k] = the query-averaged attended token of head k on sequence s; the
    attention of query j is kept in pa[k, j] (and its key count in lka[k, j])
    for the backward pass."""
    L = nzn.shape[1]
    for a in range(P):
        zb[k, a] = 0.0
    for j in range(eng_nqueries(hi, L, k)):
        l, ql = eng_query(hi, cnt, last, leff, s, k, j)
        if ql == 0.0:
            continue
        lka[k, j] = eng_attend(y, hi, hf, qv, nzi, nzc, nzn, cnt, last, s, k, P, l, T, pa, j)
        for i in range(L):
            c = ql * pa[k, j, i]
            if c != 0.0:
                for t in range(nzn[s, i]):
                    zb[k, nzi[s, i, t]] += c * nzc[s, i, t]


@_hot
def eng_value_base(hi, k, P, row):
    """Offset in y of entry 0 of value vector ``row`` of head k (entries are contiguous)."""
    if hi[k, 4] == 2:
        return hi[k, 8] + (hi[k, 12] + row) * hi[k, 7] + hi[k, 11]
    return hi[k, 14] + row * P


@_hot
def eng_sign(y, hi, hf, k):
    if hi[k, 15] >= 0:
        return y[hi[k, 15]]
    return hf[k, 1]


@_hot
def eng_forward_sample(y, hi, hf, qv, nzi, nzc, nzn, cnt, last, leff, s, P, r0, zb, u, f, T, p, pa, lka):
    """Outputs f (C,) of sequence s; fills zb (H, P) and u[s] (H, rows)."""
    H = hi.shape[0]
    C = f.shape[0]
    for c in range(C):
        f[c] = 0.0
    for k in range(H):
        eng_head_forward(y, hi, hf, qv, nzi, nzc, nzn, cnt, last, leff, s, k, P, zb, T, pa, lka)
        a_k = eng_sign(y, hi, hf, k)
        v = hi[k, 4]
        nn = hi[k, 5]
        if v == 3:
            for c in range(C):
                u[s, k, c] = zb[k, c]
                f[c] += a_k * zb[k, c]
            continue
        for c in range(C):
            acc = 0.0
            for q in range(nn):
                row = c * nn + q
                uu = 0.0
                vb = eng_value_base(hi, k, P, row)
                for a in range(P):
                    uu += y[vb + a] * zb[k, a]
                u[s, k, row] = uu
                if v == 0:
                    if uu > 0.0:
                        acc += uu
                else:
                    acc += uu
            f[c] += a_k * acc / nn


@_hot
def eng_loss_sample(kind, f, target, s, wgt, df):
    """Weighted loss of sequence s; df = dLoss/df; returns (loss, margin)."""
    C = f.shape[0]
    if kind == 0:
        m = target[s, 0] * f[0]
        e = math.exp(-abs(m))  # the one exp of the loss and its derivative
        df[0] = -wgt * target[s, 0] * sigmoid_neg_e(m, e)
        return wgt * softplus_neg_e(m, e), m
    if kind == 1:
        acc = 0.0
        worst = 0.0
        for c in range(C):
            e = f[c] - target[s, c]
            acc += 0.5 * e * e
            df[c] = wgt * e
            if abs(e) > worst:
                worst = abs(e)
        return wgt * acc, -worst
    yc = int(target[s, 0])
    mx = -math.inf
    for c in range(C):
        if f[c] > mx:
            mx = f[c]
    den = 0.0
    for c in range(C):
        den += math.exp(f[c] - mx)
    lse = mx + math.log(den)
    other = -math.inf
    for c in range(C):
        df[c] = wgt * (math.exp(f[c] - lse) - (1.0 if c == yc else 0.0))
        if c != yc and f[c] > other:
            other = f[c]
    return wgt * (lse - f[yc]), f[yc] - other


@_hot
def eng_backward_sample(y, hi, hf, qv, nzi, nzc, nzn, cnt, last, leff, s, P, r0, zb, u, df, G, gflat, pa, lka, v, om,
                        tk):
    """Add sequence s's contribution (given df = dLoss/df and the forward
    pass's attention pa, lka) to G (H, N, N) and gflat."""
    H = hi.shape[0]
    L = nzn.shape[1]
    C = df.shape[0]
    for k in range(H):
        a_k = eng_sign(y, hi, hf, k)
        att, kq, qry, qself, val, nn = hi[k, 0], hi[k, 1], hi[k, 2], hi[k, 3], hi[k, 4], hi[k, 5]
        iK, iQ, iV, iR, woff, voff, aoff = hi[k, 9], hi[k, 10], hi[k, 11], hi[k, 12], hi[k, 13], hi[k, 14], hi[k, 15]
        causal, boff, bmid = hi[k, 16], hi[k, 17], hi[k, 18]
        for a in range(P):
            om[a] = 0.0
        if val == 3:
            for a in range(P):
                om[a] = df[a] * a_k
            if aoff >= 0:
                acc = 0.0
                for c in range(C):
                    acc += df[c] * zb[k, c]
                gflat[aoff] += acc
        else:
            for c in range(C):
                outc = 0.0
                for q in range(nn):
                    row = c * nn + q
                    uu = u[s, k, row]
                    if val == 0:
                        d = df[c] * a_k * relu_prime(uu, r0) / nn
                        if uu > 0.0:
                            outc += uu
                    else:
                        d = df[c] * a_k / nn
                        outc += uu
                    if d == 0.0:
                        continue
                    if val == 2:
                        for a in range(P):
                            G[k, iR + row, iV + a] += d * zb[k, a]
                    else:
                        for a in range(P):
                            gflat[voff + row * P + a] += d * zb[k, a]
                    vb = eng_value_base(hi, k, P, row)
                    for a in range(P):
                        om[a] += d * y[vb + a]
                if aoff >= 0:
                    gflat[aoff] += df[c] * outc / nn
        nz = False
        for a in range(P):
            if om[a] != 0.0:
                nz = True
        if not nz:
            continue
        for i in range(L):
            acc = 0.0
            for t in range(nzn[s, i]):
                acc += om[nzi[s, i, t]] * nzc[s, i, t]
            v[i] = acc
        scale = hf[k, 0]
        for j in range(eng_nqueries(hi, L, k)):
            l, ql = eng_query(hi, cnt, last, leff, s, k, j)
            if ql == 0.0:
                continue
            lk = lka[k, j]
            for a in range(P):
                tk[a] = 0.0
            if att == 0:
                vbar = 0.0
                for i in range(L):
                    vbar += pa[k, j, i] * v[i]
                for i in range(L):
                    dz = ql * pa[k, j, i] * (v[i] - vbar)
                    if dz != 0.0:
                        if boff >= 0 and l >= 0:  # dLoss/db[l - i] (relative positional bias)
                            gflat[boff + l - i + bmid] += dz
                        for t in range(nzn[s, i]):
                            tk[nzi[s, i, t]] += dz * nzc[s, i, t]
            else:
                for i in range(L):
                    if cnt[s, i] > 0.0:
                        excl = qry == 1 and qself == 0 and i == last[s]
                        if cnt[s, i] > 0.0 and not excl and (causal != 1 or l < 0 or i <= l):
                            dz = ql * cnt[s, i] * v[i] / lk
                            if boff >= 0 and l >= 0:
                                gflat[boff + l - i + bmid] += dz
                            for t in range(nzn[s, i]):
                                tk[nzi[s, i, t]] += dz * nzc[s, i, t]
            oneq = l >= 0 and nzn[s, l] == 1
            for a in range(P):
                ta = scale * tk[a]
                if ta == 0.0:
                    continue
                if oneq:
                    b = nzi[s, l, 0]
                    if kq == 0:
                        G[k, iK + a, iQ + b] += ta * nzc[s, l, 0]
                    else:
                        gflat[woff + a * P + b] += ta * nzc[s, l, 0]
                elif l >= 0:
                    for t in range(nzn[s, l]):
                        b = nzi[s, l, t]
                        if kq == 0:
                            G[k, iK + a, iQ + b] += ta * nzc[s, l, t]
                        else:
                            gflat[woff + a * P + b] += ta * nzc[s, l, t]
                else:
                    for b in range(P):
                        if kq == 0:
                            G[k, iK + a, iQ + b] += ta * qv[k, b]
                        else:
                            gflat[woff + a * P + b] += ta * qv[k, b]


@_root
def eng_loss_grads(y, hi, hf, qv, nzi, nzc, nzn, cnt, last, leff, target, weight, kind, r0, grad, u, margin, zb, f, df,
                   G, gflat, T, p, v, om, tk, pa, lka):
    """Loss over every sequence; margins (n,), u (n, H, rows); if ``grad``:
    G = dLoss/dQ (H, N, N) and gflat (the narrow and small gradients)."""
    n = nzn.shape[0]
    P = qv.shape[1]
    if grad:
        for i in range(gflat.shape[0]):
            gflat[i] = 0.0
        for k in range(G.shape[0]):
            for a in range(G.shape[1]):
                for b in range(G.shape[2]):
                    G[k, a, b] = 0.0
    loss = 0.0
    for s in range(n):
        eng_forward_sample(y, hi, hf, qv, nzi, nzc, nzn, cnt, last, leff, s, P, r0, zb, u, f, T, p, pa, lka)
        ls, m = eng_loss_sample(kind, f, target, s, weight[s], df)
        loss += ls
        margin[s] = m
        if grad:
            eng_backward_sample(y, hi, hf, qv, nzi, nzc, nzn, cnt, last, leff, s, P, r0, zb, u, df, G, gflat, pa, lka,
                                v, om, tk)
    return loss


#: added to a gradient norm in normalised GD (the authors' torch.finfo(float64).eps: a zero gradient stays a zero step)
NGD_EPS = 2.220446049250313e-16


@_hot
def eng_normalise_wide(y, off, N, P, hi, k, G, Gr, Xm, T, from_xm):
    """Normalised GD for head k's wide matrices: scale the columns of Xm that
    belong to each object o (K, Q, V: P columns each; each readout r_c: one;
    one parameter each) by 1 / (||dL/dM_o||_F + NGD_EPS), with
    ||dL/dM_o||_F^2 = sum_{c, d in o} (Ghat^T Q Ghat)[c, d] Gr[d, c]
    (Ghat = G + G^T, Q = the head's Gram: dL/dM_o = M Ghat[:, o] E^T in
    parameter space). An untrained object's columns of Xm are 0 and stay 0.
    ``T`` is scratch (N x N). ``from_xm`` (a ridge, Gamma = I: meanfield.engine.ridge):
    the norm of the whole gradient in Xm, ||M Xm_o||_F^2 = sum_{c in o} (Xm^T Q Xm)[c, c]."""
    iK, iQ, iV, iR, C = hi[k, 9], hi[k, 10], hi[k, 11], hi[k, 12], hi[k, 6]
    for o in range(3 + C):
        if o == 0:
            s0, w = iK, P
        elif o == 1:
            s0, w = iQ, P
        elif o == 2:
            s0, w = iV, P
        else:
            s0, w = (iR + (o - 3) if iR >= 0 else -1), 1
        if s0 < 0:
            continue
        s1 = s0 + w
        nz = False
        for a in range(N):
            for b in range(s0, s1):
                if Xm[a, b] != 0.0:
                    nz = True
        if not nz:
            continue
        if from_xm:
            acc = 0.0
            for c in range(s0, s1):
                for a in range(N):
                    h = 0.0
                    for b in range(N):
                        h += y[off + a * N + b] * Xm[b, c]
                    acc += Xm[a, c] * h
            sc = 1.0 / (math.sqrt(max(acc, 0.0)) + NGD_EPS)
            for a in range(N):
                for b in range(s0, s1):
                    Xm[a, b] *= sc
            continue
        for a in range(N):  # T[a, d] = sum_b Q[a, b] Ghat[b, d], d in o
            for d in range(s0, s1):
                acc = 0.0
                for b in range(N):
                    acc += y[off + a * N + b] * (G[k, b, d] + G[k, d, b])
                T[a, d] = acc
        acc = 0.0
        for c in range(s0, s1):
            for d in range(s0, s1):
                gr = Gr[k, d, c]
                if gr != 0.0:
                    h = 0.0
                    for a in range(N):
                        h += (G[k, a, c] + G[k, c, a]) * T[a, d]
                    acc += h * gr
        sc = 1.0 / (math.sqrt(max(acc, 0.0)) + NGD_EPS)
        for a in range(N):
            for b in range(s0, s1):
                Xm[a, b] *= sc


@_root
def eng_update(y, out, hi, hf, Gr, grp, Gam, G, gflat, eta, mode, exact, Xm, Ym, tmp):
    """GD map (exact: ``out`` = the next state) or flow right-hand side
    (``out`` = dy/dt, eta = 1) from the gradients G, gflat."""
    H = hi.shape[0]
    P = Gam.shape[0]
    ny = y.shape[0]
    if exact:
        for i in range(ny):
            out[i] = y[i]
    else:
        for i in range(ny):
            out[i] = 0.0
    tr_att = (mode & 1) != 0
    tr_val = (mode & 2) != 0
    tr_r = (mode & 4) != 0
    tr_sgn = (mode & 8) != 0
    # normalised GD (bit 16, exact map only): each trained parameter's step divided by (its gradient's
    # Frobenius norm + NGD_EPS), the norm taken in parameter space (a wide matrix M_o: ||M Ghat_o E^T||_F)
    nrm = exact and (mode & 16) != 0
    for k in range(H):
        N = hi[k, 7]
        off = hi[k, 8]
        if N > 0 and off >= 0:  # (a Gram's offset is >= 0: the test lets LLVM drop the negative-index fix-ups)
            any_tr = False
            for b in range(N):
                g = grp[k, b]
                if (g == 0 and tr_att) or (g == 1 and tr_val) or (g == 2 and tr_r):
                    any_tr = True
            if any_tr:
                # Xm = (G + G^T) Gr D (D: the trained columns). Row by row of Gr (block diagonal: c's own
                # object; only c itself when Gamma = I), skipping the zeros of G + G^T (zero outside the
                # read pairs, e.g. [[0, G_S], [G_S^T, 0]] for keys/queries): every entry is the same sum,
                # over c in ascending order, as the plain triple loop, less its exactly-zero terms.
                for a in range(N):
                    for b in range(N):
                        Xm[a, b] = 0.0
                for c in range(N):
                    d0 = 0
                    while d0 < N and Gr[k, c, d0] == 0.0:
                        d0 += 1
                    d1 = N
                    while d1 > d0 and Gr[k, c, d1 - 1] == 0.0:
                        d1 -= 1
                    for a in range(N):
                        gs = G[k, a, c] + G[k, c, a]
                        if gs == 0.0:
                            continue
                        for b in range(d0, d1):
                            gr = Gr[k, c, b]
                            g = grp[k, b]
                            if gr != 0.0 and ((g == 0 and tr_att) or (g == 1 and tr_val) or (g == 2 and tr_r)):
                                Xm[a, b] += gs * gr
                rdg = hf[k, 7]  # the ridge lambda (||W_K||^2 + ||W_Q||^2): its gradient 2 lambda W moves the
                if rdg != 0.0 and tr_att:  # attention columns by 2 lambda x their rate (Gamma = I: Gr's diagonal)
                    for b in range(N):
                        if grp[k, b] == 0:
                            Xm[b, b] += 2.0 * rdg * Gr[k, b, b]
                if nrm:
                    eng_normalise_wide(y, off, N, P, hi, k, G, Gr, Xm, Ym, rdg != 0.0)
                # Ym = Q Xm, accumulated row c of Xm at a time over its non-zero span (same sums, same order)
                for a in range(N):
                    for b in range(N):
                        Ym[a, b] = 0.0
                for c in range(N):
                    b0 = 0
                    while b0 < N and Xm[c, b0] == 0.0:
                        b0 += 1
                    b1 = N
                    while b1 > b0 and Xm[c, b1 - 1] == 0.0:
                        b1 -= 1
                    if b0 == b1:
                        continue
                    for a in range(N):
                        q = y[off + a * N + c]
                        for b in range(b0, b1):
                            Ym[a, b] += q * Xm[c, b]
                if exact:
                    # Q' = (Q - eta Q Xm) - eta Xm^T (Q - eta Q Xm)
                    for a in range(N):
                        for b in range(N):
                            Ym[a, b] = y[off + a * N + b] - eta * Ym[a, b]
                # out = Xm^T Ym (exact) or Xm^T Q (flow), accumulated in place over the non-zero span
                # of Xm's column a
                for a in range(N):
                    for b in range(N):
                        out[off + a * N + b] = 0.0
                    c0 = 0
                    while c0 < N and Xm[c0, a] == 0.0:
                        c0 += 1
                    c1 = N
                    while c1 > c0 and Xm[c1 - 1, a] == 0.0:
                        c1 -= 1
                    for c in range(c0, c1):
                        x = Xm[c, a]
                        if exact:
                            for b in range(N):
                                out[off + a * N + b] += x * Ym[c, b]
                        else:
                            for b in range(N):
                                out[off + a * N + b] += x * y[off + c * N + b]
                    if exact:
                        for b in range(N):
                            out[off + a * N + b] = Ym[a, b] - eta * out[off + a * N + b]
                    else:
                        for b in range(N):
                            out[off + a * N + b] = -(out[off + a * N + b] + Ym[a, b])
        wo = hi[k, 13]
        if wo >= 0 and tr_att:
            # W~' = W~ - eta Gamma G_W Gamma
            for a in range(P):
                for b in range(P):
                    acc = 0.0
                    for c in range(P):
                        acc += gflat[wo + a * P + c] * Gam[c, b]
                    tmp[a, b] = acc
            sc = 1.0
            rdg = hf[k, 7]  # the ridge lambda ||W||^2 (Gamma = I: W~ = W, its gradient 2 lambda W~)
            if nrm:  # ||E G_W E^T||_F^2 = tr(G_W^T Gamma G_W Gamma) = sum_ab G_W[a, b] (Gamma G_W Gamma)[a, b]
                acc = 0.0
                for a in range(P):
                    for b in range(P):
                        gg = 0.0
                        for c in range(P):
                            gg += Gam[a, c] * tmp[c, b]  # (Gamma G_W Gamma)[a, b]
                        if rdg != 0.0:  # Gamma = I: the whole gradient G_W + 2 lambda W~, squared
                            gg += 2.0 * rdg * y[wo + a * P + b]
                            acc += gg * gg
                        else:
                            acc += gflat[wo + a * P + b] * gg
                sc = 1.0 / (math.sqrt(max(acc, 0.0)) + NGD_EPS)
            for a in range(P):
                for b in range(P):
                    acc = 0.0
                    for c in range(P):
                        acc += Gam[a, c] * tmp[c, b]
                    if rdg != 0.0:
                        acc += 2.0 * rdg * y[wo + a * P + b]
                    if exact:
                        out[wo + a * P + b] = y[wo + a * P + b] - eta * sc * hf[k, 3] * acc
                    else:
                        out[wo + a * P + b] = -hf[k, 3] * acc
        vo = hi[k, 14]
        if vo >= 0 and tr_val:
            rows = hi[k, 6] * hi[k, 5]
            lr = hf[k, 2] * hf[k, 4]  # mean-field neuron scale n times the values' rate factor
            if nrm:  # the head's value vectors as one parameter: velocity lr E g, norm lr sqrt(sum g^T Gamma g)
                acc = 0.0
                for row in range(rows):
                    for a in range(P):
                        for c in range(P):
                            acc += gflat[vo + row * P + a] * Gam[a, c] * gflat[vo + row * P + c]
                lr = lr / (lr * math.sqrt(max(acc, 0.0)) + NGD_EPS)
            for row in range(rows):
                for a in range(P):
                    acc = 0.0
                    for c in range(P):
                        acc += Gam[a, c] * gflat[vo + row * P + c]
                    j = vo + row * P + a
                    if exact:
                        out[j] = y[j] - eta * lr * acc
                    else:
                        out[j] = -lr * acc
        ao = hi[k, 15]
        if ao >= 0 and tr_sgn:
            if nrm:
                out[ao] = y[ao] - eta * gflat[ao] / (abs(gflat[ao]) + NGD_EPS)
            elif exact:
                out[ao] = y[ao] - eta * hf[k, 5] * gflat[ao]
            else:
                out[ao] = -hf[k, 5] * gflat[ao]
        bo = hi[k, 17]
        if bo >= 0 and tr_att:  # relative positional biases train with the attention, at rate factor hf[k, 6]
            for t in range(2 * hi[k, 18] + 1):
                if exact:
                    out[bo + t] = y[bo + t] - eta * hf[k, 6] * gflat[bo + t]
                else:
                    out[bo + t] = -hf[k, 6] * gflat[bo + t]


@_root
def eng_criterion(kind, loss, margin, consistent, hi, hf, Gam, gflat):
    """1 loss, 2/3/4 min margin of the consistent / inconsistent / all
    sequences, 5 the value vectors' velocity norm sqrt(sum_k (1/n_k) sum (lr g)^T Gamma (lr g))."""
    if kind == 1:
        return loss
    if kind == 5:
        P = Gam.shape[0]
        acc = 0.0
        for k in range(hi.shape[0]):
            vo = hi[k, 14]
            if vo < 0:
                continue
            lr = hf[k, 2]
            nn = hi[k, 5]
            for row in range(hi[k, 6] * nn):
                for a in range(P):
                    for b in range(P):
                        acc += lr * lr * gflat[vo + row * P + a] * Gam[a, b] * gflat[vo + row * P + b] / nn
        return math.sqrt(acc)
    val = math.inf
    for s in range(margin.shape[0]):
        if kind == 4 or (kind == 2 and consistent[s]) or (kind == 3 and not consistent[s]):
            if margin[s] < val:
                val = margin[s]
    return val


@_root
def eng_gd_advance_into(y, nsteps, eta, mode, hi, hf, qv, Gr, grp, Gam, nzi, nzc, nzn, cnt, last, leff, target, weight, kind,
                        r0, consistent, crit_kind, crit_op, crit_thresh, max_abs, u, margin, zb, f, df, G, gflat,
                        T, p, v, om, tk, Xm, Ym, tmp, new, pa, lka):
    """Up to ``nsteps`` exact GD steps in place (criterion checked before each
    step). Returns (steps done, code, loss): 0 done, 1 criterion holds,
    2 non-finite, 3 an entry above max_abs (2, 3: ``y`` keeps the last accepted state)."""
    k = 0
    while True:
        loss = eng_loss_grads(y, hi, hf, qv, nzi, nzc, nzn, cnt, last, leff, target, weight, kind, r0, True, u, margin, zb, f,
                              df, G, gflat, T, p, v, om, tk, pa, lka)
        if not math.isfinite(loss):
            return k, 2, loss
        if crit_kind != 0:
            c = eng_criterion(crit_kind, loss, margin, consistent, hi, hf, Gam, gflat)
            if (crit_op > 0 and c >= crit_thresh) or (crit_op < 0 and c <= crit_thresh):
                return k, 1, loss
        if k == nsteps:
            return k, 0, loss
        eng_update(y, new, hi, hf, Gr, grp, Gam, G, gflat, eta, mode, True, Xm, Ym, tmp)
        code = accept_step(y, new, max_abs)
        if code != 0:
            return k, code, loss
        k += 1


# ------------------------------------------------------------------ CPU drivers (allocate scratch)


@njit(cache=True)
def _scratch(ny, n, L, P, H, R, C, Nmax):
    return (np.empty((n, H, R)), np.empty(n), np.empty((H, P)), np.empty(C), np.empty(C),
            np.zeros((H, Nmax, Nmax)), np.zeros(ny), np.empty(P), np.empty(L), np.empty(L), np.empty(P),
            np.empty(P), np.empty((Nmax, Nmax)), np.empty((Nmax, Nmax)), np.empty((P, P)), np.empty(ny),
            np.zeros((H, L, L)), np.zeros((H, L)))


@njit(cache=True)
def loss_and_grads(y, hi, hf, qv, nzi, nzc, nzn, cnt, last, leff, target, weight, kind, r0, R, C, Nmax):
    """(loss, G (H, N, N), gflat, margin (n,), u (n, H, R))."""
    n, L = nzn.shape
    P = qv.shape[1]
    H = hi.shape[0]
    u, margin, zb, f, df, G, gflat, T, p, v, om, tk, Xm, Ym, tmp, new, pa, lka = _scratch(y.shape[0], n, L, P, H, R, C, Nmax)
    loss = eng_loss_grads(y, hi, hf, qv, nzi, nzc, nzn, cnt, last, leff, target, weight, kind, r0, True, u, margin, zb, f, df,
                          G, gflat, T, p, v, om, tk, pa, lka)
    return loss, G, gflat, margin, u


@njit(cache=True)
def flow_rhs(y, out, mode, hi, hf, qv, Gr, grp, Gam, nzi, nzc, nzn, cnt, last, leff, target, weight, kind, r0, R, C, Nmax):
    n, L = nzn.shape
    P = qv.shape[1]
    H = hi.shape[0]
    u, margin, zb, f, df, G, gflat, T, p, v, om, tk, Xm, Ym, tmp, new, pa, lka = _scratch(y.shape[0], n, L, P, H, R, C, Nmax)
    loss = eng_loss_grads(y, hi, hf, qv, nzi, nzc, nzn, cnt, last, leff, target, weight, kind, r0, True, u, margin, zb, f, df,
                          G, gflat, T, p, v, om, tk, pa, lka)
    eng_update(y, out, hi, hf, Gr, grp, Gam, G, gflat, 1.0, mode, False, Xm, Ym, tmp)
    return loss


@njit(cache=True)
def gd_advance(y, nsteps, eta, mode, hi, hf, qv, Gr, grp, Gam, nzi, nzc, nzn, cnt, last, leff, target, weight, kind, r0,
               consistent, crit_kind, crit_op, crit_thresh, max_abs, R, C, Nmax):
    n, L = nzn.shape
    P = qv.shape[1]
    H = hi.shape[0]
    u, margin, zb, f, df, G, gflat, T, p, v, om, tk, Xm, Ym, tmp, new, pa, lka = _scratch(y.shape[0], n, L, P, H, R, C, Nmax)
    return eng_gd_advance_into(y, nsteps, eta, mode, hi, hf, qv, Gr, grp, Gam, nzi, nzc, nzn, cnt, last, leff, target, weight,
                               kind, r0, consistent, crit_kind, crit_op, crit_thresh, max_abs, u, margin, zb, f, df,
                               G, gflat, T, p, v, om, tk, Xm, Ym, tmp, new, pa, lka)


@njit(cache=True)
def criterion_value(y, crit_kind, hi, hf, qv, Gam, nzi, nzc, nzn, cnt, last, leff, target, weight, kind, r0, consistent, R, C,
                    Nmax):
    n, L = nzn.shape
    P = qv.shape[1]
    H = hi.shape[0]
    u, margin, zb, f, df, G, gflat, T, p, v, om, tk, Xm, Ym, tmp, new, pa, lka = _scratch(y.shape[0], n, L, P, H, R, C, Nmax)
    loss = eng_loss_grads(y, hi, hf, qv, nzi, nzc, nzn, cnt, last, leff, target, weight, kind, r0, True, u, margin, zb, f, df,
                          G, gflat, T, p, v, om, tk, pa, lka)
    return eng_criterion(crit_kind, loss, margin, consistent, hi, hf, Gam, gflat)
