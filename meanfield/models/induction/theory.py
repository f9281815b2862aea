"""Theory side of the induction-head system (seed 002, ``docs/conventions.md``):
the exact stationary law of an n-gram chain, the modified chi-square mutual
information that phase 1 is claimed to maximise, and the in-context
predictors the trained model is compared with (generalised induction head,
Bayes-optimal, unigram).

Conventions are those of :mod:`meanfield.models.induction.data` (tokens (N, L+1)
int64, column l-1 = position l; kernels (N, d**p, d) with row index
``zi = sum_k x_{l-pa[k]} d**(p-1-k)``, pa sorted ascending).

Stationary law
--------------

For a window length ``W >= r = max(pa)`` the chain is lifted to the windows
``w(l) = (x_{l-1}, x_{l-2}, ..., x_{l-W})`` of the last W tokens (state index
``sum_{j=1}^{W} x_{l-j} d**(W-j)``: lag 1 is the most significant digit). The
window moves to ``(x_l, x_{l-1}, ..., x_{l-W+1})`` with probability
``pi(x_l | x_{l-pa})``; every Dirichlet kernel is positive, so this chain on
``[d]^W`` is irreducible and has one stationary law ``mu_W``, computed by the
Grassmann-Taksar-Heyman (GTH) elimination (no subtractions, so it stays
accurate when alpha is small and the kernel has tiny entries; batched over
kernels). The stationary joint law of the window and the next token is
``J[x_{l-1}, ..., x_{l-W}, x_l] = mu_W(window) pi(x_l | parents)``
(:func:`joint_law`). If a kernel has exact zeros that make the window chain
reducible (possible only when the Dirichlet draw underflows, alpha << 0.1),
GTH meets a zero pivot; that kernel's law is then the Cesaro average over
the first 4096 steps of the chain started from uniform windows (the
spec's x_1..x_r uniform), reported in ``n_reducible``.

Modified chi-square mutual information
--------------------------------------

For a set S of lags (z = x_{l-S}, e = x_l, all under mu_pi) and exponent k
(the spec's value is k = 2; ``exponent`` is an option because the spec asks
to check it against simulation):

    I~_k(S) = E_pi  sum_z mu_pi(z)^k ( sum_e mu_pi(e | z)^2 / mu_pi(e) - 1 )

k = 1 is the ordinary chi-square mutual information chi^2(mu(z, e) || mu(z)
mu(e)), which never decreases when lags are added; k = 2 is what the
small-a gradient of phase 1 sees: E[1{z_l = z_{L+1}} (1{x_l = x_{L+1}} /
mu(x_{L+1}) - 1)] for two far-apart positions is exactly the k = 2 sum, and
the factor mu(z)^2 ~ d^{-|S|} penalises large S. The empty set has I~ = 0.
E_pi is a Monte Carlo mean over ``n_kernels`` kernels drawn from the
Dirichlet(alpha) prior by the project's generator (seed ``seed``: the same
kernels as the sequences of a data set with that seed), with its standard
error (standard deviation / sqrt(n_kernels)).

**Candidate lags** (:func:`chi2_table`): the subsets S range over the lags
the model can copy, i.e. the union of the heads' RPE windows
(``first_lags[h] .. first_lags[h] + M - 1``; with the default first lags
this is 1..M), with |S| <= D, the empty set included; ``lags`` overrides.
The window length is W = max(r, largest candidate lag).

Predictors (each returns (N, d) distributions over x_{L+1})
-------------------------------------------------------------

* :func:`gih_predict`: the generalised induction head
  ``y(e) ∝ sum_{l=1}^{L} exp(a 1{x_{l-S} = x_{L+1-S}}) 1{x_l = e}``. Position
  l matches when every lag s of S exists (l - s >= 1) and x_{l-s} =
  x_{L+1-s}; positions whose history does not exist (l <= max S) never
  match. ``a = inf`` is the limit: the in-context frequency of e after the
  matching histories; when no position matches, the limit of the formula is
  the uniform weight over all positions, i.e. the **unigram in-context
  frequency** (the fallback). This is also the trained model's limit when c
  sits on S and each head's RPE is one-hot on its lag of S: the similarities
  are then exactly the match indicators, so the model's y_hat equals the GIH's
  for every a (and the a -> infinity limits agree). One boundary caveat: a
  head whose window starts below its lag s (default windows 1..M) looks, at
  a position l <= s, at the lags that exist there (the softmax runs over
  them), so such a position can count as a match for the model but never for
  the GIH; with each head's window starting at its lag (``first_lags``) the
  two agree at every position.
* :func:`bayes_predict`: the Bayes-optimal in-context predictor, the
  Dirichlet posterior mean (N(z, e) + alpha) / (N(z) + d alpha) of the row
  z = x_{L+1-pa}, with the transition counts N over positions r < l <= L.
* :func:`unigram_predict`: in-context token frequency (GIH with a = 0).

Losses (:func:`losses`) use the model's log(0) guard
``-log(max(y[x_{L+1}], yhat_floor))``; ``loss_seen`` is the mean over the
sequences whose target occurs in x_1..x_L (where the model, the GIH and the
unigram predictor are never clipped), so that comparisons are not dominated
by the clip value.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from .data import generate, normalize_pa

CESARO_STEPS = 4096

# ---------------------------------------------------------------- stationary law


def window_transition(kernels: np.ndarray, pa, d: int, W: int) -> np.ndarray:
    """(B, d**W, d**W) transition matrices of the window chain (module docstring)
    of kernels (B, d**p, d) (or one kernel (d**p, d))."""
    pa = normalize_pa(pa)
    if W < pa[-1]:
        raise ValueError(f"W: must be >= max(pa) = {pa[-1]}, got {W}")
    K = np.asarray(kernels, dtype=np.float64)
    single = K.ndim == 2
    K = K[None] if single else K
    B = K.shape[0]
    n = d ** W
    idx = np.arange(n)
    z = np.zeros(n, dtype=np.int64)
    for lag in pa:
        z = z * d + (idx // d ** (W - lag)) % d
    P = np.zeros((B, n, n))
    rows = np.repeat(idx, d)
    x = np.tile(np.arange(d), n)
    cols = x * d ** (W - 1) + rows // d
    P[:, rows, cols] = K[:, z[rows], x]
    return P[0] if single else P


def stationary(P: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Stationary laws of row-stochastic matrices P (..., n, n) by GTH elimination.

    Returns (mu (..., n), reducible (...,) bool). Where a zero pivot shows a
    reducible chain, mu is the Cesaro average of the first
    :data:`CESARO_STEPS` laws from the uniform start (see the module docstring)."""
    P = np.asarray(P, dtype=np.float64)
    shape = P.shape[:-2]
    n = P.shape[-1]
    A = P.reshape((-1, n, n)).copy()
    B = A.shape[0]
    bad = np.zeros(B, dtype=bool)
    for k in range(n - 1, 0, -1):
        s = A[:, k, :k].sum(axis=1)
        zero = ~(s > 0)
        bad |= zero
        s = np.where(zero, 1.0, s)
        A[:, :k, k] /= s[:, None]
        A[:, :k, :k] += A[:, :k, k, None] * A[:, k, None, :k]
    mu = np.zeros((B, n))
    mu[:, 0] = 1.0
    for k in range(1, n):
        mu[:, k] = np.einsum("bi,bi->b", mu[:, :k], A[:, :k, k])
    mu /= mu.sum(axis=1, keepdims=True)
    if bad.any():
        Pb = P.reshape((-1, n, n))[bad]
        q = np.full((Pb.shape[0], n), 1.0 / n)
        acc = np.zeros_like(q)
        for _ in range(CESARO_STEPS):
            acc += q
            q = np.einsum("bi,bij->bj", q, Pb)
        mu[bad] = acc / CESARO_STEPS
    return mu.reshape(shape + (n,)), bad.reshape(shape)


