"""Gaussian in-context regression prompts: the law, its exact moments, a sampler, the data family.

A prompt is Z = [x_1 .. x_N x_q; y_1 .. y_N 0] in R^{(d+1) x (N+1)} with
x_i, x_q ~ N(0, Lambda) in R^d, a task w ~ N(0, Sigma_w) drawn once per prompt,
labels y_i = w^T x_i + eps_i, eps_i ~ N(0, sigma^2), and the query's target
y_q = w^T x_q + eps_q. Tokens are coefficient vectors over the P = d + 1
features x1..xd, y (E = I), so the engine's Gram closure applies unchanged.

Given w the context tokens z_i = (x_i, y_i) are iid N(0, C_w) with

    C_w = [[Lambda, Lambda w], [w^T Lambda, w^T Lambda w + sigma^2]],

a polynomial of degree <= 2 in w: C_w = C0 + C1[w] + C2[w, w]. With
G = (1/N) sum_i z_i z_i^T (the key-value Gram the linear-attention head reads)

    E[G_ab | w] = C_ab,
    E[G_ab G_ce | w] = C_ab C_ce + (C_ac C_be + C_ae C_bc) / N       (Isserlis; derivations/icl_moments.py)

and x_q is independent of G given w (E[x_q x_q^T] = Lambda, E[x_q y_q | w] = Lambda w).
What is left, E over w of a polynomial of degree <= 4 in w, is Isserlis again
(E[w_k w_l w_m w_n] = S_kl S_mn + S_km S_ln + S_kn S_lm, S = Sigma_w), done here
on the coefficient tensors C0, C1, C2 (:func:`task_moments`), so the moment
tensors are exact for any Lambda, Sigma_w, sigma and N:

* ``K4[a, b, c, e] = E[G_ab G_ce]`` (P^4),
* ``M = K4 (x) Lambda``: ``E[G_ab x_qj G_ce x_ql]`` (the loss' quadratic form; used in Kronecker form),
* ``m[a, b, j] = E[G_ab x_qj y_q]``,
* ``c0 = E[y_q^2] = tr(Lambda Sigma_w) + sigma^2``.

A prediction linear in G (x) x_q, yhat = sum_{a,b,j} T_abj G_ab x_qj (every
linear-attention head with the query excluded from the keys, summed over heads:
``meanfield.engine.population``), has the population loss

    L(T) = (1/2) E[(yhat - y_q)^2] = (1/2) (T . M T - 2 m . T + c0),    dL/dT = M T - m.

Everything here is plain numpy; the engine's system on these moments is
``meanfield.engine.population``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..core.config import ConfigError, as_float, as_int

#: keys of a ``[data]`` table with ``family = "icl_regression"`` and their meanings (``model run FILE --help``)
DATA_KEY_HELP = {
    "family": "`icl_regression`: Gaussian in-context linear regression prompts",
    "d": "input dimension d (tokens z = (x, y) in R^(d+1))",
    "N": "context examples per prompt (the query is one more)",
    "cov": "input covariance Lambda: one number (c I), d eigenvalues, d*d entries or a d x d matrix",
    "task_cov": "task covariance Sigma_w of w ~ N(0, Sigma_w), same forms as cov",
    "noise": "label noise sigma: y = w . x + sigma eps",
    "N_test": "another context length at test time (0: none): dataset loss_test, attribute loss_min_test",
    "samples": "0: the exact population loss; n > 0: n prompts drawn with `seed` (sampled, not exact)",
    "seed": "seed of the sampled prompts",
}
DATA_KEYS = tuple(DATA_KEY_HELP)
#: the largest d and N the exact moments are built for (their cost grows as P^4 d^2, a GD step's as P^4 d)
D_MAX = 24
N_MAX = 10 ** 9


#: largest size of a covariance entry or of the noise: the exact Gaussian moments multiply up to six of them
#: (sixth moments in the loss's gradient), and (1e50)^6 = 1e300 stays a float (issue 26: --cov 1e300 was exit 70)
MAX_ENTRY = 1e50

def parse_cov(name: str, v, d: int) -> np.ndarray:
    """A d x d covariance from a description value.

    Parameters
    ----------
    name : str
        The field, for the error message.
    v : number, str, list
        One number c (c I), d numbers (the eigenvalues, on the diagonal),
        d * d numbers (the matrix, row by row) or a d x d nested list; a
        string is comma-separated numbers ("1,0.5,0.25").
    d : int
        The dimension.

    Returns
    -------
    numpy.ndarray
        The symmetric positive definite matrix.

    Example
    -------
    >>> parse_cov("cov", "1,0.5,0.25", 3).diagonal().tolist()
    [1.0, 0.5, 0.25]
    """
    allowed = f"one number, {d} eigenvalues, {d * d} entries or a {d}x{d} matrix, all finite"
    if isinstance(v, bool):
        raise ConfigError(f"{name}: must be {allowed}; got {v!r}")
    if isinstance(v, str):
        parts = [s.strip() for s in v.split(",")]
        try:
            vals = [float(s) for s in parts]
        except ValueError:
            raise ConfigError(f"{name}: must be {allowed}; got {v!r}") from None
        v = vals
    if isinstance(v, (int, float)):
        v = [v]
    try:
        a = np.array(v, dtype=float)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}: must be {allowed}; got {v!r}") from None
    if not np.all(np.isfinite(a)):
        raise ConfigError(f"{name}: must be {allowed}; got {v!r}")
    if not np.all(np.abs(a) <= MAX_ENTRY):
        raise ConfigError(f"{name}: entries at most {MAX_ENTRY:.0e} in size (the exact moments multiply up to six "
                          f"of them), got {float(np.abs(a).max()):.3g}")
    if a.ndim == 1 and a.size == 1:
        M = float(a[0]) * np.eye(d)
    elif a.ndim == 1 and a.size == d:
        M = np.diag(a)
    elif a.ndim == 1 and a.size == d * d:
        M = a.reshape(d, d)
    elif a.ndim == 2 and a.shape == (d, d):
        M = a
    else:
        raise ConfigError(f"{name}: must be {allowed}; got {a.size} values for d = {d}")
    if np.max(np.abs(M - M.T)) > 1e-12 * max(1.0, float(np.abs(M).max())):
        raise ConfigError(f"{name}: must be symmetric")
    ev = float(np.linalg.eigvalsh(M).min())
    if not ev > 1e-12 * max(1.0, float(np.abs(M).max())):
        raise ConfigError(f"{name}: must be positive definite; smallest eigenvalue {ev:.3g}")
    return 0.5 * (M + M.T)


@dataclass(frozen=True)
class GaussianPrompts:
    """The law of a Gaussian in-context regression prompt (module docstring).

    Parameters
    ----------
    d : int
        Input dimension (P = d + 1 features).
    N : int
        Context length.
    Lambda : numpy.ndarray
        d x d input covariance.
    Sigma_w : numpy.ndarray
        d x d task covariance.
    sigma : float
        Label noise standard deviation.

    Example
    -------
    >>> law = GaussianPrompts(3, 8, np.diag([1, 0.5, 0.25]), np.eye(3), 0.0)
    >>> round(law.moments().minimum_loss(), 12)
    0.280406976744
    """

    d: int
    N: int
    Lambda: np.ndarray
    Sigma_w: np.ndarray
    sigma: float = 0.0

    @property
    def P(self) -> int:
        return self.d + 1

    def with_N(self, N: int) -> "GaussianPrompts":
        """The same law with another context length (a test-time N)."""
        return GaussianPrompts(self.d, int(N), self.Lambda, self.Sigma_w, self.sigma)

    def with_cov(self, Lambda) -> "GaussianPrompts":
        """The same law with another input covariance (a covariate shift at test time)."""
        return GaussianPrompts(self.d, self.N, np.asarray(Lambda, float), self.Sigma_w, self.sigma)

    def token_cov_coefficients(self):
        """C_w = C0 + C1[w] + C2[w, w]: C0 (P, P), C1 (P, P, d), C2 (P, P, d, d)."""
        d, P, L = self.d, self.P, np.asarray(self.Lambda, float)
        C0 = np.zeros((P, P))
        C0[:d, :d] = L
        C0[d, d] = self.sigma ** 2
        C1 = np.zeros((P, P, d))
        C1[:d, d, :] = L
        C1[d, :d, :] = L
        C2 = np.zeros((P, P, d, d))
        C2[d, d] = L
        return C0, C1, C2

    def moments(self, N: int | None = None) -> "Moments":
        """The exact moment tensors at context length ``N`` (default: the law's)."""
        return Moments.of(self if N is None else self.with_N(N))

    def sample(self, n: int, rng: np.random.Generator):
        """``n`` prompts: x (n, N, d), y (n, N), xq (n, d), yq (n,), w (n, d).

        Draw order (one generator): w, x, eps, xq, eps_q."""
        d, N = self.d, self.N
        Lw = np.linalg.cholesky(np.asarray(self.Sigma_w, float))
        Lx = np.linalg.cholesky(np.asarray(self.Lambda, float))
        w = rng.standard_normal((n, d)) @ Lw.T
        x = rng.standard_normal((n, N, d)) @ Lx.T
        eps = self.sigma * rng.standard_normal((n, N))
        xq = rng.standard_normal((n, d)) @ Lx.T
        eq = self.sigma * rng.standard_normal(n)
        y = np.einsum("nid,nd->ni", x, w) + eps
        yq = np.einsum("nd,nd->n", xq, w) + eq
        return x, y, xq, yq, w

    def tokens(self, n: int, rng: np.random.Generator):
        """``n`` prompts as engine tokens (n, N + 1, P) (the query (x_q, 0) last) and targets y_q (n,)."""
        x, y, xq, yq, _ = self.sample(n, rng)
        Z = np.zeros((n, self.N + 1, self.P))
        Z[:, :self.N, :self.d] = x
        Z[:, :self.N, self.d] = y
        Z[:, self.N, :self.d] = xq
        return Z, yq


def task_moments(C0, C1, C2, S):
    """E over w ~ N(0, S) of C_ab and of C_ab C_ce for C = C0 + C1[w] + C2[w, w] (Isserlis).

    Parameters
    ----------
    C0, C1, C2 : numpy.ndarray
        (P, P), (P, P, d), (P, P, d, d) coefficient tensors (C2 symmetric in its last two axes).
    S : numpy.ndarray
        d x d covariance of w.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        E[C] (P, P) and E[C (x) C] (P, P, P, P).

    Example
    -------
    >>> C0, C1, C2 = np.zeros((1, 1)), np.zeros((1, 1, 1)), np.ones((1, 1, 1, 1))
    >>> float(task_moments(C0, C1, C2, np.eye(1))[1][0, 0, 0, 0])   # E[w^4] = 3
    3.0
    """
    t2 = np.einsum("abkl,kl->ab", C2, S)                       # E[C2[w, w]] = tr(C2_ab S)
    EC = C0 + t2
    E4 = (np.einsum("ab,ce->abce", C0, C0) + np.einsum("ab,ce->abce", C0, t2) + np.einsum("ab,ce->abce", t2, C0)
          + np.einsum("abk,kl,cel->abce", C1, S, C1, optimize=True)           # E[(C1 w)(C1 w)]
          + np.einsum("ab,ce->abce", t2, t2)                                  # E[w w w w]: the (kl)(mn) pairing
          + np.einsum("abkl,km,cemn,ln->abce", C2, S, C2, S, optimize=True)   # (km)(ln)
          + np.einsum("abkl,kn,cemn,lm->abce", C2, S, C2, S, optimize=True))  # (kn)(lm)
    # (optimize: contracted pairwise, P^4 d^2 multiply-adds instead of P^4 d^4)
    return EC, E4


@dataclass(frozen=True)
class Moments:
    """The exact moments of a :class:`GaussianPrompts` law that a linear-attention loss needs.

    Attributes: ``law``; ``K4`` (P, P, P, P) = E[G_ab G_ce]; ``m`` (P, P, d) =
    E[G_ab x_qj y_q]; ``c0`` = E[y_q^2]; ``EG`` (P, P) = E[G]; and the property
    ``M`` (P^2 d, P^2 d) = E[(G (x) x_q)(G (x) x_q)^T] = K4 (x) Lambda, formed
    only when asked for (the loss, its gradient and its minimum use the
    Kronecker form: M T = K4 T Lambda, M^+ = K4^+ (x) Lambda^{-1}).

    Example
    -------
    >>> law = GaussianPrompts(1, 2, np.eye(1), np.eye(1), 0.0)
    >>> mom = law.moments()
    >>> mom.loss(np.zeros((2, 2, 1)))     # yhat = 0: (1/2) E[y_q^2] = 1/2
    0.5
    """

    law: GaussianPrompts
    K4: np.ndarray
    m: np.ndarray
    c0: float
    EG: np.ndarray
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, law: GaussianPrompts) -> "Moments":
        d, P, N = law.d, law.P, law.N
        S = np.asarray(law.Sigma_w, float)
        Lam = np.asarray(law.Lambda, float)
        C0, C1, C2 = law.token_cov_coefficients()
        EC, E4 = task_moments(C0, C1, C2, S)
        # E[G_ab G_ce] = E_w[C_ab C_ce + (C_ac C_be + C_ae C_bc) / N]
        K4 = E4 + (np.einsum("acbe->abce", E4) + np.einsum("aebc->abce", E4)) / N
        K4 = 0.5 * (K4 + K4.transpose(2, 3, 0, 1))
        # E[G_ab x_qj y_q] = E_w[C_ab (Lambda w)_j] = C1_ab S Lambda (the odd part of C times w)
        m = np.einsum("abk,kl,lj->abj", C1, S, Lam)
        c0 = float(np.trace(Lam @ S) + law.sigma ** 2)
        return cls(law=law, K4=np.ascontiguousarray(K4), m=np.ascontiguousarray(m), c0=c0, EG=EC)

    @property
    def M(self) -> np.ndarray:
        """E[(G (x) x_q)(G (x) x_q)^T] = K4 (x) Lambda as a (P^2 d, P^2 d) matrix (formed once, on demand)."""
        if "M" not in self._cache:
            P, d = self.law.P, self.law.d
            M = np.einsum("abce,jl->abjcel", self.K4, np.asarray(self.law.Lambda, float))
            self._cache["M"] = np.ascontiguousarray(M.reshape(P * P * d, P * P * d))
        return self._cache["M"]

    def _MT(self, T: np.ndarray) -> np.ndarray:
        P, d = self.law.P, self.law.d
        Tm = np.asarray(T, float).reshape(P * P, d)
        return self.K4.reshape(P * P, P * P) @ Tm @ np.asarray(self.law.Lambda, float)

    def loss(self, T: np.ndarray) -> float:
        """(1/2) E[(yhat - y_q)^2] of yhat = sum T_abj G_ab x_qj (T of shape (P, P, d))."""
        t = np.asarray(T, float).ravel()
        return 0.5 * float(t @ self._MT(T).ravel() - 2.0 * self.m.ravel() @ t + self.c0)

    def grad(self, T: np.ndarray) -> np.ndarray:
        """dL/dT = M T - m, shape (P, P, d)."""
        return (self._MT(T) - self.m.reshape(-1, self.law.d)).reshape(self.m.shape)

    def minimum_loss(self) -> float:
        """The smallest population loss of any prediction linear in G (x) x_q:
        (1/2) (c0 - m . M^+ m) (the best T; what every linear-attention head with
        the query out of the keys can reach at most)."""
        if "Lmin" not in self._cache:
            P, d = self.law.P, self.law.d
            mm = self.m.reshape(P * P, d)
            Kp = np.linalg.pinv(self.K4.reshape(P * P, P * P), hermitian=True)
            sol = Kp @ mm @ np.linalg.inv(np.asarray(self.law.Lambda, float))   # M^+ m, M = K4 (x) Lambda
            self._cache["Lmin"] = 0.5 * float(self.c0 - np.sum(mm * sol))
        return self._cache["Lmin"]


