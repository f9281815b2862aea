"""The papers' closed-form statements for Gaussian in-context regression with one
linear-attention layer (docs/models.md, "Gaussian in-context regression").

Conventions (the engine's family ``icl_regression``): x_i, x_q ~ N(0, Lambda) in
R^d, w ~ N(0, Sigma_w), y_i = w^T x_i + eps_i, y_q = w^T x_q + eps_q,
eps ~ N(0, sigma^2); S = (1/N) sum_i x_i x_i^T, h = (1/N) sum_i y_i x_i. Every
predictor below is linear in h and x_q,

    yhat = x_q^T A h,

which is what a linear-attention head with the query out of the keys computes
when only its key-query x-block and the value's y-entry are non-zero (ZFB:
A = u U11^T for W^{PV} = [[0, 0], [0, u]], W^{KQ} = [[U11, 0], [0, 0]];
separate rank-one heads: A = sum_h v_h q_h k_h^T). The loss is
L(A) = (1/2) E[(yhat - y_q)^2]. With

    E[S B S] = (1 - 1/N) Lambda B Lambda + (1/N) (Lambda (B + B^T) Lambda + tr(B Lambda) Lambda)
    Mh = E[h h^T] = E[S Sigma_w S] + (sigma^2 / N) Lambda,      E[h w^T] = Lambda Sigma_w,

    L(A) = (1/2) [tr(Lambda Sigma_w) - 2 tr(A Lambda Sigma_w Lambda) + tr(A^T Lambda A Mh) + sigma^2],
    dL/dA = Lambda A Mh - Lambda Sigma_w Lambda,      A* = Sigma_w Lambda Mh^{-1}.

For Sigma_w = I, sigma = 0: Mh = Gamma Lambda, Gamma = (1 + 1/N) Lambda + tr(Lambda)/N I,
A* = Gamma^{-1} and L* = (1/2) (tr Lambda - tr(Lambda Gamma^{-1} Lambda)) (ZFB).

This module imports numpy only: it is the papers' side of every check, held
against Monte Carlo and against the engine's general moments in the tests.
"""

from __future__ import annotations

import math

import numpy as np


def _mat(Lam) -> np.ndarray:
    a = np.asarray(Lam, float)
    if a.ndim == 1:
        a = np.diag(a)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"expected a square matrix or a vector of eigenvalues; got shape {a.shape}")
    return a


def _task(Sigma_w, d) -> np.ndarray:
    return np.eye(d) if Sigma_w is None else _mat(Sigma_w)


def gamma(Lam, N: int) -> np.ndarray:
    """ZFB's Gamma = (1 + 1/N) Lambda + tr(Lambda)/N I.

    Parameters
    ----------
    Lam : array_like
        d x d input covariance (or its d eigenvalues).
    N : int
        Context length.

    Returns
    -------
    numpy.ndarray
        d x d.

    Example
    -------
    >>> gamma([1.0, 0.5], 2).diagonal().tolist()
    [2.25, 1.5]
    """
    L = _mat(Lam)
    return (1.0 + 1.0 / N) * L + np.trace(L) / N * np.eye(len(L))


def sbs_moment(B, Lam, N: int) -> np.ndarray:
    """E[S B S] for S = (1/N) sum_i x_i x_i^T, x_i ~ N(0, Lambda) (Isserlis).

    Parameters
    ----------
    B : array_like
        d x d matrix.
    Lam : array_like
        Input covariance.
    N : int
        Context length.

    Returns
    -------
    numpy.ndarray

    Example
    -------
    >>> float(sbs_moment(np.eye(1), np.eye(1), 1)[0, 0])   # E[x^4] = 3
    3.0
    """
    L, B = _mat(Lam), np.asarray(B, float)
    return (1 - 1 / N) * L @ B @ L + (L @ (B + B.T) @ L + np.trace(B @ L) * L) / N


