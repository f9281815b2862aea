"""The K-mixture data set (Definition 2.1) as an exact, finite, weighted sample set.

The model is permutation invariant in the tokens, so a sample is a multiset of
tokens and the population loss is a finite weighted sum. Every token is a
signed basis feature: token ``i`` of sample ``n`` is ``sgn[n, i] * e[idx[n, i]]``
with the reduced basis ``E = [c1..cK, v1..vK]`` (feature index ``k`` is ``c_{k+1}``,
``K + k`` is ``v_{k+1}``).

Token order inside a sample (irrelevant to the model, fixed for reading):
``[c_k, y v_k, distractor_1, ..., distractor_{L-2}]``; distractors are sorted.

Extensions (defaults keep the paper's setting, bit for bit):

* label probability ``label_prob`` = P(y = +1) (default 1/2): the weight of a
  sample with label y is multiplied by ``label_prob`` or ``1 - label_prob``
  instead of 1/2;
* label noise ``label_noise`` = rho, a flip probability: every sample keeps its
  tokens (built from its clean label, so its v_k token is ``y_clean v_k``) and
  appears twice, with the clean label (weight times 1 - rho) and with the
  flipped label (weight times rho). Flipped copies follow all clean ones, in
  the same order; ``flipped`` marks them. ``y`` is the label the loss sees;
  ``consistent`` keeps referring to the tokens (every distractor sign equals the
  sign of the sample's v_k token);
* :func:`training_set`: a FINITE training set of n sequences drawn from the
  mixture (seeded), every token carrying Gaussian noise N(0, sigma^2 I_d) in an
  ambient R^d in which the features are the columns of a random embedding E
  (orthonormal, or with a given Gram matrix); each sequence has weight 1/n
  (empirical risk).
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
      distractor_group (n, L-2) int64, distractor_sign (n, L-2) float64;
      flipped (n,) bool: the label is the flipped one (label noise), None when
      the set was built without that information (read it through
      :attr:`is_flipped`).
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
    flipped: np.ndarray | None = None
    label_prob: float = 0.5
    label_noise: float = 0.0

    @property
    def is_flipped(self) -> np.ndarray:
        """(n,) bool: True where the label is flipped (label noise)."""
        if self.flipped is None:
            return np.zeros(self.n, dtype=bool)
        return np.asarray(self.flipped, dtype=bool)

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
        flip = " (flipped)" if self.is_flipped[i] else ""
        return f"k={self.group[i] + 1} y={int(self.y[i]):+d}{flip} [{', '.join(toks)}]"


def n_samples(K: int, L: int) -> int:
    """Number of distinct samples: K groups x 2 labels x multisets of L-2 distractors
    drawn from 2(K-1) signed features."""
    return K * 2 * comb(2 * (K - 1) + L - 3, L - 2)


def _check_common(K: int, L: int, p, label_prob: float, label_noise: float) -> np.ndarray:
    if K < 2:
        raise ValueError(f"K: must be an integer >= 2, got {K}")
    if L < 2:
        raise ValueError(f"L: must be an integer >= 2, got {L}")
    if not (0.0 < float(label_prob) < 1.0):
        raise ValueError(f"label_prob: must be in (0, 1), got {label_prob}")
    if not (0.0 <= float(label_noise) < 0.5):
        raise ValueError(f"label_noise: must be in [0, 0.5), got {label_noise}")
    if p is None:
        return np.full(K, 1.0 / K)
    p = np.asarray(p, dtype=float)
    if p.shape != (K,) or np.any(~np.isfinite(p)) or np.any(p <= 0):
        raise ValueError(f"p: must be {K} positive group weights, got {list(np.ravel(p))}")
    return p / p.sum()


def sample_set(K: int, L: int, p=None, label_prob: float = 0.5, label_noise: float = 0.0) -> SampleSet:
    """Enumerate the K-mixture's samples exactly.

    ``p``: group weights (length K, positive, normalised here); uniform by default.
    ``label_prob``: P(y = +1) (default 1/2); ``label_noise``: flip probability
    (default 0; see the module docstring: with rho > 0 every sample also
    appears with the flipped label, weight times rho).
    Distractors: each of the L-2 tokens is ``eps v_{k'}`` with k' uniform on the
    other K-1 groups and eps uniform on {+1, -1}, independently; a multiset of
    counts ``n_t`` has probability ``(L-2)! / prod(n_t!) * (1 / (2(K-1)))^(L-2)``.
    """
    p = _check_common(K, L, p, label_prob, label_noise)
    q_pos = float(label_prob)
    rho = float(label_noise)
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
                w = p[k] * (q_pos if y > 0 else 1.0 - q_pos) * mult * q**nd
                dg = [types[t][0] for t in combo]
                ds = [types[t][1] for t in combo]
                idx = [k, K + k] + [K + g for g in dg]
                sgn = [1.0, y] + ds
                rows.append((idx, sgn, y, k, w, all(s == y for s in ds), dg, ds))
    n = len(rows)
    assert n == n_samples(K, L)
    flipped = [False] * n
    if rho > 0.0:
        # clean copies (weight times 1 - rho), then flipped copies (weight times rho), same order
        rows = ([r[:2] + (r[2], r[3], r[4] * (1.0 - rho)) + r[5:] for r in rows]
                + [r[:2] + (-r[2], r[3], r[4] * rho) + r[5:] for r in rows])
        flipped = [False] * n + [True] * n
        n = 2 * n
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
        flipped=np.array(flipped, dtype=bool),
    )
    for a in arr.values():
        a.setflags(write=False)
    return SampleSet(K=K, L=L, p=tuple(float(x) for x in p), label_prob=q_pos, label_noise=rho, **arr)


def token_matrix(samples: SampleSet, i: int) -> np.ndarray:
    """Coefficients Z (P, L) of sample ``i`` in the reduced basis: X = E Z."""
    Z = np.zeros((samples.P, samples.L))
    for l in range(samples.L):
        Z[samples.idx[i, l], l] += samples.sgn[i, l]
    return Z


def random_embedding(P: int, d: int, rng: np.random.Generator, gram=None) -> np.ndarray:
    """Features E (d, P) in R^d: a random orthonormal frame (QR of a Gaussian, signs
    fixed), times ``chol(gram)^T`` when a Gram matrix is given, so that
    E^T E = gram (the identity by default)."""
    if d < P:
        raise ValueError(f"ambient_d: must be >= 2K = {P}, got {d}")
    Qf, R = np.linalg.qr(rng.standard_normal((d, P)))
    E = Qf * np.where(np.diag(R) < 0, -1.0, 1.0)
    if gram is not None:
        E = E @ np.linalg.cholesky(np.asarray(gram, dtype=float)).T
    return E


@dataclass(frozen=True)
class TrainingSet:
    """A finite training set of n noisy sequences (empirical risk, weights 1/n).

    ``samples``: the clean structure of the n drawn sequences as a
    :class:`SampleSet` (idx, sgn: the clean tokens ``sgn e_idx``; y: the label
    the loss sees; consistent, group, distractors, flipped as there; weight 1/n).
    ``E`` (d, P): the features in R^d; ``X`` (n, d, L): the explicit tokens,
    ``X[s, :, i] = sgn[s, i] E[:, idx[s, i]] + sigma xi``, xi ~ N(0, I_d) iid.
    """

    samples: SampleSet
    E: np.ndarray
    X: np.ndarray
    sigma: float
    seed: int

    @property
    def d(self) -> int:
        return int(self.E.shape[0])


def training_set(K: int, L: int, n: int, p=None, label_prob: float = 0.5, label_noise: float = 0.0,
                 sigma: float = 0.0, d: int | None = None, seed: int = 0, gram=None) -> TrainingSet:
    """Draw n sequences of the K-mixture (Definition 2.1) with noisy tokens.

    Per sequence: group k ~ Categorical(p), clean label y ~ +1 w.p. ``label_prob``;
    tokens c_k, y v_k and L-2 distractors eps v_k' (k' uniform on the other
    groups, eps uniform on {+1, -1}); the label the loss sees is flipped with
    probability ``label_noise``; every token gets N(0, sigma^2 I_d) noise.
    ``d``: ambient dimension (default 2K + 4); ``gram``: the features' Gram
    matrix (default: orthonormal features). Reproducible from ``seed``: one
    ``default_rng(seed)`` draws, in this order, the embedding, groups, labels,
    distractor groups, distractor signs, flips, noise.
    """
    p = _check_common(K, L, p, label_prob, label_noise)
    n = int(n)
    if n < 1:
        raise ValueError(f"n_train: must be an integer >= 1, got {n}")
    if sigma < 0 or not np.isfinite(sigma):
        raise ValueError(f"noise_sigma: must be a finite number >= 0, got {sigma}")
    P = 2 * K
    d = P + 4 if d is None else int(d)
    rng = np.random.default_rng(seed)
    E = random_embedding(P, d, rng, gram)
    nd = L - 2
    group = rng.choice(K, size=n, p=p).astype(np.int64)
    y_clean = np.where(rng.random(n) < label_prob, 1.0, -1.0)
    dg = rng.integers(0, K - 1, size=(n, nd))
    dg = (dg + (dg >= group[:, None])).astype(np.int64)     # uniform on the other groups
    ds = np.where(rng.random((n, nd)) < 0.5, -1.0, 1.0)
    flipped = rng.random(n) < label_noise if label_noise > 0 else np.zeros(n, dtype=bool)
    noise = rng.standard_normal((n, d, L)) * sigma
    # distractors sorted by (group, sign), as in sample_set
    order = np.lexsort((ds, dg), axis=1) if nd else np.zeros((n, 0), dtype=np.int64)
    dg = np.take_along_axis(dg, order, axis=1)
    ds = np.take_along_axis(ds, order, axis=1)
    idx = np.concatenate([group[:, None], (K + group)[:, None], K + dg], axis=1).astype(np.int64)
    sgn = np.concatenate([np.ones((n, 1)), y_clean[:, None], ds], axis=1)
    X = np.einsum("dsl,sl->sdl", E[:, idx], sgn) + noise
    arr = dict(
        idx=idx, sgn=sgn, y=np.where(flipped, -y_clean, y_clean), group=group,
        weight=np.full(n, 1.0 / n), consistent=np.all(ds == y_clean[:, None], axis=1),
        distractor_group=dg.reshape(n, nd), distractor_sign=ds.reshape(n, nd), flipped=flipped,
    )
    for a in arr.values():
        a.setflags(write=False)
    X.setflags(write=False)
    samples = SampleSet(K=K, L=L, p=tuple(float(x) for x in p), label_prob=float(label_prob),
                        label_noise=float(label_noise), **arr)
    return TrainingSet(samples=samples, E=E, X=X, sigma=float(sigma), seed=int(seed))


def samples_group(samples: SampleSet) -> dict:
    """The ``samples`` group of a run file (datasets of a sample set)."""
    out = {
        "idx": samples.idx, "sgn": samples.sgn, "y": samples.y, "group": samples.group,
        "weight": samples.weight, "consistent": samples.consistent.astype(np.int8),
        "distractor_group": samples.distractor_group, "distractor_sign": samples.distractor_sign,
        "description": np.array([samples.describe(i) for i in range(samples.n)], dtype=object),
    }
    if samples.is_flipped.any():
        out["flipped"] = samples.is_flipped.astype(np.int8)
    return out


# ------------------------------------------------------------------ general token vectors
#
# Feature Grams and finite noisy training sets: every token is a general
# vector, given by its coordinates x in an orthonormal basis Q (d x r) of a
# subspace containing every token (non-orthogonal features: Q spans the
# features, E = Q C with C = chol(Gamma)^T, a token ``sgn e_a`` has
# x = sgn C[:, a], r = P; a training set: the first P columns of Q span the
# features, the rest the part of the tokens outside them, r <= min(d, n L + P)).
# The engine's mixture description (``meanfield.models.mixture.family``) reads its
# dictionary and tokens from here.


@dataclass(frozen=True)
class DenseData:
    """Tokens in an orthonormal basis Q of a subspace containing every token.

    samples: the sample structure (labels ``y``, ``weight``, ``consistent``,
    ``group``, ``flipped``, and the clean tokens ``idx``/``sgn``);
    X (n, L, r): token coordinates, X[s, i] = Q^T (token i of sample s);
    C (r, P): the features' coordinates (E = Q C); gram (P, P) = C^T C;
    Q (d, r), E (d, P), tokens (n, d, L): the ambient picture (training sets only).
    """

    samples: SampleSet
    X: np.ndarray
    C: np.ndarray
    gram: np.ndarray
    Q: np.ndarray | None = None
    E: np.ndarray | None = None
    tokens: np.ndarray | None = None

    @property
    def r(self) -> int:
        return int(self.X.shape[2])

    @property
    def P(self) -> int:
        return int(self.C.shape[1])

    @property
    def n(self) -> int:
        return int(self.X.shape[0])


def population_data(K: int, L: int, p=None, label_prob: float = 0.5, label_noise: float = 0.0,
                    gram=None) -> DenseData:
    """The exact population (``data.sample_set``) with features of Gram matrix
    ``gram`` (None: orthonormal): basis coordinates x = sgn C[:, idx],
    C = chol(gram)^T."""
    samples = sample_set(K, L, p, label_prob, label_noise)
    P = 2 * K
    G = np.eye(P) if gram is None else np.asarray(gram, dtype=float)
    C = np.linalg.cholesky(G).T.copy()
    X = np.ascontiguousarray(np.transpose(C[:, samples.idx] * samples.sgn[None], (1, 2, 0)))
    return DenseData(samples=samples, X=X, C=C, gram=G.copy())


def basis_of(E: np.ndarray, tokens: np.ndarray, rtol: float = 1e-10) -> np.ndarray:
    """Orthonormal Q (d, r): the first P columns span the features E (QR, signs
    fixed), the others the part of the tokens (n, d, L) outside them (left
    singular vectors above ``rtol`` times the largest)."""
    d, P = E.shape
    Q1, R = np.linalg.qr(E)
    Q1 = Q1 * np.where(np.diag(R) < 0, -1.0, 1.0)
    Z = np.transpose(tokens, (1, 0, 2)).reshape(d, -1)
    Z = Z - Q1 @ (Q1.T @ Z)
    Z = Z - Q1 @ (Q1.T @ Z)  # reorthogonalise once
    if Z.size == 0:
        return Q1
    U, s, _ = np.linalg.svd(Z, full_matrices=False)
    scale = max(float(np.abs(tokens).max()), float(np.abs(E).max()))
    keep = s > rtol * scale * max(1, Z.shape[1])
    return np.concatenate([Q1, U[:, keep]], axis=1) if keep.any() else Q1


def training_data(ts: TrainingSet) -> DenseData:
    """A finite (noisy) training set in the basis of :func:`basis_of`; checks
    that the basis holds every token to 1e-10 relative."""
    Q = basis_of(ts.E, ts.X)
    X = np.ascontiguousarray(np.einsum("dr,sdl->slr", Q, ts.X))
    back = np.einsum("dr,slr->sdl", Q, X)
    err = float(np.max(np.abs(back - ts.X))) if ts.X.size else 0.0
    if err > 1e-10 * max(1.0, float(np.max(np.abs(ts.X)))):
        raise RuntimeError(f"the token basis misses a token by {err:.3g}")
    C = Q.T @ ts.E
    return DenseData(samples=ts.samples, X=X, C=C, gram=ts.E.T @ ts.E, Q=Q, E=ts.E, tokens=ts.X)


def data_of(cfg) -> DenseData:
    """The data of a (MixtureConfig) config in a basis: the population with
    ``feature_gram``, or the finite training set when ``n_train`` is given."""
    from .config import gram_matrix

    gram = gram_matrix(cfg.feature_gram, cfg.K)
    if cfg.n_train is not None:
        ts = training_set(cfg.K, cfg.L, cfg.n_train, cfg.p, cfg.label_prob, cfg.label_noise, cfg.noise_sigma,
                          cfg.ambient_d, cfg.data_seed, gram)
        return training_data(ts)
    return population_data(cfg.K, cfg.L, cfg.p, cfg.label_prob, cfg.label_noise, gram)
