"""Numba kernels of the induction-head model: batch loss and gradients, the
GD map and the flow right-hand side. Pure functions over arrays, no hidden
state; the mathematics, the parameter layout and the log(0) guard are those
of ``meanfield.models.induction.model`` (the oracle they are tested against).

Two equivalent paths compute the copier features:

* **pattern** (default when the number of window patterns
  ``n_pat = sum_{m=0}^{M} d**m`` is at most :data:`PATTERN_MAX`): u_h(l)
  depends on the parameters only through w[h] and on the data only through
  the tuple of tokens its existing lags see, coded once per data set as an
  integer (:func:`pattern_codes`; the per-sequence precomputation). Per call
  the unit vectors of every pattern and their Gram matrices
  ``G_h[q, p] = <U_h[q], U_h[p]>`` are tabulated, so the similarity of a
  position is one table lookup, and the backward pass only accumulates
  d loss / d G_h (a (n_pat, n_pat) table per head) over the batch, which is
  pushed through the normalisation and the RPE softmax once per call.
* **direct**: builds s_h(l), u_h(l) per position from the tokens (any d, M).

Pattern code of head h at 1-based position l with m = m_h(l) existing lags:
``offset[m] + sum_{j<m} x_{l - first[h] - j} d**j``, ``offset[m] = sum_{k<m} d**k``
(codes (N, H, L+1) int32, column l-1).

Stop criteria (``crit_kind``) evaluated inside :func:`gd_advance` before
each step, compared with ``crit_thresh`` by ``crit_op`` (+1: >=, -1: <=):
see :data:`CRITERIA`.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from meanfield.core.activations import accept_step

#: pattern path when n_pat <= PATTERN_MAX (the Gram tables are H * n_pat^2 doubles)
PATTERN_MAX = 512

#: stop criteria: name -> kind. loss: mean loss on the training batch;
#: grad_norm / grad_c / grad_w / grad_a: Euclidean norm of the full gradient /
#: of its c, w, a part; a: the classifier scalar; c_top: max_S c_S^2 / sum c^2;
#: rpe_top: min over heads of the largest full-window RPE softmax weight.
#: training losses: name -> loss_kind of the kernels. "nll": the paper's
#: cross-entropy -log y_hat[x_{L+1}] (guarded, see ``model``); "official-ce":
#: the official code's choice, torch's CrossEntropyLoss applied to the model's
#: output y_hat as if it were logits, i.e. -log softmax(y_hat)[x_{L+1}]
#: (bounded between log d - 1 and log d + 1, never clipped).
LOSSES = {"nll": 0, "official-ce": 1}

from meanfield.core.criteria import INDUCTION_CRITERIA as CRITERIA  # noqa: F401,E402


def n_patterns(d: int, M: int) -> int:
    return sum(d ** m for m in range(M + 1))


@njit(cache=True, error_model="numpy")
def pattern_codes(tokens, first, M, d):
    """codes (N, H, L+1) int32 of every (sequence, head, position); see module docstring."""
    N, Lp1 = tokens.shape
    H = first.shape[0]
    offset = np.zeros(M + 1, dtype=np.int64)
    for m in range(1, M + 1):
        offset[m] = offset[m - 1] + d ** (m - 1)
    codes = np.empty((N, H, Lp1), dtype=np.int32)
    for n in range(N):
        for h in range(H):
            f = first[h]
            for i in range(Lp1):  # position l = i + 1
                m = i + 1 - f
                if m < 0:
                    m = 0
                if m > M:
                    m = M
                code = 0
                base = 1
                for j in range(m):
                    code += tokens[n, i - f - j] * base
                    base *= d
                codes[n, h, i] = offset[m] + code
    return codes


@njit(cache=True, error_model="numpy")
def _prefix_softmax(w, M, P):
    """P[h, m, j] = softmax over j < m of w[h, :m] (zero for j >= m)."""
    H = w.shape[0]
    P[:] = 0.0
    for h in range(H):
        for m in range(1, M + 1):
            mx = -np.inf
            for j in range(m):
                if w[h, j] > mx:
                    mx = w[h, j]
            s = 0.0
            for j in range(m):
                P[h, m, j] = np.exp(w[h, j] - mx)
                s += P[h, m, j]
            for j in range(m):
                P[h, m, j] /= s


@njit(cache=True, error_model="numpy")
def _classifier(g, x, L, a, c2, C, members, sizes, loss_kind, log_cap, want_grad, Kbuf, ebuf, tmp, gam, gcacc, yb):
    """Selector + classifier + loss of one sequence given g (H, L).

    ``loss_kind`` 0 (LOSSES["nll"]): -log y_hat[x_{L+1}], guarded (clipped at
    log_cap); 1 (LOSSES["official-ce"]): cross-entropy of softmax(y_hat)
    against x_{L+1}, i.e. logsumexp_e y_hat[e] - y_hat[x_{L+1}] (never
    clipped). ``yb``: scratch (d,).

    Returns (loss, d loss/d a, clipped). With want_grad and not clipped fills
    gam (H, L) = d loss / d g and adds sum_l dK_l (P_S(l) - K_l) to gcacc[S]
    (times 2 c_S / C later). Kbuf, ebuf, tmp: scratch (L,). Inner loops run
    over positions (contiguous) so that they vectorise."""
    nS = c2.shape[0]
    H = g.shape[0]
    tgt = x[L]
    invC = 1.0 / C
    for i in range(L):
        Kbuf[i] = 0.0
    for S in range(nS):
        sz = sizes[S]
        cs = c2[S] * invC
        if sz == 0:
            for i in range(L):
                Kbuf[i] += cs
        elif sz == 1:
            g0 = g[members[S, 0]]
            for i in range(L):
                Kbuf[i] += cs * g0[i]
        elif sz == 2:
            g0 = g[members[S, 0]]
            g1 = g[members[S, 1]]
            for i in range(L):
                Kbuf[i] += cs * g0[i] * g1[i]
        else:
            for i in range(L):
                tmp[i] = cs
            for k in range(sz):
                gk = g[members[S, k]]
                for i in range(L):
                    tmp[i] *= gk[i]
            for i in range(L):
                Kbuf[i] += tmp[i]
    mx = -np.inf
    for i in range(L):
        z = a * Kbuf[i]
        if z > mx:
            mx = z
    sa = 0.0
    sm = 0.0
    for i in range(L):
        ev = np.exp(a * Kbuf[i] - mx)
        ebuf[i] = ev
        sa += ev
        if x[i] == tgt:
            sm += ev
    da = 0.0
    bk = 0.0
    inv_sa = 1.0 / sa
    if loss_kind == 1:
        # y_hat = sum_l p_l e(x_l); loss = lse_e(y_hat) - y_hat[tgt]
        d = yb.shape[0]
        for e in range(d):
            yb[e] = 0.0
        for i in range(L):
            yb[x[i]] += ebuf[i] * inv_sa
        ym = yb[0]
        for e in range(1, d):
            if yb[e] > ym:
                ym = yb[e]
        se = 0.0
        for e in range(d):
            se += np.exp(yb[e] - ym)
        nll = ym + np.log(se) - yb[tgt]
        if not want_grad:
            return nll, 0.0, False
        # yb <- r_e = softmax(y_hat)_e - 1{e = tgt}; rho = r . y_hat
        rho = 0.0
        for e in range(d):
            pe = np.exp(yb[e] - ym) / se
            if e == tgt:
                pe -= 1.0
            rho += pe * yb[e]
            yb[e] = pe
        # ebuf <- dK = a p_l (r[x_l] - rho)
        for i in range(L):
            r = ebuf[i] * inv_sa * (yb[x[i]] - rho)
            da += r * Kbuf[i]
            ebuf[i] = a * r
            bk += a * r * Kbuf[i]
    else:
        if sm == 0.0:
            return log_cap, 0.0, True
        nll = np.log(sa) - np.log(sm)
        if not nll < log_cap:
            return log_cap, 0.0, True
        if not want_grad:
            return nll, 0.0, False
        inv_sm = 1.0 / sm
        # ebuf <- dK = a (p - q)
        for i in range(L):
            r = ebuf[i] * inv_sa
            if x[i] == tgt:
                r -= ebuf[i] * inv_sm
            da += r * Kbuf[i]
            ebuf[i] = a * r
            bk += a * r * Kbuf[i]
    for h in range(H):
        gh = gam[h]
        for i in range(L):
            gh[i] = 0.0
    for S in range(nS):
        sz = sizes[S]
        coef = c2[S] * invC
        acc = 0.0
        if sz == 0:
            for i in range(L):
                acc += ebuf[i]
        elif sz == 1:
            h0 = members[S, 0]
            g0 = g[h0]
            gm0 = gam[h0]
            for i in range(L):
                acc += ebuf[i] * g0[i]
                gm0[i] += coef * ebuf[i]
        elif sz == 2:
            h0 = members[S, 0]
            h1 = members[S, 1]
            g0 = g[h0]
            g1 = g[h1]
            gm0 = gam[h0]
            gm1 = gam[h1]
            for i in range(L):
                e = ebuf[i]
                acc += e * g0[i] * g1[i]
                gm0[i] += coef * e * g1[i]
                gm1[i] += coef * e * g0[i]
        else:
            for i in range(L):
                tmp[i] = ebuf[i]
            for k in range(sz):
                gk = g[members[S, k]]
                for i in range(L):
                    tmp[i] *= gk[i]
            for i in range(L):
                acc += tmp[i]
            for k in range(sz):
                gmk = gam[members[S, k]]
                for i in range(L):
                    o = coef * ebuf[i]
                    for k2 in range(sz):
                        if k2 != k:
                            o *= g[members[S, k2], i]
                    gmk[i] += o
        gcacc[S] += acc - bk
    return nll, da, False


@njit(cache=True, error_model="numpy")
def _softmax_backward(P, A, M, gw, scale):
    """gw[h, j] += scale * sum_m P[h,m,j] (A[h,m,j] - sum_k P[h,m,k] A[h,m,k])."""
    H = P.shape[0]
    for h in range(H):
        for m in range(1, M + 1):
            dot = 0.0
            for k in range(m):
                dot += P[h, m, k] * A[h, m, k]
            for j in range(m):
                gw[h, j] += scale * P[h, m, j] * (A[h, m, j] - dot)


@njit(cache=True, error_model="numpy")
def _assemble_grad(P, A, M, c, C, gcacc, ga, N, grad):
    """grad = [dLoss/dc (nS), dLoss/dw (H*M, row-major), dLoss/da] from the
    accumulated adjoints of both kernel paths (mean over N sequences)."""
    H = P.shape[0]
    nS = c.shape[0]
    gw = np.zeros((H, M))
    _softmax_backward(P, A, M, gw, 1.0 / N)
    for S in range(nS):
        grad[S] = 2.0 * c[S] / C * gcacc[S] / N
    for h in range(H):
        for j in range(M):
            grad[nS + h * M + j] = gw[h, j]
    grad[nS + H * M] = ga / N


@njit(cache=True, error_model="numpy")
def _loss_grad_pattern(theta, tokens, codes, first, M, d, members, sizes, loss_kind, log_cap, want_grad, grad):
    N, Lp1 = tokens.shape
    L = Lp1 - 1
    H = first.shape[0]
    nS = members.shape[0]
    c = theta[:nS]
    w = theta[nS: nS + H * M].reshape((H, M))
    a = theta[nS + H * M]
    c2 = c * c
    C = c2.sum()
    # tables
    npat = 0
    for m in range(M + 1):
        npat += d ** m
    P = np.empty((H, M + 1, M))
    _prefix_softmax(w, M, P)
    plen = np.empty(npat, dtype=np.int64)
    digit = np.zeros((npat, max(M, 1)), dtype=np.int64)
    p = 0
    for m in range(M + 1):
        for code in range(d ** m):
            plen[p] = m
            r = code
            for j in range(m):
                digit[p, j] = r % d
                r //= d
            p += 1
    U = np.zeros((H, npat, d))
    invn = np.zeros((H, npat))
    for h in range(H):
        for p in range(npat):
            m = plen[p]
            if m == 0:
                continue
            for j in range(m):
                U[h, p, digit[p, j]] += P[h, m, j]
            s = 0.0
            for v in range(d):
                s += U[h, p, v] * U[h, p, v]
            inv = 1.0 / np.sqrt(s)
            invn[h, p] = inv
            for v in range(d):
                U[h, p, v] *= inv
    G = np.empty((H, npat, npat))
    for h in range(H):
        for q in range(npat):
            for p in range(q, npat):
                s = 0.0
                for v in range(d):
                    s += U[h, q, v] * U[h, p, v]
                G[h, q, p] = s
                G[h, p, q] = s
    # batch
    g = np.empty((H, L))
    gam = np.empty((H, L))
    Kbuf = np.empty(L)
    ebuf = np.empty(L)
    tmp = np.empty(L)
    yb = np.empty(d)
    gcacc = np.zeros(nS)
    barG = np.zeros((H, npat, npat)) if want_grad else np.zeros((H, 1, 1))
    q = np.empty(H, dtype=np.int64)
    loss = 0.0
    ga = 0.0
    nclip = 0
    for n in range(N):
        x = tokens[n]
        cn = codes[n]
        for h in range(H):
            qh = cn[h, L]
            q[h] = qh
            Gq = G[h, qh]
            for i in range(L):
                g[h, i] = Gq[cn[h, i]]
        nll, da, clipped = _classifier(g, x, L, a, c2, C, members, sizes, loss_kind, log_cap, want_grad,
                                       Kbuf, ebuf, tmp, gam, gcacc, yb)
        loss += nll
        if clipped:
            nclip += 1
            continue
        if not want_grad:
            continue
        ga += da
        for h in range(H):
            bq = barG[h, q[h]]
            for i in range(L):
                bq[cn[h, i]] += gam[h, i]
    if not want_grad:
        return loss / N, nclip
    # backward through the tables: G_h = U_h U_h^T, U = s / ||s||, s = sum_j P e(t_j)
    A = np.zeros((H, M + 1, M))
    barU = np.empty(d)
    for h in range(H):
        for p in range(npat):
            m = plen[p]
            if m == 0:
                continue
            for v in range(d):
                barU[v] = 0.0
            for q2 in range(npat):
                b = barG[h, q2, p] + barG[h, p, q2]
                if b != 0.0:
                    for v in range(d):
                        barU[v] += b * U[h, q2, v]
            dot = 0.0
            for v in range(d):
                dot += U[h, p, v] * barU[v]
            for j in range(m):
                t = digit[p, j]
                A[h, m, j] += (barU[t] - U[h, p, t] * dot) * invn[h, p]
    _assemble_grad(P, A, M, c, C, gcacc, ga, N, grad)
    return loss / N, nclip


@njit(cache=True, error_model="numpy")
def _loss_grad_direct(theta, tokens, first, M, d, members, sizes, loss_kind, log_cap, want_grad, grad):
    N, Lp1 = tokens.shape
    L = Lp1 - 1
    H = first.shape[0]
    nS = members.shape[0]
    c = theta[:nS]
    w = theta[nS: nS + H * M].reshape((H, M))
    a = theta[nS + H * M]
    c2 = c * c
    C = c2.sum()
    P = np.empty((H, M + 1, M))
    _prefix_softmax(w, M, P)
    mcount = np.empty((H, Lp1), dtype=np.int64)
    for h in range(H):
        for i in range(Lp1):
            m = i + 1 - first[h]
            mcount[h, i] = 0 if m < 0 else (M if m > M else m)
    u = np.empty((H, Lp1, d))
    invn = np.empty((H, Lp1))
    g = np.empty((H, L))
    gam = np.empty((H, L))
    Kbuf = np.empty(L)
    ebuf = np.empty(L)
    tmp = np.empty(L)
    yb = np.empty(d)
    gcacc = np.zeros(nS)
    A = np.zeros((H, M + 1, M))
    baru = np.empty(d)
    loss = 0.0
    ga = 0.0
    nclip = 0
    for n in range(N):
        x = tokens[n]
        for h in range(H):
            f = first[h]
            for i in range(Lp1):
                m = mcount[h, i]
                ui = u[h, i]
                for v in range(d):
                    ui[v] = 0.0
                if m == 0:
                    invn[h, i] = 0.0
                    continue
                for j in range(m):
                    ui[x[i - f - j]] += P[h, m, j]
                s = 0.0
                for v in range(d):
                    s += ui[v] * ui[v]
                inv = 1.0 / np.sqrt(s)
                invn[h, i] = inv
                for v in range(d):
                    ui[v] *= inv
            uq = u[h, L]
            for i in range(L):
                s = 0.0
                for v in range(d):
                    s += uq[v] * u[h, i, v]
                g[h, i] = s
        nll, da, clipped = _classifier(g, x, L, a, c2, C, members, sizes, loss_kind, log_cap, want_grad,
                                       Kbuf, ebuf, tmp, gam, gcacc, yb)
        loss += nll
        if clipped:
            nclip += 1
            continue
        if not want_grad:
            continue
        ga += da
        for h in range(H):
            f = first[h]
            uq = u[h, L]
            for v in range(d):
                baru[v] = 0.0
            for i in range(L):
                gm = gam[h, i]
                m = mcount[h, i]
                if m == 0:
                    continue
                ui = u[h, i]
                for v in range(d):
                    baru[v] += gm * ui[v]
                # bar u_h(l) = gm * uq; <u_l, bar u_l> = gm * g
                gg = gm * g[h, i]
                inv = invn[h, i]
                for j in range(m):
                    t = x[i - f - j]
                    A[h, m, j] += (gm * uq[t] - ui[t] * gg) * inv
            m = mcount[h, L]
            if m > 0:
                dot = 0.0
                for v in range(d):
                    dot += uq[v] * baru[v]
                inv = invn[h, L]
                for j in range(m):
                    t = x[L - f - j]
                    A[h, m, j] += (baru[t] - uq[t] * dot) * inv
    if not want_grad:
        return loss / N, nclip
    _assemble_grad(P, A, M, c, C, gcacc, ga, N, grad)
    return loss / N, nclip


@njit(cache=True, error_model="numpy")
def loss_grad(theta, tokens, codes, use_pattern, first, M, d, members, sizes, loss_kind, log_cap, want_grad, grad):
    """Mean loss over ``tokens`` (N, L+1) and (if ``want_grad``) its gradient
    into ``grad`` (like theta). ``codes``: :func:`pattern_codes` of the same
    tokens when ``use_pattern`` (any array otherwise); ``loss_kind``: see
    :data:`LOSSES`. Returns (loss, number of sequences the log(0) guard
    clipped)."""
    if use_pattern:
        return _loss_grad_pattern(theta, tokens, codes, first, M, d, members, sizes, loss_kind, log_cap, want_grad,
                                  grad)
    return _loss_grad_direct(theta, tokens, first, M, d, members, sizes, loss_kind, log_cap, want_grad, grad)


@njit(cache=True, error_model="numpy")
def criterion_value(kind, loss, theta, grad, nS, H, M):
    """The quantity a stop criterion compares (see :data:`CRITERIA`)."""
    if kind == 1:
        return loss
    if kind == 2 or kind >= 6:
        lo = 0
        hi = theta.shape[0]
        if kind == 6:
            hi = nS
        elif kind == 7:
            lo = nS
            hi = nS + H * M
        elif kind == 8:
            lo = nS + H * M
        s = 0.0
        for i in range(lo, hi):
            s += grad[i] * grad[i]
        return np.sqrt(s)
    if kind == 3:
        return theta[nS + H * M]
    if kind == 4:
        C = 0.0
        mx = 0.0
        for S in range(nS):
            v = theta[S] * theta[S]
            C += v
            if v > mx:
                mx = v
        return mx / C
    if kind == 5:
        worst = np.inf
        for h in range(H):
            mx = -np.inf
            for j in range(M):
                if theta[nS + h * M + j] > mx:
                    mx = theta[nS + h * M + j]
            s = 0.0
            for j in range(M):
                s += np.exp(theta[nS + h * M + j] - mx)
            top = 1.0 / s
            if top < worst:
                worst = top
        return worst
    return np.nan


@njit(cache=True, error_model="numpy")
def gd_advance(theta, nsteps, rates, tokens, codes, use_pattern, first, M, d, members, sizes, loss_kind, log_cap,
               crit_kind, crit_op, crit_thresh, max_abs):
    """Up to ``nsteps`` GD steps on the fixed batch, in place:
    theta[group] -= rates[group] * grad[group] with groups (c, w, a).

    Before each step the criterion is checked at the current state. Returns
    (steps_done, code, loss at the final state): code 0 all steps done,
    1 criterion holds, 2 non-finite loss or state, 3 a state entry would
    exceed ``max_abs`` in absolute value; with codes 2 and 3 ``theta`` keeps
    the last accepted state."""
    nS = members.shape[0]
    H = first.shape[0]
    n = theta.shape[0]
    grad = np.zeros(n)
    new = np.empty(n)
    k = 0
    while True:
        loss, _ = loss_grad(theta, tokens, codes, use_pattern, first, M, d, members, sizes, loss_kind, log_cap, True,
                            grad)
        if not np.isfinite(loss):
            return k, 2, loss
        if crit_kind != 0:
            cv = criterion_value(crit_kind, loss, theta, grad, nS, H, M)
            if (crit_op > 0 and cv >= crit_thresh) or (crit_op < 0 and cv <= crit_thresh):
                return k, 1, loss
        if k == nsteps:
            return k, 0, loss
        for i in range(n):
            r = rates[0] if i < nS else (rates[1] if i < nS + H * M else rates[2])
            new[i] = theta[i] - r * grad[i]
        code = accept_step(theta, new, max_abs)
        if code != 0:
            return k, code, loss
        k += 1


def log_cap_of(yhat_floor: float) -> float:
    return -math.log(yhat_floor)


# ------------------------------------------------------------ Python wrappers


class Batch:
    """A batch prepared for the kernels: tokens plus the per-sequence pattern
    codes (when the pattern path applies), the architecture arrays and the
    training loss (``loss``, a key of :data:`LOSSES`; ``args()`` passes its
    kernel code). Immutable after construction; ``path`` is "pattern" or
    "direct"."""

    __slots__ = ("tokens", "codes", "use_pattern", "first", "M", "d", "members", "sizes", "nS", "H", "loss", "loss_kind")

    def __init__(self, tokens, arch, path: str = "auto", loss: str = "nll"):
        tokens = np.ascontiguousarray(tokens, dtype=np.int64)
        if tokens.ndim != 2 or tokens.shape[1] < 2:
            raise ValueError(f"tokens: need shape (N, L+1) with L >= 1, got {tokens.shape}")
        if path not in ("auto", "pattern", "direct"):
            raise ValueError(f"path: auto | pattern | direct, got {path!r}")
        if loss not in LOSSES:
            raise ValueError(f"loss: {' | '.join(LOSSES)}, got {loss!r}")
        self.loss = loss
        self.loss_kind = LOSSES[loss]
        self.tokens = tokens
        self.first = np.asarray(arch.first, dtype=np.int64)
        self.M = int(arch.M)
        self.d = int(arch.d)
        self.members = np.ascontiguousarray(arch.members)
        self.sizes = np.ascontiguousarray(arch.sizes)
        self.nS = int(arch.nS)
        self.H = int(arch.H)
        if path == "auto":
            path = "pattern" if n_patterns(self.d, self.M) <= PATTERN_MAX else "direct"
        self.use_pattern = path == "pattern"
        if self.use_pattern:
            self.codes = pattern_codes(tokens, self.first, self.M, self.d)
        else:
            self.codes = np.zeros((0, 0, 0), dtype=np.int32)

    @property
    def path(self) -> str:
        return "pattern" if self.use_pattern else "direct"

    @property
    def N(self) -> int:
        return int(self.tokens.shape[0])

    def args(self):
        return (self.tokens, self.codes, self.use_pattern, self.first, self.M, self.d, self.members, self.sizes,
                self.loss_kind)

    def subset(self, idx) -> "Batch":
        """The sequences ``idx`` (index array or slice) as a batch, reusing the pattern codes."""
        b = object.__new__(Batch)
        for k in Batch.__slots__:
            setattr(b, k, getattr(self, k))
        b.tokens = np.ascontiguousarray(self.tokens[idx])
        if self.use_pattern:
            b.codes = np.ascontiguousarray(self.codes[idx])
        return b


def batch_loss_grad(theta, batch: Batch, yhat_floor: float = 1e-300, want_grad: bool = True):
    """(mean loss, gradient (new array; zeros when not want_grad), number of clipped sequences)."""
    theta = np.ascontiguousarray(theta, dtype=np.float64)
    grad = np.zeros_like(theta)
    loss, nclip = loss_grad(theta, *batch.args(), log_cap_of(yhat_floor), bool(want_grad), grad)
    return float(loss), grad, int(nclip)


def batch_loss(theta, batch: Batch, yhat_floor: float = 1e-300) -> float:
    return batch_loss_grad(theta, batch, yhat_floor, want_grad=False)[0]
