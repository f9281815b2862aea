"""Numba kernels of the reduced mixture dynamics: pure functions over arrays.

State layout (one flat float64 vector, see :func:`layout`): for heads
h in (0: "+", 1: "-") and P = 2K features,

    S[h] (P, P)   scores            S[a, b] = e_a^T W_K^T W_Q e_b (a key, b query)
    A[h] (P, P)   key self-scores   E^T W_K^T W_K E
    B[h] (P, P)   query self-scores E^T W_Q^T W_Q E
    w[h] (P,)     neuron alignments E^T w

stored as ``[S (2,P,P), A (2,P,P), B (2,P,P), w (2,P)]``.

Forward pass of head h on sample n (tokens ``sgn_i e_{idx_i}``):
    logits[i, l] = sgn_i sgn_l S[idx_i, idx_l]     (key i, query l)
    p[l, i]      = softmax_i logits[i, l]
    u_h          = (1/L) sum_l sum_i p[l, i] sgn_i w[idx_i]
    f            = relu(u_+) - relu(u_-);  margin = y f
    Loss         = sum_n weight_n log(1 + exp(-margin_n))
Backward: G_h = dLoss/dS_h and dw_h = dLoss/dw~_h, with relu'(0) = ``r0``.

The exact GD map and the flow right-hand side are in the module docstring of
``meanfield.mixture`` and in ``derivations/``; these kernels are tested equal
to the sympy-generated code and to the explicit finite-width network.

Stop criteria evaluated inside :func:`gd_advance` (``crit_kind``):
    0 none, 1 loss, 2 min margin of consistent samples, 3 min margin of
    inconsistent samples, 4 min margin of all samples, 5 norm of dLoss/dw~;
compared with ``crit_thresh`` by ``crit_op`` (+1: >=, -1: <=).
"""

from __future__ import annotations

import numpy as np
from numba import njit

HEAD_SIGN = (1.0, -1.0)
CRITERIA = {"loss": 1, "consistent_margin": 2, "inconsistent_margin": 3, "min_margin": 4, "grad_w": 5}


def layout(P: int) -> dict[str, tuple[int, int, tuple[int, ...]]]:
    """Offsets of each block in the flat state: name -> (start, stop, shape)."""
    n2 = 2 * P * P
    return {
        "S": (0, n2, (2, P, P)),
        "A": (n2, 2 * n2, (2, P, P)),
        "B": (2 * n2, 3 * n2, (2, P, P)),
        "w": (3 * n2, 3 * n2 + 2 * P, (2, P)),
    }


def state_size(P: int) -> int:
    return 6 * P * P + 2 * P


def pack(S, A, B, w) -> np.ndarray:
    """Flat state from blocks S, A, B (2, P, P) and w (2, P)."""
    return np.concatenate([np.ravel(S), np.ravel(A), np.ravel(B), np.ravel(w)]).astype(np.float64)


def unpack(y: np.ndarray):
    """Views (S, A, B, w) of a flat state (or (T, n) stack of states)."""
    n = y.shape[-1]
    P = int(round((-2 + np.sqrt(4 + 24 * n)) / 12))
    lead = y.shape[:-1]
    out = []
    for name in ("S", "A", "B", "w"):
        a, b, shape = layout(P)[name]
        out.append(y[..., a:b].reshape(lead + shape))
    return tuple(out)


@njit(cache=True)
def _relu_prime(u, r0):
    if u > 0.0:
        return 1.0
    if u < 0.0:
        return 0.0
    return r0


@njit(cache=True)
def _softplus_neg(z):
    # log(1 + exp(-z)), stable for both signs
    if z > 0.0:
        return np.log1p(np.exp(-z))
    return -z + np.log1p(np.exp(z))


@njit(cache=True)
def _sigmoid_neg(z):
    # 1 / (1 + exp(z)) = -l'(z), stable
    if z > 0.0:
        e = np.exp(-z)
        return e / (1.0 + e)
    return 1.0 / (1.0 + np.exp(z))