# ------------------------------------------------------------------ the data family


def law_from_table(raw: dict) -> tuple[GaussianPrompts, dict]:
    """The law and the options of a ``[data]`` table with ``family = "icl_regression"``.

    Parameters
    ----------
    raw : dict
        Keys d, N, cov (Lambda: one number, d eigenvalues, d * d entries or a
        matrix; default 1), task_cov (Sigma_w, same forms; default 1), noise
        (sigma, default 0), N_test (test-time N, default: none), samples
        (0: the exact population; n > 0: n sampled prompts), seed (of the
        sampled prompts).

    Returns
    -------
    (GaussianPrompts, dict)
        The law and {"N_test", "samples", "seed"}.

    Example
    -------
    >>> law, opt = law_from_table({"family": "icl_regression", "d": 2, "N": 4})
    >>> law.P, opt["samples"]
    (3, 0)
    """
    for k in raw:
        if k not in DATA_KEYS:
            raise ConfigError(f"data: unknown key '{k}' for family icl_regression; allowed: {', '.join(DATA_KEYS)}")
    for k in ("d", "N"):
        if k not in raw:
            raise ConfigError(f"data.{k}: required with family icl_regression (a positive integer)")
    d = as_int("data.d", raw["d"], lo=1)
    if d > D_MAX:
        raise ConfigError(f"data.d: at most {D_MAX} (the exact moments cost P^4 d^2, each step P^4 d); got {d}")
    N = as_int("data.N", raw["N"], lo=1)
    if N > N_MAX:
        raise ConfigError(f"data.N: at most {N_MAX}; got {N}")
    Lam = parse_cov("data.cov", raw.get("cov", 1.0), d)
    Sw = parse_cov("data.task_cov", raw.get("task_cov", 1.0), d)
    sigma = as_float("data.noise", raw.get("noise", 0.0), nonneg=True)
    if not sigma <= MAX_ENTRY:
        raise ConfigError(f"data.noise: at most {MAX_ENTRY:.0e} (its powers enter the exact moments), got {sigma:.3g}")
    nt = raw.get("N_test", 0)
    N_test = as_int("data.N_test", nt, lo=0) if nt is not None else 0
    if N_test > N_MAX:
        raise ConfigError(f"data.N_test: at most {N_MAX}; got {N_test}")
    samples = as_int("data.samples", raw.get("samples", 0), lo=0)
    seed = as_int("data.seed", raw.get("seed", 0), lo=0)
    return GaussianPrompts(d, N, Lam, Sw, sigma), {"N_test": N_test or None, "samples": samples, "seed": seed}


