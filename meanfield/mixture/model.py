"""Plain-numpy oracle of the EXPLICIT finite-width two-headed mixture transformer.

One job: be slow and obviously right, so that the reduced dynamics
(``meanfield.mixture.kernels``) can be tested against it. Everything here works
on the explicit d-dimensional tokens and the explicit weights
W_K, W_Q (m x d) and w (d) of each head; nothing is imported from the reduced
kernels (the flat-state layout needed by :func:`project` is written out inline).

Model (see ``docs/conventions.md``), heads j = 0 ("+", a = +1) and
j = 1 ("-", a = -1), sample X = [X_1 .. X_L] (d x L):

    logits[i, l] = X_i^T W_K^T W_Q X_l          (key i, query l)
    p[l, i]      = softmax_i logits[i, l]
    u_j          = (1/L) sum_l sum_i p[l, i] w_j^T X_i
    f            = relu(u_+) - relu(u_-);   margin = y f
    Loss         = sum_n weight_n log(1 + exp(-margin_n))

Gradients are explicit backpropagation through these formulas, with
relu'(u) = 1 (u > 0), 0 (u < 0), ``relu_prime_at_zero`` (u == 0).
"""

from __future__ import annotations

import numpy as np

HEAD_SIGN = np.array([1.0, -1.0])


def embedding(K: int, d: int, rng: np.random.Generator) -> np.ndarray:
    """Random orthonormal basis E (d, 2K) = [c_1..c_K, v_1..v_K] (QR of a Gaussian)."""
    P = 2 * K
    if d < P:
        raise ValueError(f"d: must be >= 2K = {P}, got {d}")
    Q, R = np.linalg.qr(rng.standard_normal((d, P)))
    # fix the sign ambiguity of QR so the result is a deterministic function of the draw
    return Q * np.where(np.diag(R) < 0, -1.0, 1.0)


def tokens(samples, E: np.ndarray) -> np.ndarray:
    """Explicit token vectors X (n, d, L): X[n, :, i] = sgn[n, i] * E[:, idx[n, i]]."""
    idx = np.asarray(samples.idx)
    sgn = np.asarray(samples.sgn)
    n, L = idx.shape
    X = np.zeros((n, E.shape[0], L))
    for s in range(n):
        for i in range(L):
            X[s, :, i] = sgn[s, i] * E[:, idx[s, i]]
    return X


def init_weights(m: int, d: int, omega: float, rng: np.random.Generator, w=None) -> dict:
    """W_K, W_Q (2, m, d) with iid N(0, omega^2/m) entries; w (2, d), zero unless given."""
    sd = omega / np.sqrt(m)
    W_K = rng.standard_normal((2, m, d)) * sd
    W_Q = rng.standard_normal((2, m, d)) * sd
    if w is None:
        w = np.zeros((2, d))
    else:
        w = np.array(w, dtype=float)
        if w.shape != (2, d):
            raise ValueError(f"w: must have shape (2, {d}), got {w.shape}")
    return {"W_K": W_K, "W_Q": W_Q, "w": w}


def _softmax_over_keys(logits: np.ndarray) -> np.ndarray:
    """logits (n, L_key i, L_query l) -> p (n, L_query l, L_key i), softmax over i."""
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    p = e / e.sum(axis=1, keepdims=True)
    return np.transpose(p, (0, 2, 1))


def _head_forward(W_K, W_Q, w, X):
    """One head on all samples: returns (u (n,), p (n, L, L) [l, i], keys, queries, v (n, L))."""
    keys = W_K @ X                               # (n, m, L): column i is W_K X_i
    queries = W_Q @ X                            # (n, m, L): column l is W_Q X_l
    logits = np.swapaxes(keys, 1, 2) @ queries   # (n, i, l): (W_K X_i) . (W_Q X_l)
    p = _softmax_over_keys(logits)               # p[n, l, i]
    v = w @ X                                    # (n, L): w^T X_i
    L = X.shape[2]
    u = (p @ v[:, :, None])[:, :, 0].sum(axis=1) / L
    return u, p, keys, queries, v


def _logistic_loss(margin):
    # log(1 + exp(-z)), stable for both signs
    return np.where(margin > 0, np.log1p(np.exp(-np.abs(margin))),
                    -margin + np.log1p(np.exp(-np.abs(margin))))


