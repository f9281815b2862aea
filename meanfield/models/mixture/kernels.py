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
``meanfield.models.mixture`` and in ``derivations/``; these kernels are tested equal
to the sympy-generated code and to the explicit finite-width network.

Stop criteria evaluated inside :func:`gd_advance` (``crit_kind``):
    0 none, 1 loss, 2 min margin of consistent samples, 3 min margin of
    inconsistent samples, 4 min margin of all samples, 5 norm of dLoss/dw~;
compared with ``crit_thresh`` by ``crit_op`` (+1: >=, -1: <=).

One copy of the mathematics, several targets. The per-step mathematics is
written once below as plain Python functions marked ``@portable``: scalar
loops over preallocated arrays that never allocate and call nothing but
``math`` functions and each other. ``@portable`` compiles each one for the CPU
at import (``numba.njit(cache=True)``; the module-level name is the CPU
version) and keeps its Python source in a registry; ``meanfield.core.activations.compile_portable``
compiles the same source for another target, e.g.
``compile_portable(numba.cuda.jit(device=True))`` for the GPU (see
``meanfield.models.mixture.batched``, which builds it only when the CUDA backend is
asked for, so importing meanfield never needs CUDA), and
``meanfield.core.activations.complex_step_portable`` runs it over complex numbers
for the exact Jacobians of ``meanfield.models.mixture.escape``. The public CPU kernels
(:func:`forward`, :func:`backward`, :func:`loss_and_grads`, :func:`flow_rhs`,
:func:`gd_advance`, ...) allocate their scratch and call the portable
functions; their results are bit-identical to the earlier hand-written
kernels.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ...core.activations import portable, relu_prime, sigmoid_neg, softplus_neg
from ...core.activations import accept_step

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


# ------------------------------------------------------ portable mathematics
# (@portable and the primitives relu_prime, softplus_neg, sigmoid_neg: meanfield.core.activations)


@portable
def head_preactivation(y, P, idx, sgn, s, h, logit):
    """u_h(X_s) = (1/L) sum_l sum_i p_{l,i} w~_h . X_i (softmax over keys i per
    query l); scratch ``logit`` (L,)."""
    L = idx.shape[1]
    n2 = P * P
    So = h * n2
    wo = 6 * n2 + h * P
    u = 0.0
    for l in range(L):
        mx = -math.inf
        for i in range(L):
            z = sgn[s, i] * sgn[s, l] * y[So + idx[s, i] * P + idx[s, l]]
            logit[i] = z
            if z > mx:
                mx = z
        den = 0.0
        num = 0.0
        for i in range(L):
            e = math.exp(logit[i] - mx)
            den += e
            num += e * sgn[s, i] * y[wo + idx[s, i]]
        u += num / den
    return u / L


@portable
def head_backward(y, P, idx, sgn, s, h, coef, G, dw, logit, p):
    """Add coef x du_h(X_s)/dS_h to G[h] and coef x du_h(X_s)/dw~_h to dw[h]
    (coef = dLoss/du_h(X_s) with the 1/L of the query mean); scratch
    ``logit``, ``p`` (L,)."""
    L = idx.shape[1]
    n2 = P * P
    So = h * n2
    wo = 6 * n2 + h * P
    for l in range(L):
        mx = -math.inf
        for i in range(L):
            z = sgn[s, i] * sgn[s, l] * y[So + idx[s, i] * P + idx[s, l]]
            logit[i] = z
            if z > mx:
                mx = z
        den = 0.0
        for i in range(L):
            p[i] = math.exp(logit[i] - mx)
            den += p[i]
        vbar = 0.0
        for i in range(L):
            p[i] /= den
            vbar += p[i] * sgn[s, i] * y[wo + idx[s, i]]
        for i in range(L):
            vi = sgn[s, i] * y[wo + idx[s, i]]
            G[h, idx[s, i], idx[s, l]] += coef * p[i] * (vi - vbar) * sgn[s, i] * sgn[s, l]
            dw[h, idx[s, i]] += coef * p[i] * sgn[s, i]


@portable
def forward_into(y, P, idx, sgn, lab, weight, u_out, margin_out, logit):
    """:func:`forward` with scratch ``logit`` (L,)."""
    n = idx.shape[0]
    loss = 0.0
    for s in range(n):
        f = 0.0
        for h in range(2):
            u = head_preactivation(y, P, idx, sgn, s, h, logit)
            u_out[s, h] = u
            if u > 0.0:
                f += (1.0 - 2.0 * h) * u
        m = lab[s] * f
        margin_out[s] = m
        loss += weight[s] * softplus_neg(m)
    return loss


@portable
def backward_into(y, P, idx, sgn, lab, weight, r0, u, margin, G, dw, logit, p):
    """:func:`backward` with scratch ``logit``, ``p`` (L,)."""
    n = idx.shape[0]
    L = idx.shape[1]
    for h in range(2):
        for a in range(P):
            dw[h, a] = 0.0
            for b in range(P):
                G[h, a, b] = 0.0
    for s in range(n):
        g = sigmoid_neg(margin[s])
        for h in range(2):
            coef = -weight[s] * g * lab[s] * (1.0 - 2.0 * h) * relu_prime(u[s, h], r0) / L
            if coef == 0.0:
                continue
            head_backward(y, P, idx, sgn, s, h, coef, G, dw, logit, p)


@portable
def attention_update_into(y, out, P, G, eta, exact, T):
    """:func:`_attention_update` with scratch ``T`` (3, P, P) for the
    second-order terms S^T G, B G^T, A G (O(P^3) per head)."""
    n2 = P * P
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