def family_data(raw: dict, dictionary_raw=None):
    """The (Dictionary, Data) of a ``[data]`` table with ``family = "icl_regression"``.

    The features are x1..xd, y (groups ``x`` and ``y``; E = I). Without
    ``samples`` the data are the exact population: one placeholder sequence
    (the engine's system is then ``meanfield.engine.population``, which
    reads the law from ``Data.extra["population"]``); with ``samples = n``, n
    prompts drawn with ``seed`` as tokens (n, N + 1, P) (the query (x_q, 0)
    last), targets y_q, weights 1/n: the engine's finite-data path, sampled,
    not exact (``Data.extra["sampled"]`` holds the run-file attributes).

    Parameters
    ----------
    raw : dict
        The [data] table (parameters already substituted).
    dictionary_raw : dict or None
        The [dictionary] table: must be absent (the family names the features).

    Returns
    -------
    (Dictionary, Data)

    Example
    -------
    >>> dic, data = family_data({"family": "icl_regression", "d": 2, "N": 3, "samples": 5})
    >>> dic.features, data.tokens.shape
    (('x1', 'x2', 'y'), (5, 4, 3))
    """
    from .objects import Data, Dictionary, make_data

    fam = raw.get("family")
    if fam != "icl_regression":
        raise ConfigError(f"data.family: must be icl_regression (the built-in data family); got {fam!r}")
    if dictionary_raw is not None:
        raise ConfigError("dictionary: not with data.family = icl_regression (the family names the features "
                          "x1..xd, y)")
    law, opts = law_from_table(raw)
    check_sizes(law, opts["samples"])
    names = feature_names(law.d)
    dic = Dictionary(features=names, groups=(("x", names[:-1]), ("y", ("y",))))
    if opts["samples"]:
        Z, yq = law.tokens(opts["samples"], np.random.default_rng(opts["seed"]))
        data = make_data(Z, yq, None, None, None, None, law.P)
        extra = {"sampled": convention_attrs(law, opts, exact=False), "law": law, "icl": opts}
    else:
        data = make_data(np.zeros((1, 1, law.P)), np.zeros(1), np.ones(1), None, ["population"], None, law.P)
        extra = population_marker(law, opts)
        extra["icl"] = opts
    return dic, Data(tokens=data.tokens, target=data.target, weight=data.weight, counts=data.counts,
                     names=data.names, flags=data.flags, extra=extra)


