"""What every icl check shares: engine runs of a description, the predictor
matrix A read from a run, and the measurements of plateaus and transitions
(each fixed here before any run; docs/models.md)."""

from __future__ import annotations

import math

import numpy as np

#: a plateau is "visited" when the loss stays in its band for at least this
#: fraction of the time it took to enter it (>= log(1.5) on a log-time axis)
DWELL_FRACTION = 0.5
#: a band's half-width: this fraction of the gap to the nearest neighbouring level
BAND_FRACTION = 0.25
#: a principal component counts as learned when the predictor's coefficient on it
#: is at least this fraction of its value at the fixed point
LEARNED_FRACTION = 0.5


def engine_run(path, **overrides):
    """Load the description at ``path`` with ``overrides`` (declared parameters
    and run knobs) and run the engine. Returns (desc, run); a run that does not
    complete is an error naming its status.

    Parameters
    ----------
    path : str or Path
        The description.
    **overrides
        Declared parameters and run knobs.

    Example
    -------
    >>> # desc, r = engine_run('meanfield/models/icl_zfb.toml', steps=10)
    """
    from ...engine.description import load_description
    from ...engine.runs import run

    desc = load_description(str(path), overrides)
    r = run(desc)
    if r.status != "complete":
        raise RunFailed(f"engine run {r.status}: {r.message}")
    return desc, r


def predictor_of_T(T) -> tuple[np.ndarray, float]:
    """A and the unread part of a prediction tensor T (P, P, d), yhat = sum T_abj G_ab x_qj.

    G_{y b} = G_{b y} = h_b (b < d), so yhat = x_q^T A h + (the rest) with
    A[j, b] = T[y, b, j] + T[b, y, j]; ``leak`` is max |T| over the rest
    (the G_xx and G_yy terms, which the papers' predictor does not have).

    Parameters
    ----------
    T : array_like
        (P, P, d) prediction tensor.

    Returns
    -------
    (numpy.ndarray, float)
        A (d, d) and the largest unread entry.

    Example
    -------
    >>> T = np.zeros((3, 3, 2)); T[2, 0, 1] = 0.5
    >>> A, leak = predictor_of_T(T); float(A[1, 0]), leak
    (0.5, 0.0)
    """
    T = np.asarray(T, float)
    P = T.shape[0]
    d = P - 1
    A = (T[d, :d, :] + T[:d, d, :]).T
    rest = T.copy()
    rest[d, :d, :] = 0.0
    rest[:d, d, :] = 0.0
    return A, float(np.max(np.abs(rest))) if rest.size else 0.0


def predictor_series(r) -> tuple[np.ndarray, np.ndarray]:
    """A (R, d, d) and leak (R,) at every record of a population run ``r``.

    Parameters
    ----------
    r : meanfield.engine.runs.Run
        A population run.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)

    Example
    -------
    >>> # As, leaks = predictor_series(r)
    """
    sys = r.system
    As, leaks = [], []
    for y in r.y:
        A, lk = predictor_of_T(sys.T(y))
        As.append(A)
        leaks.append(lk)
    return np.asarray(As), np.asarray(leaks)


def predictor_bound(loss, loss_min, Lam, Mh) -> float:
    """The largest ||A - A*||_F a loss gap allows: L(A) - L* = (1/2) tr(D^T Lambda D Mh)
    >= (1/2) lambda_min(Lambda) lambda_min(Mh) ||D||_F^2 for D = A - A*.

    Parameters
    ----------
    loss, loss_min : float
        Final loss and the minimum.
    Lam, Mh : array_like
        Lambda and E[h h^T].

    Returns
    -------
    float

    Example
    -------
    >>> predictor_bound(1.5, 1.0, np.eye(1), np.eye(1))
    1.0
    """
    gap = max(float(loss) - float(loss_min), 0.0)
    c = float(np.linalg.eigvalsh(np.asarray(Lam, float)).min() * np.linalg.eigvalsh(np.asarray(Mh, float)).min())
    return math.sqrt(2.0 * gap / c)


