"""An independent numpy port of the training step of the public code of
"Unveiling Induction Heads" (NeurIPS 2024): the simplified two-layer model
(``SimplifiedTwoLayerTransformer``: ``SimplifiedRPEAttention`` +
``PolyKernelMultiHeadAttention``) trained by SGD on torch's
``CrossEntropyLoss`` applied to the model's output.

Written from the structure of that code, not from ``meanfield``: its own
parameter layout (RPE matrix W of shape (T, H) whose diagonals feed the
heads; one C entry per degree vector over the H + 1 components (the raw
tokens and the H heads) with total degree <= ``low_degree``), the
zero row appended as the query position, the ``relu`` / ``log(x + 1e-24)``
product of the polynomial kernel, the normalisation by the C entries
without the raw-token component, and the mean cross-entropy of
``softmax(y_hat)``. Gradients by complex-step differentiation
(f'(x) = Im f(x + i h) / h with h = 1e-30: exact to rounding, no
subtraction), so nothing of the package's backward pass is reused.

``eps``: the official ``SimplifiedLayerNorm`` divides by ``norm + 1e-7``;
the package (and the paper) divide by the norm. ``eps = 0`` compares the
mathematics; ``eps = 1e-7`` is the code as published.
"""

from __future__ import annotations

import itertools

import numpy as np

H_STEP = 1e-30


def degrees(H: int, low_degree: int) -> np.ndarray:
    """Rows of itertools.product({0,1}, repeat=H+1) with total degree <= low_degree (the code's order)."""
    rows = np.array(list(itertools.product(range(2), repeat=H + 1)), dtype=float)
    return rows[rows.sum(axis=1) <= low_degree]


def _masked_softmax_rows(logits, mask):
    """Row softmax over the True entries of ``mask`` (rows without any: zeros); complex-safe."""
    out = np.zeros(logits.shape, dtype=logits.dtype)
    for i in range(logits.shape[0]):
        idx = np.flatnonzero(mask[i])
        if idx.size == 0:
            continue
        v = logits[i, idx]
        e = np.exp(v - np.max(v.real))
        out[i, idx] = e / e.sum()
    return out


def forward(X, W, C, a, H: int, low_degree: int, eps: float = 0.0):
    """y_hat (N, d) for one-hot inputs X (N, T, d)."""
    N, T, d = X.shape
    dt = np.result_type(W, C, a, np.float64)
    Xt = np.concatenate([X, np.zeros((N, 1, d))], axis=1).astype(dt)  # (N, T+1, d)
    comps = [Xt]
    for h in range(H):
        logits = np.zeros((T + 1, T + 1), dtype=dt)
        mask = np.zeros((T + 1, T + 1), dtype=bool)
        for j in range(H):
            off = j + h + 1
            for i in range(off, T + 1):
                logits[i, i - off] = W[j + h, h]
                mask[i, i - off] = True
        att = _masked_softmax_rows(logits, mask)
        v = np.einsum("ij,njd->nid", att, Xt)
        nrm = np.sqrt(np.sum(v * v, axis=-1, keepdims=True))
        safe = np.where(nrm.real == 0, 1.0, nrm + eps)
        comps.append(np.where(nrm.real == 0, 0.0, v / safe))
    deg = degrees(H, low_degree)
    x = np.stack([np.einsum("nd,ntd->nt", c[:, T], c[:, :T]) for c in comps], axis=-1)  # (N, T, H+1)
    x = np.where(x.real > 0, x, 0.0)  # relu
    feat = np.exp(np.einsum("ntc,lc->ntl", np.log(x + 1e-24), deg))  # (N, T, rows)
    num = feat @ (C * C)
    remain = deg[:, 0] == 0
    den = np.sum((C * C)[remain])
    z = a * num / den  # (N, T)
    z = z - np.max(z.real, axis=1, keepdims=True)
    p = np.exp(z)
    p = p / p.sum(axis=1, keepdims=True)
    return np.einsum("nt,ntd->nd", p, X.astype(dt))


