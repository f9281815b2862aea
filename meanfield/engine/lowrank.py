"""Holding a finite-width Gram state on its rank-m manifold (``meanfield.engine.lowrank``).

At finite width m a head's Gram state is Q = U^T U with U the m x N stack of
its wide weights (docs/engine.md, "Why the reduction is exact"), so Q is
positive semi-definite of rank <= m. The exact GD map Q' = (I - eta X)^T Q
(I - eta X) and the flow dQ/dt = -(X^T Q + Q X) keep that rank in exact
arithmetic, but a computed step does not: its rounding (GD) or truncation
error (an ODE step) puts O(eps ||Q||) mass on the N - m directions no network
of width m has, and where the loss has an unstable direction there (a second
"row" that would learn a second component) the dynamics grow it like a real
row of W_K, W_Q. Measured on ``icl_saddles`` at m = 1 from the authors'
random init: |lambda_2| / lambda_1 goes 2e-16 -> 4e-4 -> 0.54 at t = 0, 300,
500 and the loss leaves the rank-one network's by 0.08 (docs/engine.md,
"Finite width: the rank-m manifold").

:func:`project_rank` replaces each such head's Q (when m < N; at m >= N the
rank bound says nothing) by its nearest point, in Frobenius norm, of the set
of positive semi-definite matrices of rank <= m: the symmetric part's
eigen-decomposition truncated to its m largest eigenvalues, negative ones set
to 0. Since the exact next state lies in that set, the projection moves the
computed state by at most the step's own error, and the projected state is
within twice that error of the exact one; what the step put off the manifold
is removed every step instead of growing. Infinite width is never projected.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .tables import H_N, H_QOFF


#: the warm start (below) is accepted when its Ritz residual ||Q W - W diag(theta)||_F is at most this times
#: ||Q||_F (rounding level: a computed step's error is a few eps ||Q||), and the rest of Q outside span(W)
#: carries at most SPAN_TOL^2 of ||Q||_F^2; otherwise the full eigen-decomposition is used
RITZ_TOL = 1e-12
SPAN_TOL = 1e-6
#: a starting state (``init_from``) whose lambda_(m+1) / lambda_1 exceeds this is not a width-m network's
#: (rounding leaves ~1e-16; the projection would otherwise change it by far more than a step's error)
START_TOL = 1e-8


@njit(cache=True)
def _write(y, off, N, W, th, m):
    """Q = sum_i max(theta_i, 0) w_i w_i^T into y (symmetric by construction); the change's Frobenius norm."""
    ch = 0.0
    for a in range(N):
        for b in range(a, N):
            acc = 0.0
            for i in range(m):
                if th[i] > 0.0:
                    acc += th[i] * W[a, i] * W[b, i]
            ch += (acc - y[off + a * N + b]) ** 2
            y[off + a * N + b] = acc
            if b != a:
                ch += (acc - y[off + b * N + a]) ** 2
                y[off + b * N + a] = acc
    return np.sqrt(ch)


@njit(cache=True)
def _ritz(Q, V, m):
    """One subspace-iteration step from V (N x m) and Rayleigh-Ritz: (W, theta, ok)."""
    N = Q.shape[0]
    B = Q @ V
    for j in range(m):  # modified Gram-Schmidt
        for i in range(j):
            r = 0.0
            for a in range(N):
                r += B[a, i] * B[a, j]
            for a in range(N):
                B[a, j] -= r * B[a, i]
        nr = 0.0
        for a in range(N):
            nr += B[a, j] * B[a, j]
        nr = np.sqrt(nr)
        if not (nr > 0.0 and np.isfinite(nr)):
            return B, np.zeros(m), False
        for a in range(N):
            B[a, j] /= nr
    T = B.T @ (Q @ B)
    T = 0.5 * (T + T.T)
    th, S = np.linalg.eigh(T)
    W = B @ S
    R = Q @ W
    res = 0.0
    for a in range(N):
        for i in range(m):
            res += (R[a, i] - th[i] * W[a, i]) ** 2
    q2 = 0.0
    for a in range(N):
        for b in range(N):
            q2 += Q[a, b] * Q[a, b]
    t2 = 0.0
    for i in range(m):
        t2 += th[i] * th[i]
    ok = res <= (RITZ_TOL ** 2) * q2 and q2 - t2 <= (SPAN_TOL ** 2) * q2
    return W, th, ok