def h_moment(Lam, N: int, Sigma_w=None, sigma: float = 0.0) -> np.ndarray:
    """Mh = E[h h^T] = E[S Sigma_w S] + sigma^2/N Lambda.

    Parameters
    ----------
    Lam : array_like
        Input covariance (or its eigenvalues).
    N : int
        Context length.
    Sigma_w : array_like or None
        Task covariance (default I).
    sigma : float
        Label noise.

    Returns
    -------
    numpy.ndarray
        d x d.

    Example
    -------
    >>> np.allclose(h_moment(np.diag([1.0, 0.5]), 4), gamma(np.diag([1.0, 0.5]), 4) @ np.diag([1.0, 0.5]))
    True
    """
    L = _mat(Lam)
    S = _task(Sigma_w, len(L))
    return sbs_moment(S, L, N) + sigma ** 2 / N * L


def linear_loss(A, Lam, N: int, Sigma_w=None, sigma: float = 0.0) -> float:
    """L(A) = (1/2) E[(x_q^T A h - y_q)^2] (module docstring; the target carries the noise).

    Parameters
    ----------
    A : array_like
        d x d predictor matrix.
    Lam, N, Sigma_w, sigma
        The prompt law (Sigma_w default I).

    Returns
    -------
    float

    Example
    -------
    >>> round(linear_loss(np.zeros((2, 2)), [1.0, 0.5], 4), 12)   # (1/2) tr Lambda
    0.75
    """
    L = _mat(Lam)
    S = _task(Sigma_w, len(L))
    A = np.asarray(A, float)
    Mh = h_moment(L, N, S, sigma)
    return 0.5 * float(np.trace(L @ S) - 2 * np.trace(A @ L @ S @ L) + np.trace(A.T @ L @ A @ Mh) + sigma ** 2)


def linear_loss_grad(A, Lam, N: int, Sigma_w=None, sigma: float = 0.0) -> np.ndarray:
    """dL/dA = Lambda A Mh - Lambda Sigma_w Lambda.

    Parameters
    ----------
    A : array_like
        d x d predictor.
    Lam, N, Sigma_w, sigma
        The prompt law.

    Returns
    -------
    numpy.ndarray
        d x d.

    Example
    -------
    >>> np.allclose(linear_loss_grad(optimal_A([1.0, 0.5], 3), [1.0, 0.5], 3), 0)
    True
    """
    L = _mat(Lam)
    S = _task(Sigma_w, len(L))
    return L @ np.asarray(A, float) @ h_moment(L, N, S, sigma) - L @ S @ L


def optimal_A(Lam, N: int, Sigma_w=None, sigma: float = 0.0) -> np.ndarray:
    """The global minimiser A* = Sigma_w Lambda Mh^{-1} (Gamma^{-1} for Sigma_w = I, sigma = 0).

    Parameters
    ----------
    Lam, N, Sigma_w, sigma
        The prompt law (Sigma_w default I).

    Returns
    -------
    numpy.ndarray
        d x d.

    Example
    -------
    >>> np.allclose(optimal_A([1.0, 0.5], 3), np.linalg.inv(gamma([1.0, 0.5], 3)))
    True
    """
    L = _mat(Lam)
    S = _task(Sigma_w, len(L))
    return S @ L @ np.linalg.inv(h_moment(L, N, S, sigma))


def min_loss(Lam, N: int, Sigma_w=None, sigma: float = 0.0) -> float:
    """L(A*), the smallest population loss of any predictor x_q^T A h.

    Parameters
    ----------
    Lam, N, Sigma_w, sigma
        The prompt law.

    Returns
    -------
    float

    Example
    -------
    >>> round(min_loss([1.0, 0.5, 0.25], 8), 12)
    0.280406976744
    """
    return linear_loss(optimal_A(Lam, N, Sigma_w, sigma), Lam, N, Sigma_w, sigma)


