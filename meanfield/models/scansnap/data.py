"""The sequence classes of Tian et al. "Scan and Snap" (NeurIPS 2023) as an engine data set.

One query token m shared by ``n_next`` next tokens n_1..n_K (the classes); the contextual
tokens of class n are drawn from P(l | n): ``n_common`` common tokens (in every class, weight
``n_distinct`` each) and ``n_distinct`` distinct tokens of class n with weights 1, 2, ..., n_distinct
(the official code's linspace(min, max) co-occurrence, facebookresearch/luckmatters
``ssl/real-dataset/decoder_only.py`` ``Dataset2``, read, not copied). The paper's long-sequence limit
(assumption (b)) makes the attended token the expectation over P(l | n); the engine's multiset counts
give it exactly: one sequence per class, every token of its support once, its count the weight.
"""

from __future__ import annotations

import numpy as np


def features(n_common: int = 4, n_distinct: int = 5, n_next: int = 2) -> list[str]:
    """The token names: c1.., the distinct tokens d<class>_<j>, and the query m.

    Parameters
    ----------
    n_common, n_distinct, n_next : int

    Returns
    -------
    list of str

    Examples
    --------
    >>> features(1, 2, 2)
    ['c1', 'd1_1', 'd1_2', 'd2_1', 'd2_2', 'm']
    """
    n_common, n_distinct, n_next = _sizes(n_common, n_distinct, n_next)
    return ([f"c{i + 1}" for i in range(n_common)]
            + [f"d{k + 1}_{j + 1}" for k in range(n_next) for j in range(n_distinct)] + ["m"])


def _sizes(n_common, n_distinct, n_next):
    out = []
    for name, v, lo in (("n_common", n_common, 0), ("n_distinct", n_distinct, 1), ("n_next", n_next, 2)):
        if isinstance(v, bool) or int(v) != v or int(v) < lo or int(v) > 64:
            raise ValueError(f"{name} must be an integer in [{lo}, 64]; got {v!r}")
        out.append(int(v))
    return out


def dataset(features, n_common: int = 4, n_distinct: int = 5, n_next: int = 2) -> dict:
    """One sequence per class n_k: every common and every distinct token of n_k once, with its
    co-occurrence count (common: n_distinct; distinct j: j), then the query m; target k.

    Parameters
    ----------
    features : tuple of str
        The dictionary (:func:`features`).
    n_common, n_distinct, n_next : int

    Returns
    -------
    dict
        tokens (n_next, L, P), counts, target (class indices), names.

    Examples
    --------
    >>> d = dataset(features(1, 2, 2), 1, 2, 2)
    >>> d["counts"][0], d["target"]
    ([2, 1, 2, 1], [0, 1])
    """
    n_common, n_distinct, n_next = _sizes(n_common, n_distinct, n_next)
    P = len(features)
    if P != n_common + n_next * n_distinct + 1:
        raise ValueError("features: must be features(n_common, n_distinct, n_next)")
    eye = np.eye(P)
    toks, counts = [], []
    for k in range(n_next):
        idx = list(range(n_common)) + [n_common + k * n_distinct + j for j in range(n_distinct)] + [P - 1]
        toks.append(eye[idx])
        counts.append([n_distinct] * n_common + list(range(1, n_distinct + 1)) + [1])
    return {"tokens": np.array(toks), "counts": counts, "target": list(range(n_next)),
            "names": [f"n{k + 1}" for k in range(n_next)]}