def bands(levels) -> np.ndarray:
    """Half-width of each level's band: BAND_FRACTION x the gap to its nearest neighbour.

    Parameters
    ----------
    levels : array_like
        The predicted levels.

    Returns
    -------
    numpy.ndarray

    Example
    -------
    >>> bands([1.0, 0.6, 0.0]).tolist()
    [0.1, 0.1, 0.15]
    """
    lv = np.asarray(levels, float)
    gaps = np.abs(np.diff(lv))
    out = np.empty(len(lv))
    for m in range(len(lv)):
        g = [gaps[m - 1]] if m > 0 else []
        if m < len(gaps):
            g.append(gaps[m])
        out[m] = BAND_FRACTION * min(g)
    return out


def _crossing(t, f, level) -> float | None:
    """First time f(t) <= level, linearly interpolated between records (None if never)."""
    t, f = np.asarray(t, float), np.asarray(f, float)
    idx = np.nonzero(f <= level)[0]
    if idx.size == 0:
        return None
    i = int(idx[0])
    if i == 0:
        return float(t[0])
    f0, f1 = f[i - 1], f[i]
    return float(t[i - 1] + (f0 - level) / (f0 - f1) * (t[i] - t[i - 1]))


def plateau_table(t, loss, levels) -> list[dict]:
    """For each predicted level L_m: the band [L_m - b_m, L_m + b_m] (``bands``),
    the first time the loss enters it and the last time it is in it (records),
    the dwell, whether it is visited (dwell >= DWELL_FRACTION x entry time; the
    first level: the run starts in it; the last: the run ends in it), the
    measured level (the loss at the record nearest the geometric middle of the
    dwell, the arithmetic middle for the first level) and the transition time
    into level m (first crossing of the midpoint between L_{m-1} and L_m).

    Parameters
    ----------
    t, loss : array_like
        A run's records.
    levels : array_like
        The predicted plateau levels, descending.

    Returns
    -------
    list of dict
        One row per level.

    Example
    -------
    >>> rows = plateau_table([0, 1, 2, 3], [1.0, 1.0, 0.0, 0.0], [1.0, 0.0])
    >>> [r['visited'] for r in rows]
    [True, True]
    """
    t, loss = np.asarray(t, float), np.asarray(loss, float)
    lv = np.asarray(levels, float)
    hb = bands(lv)
    rows = []
    for m, (L, b) in enumerate(zip(lv, hb)):
        inside = np.abs(loss - L) <= b
        row = {"m": m, "predicted": float(L), "band": float(b), "t_enter": None, "t_leave": None,
               "dwell": 0.0, "visited": False, "measured": None,
               "t_transition": None if m == 0 else _crossing(t, loss, 0.5 * (lv[m - 1] + L))}
        if inside.any():
            idx = np.nonzero(inside)[0]
            i0, i1 = int(idx[0]), int(idx[-1])
            te, tl = float(t[i0]), float(t[i1])
            row.update(t_enter=te, t_leave=tl, dwell=float(np.sum(np.diff(t)[inside[:-1]])))
            if m == 0:
                visited = bool(inside[0])
                mid = 0.5 * (te + tl)
            elif m == len(lv) - 1:
                visited = bool(inside[-1])
                mid = tl
            else:
                visited = row["dwell"] >= DWELL_FRACTION * te
                mid = math.sqrt(max(te, 1e-300) * max(tl, 1e-300))
            j = int(np.argmin(np.abs(t - mid)))
            row.update(visited=visited, measured=float(loss[j]), t_mid=float(t[j]), i_mid=j)
        rows.append(row)
    return rows