def check_description(desc) -> None:
    """Refuse (one line) an icl_regression description the family cannot run
    (:func:`check_heads`)."""
    check_heads(desc, exact="population" in desc.data.extra)


def feature_names(d: int) -> tuple[str, ...]:
    """x1..xd, y."""
    return tuple(f"x{i + 1}" for i in range(d)) + ("y",)


def sampled_bytes(law: GaussianPrompts, n: int) -> float:
    """Memory of ``n`` sampled prompts as engine tokens (and their sparse copy)."""
    return 8.0 * n * (law.N + 1) * law.P * 4.0


def check_sizes(law: GaussianPrompts, samples: int, force: bool = False) -> None:
    """Refuse (one line) moment tensors or sampled sets beyond memory before building them."""
    P, d = law.P, law.d
    mom = 8.0 * (P ** 4 * 2 + P * P * d * d)
    if mom > 4e9 and not force:
        raise ConfigError(f"data.d: the exact moments at d = {d} need {mom / 1e9:.1f} GB; choose a smaller d")
    if samples:
        b = sampled_bytes(law, samples)
        if b > 4e9 and not force:
            raise ConfigError(f"data.samples: {samples} prompts of N = {law.N} need {b / 1e9:.1f} GB; "
                              "choose fewer samples or a smaller N")


