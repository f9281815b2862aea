"""Numba kernels of the symmetry-reduced mixture dynamics in orbit variables (``meanfield.models.mixture.symmetry``).

The orbit variables z (one representative per orbit of the flat state) are
embedded into the full state (:func:`_embed_into`), the forward and backward
passes run only over the representative samples and heads of each orbit,
and the gradient is folded back with the orbit sizes; :func:`red_flow_rhs` and
:func:`red_gd_advance` are the flow and the exact GD map of z, tested equal
to the full kernels (``tests/test_mixture_symmetry.py``). The argument tuple
``args`` is built by ``symmetry.Reduction``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ...core.activations import accept_step
from . import kernels

@njit(cache=True)
def _embed_into(z, y, orbit_of, orbit_sign):
    for i in range(y.shape[0]):
        o = orbit_of[i]
        y[i] = orbit_sign[i] * z[o] if o >= 0 else 0.0


@njit(cache=True)
def _red_forward(y, P, idx, sgn, lab, weight, fw_h, fw_n, hn, U, margin, logit):
    """u of each (head, sample) orbit representative, margins of every sample, loss."""
    n, L = idx.shape
    for o in range(fw_h.shape[0]):
        U[o] = kernels.head_preactivation(y, P, idx, sgn, fw_n[o], fw_h[o], logit)
    loss = 0.0
    for s in range(n):
        f = 0.0
        for h in range(2):
            u = U[hn[h, s]]
            if u > 0.0:
                f += (1.0 - 2.0 * h) * u
        m = lab[s] * f
        margin[s] = m
        loss += weight[s] * kernels._softplus_neg(m)
    return loss


@njit(cache=True)
def _red_backward(y, P, idx, sgn, lab, weight, r0, U, hn, margin, bw_h, bw_n, bw_mult, grad_heads,
                  orbit_of, orbit_sign, G, dw, C, D, acc, cnt, logit, p):
    """G, dw on the heads in ``grad_heads``: orbit representatives' contributions
    times the orbit sizes, then the signed mean over each coordinate orbit
    (C, D, acc, cnt, logit, p: scratch)."""
    n, L = idx.shape
    n2 = P * P
    woff = 6 * n2
    C[:] = 0.0
    D[:] = 0.0
    for k in range(bw_h.shape[0]):
        h = bw_h[k]
        s = bw_n[k]
        g = kernels._sigmoid_neg(margin[s])
        coef = -bw_mult[k] * weight[s] * g * lab[s] * (1.0 - 2.0 * h) * kernels._relu_prime(U[hn[h, s]], r0) / L
        if coef == 0.0:
            continue
        kernels.head_backward(y, P, idx, sgn, s, h, coef, C, D, logit, p)
    acc[:] = 0.0
    cnt[:] = 0.0
    for hh in range(grad_heads.shape[0]):
        h = grad_heads[hh]
        for a in range(P):
            for b in range(P):
                i = h * n2 + a * P + b
                o = orbit_of[i]
                if o >= 0:
                    acc[o] += orbit_sign[i] * C[h, a, b]
                    cnt[o] += 1.0
            i = woff + h * P + a
            o = orbit_of[i]
            if o >= 0:
                acc[o] += orbit_sign[i] * D[h, a]
                cnt[o] += 1.0
    for hh in range(grad_heads.shape[0]):
        h = grad_heads[hh]
        for a in range(P):
            for b in range(P):
                i = h * n2 + a * P + b
                o = orbit_of[i]
                G[h, a, b] = orbit_sign[i] * acc[o] / cnt[o] if o >= 0 else 0.0
            i = woff + h * P + a
            o = orbit_of[i]
            dw[h, a] = orbit_sign[i] * acc[o] / cnt[o] if o >= 0 else 0.0


@njit(cache=True)
def _scratch(z, args):
    """Work arrays: y (N), U, margin, G, dw, C, D, acc, cnt, logit, p."""
    P, idx = args[0], args[1]
    n, L = idx.shape
    nred = z.shape[0]
    return (np.empty(args[5].shape[0]), np.empty(args[7].shape[0]), np.empty(n), np.zeros((2, P, P)),
            np.zeros((2, P)), np.zeros((2, P, P)), np.zeros((2, P)), np.zeros(nred), np.zeros(nred),
            np.empty(L), np.empty(L))


@njit(cache=True)
def _red_grads(z, args, r0, w):
    """Loss; fills the scratch ``w`` (see :func:`_scratch`): U, margins, G, dw."""
    (P, idx, sgn, lab, weight, orbit_of, orbit_sign, fw_h, fw_n, hn, bw_h, bw_n, bw_mult, grad_heads,
     rk, rh, ra, rb) = args
    y, U, margin, G, dw, C, D, acc, cnt, logit, p = w
    _embed_into(z, y, orbit_of, orbit_sign)
    loss = _red_forward(y, P, idx, sgn, lab, weight, fw_h, fw_n, hn, U, margin, logit)
    _red_backward(y, P, idx, sgn, lab, weight, r0, U, hn, margin, bw_h, bw_n, bw_mult, grad_heads,
                  orbit_of, orbit_sign, G, dw, C, D, acc, cnt, logit, p)
    return loss


@njit(cache=True)
def _red_update(z, y, out, P, G, dw, rk, rh, ra, rb, eta, exact, train_w, train_att):
    """out[r] at every representative: the GD map (exact) or the flow rhs (eta = 1)."""
    n2 = P * P
    for r in range(z.shape[0]):
        kind = rk[r]
        h = rh[r]
        a = ra[r]
        b = rb[r]
        if kind == 3:
            if train_w:
                out[r] = z[r] - eta * dw[h, a] if exact else -dw[h, a]
            else:
                out[r] = z[r] if exact else 0.0
            continue
        if not train_att:
            out[r] = z[r] if exact else 0.0
            continue
        So = h * n2
        Ao = 2 * n2 + h * n2
        Bo = 4 * n2 + h * n2
        d = 0.0
        if kind == 0:
            for c in range(P):
                d += y[Ao + a * P + c] * G[h, c, b] + G[h, a, c] * y[Bo + c * P + b]
        elif kind == 1:
            for c in range(P):
                d += G[h, a, c] * y[So + b * P + c] + y[So + a * P + c] * G[h, b, c]
        else:
            for c in range(P):
                d += G[h, c, a] * y[So + c * P + b] + y[So + c * P + a] * G[h, c, b]
        if not exact:
            out[r] = -eta * d
            continue
        sec = 0.0
        for c in range(P):
            t = 0.0
            if kind == 0:  # G S^T G
                for e in range(P):
                    t += y[So + e * P + c] * G[h, e, b]
                sec += G[h, a, c] * t
            elif kind == 1:  # G B G^T
                for e in range(P):
                    t += y[Bo + c * P + e] * G[h, b, e]
                sec += G[h, a, c] * t
            else:  # G^T A G
                for e in range(P):
                    t += y[Ao + c * P + e] * G[h, e, b]
                sec += G[h, c, a] * t
        out[r] = z[r] - eta * d + eta * eta * sec


@njit(cache=True)
def red_flow_rhs(z, out, args, r0, train_w, train_att):
    """Gradient-flow right-hand side in orbit variables into ``out``; returns the loss."""
    P, rk, rh, ra, rb = args[0], args[14], args[15], args[16], args[17]
    w = _scratch(z, args)
    loss = _red_grads(z, args, r0, w)
    y, G, dw = w[0], w[3], w[4]
    _red_update(z, y, out, P, G, dw, rk, rh, ra, rb, 1.0, False, train_w, train_att)
    return loss


@njit(cache=True)
def red_gd_advance(z, nsteps, eta, args, consistent, r0, train_w, train_att, crit_kind, crit_op, crit_thresh,
                   max_abs):
    """Up to ``nsteps`` exact GD steps on the orbit variables ``z`` in place;
    (steps_done, code, loss) as ``kernels.gd_advance``."""
    (P, idx, sgn, lab, weight, orbit_of, orbit_sign, fw_h, fw_n, hn, bw_h, bw_n, bw_mult, grad_heads,
     rk, rh, ra, rb) = args
    w = _scratch(z, args)
    y, U, margin, G, dw = w[0], w[1], w[2], w[3], w[4]
    dwf = np.zeros((2, P))
    new = np.empty_like(z)
    woff = 6 * P * P
    k = 0
    while True:
        loss = _red_grads(z, args, r0, w)
        if not np.isfinite(loss):
            return k, 2, loss
        if crit_kind != 0:
            if crit_kind == 5:
                # the full state's dLoss/dw~ (both heads) from the orbit values
                for h in range(2):
                    for a in range(P):
                        i = woff + h * P + a
                        o = orbit_of[i]
                        dwf[h, a] = 0.0 if o < 0 else orbit_sign[i] * dw[rh[o], ra[o]]
                c = kernels.criterion_value(crit_kind, loss, margin, consistent, dwf)
            else:
                c = kernels.criterion_value(crit_kind, loss, margin, consistent, dw)
            if (crit_op > 0 and c >= crit_thresh) or (crit_op < 0 and c <= crit_thresh):
                return k, 1, loss
        if k == nsteps:
            return k, 0, loss
        _red_update(z, y, new, P, G, dw, rk, rh, ra, rb, eta, True, train_w, train_att)
        code = accept_step(z, new, max_abs)
        if code != 0:
            return k, code, loss
        k += 1
