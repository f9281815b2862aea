"""The K-mixture data set (Definition 2.1) as an exact, finite, weighted sample set.

The model is permutation invariant in the tokens, so a sample is a multiset of
tokens and the population loss is a finite weighted sum. Every token is a
signed basis feature: token ``i`` of sample ``n`` is ``sgn[n, i] * e[idx[n, i]]``
with the reduced basis ``E = [c1..cK, v1..vK]`` (feature index ``k`` is ``c_{k+1}``,
``K + k`` is ``v_{k+1}``).

Token order inside a sample (irrelevant to the model, fixed for reading):
``[c_k, y v_k, distractor_1, ..., distractor_{L-2}]``; distractors are sorted.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from math import comb, factorial

import numpy as np


def feature_labels(K: int) -> list[str]:
    """``["c1", ..., "cK", "v1", ..., "vK"]``: the reduced basis, in order."""
    return [f"c{k + 1}" for k in range(K)] + [f"v{k + 1}" for k in range(K)]


@dataclass(frozen=True)
class SampleSet:
    """All distinct samples of the K-mixture with their exact probabilities.

    Arrays (n = number of distinct samples):
      idx (n, L) int64, sgn (n, L) float64: the tokens (see module docstring);
      y (n,) float64 label; group (n,) int64 (0-based k); weight (n,) float64
      (probability, sums to 1); consistent (n,) bool (every distractor sign == y);
      distractor_group (n, L-2) int64, distractor_sign (n, L-2) float64.
    """

    K: int
    L: int
    p: tuple[float, ...]
    idx: np.ndarray
    sgn: np.ndarray
    y: np.ndarray
    group: np.ndarray
    weight: np.ndarray
    consistent: np.ndarray
    distractor_group: np.ndarray
    distractor_sign: np.ndarray

    @property
    def n(self) -> int:
        return int(self.y.shape[0])

    @property
    def P(self) -> int:
        return 2 * self.K

    def describe(self, i: int) -> str:
        """A readable name of sample ``i``: e.g. ``k=1 y=+1 [c1, +v1, -v2]``."""
        labels = feature_labels(self.K)
        toks = []
        for a, s in zip(self.idx[i], self.sgn[i]):
            name = labels[a]
            toks.append(name if name.startswith("c") else ("+" if s > 0 else "-") + name)
        return f"k={self.group[i] + 1} y={int(self.y[i]):+d} [{', '.join(toks)}]"


def n_samples(K: int, L: int) -> int:
    """Number of distinct samples: K groups x 2 labels x multisets of L-2 distractors
    drawn from 2(K-1) signed features."""
    return K * 2 * comb(2 * (K - 1) + L - 3, L - 2)


def sample_set(K: int, L: int, p=None) -> SampleSet:
    """Enumerate the K-mixture's samples exactly.

    ``p``: group weights (length K, positive, normalised here); uniform by default.
    Distractors: each of the L-2 tokens is ``eps v_{k'}`` with k' uniform on the
    other K-1 groups and eps uniform on {+1, -1}, independently; a multiset of
    counts ``n_t`` has probability ``(L-2)! / prod(n_t!) * (1 / (2(K-1)))^(L-2)``.
    """
    if K < 2:
        raise ValueError(f"K: must be an integer >= 2, got {K}")
    if L < 2:
        raise ValueError(f"L: must be an integer >= 2, got {L}")
    if p is None:
        p = np.full(K, 1.0 / K)
    else:
        p = np.asarray(p, dtype=float)
        if p.shape != (K,) or np.any(~np.isfinite(p)) or np.any(p <= 0):
            raise ValueError(f"p: must be {K} positive group weights, got {list(np.ravel(p))}")
        p = p / p.sum()
    nd = L - 2
    n_types = 2 * (K - 1)
    q = 1.0 / n_types
    rows = []
    for k in range(K):
        others = [kk for kk in range(K) if kk != k]
        # distractor types: (group, sign), sign -1 before +1
        types = [(kk, s) for kk in others for s in (-1.0, 1.0)]
        for y in (1.0, -1.0):
            for combo in itertools.combinations_with_replacement(range(n_types), nd):
                counts = np.bincount(np.asarray(combo, dtype=int), minlength=n_types) if nd else np.zeros(n_types, int)
                mult = factorial(nd)
                for c in counts:
                    mult //= factorial(int(c))
                w = p[k] * 0.5 * mult * q**nd
                dg = [types[t][0] for t in combo]
                ds = [types[t][1] for t in combo]
                idx = [k, K + k] + [K + g for g in dg]
                sgn = [1.0, y] + ds
                rows.append((idx, sgn, y, k, w, all(s == y for s in ds), dg, ds))
    n = len(rows)
    assert n == n_samples(K, L)
    idx = np.array([r[0] for r in rows], dtype=np.int64).reshape(n, L)
    sgn = np.array([r[1] for r in rows], dtype=np.float64).reshape(n, L)
    arr = dict(
        idx=idx,
        sgn=sgn,
        y=np.array([r[2] for r in rows], dtype=np.float64),
        group=np.array([r[3] for r in rows], dtype=np.int64),
        weight=np.array([r[4] for r in rows], dtype=np.float64),
        consistent=np.array([r[5] for r in rows], dtype=bool),
        distractor_group=np.array([r[6] for r in rows], dtype=np.int64).reshape(n, nd),
        distractor_sign=np.array([r[7] for r in rows], dtype=np.float64).reshape(n, nd),
    )
    for a in arr.values():
        a.setflags(write=False)
    return SampleSet(K=K, L=L, p=tuple(float(x) for x in p), **arr)


def token_matrix(samples: SampleSet, i: int) -> np.ndarray:
    """Coefficients Z (P, L) of sample ``i`` in the reduced basis: X = E Z."""
    Z = np.zeros((samples.P, samples.L))
    for l in range(samples.L):
        Z[samples.idx[i, l], l] += samples.sgn[i, l]
    return Z
