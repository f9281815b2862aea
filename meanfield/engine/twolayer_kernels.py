"""numba kernels of one attention head of the generic two-layer network (forward and backward).

One head of :mod:`meanfield.engine.twolayer_net` over a stream X (n, T, D):
for each sequence and position t, the lags of the window that exist
(t - lag >= 0, 0-based), the score z = w_lag (rpe) + X_t^T A X_{t-lag}
(bilinear), alpha = softmax over those lags (or z itself: linear attention),
s_t = sum alpha X_{t-lag}[:V] (V = S for a token value, D for the stream),
u_t = s_t / ||s_t|| (normalise; 0 where s_t = 0). The backward pass returns
the gradients of w, A and (optionally) of the stream. Serial loops (the
machine's cores are shared); ``cache=True``.

Example
-------
>>> import numpy as np
>>> X = np.zeros((1, 2, 4)); X[0, 0, 0] = X[0, 1, 1] = 1.0; X[0, 0, 2] = X[0, 1, 3] = 1.0
>>> al, u, nrm = head_forward(X, np.array([0, 1]), np.zeros(2), np.zeros((4, 4)), True, False, True, False, 2)
>>> u[0, 1].tolist()
[0.5, 0.5]
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = ["head_forward", "head_backward", "readout_attention", "loss_row", "LOSS_KINDS"]

#: the read-out's losses by kernel code: 0 the cross-entropy sum_e y_e min(-log y_hat_e, log_cap) (``nll`` and
#: ``soft``: y one-hot or a distribution); 1 ``official-ce``, the cross-entropy of softmax(y_hat) against y
#: (y_hat taken as logits: what torch's CrossEntropyLoss does when handed probabilities; never capped)
LOSS_KINDS = {"nll": 0, "soft": 0, "official-ce": 1}


@njit(cache=True, error_model="numpy")
def loss_row(logy, y, p, log_cap, loss_kind, wy):
    """One sequence's loss term p * l(y_hat, y) and its cotangent weights.

    ``wy[e]`` is set to d (p l) / d(-log y_hat_e). Kind 0: l = sum_e y_e min(-log y_hat_e, log_cap), wy_e = p y_e
    where the term is below the cap (0 where capped). Kind 1: l = sum_e y_e (lse(y_hat) - y_hat_e), with
    dl / d log y_hat_e = y_hat_e (|y| softmax(y_hat)_e - y_e). Returns (p l, sum_e wy_e, whether any wy_e != 0).
    """
    S = y.shape[0]
    total = 0.0
    wsum = 0.0
    live = False
    if loss_kind == 1:
        ym = -math.inf
        for e in range(S):
            if math.exp(logy[e]) > ym:
                ym = math.exp(logy[e])
        se = 0.0
        ys = 0.0
        for e in range(S):
            se += math.exp(math.exp(logy[e]) - ym)
            ys += y[e]
        lse = ym + math.log(se)
        for e in range(S):
            yh = math.exp(logy[e])
            total += p * y[e] * (lse - yh)
            wy[e] = -p * yh * (ys * math.exp(yh - lse) - y[e])
            wsum += wy[e]
            if wy[e] != 0.0:
                live = True
        return total, wsum, live
    for e in range(S):
        wy[e] = 0.0
        if y[e] > 0:
            nl = -logy[e]
            if nl < log_cap:
                total += p * y[e] * nl
                wy[e] = y[e] * p
                wsum += wy[e]
                live = True
            else:
                total += p * y[e] * log_cap
    return total, wsum, live


@njit(cache=True, error_model="numpy")  # a non-finite value propagates (the run stops as diverged)
def _fwd(X, lags, w, A, use_rpe, use_bil, softmax, normalise, V, al, u, nrm):
    n, T, D = X.shape
    K = lags.shape[0]
    xa = np.zeros(D)
    z = np.zeros(K)
    # an rpe-only score: the lags that exist are a prefix (the window is sorted), so alpha depends only on how
    # many exist: tab[m] = softmax(w[:m]) (or w[:m] for linear attention), computed once
    tab = np.zeros((K + 1, K))
    if use_rpe and not use_bil:
        for m in range(1, K + 1):
            if softmax:
                mx = -math.inf
                for k in range(m):
                    if w[k] > mx:
                        mx = w[k]
                tot = 0.0
                for k in range(m):
                    tab[m, k] = math.exp(w[k] - mx)
                    tot += tab[m, k]
                for k in range(m):
                    tab[m, k] /= tot
            else:
                for k in range(m):
                    tab[m, k] = w[k]
    table = use_rpe and not use_bil
    for i in range(n):
        for t in range(T):
            m = 0
            for k in range(K):
                if t - lags[k] >= 0:
                    m += 1
            if m == 0:
                nrm[i, t] = 0.0
                continue
            if table:
                for k in range(m):
                    al[i, t, k] = tab[m, k]
            else:
                if use_bil:
                    for e in range(D):
                        acc = 0.0
                        for d in range(D):
                            acc += X[i, t, d] * A[d, e]
                        xa[e] = acc
                zmax = -math.inf
                for k in range(m):
                    j = t - lags[k]
                    v = w[k] if use_rpe else 0.0
                    if use_bil:
                        for e in range(D):
                            v += xa[e] * X[i, j, e]
                    z[k] = v
                    if v > zmax:
                        zmax = v
                if softmax:
                    tot = 0.0
                    for k in range(m):
                        al[i, t, k] = math.exp(z[k] - zmax)
                        tot += al[i, t, k]
                    for k in range(m):
                        al[i, t, k] /= tot
                else:
                    for k in range(m):
                        al[i, t, k] = z[k]
            for k in range(m):
                j = t - lags[k]
                a = al[i, t, k]
                for v in range(V):
                    u[i, t, v] += a * X[i, j, v]
            if normalise:
                sq = 0.0
                for v in range(V):
                    sq += u[i, t, v] * u[i, t, v]
                r = math.sqrt(sq)
                nrm[i, t] = r
                if r > 0:
                    for v in range(V):
                        u[i, t, v] /= r


def head_forward(X, lags, w, A, softmax, normalise, use_rpe, use_bil, V):
    """alpha (n, T, K), the output u (n, T, V) and ||s|| (n, T) of one head.

    Parameters
    ----------
    X : ndarray, shape (n, T, D)
        The stream.
    lags : ndarray of int, shape (K,)
        The window's lags (0-based positions t - lag).
    w : ndarray, shape (>= K,)
        rpe weights (read when ``use_rpe``).
    A : ndarray, shape (D, D)
        The bilinear matrix (read when ``use_bil``).
    softmax, normalise, use_rpe, use_bil : bool
    V : int
        The value width (the first V columns of the stream: S for a token value, D for the stream).

    Returns
    -------
    al, u, nrm : ndarray

    Example
    -------
    >>> X = np.ones((1, 1, 2))
    >>> head_forward(X, np.array([0]), np.zeros(1), np.zeros((2, 2)), True, False, True, False, 2)[1].tolist()
    [[[1.0, 1.0]]]
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    n, T, _ = X.shape
    lags = np.ascontiguousarray(lags, dtype=np.int64)
    al = np.zeros((n, T, lags.shape[0]))
    u = np.zeros((n, T, int(V)))
    nrm = np.zeros((n, T))
    _fwd(X, lags, np.ascontiguousarray(w, dtype=np.float64), np.ascontiguousarray(A, dtype=np.float64),
         bool(use_rpe), bool(use_bil), bool(softmax), bool(normalise), int(V), al, u, nrm)
    return al, u, nrm