def components_learned(A, Lam, N, Sigma_w=None, sigma=0.0) -> np.ndarray:
    """The coefficient of A on each principal component of Lambda (descending
    eigenvalues) as a fraction of its value at the global minimum:
    c_i = (U^T A U)_ii / (U^T A* U)_ii.

    Parameters
    ----------
    A : array_like
        Predictor.
    Lam, N, Sigma_w, sigma
        The prompt law.

    Returns
    -------
    numpy.ndarray
        (d,) in descending eigenvalue order.

    Example
    -------
    >>> components_learned(np.zeros((1, 1)), [1.0], 2).tolist()
    [0.0]
    """
    from . import theory

    _, U = theory.eigen(Lam)
    Astar = theory.optimal_A(Lam, N, Sigma_w, sigma)
    return np.diagonal(U.T @ np.asarray(A) @ U) / np.diagonal(U.T @ Astar @ U)


def jl(x):
    """A JSON-friendly copy of numbers / arrays.

    Parameters
    ----------
    x : object

    Returns
    -------
    object

    Example
    -------
    >>> jl(np.arange(2))
    [0, 1]
    """
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    return x


def predict(T, x, y, xq) -> np.ndarray:
    """The prediction yhat = sum_{a,b,j} T_abj G_ab x_qj on sampled prompts
    (x (n, N, d), y (n, N), xq (n, d)), G = (1/N) sum_i z_i z_i^T, z_i = (x_i, y_i):
    the trained network's output computed from the prompt itself (no moment).

    Parameters
    ----------
    T : array_like
        (P, P, d).
    x, y, xq : array_like
        Prompts.

    Returns
    -------
    numpy.ndarray
        (n,).

    Example
    -------
    >>> T = np.zeros((2, 2, 1)); T[1, 0, 0] = 1.0        # yhat = x_q (1/N) sum y_i x_i
    >>> float(predict(T, np.ones((1, 2, 1)), np.array([[1.0, 3.0]]), np.ones((1, 1)))[0])
    2.0
    """
    z = np.concatenate([np.asarray(x, float), np.asarray(y, float)[..., None]], axis=-1)
    G = np.einsum("nia,nib->nab", z, z) / z.shape[1]
    return np.einsum("abj,nab,nj->n", np.asarray(T, float), G, np.asarray(xq, float))


def gd_step_prediction(P, x, y, xq) -> np.ndarray:
    """One step of preconditioned GD from w = 0 on (1/2) sum_i (y_i - w^T x_i)^2,
    w_1 = P sum_i y_i x_i, read at the query: x_q^T w_1 (Mahankali; Ahn).

    Parameters
    ----------
    P : array_like
        d x d preconditioner.
    x, y, xq : array_like
        Prompts.

    Returns
    -------
    numpy.ndarray
        (n,).

    Example
    -------
    >>> float(gd_step_prediction(np.eye(1), np.ones((1, 2, 1)), np.array([[1.0, 3.0]]), np.ones((1, 1)))[0])
    4.0
    """
    w1 = np.einsum("jk,nik,ni->nj", np.asarray(P, float), np.asarray(x, float), np.asarray(y, float))
    return np.einsum("nj,nj->n", np.asarray(xq, float), w1)


class RunFailed(RuntimeError):
    """An engine run of a check did not complete (diverged, interrupted): its claims are FAIL, not a crash.

    Parameters
    ----------
    message : str
        The run's status and message.

    Returns
    -------
    RunFailed

    Example
    -------
    >>> str(RunFailed("engine run diverged: ..."))
    'engine run diverged: ...'
    """


def failed_claim(name: str, source: str, statement: str, err: Exception, setting: dict):
    """The FAIL claim of a check whose run did not complete, with the run's own message as the mechanism.

    Parameters
    ----------
    name, source, statement : str
        The claim.
    err : Exception
        Why the run stopped.
    setting : dict

    Returns
    -------
    meanfield.core.report.Claim
        status FAIL.

    Example
    -------
    >>> failed_claim('c', 'proved', 'S.', RuntimeError('diverged'), {}).status
    'FAIL'
    """
    from ...core.report import Claim

    return Claim(name, "FAIL", statement + f" NOT MEASURED: the engine run did not complete ({err}).", setting,
                 {"run_status": str(err)}, None, source)