def population_marker(law: GaussianPrompts, opts: dict) -> dict:
    """The ``Data.extra`` entry that makes the engine run the exact population (``meanfield.engine.population``)."""
    return {"population": {"law": law, "N_test": opts["N_test"], "family": "icl_regression"}}


def convention_attrs(law: GaussianPrompts, opts: dict, exact: bool) -> dict:
    """Run-file attributes of an icl_regression run: the law, the loss convention, exact or sampled."""
    attrs = {
        "data_family": "icl_regression", "icl_d": law.d, "icl_N": law.N,
        "icl_cov": json_matrix(law.Lambda), "icl_task_cov": json_matrix(law.Sigma_w), "icl_noise": law.sigma,
        "icl_N_test": opts["N_test"] or 0,
        "loss_convention": "(1/2) E[(yhat - y_q)^2]; yhat read at the y-row of the query (last) position; "
                           "linear attention normalised by N; the query is not a key; y_q = w^T x_q + eps_q",
        "exact": int(bool(exact)),
        "population": "exact population (closed-form Gaussian moments)" if exact else
                      f"sampled, not exact: {opts['samples']} prompts drawn with seed {opts['seed']}",
    }
    if not exact:
        attrs["samples"] = int(opts["samples"])
        attrs["samples_seed"] = int(opts["seed"])
    return attrs


