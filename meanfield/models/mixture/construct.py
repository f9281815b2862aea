"""An explicit two-headed transformer that classifies every sample of the
K-mixture (the expressivity statement of the paper's Lemma 6.1, rebuilt here
in the model of ``docs/conventions.md``: attention sums innermost, then the
neuron, the ReLU, and the sum over heads).

The weights (head h in {+1, -1}, b > 0, beta > 0; key feature first):

    S_h[c_k, v_k] = h beta,   S_h[c_j, v_k] = -h beta (j != k),
    S_h[v_j, v_k] = beta / 2 (j != k),   every other score 0,
    w_h = b (c_1 + ... + c_K) + h b (v_1 + ... + v_K).

Why it works (beta -> infinity): in head +, the signal token y v_k as a query
attends to its group identifier c_k when y = +1 (value b) and to a v token of
value -b when y = -1; a distractor eps v_j attends to c_k when eps = -1 (value
b) and to a token of value +b otherwise; the query c_k attends uniformly.
Head - is the mirror image. Summing, for y = +1: u_+ - u_- = (b/L)(6/L) and
u_+ > 0, and the mirror statement for y = -1, so every margin y f tends to at
least 6 b / L^2 (L >= 3; 4 b / L^2 for L = 2: no distractor), for every K. At
finite beta the corrections are O(L e^{-beta/2}).

:func:`construct` returns the reduced state and explicit weights W_K, W_Q
(m = P = 2K rows, ambient d >= 2K, features embedded by an orthonormal E) and
verifies the margins on the EXPLICIT network: the engine's oracle
(``meanfield.engine.oracle``, plain numpy, sharing no code with the reduced
kernels) on the mixture description of (K, L).
"""

from __future__ import annotations

import numpy as np

from . import kernels
from .data import sample_set


def reduced_weights(K: int, beta: float = 20.0, b: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(S (2, P, P), w (2, P)) of the construction."""
    P = 2 * K
    S = np.zeros((2, P, P))
    w = np.zeros((2, P))
    for h, sg in enumerate((1.0, -1.0)):
        for k in range(K):
            for j in range(K):
                S[h, j, K + k] = sg * beta if j == k else -sg * beta
                if j != k:
                    S[h, K + j, K + k] = beta / 2
        w[h, :K] = b
        w[h, K:] = sg * b
    return S, w


def limit_margin(L: int, b: float = 1.0) -> float:
    """The beta -> infinity minimum margin."""
    return (4.0 if L == 2 else 6.0) * b / L**2


def construct(K: int, L: int, beta: float = 20.0, b: float = 1.0, d: int | None = None, seed: int = 0) -> dict:
    """Build the weights, check every sample on the explicit network.

    Returns a dict with W_K, W_Q (2, m, d), w (2, d), E (d, P), S, w_reduced,
    margins (explicit network: the engine's oracle), margins_reduced (numba kernels), min_margin,
    argmin (sample description), limit_margin."""
    if K < 2 or L < 2:
        raise ValueError("K and L must be >= 2")
    P = 2 * K
    d = P if d is None else d
    S, wr = reduced_weights(K, beta, b)
    from .family import mixture_description
    from ...engine.oracle import Oracle, embedding
    from .config import make_config

    E = np.eye(d, P) if d == P else embedding(np.eye(P), d, np.random.default_rng(seed))
    # explicit weights with E^T W_K^T W_Q E = S: W_K = E^T (P x d), W_Q = S E^T
    W_K = np.stack([E.T, E.T])
    W_Q = np.stack([S[h] @ E.T for h in range(2)])
    w = np.stack([E @ wr[h] for h in range(2)])
    samples = sample_set(K, L, None)
    net = Oracle(mixture_description(make_config({}, K=K, L=L)), E)   # its samples are sample_set(K, L)'s
    _, cache = net.forward([{"a": np.array(a), "WK": W_K[h], "WQ": W_Q[h], "w": w[h][None, None, :]}
                            for h, a in enumerate((1.0, -1.0))])
    margins = net.margins(cache["f"])
    # the same through the reduced kernels (A, B are irrelevant to the forward pass)
    A = np.stack([np.eye(P), np.eye(P)])
    y = kernels.pack(S, A, A.copy(), wr)
    u = np.empty((samples.n, 2))
    m_red = np.empty(samples.n)
    kernels.forward(y, P, samples.idx, samples.sgn, samples.y, samples.weight, u, m_red)
    i = int(np.argmin(margins))
    return {"W_K": W_K, "W_Q": W_Q, "w": w, "E": E, "S": S, "w_reduced": wr, "samples": samples,
            "margins": margins, "margins_reduced": m_red, "min_margin": float(margins[i]),
            "argmin": samples.describe(i), "limit_margin": limit_margin(L, b), "beta": beta, "b": b, "d": d}