def joint_law(kernels: np.ndarray, pa, d: int, W: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Stationary joint law of (x_{l-1}, ..., x_{l-W}, x_l) for kernels (B, d**p, d):
    an array (B,) + (d,)*W + (d,) (lag j on axis j), and the reducible flags (B,)."""
    pa = normalize_pa(pa)
    W = pa[-1] if W is None else int(W)
    K = np.asarray(kernels, dtype=np.float64)
    single = K.ndim == 2
    K = K[None] if single else K
    B = K.shape[0]
    mu, bad = stationary(window_transition(K, pa, d, W))
    n = d ** W
    idx = np.arange(n)
    z = np.zeros(n, dtype=np.int64)
    for lag in pa:
        z = z * d + (idx // d ** (W - lag)) % d
    J = mu[:, :, None] * K[:, z, :]
    J = J.reshape((B,) + (d,) * W + (d,))
    return (J[0], bad[0]) if single else (J, bad)


def marginal(J: np.ndarray, S, W: int) -> np.ndarray:
    """Joint law (B, d**|S|, d) of (x_{l-S}, x_l) from a joint law J (B,)+(d,)*W+(d,);
    z flattened like the kernels (smallest lag most significant)."""
    S = tuple(sorted(int(s) for s in S))
    B = J.shape[0]
    d = J.shape[-1]
    drop = tuple(j for j in range(1, W + 1) if j not in S)
    m = J.sum(axis=drop) if drop else J
    return m.reshape(B, d ** len(S), d)


def chi2_mi(J: np.ndarray, S, W: int, exponent: float = 2.0) -> np.ndarray:
    """I~_k(S) of each joint law (B,) -> (B,) (module docstring; k = ``exponent``)."""
    if len(tuple(S)) == 0:
        return np.zeros(J.shape[0])
    m = marginal(J, S, W)
    mz = m.sum(axis=2)                                   # (B, nz)
    me = m.sum(axis=1)                                   # (B, d)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(me[:, None, :] > 0, m * m / me[:, None, :], 0.0).sum(axis=2)  # sum_e mu(z,e)^2/mu(e)
        inner = np.where(mz > 0, ratio / mz**2 - 1.0, 0.0)                              # sum_e mu(e|z)^2/mu(e) - 1
        term = np.where(mz > 0, mz ** exponent * inner, 0.0)
    return term.sum(axis=1)


def lag_subsets(lags, D: int) -> list[tuple[int, ...]]:
    """Subsets of the candidate lags with |S| <= D, the empty set first, by size then lexicographically."""
    lags = sorted(set(int(v) for v in lags))
    out: list[tuple[int, ...]] = []
    for k in range(0, min(D, len(lags)) + 1):
        out.extend(itertools.combinations(lags, k))
    return out


def candidate_lags(M: int, first_lags=None, H: int | None = None) -> tuple[int, ...]:
    """Union of the heads' windows first .. first + M - 1 (default first lags 1: lags 1..M)."""
    if first_lags is None:
        return tuple(range(1, M + 1))
    out = set()
    for f in first_lags:
        out.update(range(int(f), int(f) + M))
    return tuple(sorted(out))


def sample_kernels(n: int, d: int, pa, alpha: float, seed=0) -> np.ndarray:
    """n kernels (n, d**p, d) from the Dirichlet(alpha) prior, by the project's generator
    (those of the sequences of ``generate(n, ..., seed=seed)``)."""
    pa = normalize_pa(pa)
    return generate(n, d, pa[-1] + 1, pa, alpha, seed, kernels=True).kernels


@dataclass
class Chi2Result:
    """I~(S) for every candidate subset S (Monte Carlo over the prior)."""

    d: int
    pa: tuple[int, ...]
    alpha: float
    lags: tuple[int, ...]
    D: int
    n_kernels: int
    seed: object
    exponents: tuple[float, ...]
    subsets: list[tuple[int, ...]]
    mean: dict = field(default_factory=dict)    # exponent -> (nS,) Monte Carlo means
    se: dict = field(default_factory=dict)      # exponent -> (nS,) standard errors
    n_reducible: int = 0
    values: dict = field(default_factory=dict, repr=False)  # exponent -> (n_kernels, nS) per-kernel values

    def diff_se(self, exponent: float, i: int, j: int) -> float:
        """Standard error of I~(S_i) - I~(S_j) (paired: the same kernels for every subset)."""
        v = self.values[float(exponent)]
        if v.shape[0] < 2:
            return 0.0
        return float(np.std(v[:, i] - v[:, j], ddof=1) / math.sqrt(v.shape[0]))

    def ranking(self, exponent: float = 2.0) -> list[tuple[int, ...]]:
        """Subsets by decreasing I~ (ties broken by smaller subsets first, then canonical order)."""
        m = self.mean[float(exponent)]
        order = sorted(range(len(self.subsets)), key=lambda i: (-m[i], len(self.subsets[i]), i))
        return [self.subsets[i] for i in order]

    def S_star(self, exponent: float = 2.0) -> tuple[int, ...]:
        return self.ranking(exponent)[0]

    def gap_in_se(self, exponent: float = 2.0) -> float:
        """(I~(S*) - I~(runner-up)) in units of the paired standard error of the difference:
        how well the Monte Carlo resolves S*."""
        m = self.mean[float(exponent)]
        rk = self.ranking(exponent)
        if len(rk) < 2:
            return math.inf
        i, j = self.subsets.index(rk[0]), self.subsets.index(rk[1])
        den = self.diff_se(exponent, i, j)
        return (m[i] - m[j]) / den if den > 0 else math.inf

    def to_dict(self) -> dict:
        out = {"d": self.d, "pa": list(self.pa), "alpha": self.alpha, "lags": list(self.lags), "D": self.D,
               "n_kernels": self.n_kernels, "n_reducible": self.n_reducible,
               "subsets": [list(S) for S in self.subsets], "exponents": {}}
        for k in self.exponents:
            out["exponents"][str(k)] = {
                "mean": [float(v) for v in self.mean[k]], "se": [float(v) for v in self.se[k]],
                "ranking": [list(S) for S in self.ranking(k)], "S_star": list(self.S_star(k)),
                "gap_in_se": float(self.gap_in_se(k))}
        return out


def chi2_table(d: int = 3, pa=(1, 2), alpha: float = 1.0, lags=(1, 2, 3), D: int = 2,
               n_kernels: int = 2000, seed=0, exponents=(2.0,), chunk: int = 1000) -> Chi2Result:
    """I~_k(S) (mean, standard error over ``n_kernels`` prior draws) for every
    subset of ``lags`` with |S| <= D and every exponent k in ``exponents``."""
    pa = normalize_pa(pa)
    lags = tuple(sorted(set(int(v) for v in lags)))
    if not lags or lags[0] < 1:
        raise ValueError(f"lags: must be positive integers, got {lags!r}")
    exponents = tuple(float(k) for k in exponents)
    W = max(pa[-1], lags[-1])
    subs = lag_subsets(lags, D)
    K = sample_kernels(n_kernels, d, pa, alpha, seed)
    vals = {k: np.empty((n_kernels, len(subs))) for k in exponents}
    nred = 0
    for lo in range(0, n_kernels, chunk):
        J, bad = joint_law(K[lo: lo + chunk], pa, d, W)
        nred += int(bad.sum())
        for i, S in enumerate(subs):
            for k in exponents:
                vals[k][lo: lo + chunk, i] = chi2_mi(J, S, W, k)
    res = Chi2Result(d, pa, float(alpha), lags, int(D), int(n_kernels), seed, exponents, subs, n_reducible=nred)
    for k in exponents:
        res.values[k] = vals[k]
        res.mean[k] = vals[k].mean(axis=0)
        res.se[k] = vals[k].std(axis=0, ddof=1) / math.sqrt(n_kernels) if n_kernels > 1 else np.zeros(len(subs))
    return res


# ---------------------------------------------------------------- predictors


def match_matrix(tokens: np.ndarray, lags) -> np.ndarray:
    """(N, L) bool: position l (column l-1) matches the current history on ``lags``:
    l - s >= 1 and x_{l-s} = x_{L+1-s} for every s in lags (all True for lags = ())."""
    tokens = np.asarray(tokens)
    N, Lp1 = tokens.shape
    L = Lp1 - 1
    m = np.ones((N, L), dtype=bool)
    for s in lags:
        s = int(s)
        cur = tokens[:, L - s]                     # x_{L+1-s}
        ok = np.zeros((N, L), dtype=bool)
        if s < L:
            ok[:, s:] = tokens[:, : L - s] == cur[:, None]   # position l = i+1 >= s+1 sees x_{l-s} = column i-s
        m &= ok
    return m


def _counts(tokens: np.ndarray, d: int, lags):
    """N(e) (N, d) counts in x_1..x_L, Nm(e) (N, d) counts after matching histories."""
    tokens = np.asarray(tokens)
    L = tokens.shape[1] - 1
    onehot = tokens[:, :L, None] == np.arange(d)[None, None, :]
    m = match_matrix(tokens, lags)
    return onehot.sum(axis=1).astype(np.float64), (onehot & m[:, :, None]).sum(axis=1).astype(np.float64)


def gih_predict(tokens: np.ndarray, d: int, lags, a: float) -> np.ndarray:
    """Generalised induction head y(e) ∝ sum_l exp(a 1{match_l}) 1{x_l = e} (N, d);
    a = inf: frequency after matching histories, unigram when none matches."""
    L = np.asarray(tokens).shape[1] - 1
    Ne, Nm = _counts(tokens, d, lags)
    nm = Nm.sum(axis=1, keepdims=True)
    if math.isinf(a) and a > 0:
        uni = Ne / L
        with np.errstate(invalid="ignore", divide="ignore"):
            after = np.where(nm > 0, Nm / np.where(nm > 0, nm, 1.0), 0.0)
        return np.where(nm > 0, after, uni)
    a = float(a)
    if a >= 0:  # divide numerator and denominator by e^a
        q = math.exp(-a)
        return (Nm + q * (Ne - Nm)) / (nm + q * (L - nm))
    q = math.exp(a)
    return (q * Nm + (Ne - Nm)) / (q * nm + (L - nm))


def unigram_predict(tokens: np.ndarray, d: int) -> np.ndarray:
    """In-context frequency of each token in x_1..x_L (N, d)."""
    L = np.asarray(tokens).shape[1] - 1
    Ne, _ = _counts(tokens, d, ())
    return Ne / L


def bayes_predict(tokens: np.ndarray, d: int, pa, alpha: float) -> np.ndarray:
    """Dirichlet posterior mean (N(z*, e) + alpha) / (N(z*) + d alpha) on the true parents (N, d):
    z* = x_{L+1-pa}; N counts transitions at positions r < l <= L."""
    pa = normalize_pa(pa)
    tokens = np.asarray(tokens)
    L = tokens.shape[1] - 1
    r = pa[-1]
    m = match_matrix(tokens, pa)
    m[:, :r] = False  # (already: positions l <= r have no full parent context)
    onehot = tokens[:, :L, None] == np.arange(d)[None, None, :]
    cnt = (onehot & m[:, :, None]).sum(axis=1).astype(np.float64)
    return (cnt + alpha) / (cnt.sum(axis=1, keepdims=True) + d * alpha)


def losses(probs: np.ndarray, tokens: np.ndarray, yhat_floor: float = 1e-300) -> dict:
    """Guarded cross-entropy of predictions (N, d) for x_{L+1}: ``loss`` (all sequences),
    ``loss_seen`` (sequences whose target occurs in the context), ``n_seen``, ``n_clipped``."""
    tokens = np.asarray(tokens)
    L = tokens.shape[1] - 1
    tgt = tokens[:, L]
    p = probs[np.arange(len(tgt)), tgt]
    nll = -np.log(np.maximum(p, yhat_floor))
    seen = (tokens[:, :L] == tgt[:, None]).any(axis=1)
    return {"loss": float(nll.mean()), "loss_seen": float(nll[seen].mean()) if seen.any() else math.nan,
            "n_seen": int(seen.sum()), "n_clipped": int((p <= yhat_floor).sum()), "N": int(len(tgt))}


def seen_mask(tokens: np.ndarray) -> np.ndarray:
    """(N,) bool: the target x_{L+1} occurs in x_1..x_L."""
    tokens = np.asarray(tokens)
    L = tokens.shape[1] - 1
    return (tokens[:, :L] == tokens[:, L][:, None]).any(axis=1)


def gih_loss(tokens: np.ndarray, d: int, lags, a: float, yhat_floor: float = 1e-300, seen_only: bool = True) -> float:
    out = losses(gih_predict(tokens, d, lags, a), tokens, yhat_floor)
    return out["loss_seen"] if seen_only else out["loss"]


def gih_best_a(tokens: np.ndarray, d: int, lags, a_max: float = 50.0, yhat_floor: float = 1e-300) -> float:
    """The a minimising the GIH's mean loss on ``tokens`` (seen targets), in [0, a_max]
    (bounded Brent search on the counts; a_max when the loss still decreases there)."""
    from scipy.optimize import minimize_scalar

    tokens = np.asarray(tokens)
    seen = seen_mask(tokens)
    tok = tokens[seen]
    L = tok.shape[1] - 1
    Ne, Nm = _counts(tok, d, lags)
    nm = Nm.sum(axis=1)
    tgt = tok[:, L]
    i = np.arange(len(tgt))
    ne_t, nm_t = Ne[i, tgt], Nm[i, tgt]

    def f(a):
        q = math.exp(-a)
        p = (nm_t + q * (ne_t - nm_t)) / (nm + q * (L - nm))
        return float(-np.log(np.maximum(p, yhat_floor)).mean())

    res = minimize_scalar(f, bounds=(0.0, a_max), method="bounded", options={"xatol": 1e-6})
    return float(res.x)