@njit(cache=True)
def project_rank(y, hi, m, col_n, col_off, basis, have):
    """Project every head's Gram block Q (N x N, N > m) of state ``y`` in place
    onto the positive semi-definite matrices of rank <= m (module docstring).

    The top-m eigenvectors come from one subspace-iteration step started at
    the previous call's (``basis``, where ``have`` says so) with Rayleigh-Ritz,
    accepted when its residual is at rounding level (RITZ_TOL) and span(W)
    holds all of Q but SPAN_TOL^2 of its squared norm: then they are the top-m
    eigenvectors to the accuracy of a full eigen-decomposition, which is used
    otherwise (the first call, or a state that moved off the basis).

    Parameters
    ----------
    y : numpy.ndarray
        The engine state (changed in place).
    hi : numpy.ndarray
        The layout's integer head table (``reduce.Layout.hi``).
    m : int
        The width (> 0).
    col_n, col_off : int
        The columns of ``hi`` holding a head's N and the offset of its Q
        (``reduce.H_N``, ``reduce.H_QOFF``).
    basis : numpy.ndarray
        (H, Nmax, m) scratch: each head's top-m eigenvectors (updated).
    have : numpy.ndarray
        (H,) bool: whether ``basis`` holds a head's (updated; all False: full
        eigen-decompositions).

    Returns
    -------
    float
        The largest Frobenius norm of the change over the heads (0 if none was
        projected).

    Example
    -------
    >>> import numpy as np
    >>> u = np.array([1.0, 2.0, 0.5]); y = (np.outer(u, u) + 1e-9 * np.eye(3)).ravel()
    >>> hi = np.array([[3, 0]]); d = project_rank(y, hi, 1, 0, 1, np.zeros((1, 3, 1)), np.zeros(1, bool))
    >>> bool(abs(np.linalg.eigvalsh(y.reshape(3, 3))[1]) < 1e-14)
    True
    """
    worst = 0.0
    for k in range(hi.shape[0]):
        N = hi[k, col_n]
        if N <= m:
            continue
        off = hi[k, col_off]
        Q = np.empty((N, N))
        for a in range(N):
            for b in range(N):
                Q[a, b] = 0.5 * (y[off + a * N + b] + y[off + b * N + a])
        done = False
        if have[k]:
            W, th, ok = _ritz(Q, np.ascontiguousarray(basis[k, :N, :]), m)
            if ok:
                worst = max(worst, _write(y, off, N, W, th, m))
                basis[k, :N, :] = W
                done = True
        if not done:
            w, V = np.linalg.eigh(Q)
            W = np.ascontiguousarray(V[:, N - m:])
            worst = max(worst, _write(y, off, N, W, w[N - m:], m))
            basis[k, :N, :] = W
            have[k] = True
    return worst


def width_to_hold(desc, lay) -> int:
    """The width m whose rank the state must keep, or 0 (infinite width, or no
    head with more than m stacked columns).

    Parameters
    ----------
    desc : Description
    lay : Layout
        ``reduce.layout(desc)``.

    Returns
    -------
    int

    Example
    -------
    >>> import meanfield.engine as me
    >>> from meanfield.engine.reduce import layout
    >>> desc = me.load("meanfield/models/icl_saddles.toml", steps=1)
    >>> width_to_hold(desc, layout(desc))
    1
    """
    m = desc.init.width
    if m is None or not np.isfinite(m):
        return 0
    m = int(m)
    return m if any(int(lay.hi[k, H_N]) > m for k in range(lay.hi.shape[0])) else 0


def scratch(lay, m) -> tuple[np.ndarray, np.ndarray]:
    """(basis, have) for :func:`project_rank`: no basis yet.

    Parameters
    ----------
    lay : Layout
    m : int

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)

    Example
    -------
    >>> # basis, have = scratch(layout(desc), 1)
    """
    return np.zeros((lay.hi.shape[0], max(int(lay.Nmax), 1), max(int(m), 1))), np.zeros(lay.hi.shape[0], np.bool_)


def project(y, lay, m, basis=None, have=None) -> float:
    """:func:`project_rank` on state ``y`` (in place) with the layout's columns; 0 if m = 0.

    Parameters
    ----------
    y : numpy.ndarray
    lay : Layout
    m : int
        From :func:`width_to_hold`.
    basis, have : numpy.ndarray, optional
        :func:`scratch` (a warm start kept between calls); fresh if not given.

    Returns
    -------
    float
        The largest change (Frobenius) over the heads.

    Example
    -------
    >>> # project(y, layout(desc), width_to_hold(desc, layout(desc)))
    """
    if m <= 0:
        return 0.0
    if basis is None:
        basis, have = scratch(lay, m)
    return float(project_rank(y, lay.hi, int(m), H_N, H_QOFF, basis, have))


def rank_leak(y, lay, m: int = 1) -> float:
    """The largest max(|lambda_(m+1)|, |lambda_min|) / lambda_1 over the heads' Gram blocks of ``y``
    (eigenvalues in decreasing order): the distance from rank m, 0 for a Gram of rank <= m.

    Parameters
    ----------
    y : numpy.ndarray
    lay : Layout
    m : int
        The width (heads with N <= m are skipped).

    Returns
    -------
    float

    Example
    -------
    >>> # rank_leak(run.y[-1], layout(desc), m=1)
    """
    worst = 0.0
    for k in range(lay.hi.shape[0]):
        N = int(lay.hi[k, H_N])
        if N <= m:
            continue
        off = int(lay.hi[k, H_QOFF])
        ev = np.linalg.eigvalsh(np.asarray(y[off:off + N * N]).reshape(N, N))
        if ev[-1] > 0:
            worst = max(worst, max(abs(ev[-1 - m]), abs(ev[0])) / ev[-1])
    return float(worst)
