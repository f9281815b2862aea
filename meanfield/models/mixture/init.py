"""Initial reduced states of the mixture system.

Attention, infinite width (``width=None``): S = 0, A = B = omega^2 I exactly.
Finite width m: per head, M_K = W_K E and M_Q = W_Q E are m x P matrices with
iid N(0, omega^2/m) entries (the law of the projection of W_K, W_Q with iid
N(0, omega^2/m) entries on orthonormal features); S = M_K^T M_Q,
A = M_K^T M_K, B = M_Q^T M_Q. Random streams come from
``SeedSequence(seed).spawn(2)``: the first for attention, the second for the
neurons, so changing the neuron init leaves the sampled attention unchanged.
"""

from __future__ import annotations

import math

import numpy as np

from .config import MixtureConfig, parse_neuron_init
from .kernels import pack


def _streams(seed: int):
    a, b = np.random.SeedSequence(seed).spawn(2)
    return np.random.default_rng(a), np.random.default_rng(b)


def attention_init(K: int, omega: float, width: int | None, seed: int = 0):
    """(S, A, B), each (2, P, P)."""
    P = 2 * K
    if width is None:
        S = np.zeros((2, P, P))
        A = np.broadcast_to(omega**2 * np.eye(P), (2, P, P)).copy()
        return S, A, A.copy()
    rng, _ = _streams(seed)
    S = np.empty((2, P, P))
    A = np.empty((2, P, P))
    B = np.empty((2, P, P))
    scale = omega / np.sqrt(width)
    for h in range(2):
        MK = rng.standard_normal((width, P)) * scale
        MQ = rng.standard_normal((width, P)) * scale
        S[h] = MK.T @ MQ
        A[h] = MK.T @ MK
        B[h] = MQ.T @ MQ
    return S, A, B


def neuron_init(K: int, spec: str, seed: int = 0) -> np.ndarray:
    """w~ (2, P) from a neuron-init spec (see ``parse_neuron_init``)."""
    P = 2 * K
    kind, payload = parse_neuron_init(spec, K)
    if kind == "zero":
        return np.zeros((2, P))
    if kind == "const":
        return np.array(payload, dtype=float)
    _, rng = _streams(seed)
    return payload * rng.standard_normal((2, P))


def initial_state(cfg: MixtureConfig) -> np.ndarray:
    """The flat reduced state at t = 0 for a config."""
    if cfg.width is None and cfg.neuron_init == "zero":
        d = cfg.omega**2
        if isinstance(d, (int, float)) and math.isfinite(d):  # the blocks' numbers written in place (a sweep
            P = 2 * cfg.K  # builds 1000s): omega^2 x 1 on the diagonals of A and B, omega^2 x 0 = 0 elsewhere
            n2 = P * P
            y = np.zeros(6 * n2 + 2 * P)
            for blk in range(2, 6):  # A (heads + and -), then B: after S's 2 blocks (kernels.layout)
                y[blk * n2:(blk + 1) * n2:P + 1] = d
            return y
    S, A, B = attention_init(cfg.K, cfg.omega, cfg.width, cfg.seed)
    w = neuron_init(cfg.K, cfg.neuron_init, cfg.seed)
    return pack(S, A, B, w)