@portable
def flow_rhs_into(y, out, P, idx, sgn, lab, weight, r0, train_w, train_att, u, margin, G, dw, logit, p, T):
    """:func:`flow_rhs` with scratch u (n, 2), margin (n,), G (2, P, P),
    dw (2, P), logit, p (L,), T (3, P, P)."""
    loss = forward_into(y, P, idx, sgn, lab, weight, u, margin, logit)
    backward_into(y, P, idx, sgn, lab, weight, r0, u, margin, G, dw, logit, p)
    n2 = P * P
    if train_att:
        attention_update_into(y, out, P, G, 1.0, False, T)
    else:
        for i in range(6 * n2):
            out[i] = 0.0
    for h in range(2):
        for a in range(P):
            out[6 * n2 + h * P + a] = -dw[h, a] if train_w else 0.0
    return loss


@portable
def criterion_of(kind, loss, margin, consistent, dw):
    """:func:`criterion_value`."""
    if kind == 1:
        return loss
    if kind == 5:
        s = 0.0
        for h in range(dw.shape[0]):
            for a in range(dw.shape[1]):
                s += dw[h, a] * dw[h, a]
        return math.sqrt(s)
    v = math.inf
    for s in range(margin.shape[0]):
        if kind == 4 or (kind == 2 and consistent[s]) or (kind == 3 and not consistent[s]):
            if margin[s] < v:
                v = margin[s]
    return v


@portable
def gd_update_into(y, new, P, G, dw, eta, train_w, train_att, T):
    """new = the exact GD map of ``y`` given G = dLoss/dS, dw = dLoss/dw~ at
    ``y`` (backward_into's); scratch T (3, P, P)."""
    woff = 6 * P * P
    if train_att:
        attention_update_into(y, new, P, G, eta, True, T)
    else:
        for i in range(woff):
            new[i] = y[i]
    for h in range(2):
        for a in range(P):
            v = y[woff + h * P + a] - eta * dw[h, a] if train_w else y[woff + h * P + a]
            new[woff + h * P + a] = v


@portable
def gd_advance_into(y, nsteps, eta, P, idx, sgn, lab, weight, consistent, r0, train_w, train_att,
                    crit_kind, crit_op, crit_thresh, max_abs, u, margin, G, dw, new, logit, p, T):
    """:func:`gd_advance` with scratch u (n, 2), margin (n,), G (2, P, P),
    dw (2, P), new (state size,), logit, p (L,), T (3, P, P)."""
    k = 0
    while True:
        loss = forward_into(y, P, idx, sgn, lab, weight, u, margin, logit)
        if not math.isfinite(loss):
            return k, 2, loss
        backward_into(y, P, idx, sgn, lab, weight, r0, u, margin, G, dw, logit, p)
        if crit_kind != 0:
            c = criterion_of(crit_kind, loss, margin, consistent, dw)
            if (crit_op > 0 and c >= crit_thresh) or (crit_op < 0 and c <= crit_thresh):
                return k, 1, loss
        if k == nsteps:
            return k, 0, loss
        gd_update_into(y, new, P, G, dw, eta, train_w, train_att, T)
        code = accept_step(y, new, max_abs)
        if code != 0:
            return k, code, loss
        k += 1


# --------------------------------------------------- public CPU kernels

_relu_prime = relu_prime
_softplus_neg = softplus_neg
_sigmoid_neg = sigmoid_neg


@njit(cache=True)
def forward(y, P, idx, sgn, lab, weight, u_out, margin_out):
    """Pre-activations u (n, 2), margins (n,) and the loss at state ``y``."""
    logit = np.empty(idx.shape[1])
    return forward_into(y, P, idx, sgn, lab, weight, u_out, margin_out, logit)


@njit(cache=True)
def backward(y, P, idx, sgn, lab, weight, r0, u, margin, G, dw):
    """G = dLoss/dS (2, P, P) and dw = dLoss/dw~ (2, P) given forward's u, margin."""
    L = idx.shape[1]
    logit = np.empty(L)
    p = np.empty(L)
    backward_into(y, P, idx, sgn, lab, weight, r0, u, margin, G, dw, logit, p)


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
    T = np.empty((3, P, P))
    attention_update_into(y, out, P, G, eta, exact, T)


@njit(cache=True)
def flow_rhs(y, out, P, idx, sgn, lab, weight, r0, train_w, train_att):
    """Gradient-flow right-hand side dy/dt into ``out``; returns the loss."""
    n, L = idx.shape
    u = np.empty((n, 2))
    margin = np.empty(n)
    G = np.empty((2, P, P))
    dw = np.empty((2, P))
    logit = np.empty(L)
    p = np.empty(L)
    T = np.empty((3, P, P))
    return flow_rhs_into(y, out, P, idx, sgn, lab, weight, r0, train_w, train_att, u, margin, G, dw, logit, p, T)


@njit(cache=True)
def criterion_value(kind, loss, margin, consistent, dw):
    """The quantity a stop criterion compares (see module docstring)."""
    return criterion_of(kind, loss, margin, consistent, dw)


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
    n, L = idx.shape
    u = np.empty((n, 2))
    margin = np.empty(n)
    G = np.empty((2, P, P))
    dw = np.empty((2, P))
    new = np.empty_like(y)
    logit = np.empty(L)
    p = np.empty(L)
    T = np.empty((3, P, P))
    return gd_advance_into(y, nsteps, eta, P, idx, sgn, lab, weight, consistent, r0, train_w, train_att,
                           crit_kind, crit_op, crit_thresh, max_abs, u, margin, G, dw, new, logit, p, T)