def ce_loss(yhat, y):
    """torch.nn.CrossEntropyLoss(yhat, y): mean of logsumexp(yhat) - yhat[y]."""
    m = np.max(yhat.real, axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.sum(np.exp(yhat - m), axis=1))
    return np.mean(lse - yhat[np.arange(len(y)), y])


def loss(params, X, y, H, low_degree, eps=0.0):
    W, C, a = params
    return ce_loss(forward(X, W, C, a, H, low_degree, eps), y)


def grads(params, X, y, H, low_degree, eps=0.0):
    """Complex-step gradients (dW, dC, da) of the loss; dW only on the entries the heads use."""
    W, C, a = params
    dW = np.zeros_like(W)
    for h in range(H):
        for j in range(H):
            Wc = W.astype(complex)
            Wc[j + h, h] += 1j * H_STEP
            dW[j + h, h] = loss((Wc, C, a), X, y, H, low_degree, eps).imag / H_STEP
    dC = np.zeros_like(C)
    for k in range(C.size):
        Cc = C.astype(complex)
        Cc[k] += 1j * H_STEP
        dC[k] = loss((W, Cc, a), X, y, H, low_degree, eps).imag / H_STEP
    da = loss((W, C, complex(a, H_STEP)), X, y, H, low_degree, eps).imag / H_STEP
    return dW, dC, da


def init(T: int, H: int, low_degree: int, w_plus: float, w_minus: float, c_init: float, a_init: float):
    """The official init: W = w_minus with W[h, h] = w_plus; every C = c_init; a = a_init."""
    W = np.full((T, H), float(w_minus))
    for h in range(H):
        W[h, h] = float(w_plus)
    C = np.full(degrees(H, low_degree).shape[0], float(c_init))
    return W, C, float(a_init)


def train(tokens, H, low_degree, phases, lrs, steps, w_plus, w_minus, c_init, a_init, eps=0.0):
    """Full-batch SGD (momentum 0) over ``phases`` (strings of C / W / a, the
    code's ``--train-cmd``), each with its learning rate and number of steps
    (epochs of one full batch). Returns the list of (W, C, a, loss) after every step."""
    tokens = np.asarray(tokens)
    T = tokens.shape[1] - 1
    d = int(tokens.max()) + 1
    X = np.eye(max(d, 2))[tokens[:, :T]]
    y = tokens[:, T]
    W, C, a = init(T, H, low_degree, w_plus, w_minus, c_init, a_init)
    out = [(W.copy(), C.copy(), a, float(loss((W, C, a), X, y, H, low_degree, eps).real))]
    for ph, lr, n in zip(phases, lrs, steps):
        for _ in range(n):
            dW, dC, da = grads((W, C, a), X, y, H, low_degree, eps)
            if "W" in ph:
                W = W - lr * dW
            if "C" in ph:
                C = C - lr * dC
            if "a" in ph:
                a = a - lr * da
            out.append((W.copy(), C.copy(), a, float(loss((W, C, a), X, y, H, low_degree, eps).real)))
    return out


def to_package_theta(W, C, a, H: int, D: int, low_degree: int) -> np.ndarray:
    """The same state in the package's layout [c (subsets of heads, |S| <= D, by
    size then lexicographically), w (H, M=H): w[h, j] = W[j + h, h], a]."""
    deg = degrees(H, low_degree)
    cs = []
    for k in range(D + 1):
        for S in itertools.combinations(range(H), k):
            row = np.zeros(H + 1)
            row[[1 + h for h in S]] = 1
            cs.append(C[int(np.flatnonzero((deg == row).all(axis=1))[0])])
    w = np.array([[W[j + h, h] for j in range(H)] for h in range(H)])
    return np.concatenate([cs, w.ravel(), [a]])