def forward(params: dict, X: np.ndarray, samples):
    """(loss, u (n, 2), margins (n,)) of the explicit network on tokens X (n, d, L)."""
    n = X.shape[0]
    u = np.empty((n, 2))
    for j in range(2):
        u[:, j] = _head_forward(params["W_K"][j], params["W_Q"][j], params["w"][j], X)[0]
    f = np.maximum(u[:, 0], 0.0) - np.maximum(u[:, 1], 0.0)
    margins = np.asarray(samples.y) * f
    loss = float(np.sum(np.asarray(samples.weight) * _logistic_loss(margins)))
    return loss, u, margins


def _relu_prime(u, r0):
    return np.where(u > 0, 1.0, np.where(u < 0, 0.0, r0))


def gradients(params: dict, X: np.ndarray, samples, relu_prime_at_zero: float = 1.0) -> dict:
    """dLoss/dW_K, dLoss/dW_Q (2, m, d) and dLoss/dw (2, d) by explicit backprop."""
    y = np.asarray(samples.y)
    weight = np.asarray(samples.weight)
    L = X.shape[2]
    heads = [_head_forward(params["W_K"][j], params["W_Q"][j], params["w"][j], X) for j in range(2)]
    f = np.maximum(heads[0][0], 0.0) - np.maximum(heads[1][0], 0.0)
    margins = y * f
    g = 1.0 / (1.0 + np.exp(np.clip(margins, -700, 700)))   # -l'(margin)
    out = {k: np.zeros_like(params[k]) for k in ("W_K", "W_Q", "w")}
    for j in range(2):
        uj, p, keys, queries, v = heads[j]
        # dLoss/du_j per sample: weight * l'(margin) * y * a_j * relu'(u_j)
        c = -weight * g * y * HEAD_SIGN[j] * _relu_prime(uj, relu_prime_at_zero)
        # u = (1/L) sum_l sum_i p[l,i] v_i,  v_i = w^T X_i
        # dLoss/dw = sum_n c_n (1/L) sum_i (sum_l p[l,i]) X_i
        coef_i = c[:, None] * p.sum(axis=1) / L                       # (n, i)
        out["w"][j] = (X @ coef_i[:, :, None]).sum(axis=0)[:, 0]
        # du/dlogit[i,l] = (1/L) p[l,i] (v_i - vbar_l),  vbar_l = sum_i p[l,i] v_i
        vbar = (p @ v[:, :, None])[:, :, 0]                           # (n, l)
        D = c[:, None, None] * np.swapaxes(p, 1, 2) * (v[:, :, None] - vbar[:, None, :]) / L  # [n, i, l]
        # logit[i,l] = (W_K X_i) . (W_Q X_l):
        # dLoss/dW_K = sum_n sum_{i,l} D[i,l] (W_Q X_l) X_i^T
        out["W_K"][j] = (queries @ np.swapaxes(D, 1, 2) @ np.swapaxes(X, 1, 2)).sum(axis=0)
        # dLoss/dW_Q = sum_n sum_{i,l} D[i,l] (W_K X_i) X_l^T
        out["W_Q"][j] = (keys @ D @ np.swapaxes(X, 1, 2)).sum(axis=0)
    return out


def gd_step(params: dict, X: np.ndarray, samples, eta: float, train_w: bool = True,
            train_att: bool = True, relu_prime_at_zero: float = 1.0) -> dict:
    """One plain full-batch GD step on W_K, W_Q (if train_att) and w (if train_w)."""
    grads = gradients(params, X, samples, relu_prime_at_zero)
    new = {k: np.array(v, copy=True) for k, v in params.items()}
    if train_att:
        new["W_K"] = params["W_K"] - eta * grads["W_K"]
        new["W_Q"] = params["W_Q"] - eta * grads["W_Q"]
    if train_w:
        new["w"] = params["w"] - eta * grads["w"]
    return new


def project(params: dict, E: np.ndarray) -> np.ndarray:
    """Flat reduced state [S (2,P,P), A (2,P,P), B (2,P,P), w~ (2,P)] of the weights:
    S = E^T W_K^T W_Q E, A = E^T W_K^T W_K E, B = E^T W_Q^T W_Q E, w~ = E^T w per head
    (head 0 = "+", head 1 = "-"; row-major blocks)."""
    KE = np.einsum("jmd,da->jma", params["W_K"], E)   # W_K E
    QE = np.einsum("jmd,da->jma", params["W_Q"], E)   # W_Q E
    S = np.einsum("jma,jmb->jab", KE, QE)
    A = np.einsum("jma,jmb->jab", KE, KE)
    B = np.einsum("jma,jmb->jab", QE, QE)
    wt = params["w"] @ E
    return np.concatenate([S.ravel(), A.ravel(), B.ravel(), wt.ravel()]).astype(np.float64)


