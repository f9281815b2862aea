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

from .reduce import H_N, H_QOFF


@njit(cache=True)
def project_rank(y, hi, m, col_n, col_off):
    """Project every head's Gram block Q (N x N, N > m) of state ``y`` in place
    onto the positive semi-definite matrices of rank <= m (module docstring).

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

    Returns
    -------
    float
        The largest Frobenius norm of the change over the heads (0 if none was
        projected).

    Example
    -------
    >>> import numpy as np
    >>> u = np.array([1.0, 2.0, 0.5]); y = (np.outer(u, u) + 1e-9 * np.eye(3)).ravel()
    >>> hi = np.array([[3, 0]]); d = project_rank(y, hi, 1, 0, 1)
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
        w, V = np.linalg.eigh(Q)
        ch = 0.0
        for a in range(N):
            for b in range(a, N):
                acc = 0.0
                for i in range(N - m, N):
                    if w[i] > 0.0:
                        acc += w[i] * V[a, i] * V[b, i]
                ch += (acc - y[off + a * N + b]) ** 2
                y[off + a * N + b] = acc
                if b != a:
                    ch += (acc - y[off + b * N + a]) ** 2
                    y[off + b * N + a] = acc
        worst = max(worst, np.sqrt(ch))
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


def project(y, lay, m) -> float:
    """:func:`project_rank` on state ``y`` (in place) with the layout's columns; 0 if m = 0.

    Parameters
    ----------
    y : numpy.ndarray
    lay : Layout
    m : int
        From :func:`width_to_hold`.

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
    return float(project_rank(y, lay.hi, int(m), H_N, H_QOFF))


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
