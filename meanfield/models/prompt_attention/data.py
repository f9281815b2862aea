"""A contextual mixture in the spirit of Oymak, Rawat, Soltanolkotabi, Thrampoulidis, "On the role of
attention in prompt-tuning" (ICML 2023): every sequence has a few context-relevant tokens and many
context-irrelevant ones.

Features: ``q`` (the context direction q*), ``v`` (the label direction v*), ``z1..`` (noise
directions) and ``p`` (the prompt's own feature: the fixed query of the prompt-attention head, no
data token has it). A sequence of label y = +-1 has ``T`` tokens; ``n_relevant`` of them (at random
positions) are q* + y v* + noise, the others are s sigma v* + noise with a random sign s
independent of y (they carry label-like signal that contradicts the label half of the time), the
noise N(0, noise^2) on the z directions. The law is ours (the paper's sections could not be read:
docs/models.md, "prompt_attention").
"""

from __future__ import annotations

import numpy as np


def features(n_noise: int = 4) -> list[str]:
    """``q``, ``v``, ``z1..z{n_noise}``, ``p``.

    Parameters
    ----------
    n_noise : int

    Returns
    -------
    list of str

    Examples
    --------
    >>> features(2)
    ['q', 'v', 'z1', 'z2', 'p']
    """
    if isinstance(n_noise, bool) or int(n_noise) != n_noise or not 0 <= int(n_noise) <= 64:
        raise ValueError(f"n_noise must be an integer in [0, 64]; got {n_noise!r}")
    return ["q", "v"] + [f"z{i + 1}" for i in range(int(n_noise))] + ["p"]


def dataset(features, n: int = 40, T: int = 8, n_relevant: int = 2, sigma: float = 1.0, noise: float = 0.5,
            seed: int = 0) -> dict:
    """``n`` sequences of the contextual mixture (module docstring), labels alternating +1, -1.

    Parameters
    ----------
    features : tuple of str
        :func:`features`.
    n, T, n_relevant : int
    sigma, noise : float
    seed : int

    Returns
    -------
    dict
        tokens (n, T, P), target (+-1), names, flags ``relevant`` is not a per-sequence flag: the
        relevant positions are returned as ``relevant`` (n, T) booleans.

    Examples
    --------
    >>> d = dataset(features(2), n=2, T=4, n_relevant=1)
    >>> d["tokens"].shape, d["target"]
    ((2, 4, 5), [1.0, -1.0])
    """
    P = len(features)
    if P < 3 or features[0] != "q" or features[1] != "v" or features[-1] != "p":
        raise ValueError("features: must be features(n_noise)")
    n, T, k = int(n), int(T), int(n_relevant)
    if not (1 <= n <= 100_000 and 2 <= T <= 256 and 1 <= k < T):
        raise ValueError(f"need 1 <= n <= 1e5, 2 <= T <= 256, 1 <= n_relevant < T; got n={n}, T={T}, "
                         f"n_relevant={k}")
    rng = np.random.default_rng(int(seed))
    X = np.zeros((n, T, P))
    rel = np.zeros((n, T), bool)
    y = np.array([1.0 if i % 2 == 0 else -1.0 for i in range(n)])
    for i in range(n):
        pos = rng.choice(T, size=k, replace=False)
        rel[i, pos] = True
        s = rng.choice([-1.0, 1.0], size=T)
        X[i, :, 1] = np.where(rel[i], y[i], s * float(sigma))
        X[i, rel[i], 0] = 1.0
        X[i, :, 2:P - 1] = float(noise) * rng.standard_normal((T, P - 3))
    return {"tokens": X.round(6), "target": y.tolist(), "names": [f"s{i}" for i in range(n)], "relevant": rel}