def zfb_min_loss(Lam, N: int) -> float:
    """ZFB's closed form L* = (1/2) (tr Lambda - tr(Lambda Gamma^{-1} Lambda)) (Sigma_w = I, no noise).

    Parameters
    ----------
    Lam : array_like
        Input covariance.
    N : int
        Context length.

    Returns
    -------
    float

    Example
    -------
    >>> round(zfb_min_loss([1.0, 0.5, 0.25], 8), 15)
    0.280406976744186
    """
    L = _mat(Lam)
    return 0.5 * float(np.trace(L) - np.trace(L @ np.linalg.solve(gamma(L, N), L)))


# --------------------------------------------------------------- one step of GD (Mahankali; Ahn)


def onestep_step_size(d: int, N: int, sigma: float = 0.0, task_var: float = 1.0) -> float:
    """Mahankali et al. (isotropic): with Lambda = I, Sigma_w = s I, the optimal
    predictor is one GD step from w = 0 on (1/2) sum_i (y_i - w^T x_i)^2,
    yhat = eta x_q^T sum_i y_i x_i, with eta = 1 / (N + d + 1 + sigma^2 / s).

    Parameters
    ----------
    d, N : int
        Dimension and context length.
    sigma : float
        Label noise.
    task_var : float
        s, the task variance (Sigma_w = s I).

    Returns
    -------
    float

    Example
    -------
    >>> onestep_step_size(3, 8)
    0.08333333333333333
    """
    return 1.0 / (N + d + 1 + sigma ** 2 / task_var)


def preconditioner(Lam, N: int, Sigma_w=None, sigma: float = 0.0) -> np.ndarray:
    """The preconditioner P* of the optimal predictor read as one step of
    preconditioned GD from 0: yhat = x_q^T P* sum_i y_i x_i, P* = A*/N.
    Ahn et al. (Sigma_w = I, sigma = 0): P* = Gamma^{-1}/N; with Sigma_w = Lambda^{-1}
    (Mahankali's non-isotropic case): P* = Lambda^{-1} / (N + d + 1 + sigma^2).

    Parameters
    ----------
    Lam, N, Sigma_w, sigma
        The prompt law.

    Returns
    -------
    numpy.ndarray
        d x d.

    Example
    -------
    >>> L = np.diag([1.0, 0.5])
    >>> np.allclose(preconditioner(L, 4, np.linalg.inv(L)), np.linalg.inv(L) / 7)
    True
    """
    return optimal_A(Lam, N, Sigma_w, sigma) / N


# --------------------------------------------------------------- saddles (Zhang, Singh, Latham, Saxe)


def eigen(Lam):
    """Eigenvalues (descending) and eigenvectors (columns) of Lambda.

    Parameters
    ----------
    Lam : array_like
        Input covariance.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        Eigenvalues (d,) descending and eigenvectors (d, d) as columns.

    Example
    -------
    >>> eigen([0.5, 1.0])[0].tolist()
    [1.0, 0.5]
    """
    ev, U = np.linalg.eigh(_mat(Lam))
    o = np.argsort(-ev, kind="stable")
    return ev[o], U[:, o]


def restricted_optimum(Lam, N: int, U, Sigma_w=None, sigma: float = 0.0) -> np.ndarray:
    """The best A = U C U^T with C free (U: d x m orthonormal columns):
    (U^T Lambda U) C (U^T Mh U) = U^T Lambda Sigma_w Lambda U.

    Parameters
    ----------
    Lam, N : the law
    U : array_like
        d x m orthonormal columns.
    Sigma_w, sigma
        The rest of the law.

    Returns
    -------
    numpy.ndarray
        d x d.

    Example
    -------
    >>> L = np.diag([1.0, 0.5])
    >>> np.allclose(restricted_optimum(L, 3, np.eye(2)), optimal_A(L, 3))
    True
    """
    L = _mat(Lam)
    S = _task(Sigma_w, len(L))
    U = np.asarray(U, float).reshape(len(L), -1)
    if U.shape[1] == 0:
        return np.zeros_like(L)
    Mh = h_moment(L, N, S, sigma)
    C = np.linalg.solve(U.T @ L @ U, U.T @ L @ S @ L @ U) @ np.linalg.inv(U.T @ Mh @ U)
    return U @ C @ U.T