@njit(cache=True)
def forward(y, P, idx, sgn, lab, weight, u_out, margin_out):
    """Pre-activations u (n, 2), margins (n,) and the loss at state ``y``."""
    n, L = idx.shape
    n2 = P * P
    woff = 6 * n2
    logit = np.empty(L)
    loss = 0.0
    for s in range(n):
        f = 0.0
        for h in range(2):
            So = h * n2
            wo = woff + h * P
            u = 0.0
            for l in range(L):
                mx = -np.inf
                for i in range(L):
                    z = sgn[s, i] * sgn[s, l] * y[So + idx[s, i] * P + idx[s, l]]
                    logit[i] = z
                    if z > mx:
                        mx = z
                den = 0.0
                num = 0.0
                for i in range(L):
                    e = np.exp(logit[i] - mx)
                    den += e
                    num += e * sgn[s, i] * y[wo + idx[s, i]]
                u += num / den
            u /= L
            u_out[s, h] = u
            if u > 0.0:
                f += (1.0 - 2.0 * h) * u
        m = lab[s] * f
        margin_out[s] = m
        loss += weight[s] * _softplus_neg(m)
    return loss


@njit(cache=True)
def backward(y, P, idx, sgn, lab, weight, r0, u, margin, G, dw):
    """G = dLoss/dS (2, P, P) and dw = dLoss/dw~ (2, P) given forward's u, margin."""
    n, L = idx.shape
    n2 = P * P
    woff = 6 * n2
    G[:] = 0.0
    dw[:] = 0.0
    logit = np.empty(L)
    p = np.empty(L)
    for s in range(n):
        g = _sigmoid_neg(margin[s])
        for h in range(2):
            coef = -weight[s] * g * lab[s] * (1.0 - 2.0 * h) * _relu_prime(u[s, h], r0) / L
            if coef == 0.0:
                continue
            So = h * n2
            wo = woff + h * P
            for l in range(L):
                mx = -np.inf
                for i in range(L):
                    z = sgn[s, i] * sgn[s, l] * y[So + idx[s, i] * P + idx[s, l]]
                    logit[i] = z
                    if z > mx:
                        mx = z
                den = 0.0
                for i in range(L):
                    p[i] = np.exp(logit[i] - mx)
                    den += p[i]
                vbar = 0.0
                for i in range(L):
                    p[i] /= den
                    vbar += p[i] * sgn[s, i] * y[wo + idx[s, i]]
                for i in range(L):
                    vi = sgn[s, i] * y[wo + idx[s, i]]
                    G[h, idx[s, i], idx[s, l]] += coef * p[i] * (vi - vbar) * sgn[s, i] * sgn[s, l]
                    dw[h, idx[s, i]] += coef * p[i] * sgn[s, i]


@njit(cache=True)
def loss_and_grads(y, P, idx, sgn, lab, weight, r0):
    """Convenience (allocating): (loss, G (2,P,P), dw (2,P), margin (n,), u (n,2))."""
    n = idx.shape[0]
    u = np.empty((n, 2))
    margin = np.empty(n)
    G = np.empty((2, P, P))
    dw = np.empty((2, P))
    loss = forward(y, P, idx, sgn, lab, weight, u, margin)
    backward(y, P, idx, sgn, lab, weight, r0, u, margin, G, dw)
    return loss, G, dw, margin, u


@njit(cache=True)
def _attention_update(y, out, P, G, eta, exact):
    """out[S, A, B] = the GD map (exact=True, with the eta^2 terms) or the flow
    right-hand side times eta (exact=False: out = -eta * (...), no base state)."""
    n2 = P * P
    T = np.empty((3, P, P))  # second-order scratch: S^T G, B G^T, A G (O(P^3) per head)
    for h in range(2):
        So = h * n2
        Ao = 2 * n2 + h * n2
        Bo = 4 * n2 + h * n2
        if exact:
            for c in range(P):
                for b in range(P):
                    tS = 0.0
                    tA = 0.0
                    tB = 0.0
                    for e in range(P):
                        tS += y[So + e * P + c] * G[h, e, b]  # (S^T G)[c, b]
                        tA += y[Bo + c * P + e] * G[h, b, e]  # (B G^T)[c, b]
                        tB += y[Ao + c * P + e] * G[h, e, b]  # (A G)[c, b]
                    T[0, c, b] = tS
                    T[1, c, b] = tA
                    T[2, c, b] = tB
        for a in range(P):
            for b in range(P):
                # first order: S: A G + G B ; A: G S^T + S G^T ; B: G^T S + S^T G
                dS = 0.0
                dA = 0.0
                dB = 0.0
                for c in range(P):
                    dS += y[Ao + a * P + c] * G[h, c, b] + G[h, a, c] * y[Bo + c * P + b]
                    dA += G[h, a, c] * y[So + b * P + c] + y[So + a * P + c] * G[h, b, c]
                    dB += G[h, c, a] * y[So + c * P + b] + y[So + c * P + a] * G[h, c, b]
                if exact:
                    # second order: S: G S^T G ; A: G B G^T ; B: G^T A G
                    sS = 0.0
                    sA = 0.0
                    sB = 0.0
                    for c in range(P):
                        sS += G[h, a, c] * T[0, c, b]
                        sA += G[h, a, c] * T[1, c, b]
                        sB += G[h, c, a] * T[2, c, b]
                    out[So + a * P + b] = y[So + a * P + b] - eta * dS + eta * eta * sS
                    out[Ao + a * P + b] = y[Ao + a * P + b] - eta * dA + eta * eta * sA
                    out[Bo + a * P + b] = y[Bo + a * P + b] - eta * dB + eta * eta * sB
                else:
                    out[So + a * P + b] = -eta * dS
                    out[Ao + a * P + b] = -eta * dA
                    out[Bo + a * P + b] = -eta * dB