@njit(cache=True, error_model="numpy")  # a non-finite value propagates (the run stops as diverged)
def _bwd(X, lags, A, al, u, nrm, du, use_bil, softmax, normalise, need_dx, gw, gA, dX):
    n, T, D = X.shape
    K = lags.shape[0]
    V = u.shape[2]
    ds = np.zeros(V)
    dal = np.zeros(K)
    xk = np.zeros(D)
    xa = np.zeros(D)
    for i in range(n):
        for t in range(T):
            if normalise:
                r = nrm[i, t]
                if r <= 0:
                    continue
                proj = 0.0
                for v in range(V):
                    proj += u[i, t, v] * du[i, t, v]
                for v in range(V):
                    ds[v] = (du[i, t, v] - u[i, t, v] * proj) / r
            else:
                for v in range(V):
                    ds[v] = du[i, t, v]
            m = 0
            sd = 0.0
            for k in range(K):
                j = t - lags[k]
                if j < 0:
                    continue
                m += 1
                acc = 0.0
                for v in range(V):
                    acc += ds[v] * X[i, j, v]
                dal[k] = acc
                sd += al[i, t, k] * acc
                if need_dx:
                    a = al[i, t, k]
                    for v in range(V):
                        dX[i, j, v] += a * ds[v]
            if m == 0:
                continue
            if use_bil:
                for e in range(D):
                    xk[e] = 0.0
                if need_dx:  # A^T X_t, once per position (d z / d X_j = A^T X_t for every lag)
                    for e in range(D):
                        xa[e] = 0.0
                    for d in range(D):
                        xd = X[i, t, d]
                        if xd != 0.0:
                            for e in range(D):
                                xa[e] += xd * A[d, e]
            for k in range(K):
                j = t - lags[k]
                if j < 0:
                    continue
                dz = al[i, t, k] * (dal[k] - sd) if softmax else dal[k]
                gw[k] += dz
                if use_bil:
                    for e in range(D):
                        xk[e] += dz * X[i, j, e]
                    if need_dx:
                        for e in range(D):
                            dX[i, j, e] += dz * xa[e]
            if use_bil:
                for d in range(D):
                    xd = X[i, t, d]
                    if xd != 0.0:
                        for e in range(D):
                            gA[d, e] += xd * xk[e]
                if need_dx:  # d z / d X_t = A X_j
                    for d in range(D):
                        acc = 0.0
                        for e in range(D):
                            acc += A[d, e] * xk[e]
                        dX[i, t, d] += acc