def plateau_levels(Lam, N: int, Sigma_w=None, sigma: float = 0.0) -> np.ndarray:
    """L_0..L_d: the loss at the fixed point where the top m principal components of
    Lambda are learned (A the best predictor on their span), m = 0..d. For
    Sigma_w = I, sigma = 0: L_m = (1/2) (tr Lambda - sum_{i <= m} lambda_i^2 / Gamma_i),
    Gamma_i = (1 + 1/N) lambda_i + tr(Lambda)/N.

    Parameters
    ----------
    Lam, N, Sigma_w, sigma
        The prompt law.

    Returns
    -------
    numpy.ndarray
        (d + 1,) levels, descending.

    Example
    -------
    >>> np.round(plateau_levels([1.0, 0.5], 10**9), 6).tolist()   # N -> inf: the tail sums
    [0.75, 0.25, 0.0]
    """
    L = _mat(Lam)
    _, U = eigen(L)
    return np.array([linear_loss(restricted_optimum(L, N, U[:, :m], Sigma_w, sigma), L, N, Sigma_w, sigma)
                     for m in range(len(L) + 1)])


def tail_sums(Lam) -> np.ndarray:
    """(1/2) sum_{i > m} lambda_i, m = 0..d: the plateau levels' N -> infinity limit.

    Parameters
    ----------
    Lam : array_like
        Input covariance.

    Returns
    -------
    numpy.ndarray
        (d + 1,).

    Example
    -------
    >>> tail_sums([1.0, 0.5]).tolist()
    [0.75, 0.25, 0.0]
    """
    ev, _ = eigen(Lam)
    return np.array([0.5 * float(ev[m:].sum()) for m in range(len(ev) + 1)])


def aligned_head_rates(Lam, N: int, Sigma_w=None, sigma: float = 0.0):
    """For a rank-one head aligned with eigenvector i (q = u e_i, k = u e_i, value u,
    A = u^3 e_i e_i^T) the loss along the head is (1/2)(c - 2 b_i p + a_i p^2),
    p = u^3, b_i = e_i^T Lambda Sigma_w Lambda e_i, a_i = e_i^T Lambda e_i e_i^T Mh e_i;
    gradient flow on the three factors keeps them equal and gives the scalar ODE
    du/dt = u^2 (b_i - a_i u^3) (fixed point p* = b_i / a_i). Returns (b, a) in the
    eigenvalue order (descending); exact when Lambda, Sigma_w commute.

    Parameters
    ----------
    Lam, N, Sigma_w, sigma
        The prompt law.

    Example
    -------
    >>> b, a = aligned_head_rates([1.0, 0.5], 10**9)
    >>> np.round(b, 6).tolist(), np.round(a, 6).tolist()
    ([1.0, 0.25], [1.0, 0.125])
    """
    L = _mat(Lam)
    S = _task(Sigma_w, len(L))
    _, U = eigen(L)
    Mh = h_moment(L, N, S, sigma)
    b = np.array([U[:, i] @ L @ S @ L @ U[:, i] for i in range(len(L))])
    a = np.array([(U[:, i] @ L @ U[:, i]) * (U[:, i] @ Mh @ U[:, i]) for i in range(len(L))])
    return b, a