# ------------------------------------------------ several neurons per head

def forward_neurons(params: dict, X: np.ndarray, samples):
    """(loss, u (n, 2, nn), margins (n,)) with nn neurons per head sharing its attention:
    w (2, nn, d);  zbar_j = (1/L) sum_l sum_i p[l, i] X_i,  u_{j,q} = w_{j,q}^T zbar_j,
    f = sum_j a_j (1/nn) sum_q relu(u_{j,q})."""
    n, _, L = X.shape
    nn = params["w"].shape[1]
    u = np.empty((n, 2, nn))
    for j in range(2):
        # attention only (the value vector passed here is unused)
        _, p, _, _, _ = _head_forward(params["W_K"][j], params["W_Q"][j], np.zeros(X.shape[1]), X)
        zbar = np.einsum("sli,sdi->sd", p, X) / L
        u[:, j, :] = zbar @ params["w"][j].T
    f = np.maximum(u[:, 0, :], 0.0).mean(axis=1) - np.maximum(u[:, 1, :], 0.0).mean(axis=1)
    margins = np.asarray(samples.y) * f
    loss = float(np.sum(np.asarray(samples.weight) * _logistic_loss(margins)))
    return loss, u, margins


def gradients_neurons(params: dict, X: np.ndarray, samples, relu_prime_at_zero: float = 1.0) -> dict:
    """dLoss/dW_K, dLoss/dW_Q (2, m, d) and dLoss/dw (2, nn, d) of :func:`forward_neurons`
    by explicit backprop."""
    y = np.asarray(samples.y)
    weight = np.asarray(samples.weight)
    n, _, L = X.shape
    nn = params["w"].shape[1]
    heads = [_head_forward(params["W_K"][j], params["W_Q"][j], np.zeros(X.shape[1]), X) for j in range(2)]
    zbars = [np.einsum("sli,sdi->sd", heads[j][1], X) / L for j in range(2)]
    u = np.stack([zbars[j] @ params["w"][j].T for j in range(2)], axis=1)           # (n, 2, nn)
    f = np.maximum(u[:, 0, :], 0.0).mean(axis=1) - np.maximum(u[:, 1, :], 0.0).mean(axis=1)
    g = 1.0 / (1.0 + np.exp(np.clip(y * f, -700, 700)))   # -l'(margin)
    out = {k: np.zeros_like(params[k]) for k in ("W_K", "W_Q", "w")}
    for j in range(2):
        _, p, keys, queries, _ = heads[j]
        # dLoss/du_{j,q} = weight * l'(margin) * y * a_j * relu'(u_{j,q}) / nn
        c = (-weight * g * y * HEAD_SIGN[j])[:, None] * _relu_prime(u[:, j, :], relu_prime_at_zero) / nn  # (n, nn)
        out["w"][j] = c.T @ zbars[j]                                      # (nn, d)
        om = c @ params["w"][j]                                           # (n, d): dLoss/dzbar_j
        v = np.einsum("sd,sdi->si", om, X)                                # om . X_i
        vbar = np.einsum("sli,si->sl", p, v)
        D = np.swapaxes(p, 1, 2) * (v[:, :, None] - vbar[:, None, :]) / L  # [n, i, l]
        out["W_K"][j] = (queries @ np.swapaxes(D, 1, 2) @ np.swapaxes(X, 1, 2)).sum(axis=0)
        out["W_Q"][j] = (keys @ D @ np.swapaxes(X, 1, 2)).sum(axis=0)
    return out


def gd_step_neurons(params: dict, X: np.ndarray, samples, eta: float, neuron_eta: float,
                    train_w: bool = True, train_att: bool = True, relu_prime_at_zero: float = 1.0) -> dict:
    """One plain full-batch GD step of the several-neuron network: step ``eta`` on
    W_K, W_Q, step ``neuron_eta`` on the neurons (eta * nn: the mean-field time scale)."""
    grads = gradients_neurons(params, X, samples, relu_prime_at_zero)
    new = {k: np.array(v, copy=True) for k, v in params.items()}
    if train_att:
        new["W_K"] = params["W_K"] - eta * grads["W_K"]
        new["W_Q"] = params["W_Q"] - eta * grads["W_Q"]
    if train_w:
        new["w"] = params["w"] - neuron_eta * grads["w"]
    return new