def head_backward(X, lags, A, al, u, nrm, du, softmax, normalise, use_bil, need_dx):
    """Gradients (gw (K,), gA (D, D), dX (n, T, D) or None) of one head, given d loss / d u.

    Parameters
    ----------
    X, lags, A : as :func:`head_forward`
    al, u, nrm : ndarray
        Its outputs.
    du : ndarray, shape (n, T, V)
        The gradient of the loss with respect to the head's output u.
    softmax, normalise, use_bil : bool
    need_dx : bool
        Also the gradient of the stream (False below the first layer: the embeddings are fixed).

    Returns
    -------
    gw, gA, dX

    Example
    -------
    >>> X = np.ones((1, 1, 2)); lags = np.array([0])
    >>> al, u, nrm = head_forward(X, lags, np.zeros(1), np.zeros((2, 2)), True, False, True, False, 2)
    >>> head_backward(X, lags, np.zeros((2, 2)), al, u, nrm, np.ones((1, 1, 2)), True, False, False, True)[2].tolist()
    [[[1.0, 1.0]]]
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    n, T, D = X.shape
    K = len(lags)
    gw, gA = np.zeros(K), np.zeros((D, D))
    dX = np.zeros((n, T, D)) if need_dx else np.zeros((0, 0, 0))
    _bwd(X, np.ascontiguousarray(lags, dtype=np.int64), np.ascontiguousarray(A, dtype=np.float64), al, u, nrm,
         np.ascontiguousarray(du, dtype=np.float64), bool(use_bil), bool(softmax), bool(normalise), bool(need_dx),
         gw, gA, dX)
    return gw, gA, (dX if need_dx else None)


@njit(cache=True, error_model="numpy")  # a non-finite value propagates (the run stops as diverged)
def _readout(U, x, y, p, c, a, members, sizes, log_cap, loss_kind, want_grad, logy, dU, gc, ga):
    n, T, H, Vm = U.shape
    L = T - 1
    nS = c.shape[0]
    S = y.shape[1]
    C = 0.0
    for s in range(nS):
        C += c[s] * c[s]
    g = np.zeros((L, H))
    prods = np.zeros((L, nS))
    K = np.zeros(L)
    ez = np.zeros(L)
    me = np.zeros(S)
    wy = np.zeros(S)
    dg = np.zeros((L, H))
    total = 0.0
    gat = 0.0
    for i in range(n):
        for l in range(L):
            for h in range(H):
                acc = 0.0
                for v in range(Vm):
                    acc += U[i, L, h, v] * U[i, l, h, v]
                g[l, h] = acc
            kk = 0.0
            for s in range(nS):
                pr = 1.0
                for q in range(sizes[s]):
                    pr *= g[l, members[s, q]]
                prods[l, s] = pr
                kk += c[s] * c[s] * pr
            K[l] = kk / C
        zmax = -math.inf
        for l in range(L):
            if a * K[l] > zmax:
                zmax = a * K[l]
        tot = 0.0
        for e in range(S):
            me[e] = 0.0
        for l in range(L):
            ez[l] = math.exp(a * K[l] - zmax)
            tot += ez[l]
            me[x[i, l]] += ez[l]
        ltot = math.log(tot)
        for e in range(S):
            logy[i, e] = math.log(me[e]) - ltot if me[e] > 0 else -math.inf
        li, wsum, live = loss_row(logy[i], y[i], p[i], log_cap, loss_kind, wy)
        total += li
        if not want_grad or not live:
            continue
        for l in range(L):
            e = x[i, l]
            dz = ez[l] / tot * wsum - wy[e] * ez[l] / me[e]
            gat += K[l] * dz
            dK = a * dz
            for s in range(nS):
                gc[s] += 2.0 * c[s] * dK * (prods[l, s] - K[l]) / C
            for h in range(H):
                dg[l, h] = 0.0
            for s in range(nS):
                for q in range(sizes[s]):
                    h = members[s, q]
                    pr = 1.0
                    for r in range(sizes[s]):
                        if r != q:
                            pr *= g[l, members[s, r]]
                    dg[l, h] += c[s] * c[s] / C * pr * dK
            for h in range(H):
                dgh = dg[l, h]
                if dgh != 0.0:
                    for v in range(Vm):
                        dU[i, l, h, v] += dgh * U[i, L, h, v]
                        dU[i, L, h, v] += dgh * U[i, l, h, v]
    ga[0] = gat
    return total


def readout_attention(U, x, y, p, c, a, members, sizes, log_cap, want_grad, loss_kind=0):
    """The selector and the attention read-out of :mod:`meanfield.engine.twolayer_net`, fused.

    K(l) = sum_S c_S^2 prod_{h in S} <U[L, h], U[l, h]> / sum_S c_S^2, log y_hat_e = lse_{x_l = e} a K - lse a K,
    the loss sum_n p_n sum_e y_ne min(-log y_hat_ne, log_cap) (``loss_kind`` 1: the cross-entropy of
    softmax(y_hat), :func:`loss_row`) and its gradients.

    Parameters
    ----------
    U : ndarray, shape (n, L + 1, H, Vmax)
        The head outputs (zero-padded to the widest).
    x : ndarray of int, shape (n, >= L)
    y : ndarray, shape (n, S)
    p : ndarray, shape (n,)
    c : ndarray, shape (nS,)
    a : float
    members : ndarray of int, shape (nS, max(D, 1))
        The heads of each subset (padded).
    sizes : ndarray of int, shape (nS,)
    log_cap : float
    want_grad : bool
    loss_kind : int
        0: the guarded cross-entropy of y_hat; 1: of softmax(y_hat) (:data:`LOSS_KINDS`).

    Returns
    -------
    loss : float
    logy : ndarray, shape (n, S)
    dU, gc, ga : ndarray
        Gradients with respect to U, c and a (zeros when not ``want_grad``).

    Example
    -------
    >>> U = np.zeros((1, 3, 1, 2)); x = np.array([[0, 1]]); y = np.array([[1.0, 0.0]])
    >>> out = readout_attention(U, x, y, np.ones(1), np.ones(1), 1.0, np.zeros((1, 1), np.int64), np.zeros(1, np.int64),
    ...                         690.0, True)
    >>> round(out[0], 12) == round(float(np.log(2)), 12)
    True
    """
    U = np.ascontiguousarray(U, dtype=np.float64)
    n, T, H, Vm = U.shape
    S = y.shape[1]
    logy = np.zeros((n, S))
    dU = np.zeros_like(U)
    gc = np.zeros(len(c))
    ga = np.zeros(1)
    loss = _readout(U, np.ascontiguousarray(x, dtype=np.int64), np.ascontiguousarray(y, dtype=np.float64),
                    np.ascontiguousarray(p, dtype=np.float64), np.ascontiguousarray(c, dtype=np.float64), float(a),
                    np.ascontiguousarray(members, dtype=np.int64), np.ascontiguousarray(sizes, dtype=np.int64),
                    float(log_cap), int(loss_kind), bool(want_grad), logy, dU, gc, ga)
    return float(loss), logy, dU, gc, float(ga[0])