def json_matrix(A) -> str:
    import json

    return json.dumps(np.asarray(A, float).tolist())


def minimum_loss_of(law: GaussianPrompts) -> float:
    """Shortcut: the law's :meth:`Moments.minimum_loss`."""
    return law.moments().minimum_loss()


def _isclose(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15)


def check_heads(desc, exact: bool) -> None:
    """Refuse (one line) a head with no closed-form population loss under
    Gaussian prompts (``exact``) and, sampled or not, a head that does not
    read the query position's y-row as one output.

    Example
    -------
    >>> # check_heads(desc, exact=True) raises ConfigError for softmax heads
    """
    for i, h in enumerate(desc.model.heads):
        where = f"heads[{i}]"
        if h.query != "last":
            raise ConfigError(f"{where}.query: with family icl_regression the query is the last position "
                              f"(query = \"last\"); got {h.query!r}")
        if h.value in ("token",) or h.outputs != 1:
            raise ConfigError(f"{where}.value: with family icl_regression the head outputs one number, the y-row "
                              f"read-out (value = \"linear\" or \"matrix\" with outputs = 1); got value = {h.value!r}")
        if not exact:
            continue
        if h.attention != "linear":
            raise ConfigError(f"{where}.attention: {h.attention} attention has no closed-form population loss under "
                              "Gaussian prompts; give --samples n (n sampled prompts, seeded: sampled, not exact) "
                              "or attention = \"linear\"")
        if h.query_self:
            raise ConfigError(f"{where}.query_self: the exact population needs the query out of the keys "
                              "(query_self = false); give --samples n to run it on sampled prompts")
        if h.value not in ("linear", "matrix"):
            raise ConfigError(f"{where}.value: {h.value!r} has no closed-form population loss under Gaussian "
                              "prompts (a ReLU of the head output); give value = \"linear\" or \"matrix\", or "
                              "--samples n")
        if h.n_neurons != 1:
            raise ConfigError(f"{where}.n_neurons: the exact population takes one value vector per head")
    if exact and desc.model.loss != "squared":
        raise ConfigError(f"model.loss: the exact population of family icl_regression is the squared loss "
                          f"(1/2) E[(yhat - y_q)^2]; got {desc.model.loss!r}")