def aligned_transition_time(b: float, a: float, u0: float, frac: float = 0.5, n: int = 20001) -> float:
    """Time for the scalar ODE du/dt = u^2 (b - a u^3) from u0 to the point where
    p = u^3 has covered ``frac`` of the way from u0^3 to p* = b/a (the transition
    of that component): t = int du / (u^2 (b - a u^3)), by the substitution
    s = 1/u (smooth integrand) and Simpson's rule on n points (relative error
    ~1e-12 at the default n).

    Parameters
    ----------
    b, a : float
        The head's rates (``aligned_head_rates``).
    u0 : float
        Initial u (0 < u0^3 < b/a).
    frac : float
        Fraction of the way from u0^3 to p*.
    n : int
        Simpson points.

    Returns
    -------
    float

    Example
    -------
    >>> round(aligned_transition_time(1.0, 1.0, 1e-3), 3)   # ~ 1/(b u0) - O(1)
    999.15
    """
    if not (b > 0 and a > 0 and u0 > 0):
        raise ValueError("aligned_transition_time: b, a, u0 must be positive")
    pstar = b / a
    p0 = u0 ** 3
    if p0 >= pstar:
        raise ValueError("aligned_transition_time: u0 starts at or beyond the fixed point")
    u1 = (p0 + frac * (pstar - p0)) ** (1 / 3)
    # s = 1/u: du = -ds/s^2, du/(u^2 (b - a u^3)) = -ds / (b - a s^-3); s from 1/u0 down to 1/u1
    s = np.linspace(1.0 / u1, 1.0 / u0, n)
    f = 1.0 / (b - a / s ** 3)
    h = (s[-1] - s[0]) / (n - 1)
    return float(h / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum()))


# --------------------------------------------------------------- covariate shift (ZFB)


def shift_loss_limit(A, Lam_test, Sigma_w=None, sigma: float = 0.0) -> float:
    """lim_{N_test -> inf} of the test loss of the fixed predictor A on prompts with
    input covariance Lam_test: h -> Lam_test w, so
    L = (1/2) E[(x_q^T (A Lam_test - I) w)^2] + sigma^2/2
      = (1/2) tr(Lam_test (A Lam_test - I) Sigma_w (A Lam_test - I)^T) + sigma^2/2.

    Parameters
    ----------
    A : array_like
        The fixed d x d predictor.
    Lam_test : array_like
        Test input covariance.
    Sigma_w, sigma
        Task covariance and noise.

    Returns
    -------
    float

    Example
    -------
    >>> shift_loss_limit(np.eye(2), np.eye(2))   # A = Lambda^{-1}: no error left
    0.0
    """
    Lt = _mat(Lam_test)
    S = _task(Sigma_w, len(Lt))
    R = np.asarray(A, float) @ Lt - np.eye(len(Lt))
    return 0.5 * float(np.trace(Lt @ R @ S @ R.T)) + 0.5 * sigma ** 2


def bayes_limit_loss(sigma: float = 0.0) -> float:
    """The N_test -> inf loss of a consistent in-context estimator (least squares): sigma^2 / 2.

    Parameters
    ----------
    sigma : float
        Label noise.

    Returns
    -------
    float

    Example
    -------
    >>> bayes_limit_loss(0.0)
    0.0
    """
    return 0.5 * sigma ** 2


def relerr(a: float, b: float) -> float:
    """|a - b| / max(|b|, tiny).

    Parameters
    ----------
    a, b : float
        Value and reference.

    Returns
    -------
    float

    Example
    -------
    >>> relerr(1.1, 1.0) < 0.11
    True
    """
    return abs(a - b) / max(abs(b), 1e-300)


def isfinite(x) -> bool:
    """isfinite.

    Parameters
    ----------
    x : object
        Anything.

    Returns
    -------
    bool

    Example
    -------
    >>> isfinite(None), isfinite(1.0)
    (False, True)
    """
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def aligned_time_to(b: float, a: float, u0: float, fraction: float) -> float:
    """Time for an aligned head (``aligned_head_rates``) started at u0 to reach
    p = u^3 = fraction x p* (p* = b / a): ``aligned_transition_time`` with the
    fraction of the way from u0^3 it covers.

    Parameters
    ----------
    b, a, u0 : float
        As ``aligned_transition_time``.
    fraction : float
        Target p as a fraction of p*.

    Returns
    -------
    float

    Example
    -------
    >>> round(aligned_time_to(1.0, 1.0, 1e-3, 0.5), 3)
    999.15
    """
    p0, pstar = u0 ** 3, b / a
    return aligned_transition_time(b, a, u0, frac=(fraction * pstar - p0) / (pstar - p0))