@njit(cache=True)
def flow_rhs(y, out, P, idx, sgn, lab, weight, r0, train_w, train_att):
    """Gradient-flow right-hand side dy/dt into ``out``; returns the loss."""
    n = idx.shape[0]
    u = np.empty((n, 2))
    margin = np.empty(n)
    G = np.empty((2, P, P))
    dw = np.empty((2, P))
    loss = forward(y, P, idx, sgn, lab, weight, u, margin)
    backward(y, P, idx, sgn, lab, weight, r0, u, margin, G, dw)
    n2 = P * P
    if train_att:
        _attention_update(y, out, P, G, 1.0, False)
    else:
        out[: 6 * n2] = 0.0
    for h in range(2):
        for a in range(P):
            out[6 * n2 + h * P + a] = -dw[h, a] if train_w else 0.0
    return loss


@njit(cache=True)
def criterion_value(kind, loss, margin, consistent, dw):
    """The quantity a stop criterion compares (see module docstring)."""
    if kind == 1:
        return loss
    if kind == 5:
        s = 0.0
        for h in range(dw.shape[0]):
            for a in range(dw.shape[1]):
                s += dw[h, a] * dw[h, a]
        return np.sqrt(s)
    v = np.inf
    for s in range(margin.shape[0]):
        if kind == 4 or (kind == 2 and consistent[s]) or (kind == 3 and not consistent[s]):
            if margin[s] < v:
                v = margin[s]
    return v


@njit(cache=True)
def gd_advance(y, nsteps, eta, P, idx, sgn, lab, weight, consistent, r0, train_w, train_att,
               crit_kind, crit_op, crit_thresh, max_abs):
    """Apply up to ``nsteps`` exact GD steps to ``y`` in place.

    Before each step the criterion is checked at the current state; returns
    (steps_done, code, loss_at_final_state) with code 0 = all steps done,
    1 = criterion holds at the final state, 2 = non-finite state or loss,
    3 = a state entry would exceed ``max_abs`` in absolute value (blow-up);
    with codes 2 and 3 ``y`` holds the last accepted state.
    """
    n = idx.shape[0]
    u = np.empty((n, 2))
    margin = np.empty(n)
    G = np.empty((2, P, P))
    dw = np.empty((2, P))
    new = np.empty_like(y)
    n2 = P * P
    woff = 6 * n2
    k = 0
    while True:
        loss = forward(y, P, idx, sgn, lab, weight, u, margin)
        if not np.isfinite(loss):
            return k, 2, loss
        backward(y, P, idx, sgn, lab, weight, r0, u, margin, G, dw)
        if crit_kind != 0:
            c = criterion_value(crit_kind, loss, margin, consistent, dw)
            if (crit_op > 0 and c >= crit_thresh) or (crit_op < 0 and c <= crit_thresh):
                return k, 1, loss
        if k == nsteps:
            return k, 0, loss
        if train_att:
            _attention_update(y, new, P, G, eta, True)
        else:
            new[:woff] = y[:woff]
        for h in range(2):
            for a in range(P):
                v = y[woff + h * P + a] - eta * dw[h, a] if train_w else y[woff + h * P + a]
                new[woff + h * P + a] = v
        for i in range(new.shape[0]):
            if not np.isfinite(new[i]):
                return k, 2, loss
            if abs(new[i]) > max_abs:
                return k, 3, loss
        y[:] = new
        k += 1
