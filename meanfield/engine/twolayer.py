"""Exact finite sequence laws for the two-layer (small-parameter) model class.

The first generic piece of the two-layer class (``docs/engine.md``, "Two-layer
attention: which models close"): the population of an in-context Markov chain
with a Dirichlet prior, as every sequence of the finite set [d]^{L+1} with its
exact probability, so that a small-parameter model's population loss and
gradient are finite sums (no sampling).

The law (parent lags ``pa``, r = max(pa), 1-based positions): x_1..x_r
uniform on [d]; for every parent context z in [d]^{|pa|} an independent row
pi(. | z) ~ Dirichlet(alpha 1_d); x_l ~ pi(. | x_{l - pa}) for l = r+1..L+1.
Integrating the prior out (Dirichlet-multinomial),

    p(x) = d^{-r} prod_z B(alpha 1 + n_z) / B(alpha 1),
    B(beta) = prod_e Gamma(beta_e) / Gamma(sum_e beta_e),

with n_z(e) = #{l > r : x_{l - pa} = z, x_l = e}. The context z of pa =
(p_0, p_1, ...) is coded sum_i x_{l - p_i} d^i.

Example
-------
>>> law = markov_law(2, 3, pa=(1,), alpha=1.0)
>>> law.tokens.shape, round(float(law.prob.sum()), 12)
((16, 4), 1.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import gammaln

from ..core.errors import ConfigError

__all__ = ["MAX_SEQUENCES", "SequenceLaw", "markov_law", "posterior_mean", "population_mean", "context_codes",
           "graph_law", "graph_posterior_mean"]

#: the most sequences an exact law enumerates (d^{L+1}); above it the law is refused before allocating
MAX_SEQUENCES = 2_000_000
#: the most count-table cells (sequences x contexts x d) an exact law allocates
_MAX_CELLS = 60_000_000


@dataclass(frozen=True)
class SequenceLaw:
    """Every sequence of [d]^{L+1} (rows of ``tokens``, tokens 0..d-1) and its probability ``prob``."""

    tokens: np.ndarray
    prob: np.ndarray
    d: int
    L: int
    pa: tuple
    alpha: float


def _check(d, L, pa, alpha, enumerate_all=True):
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 2:
        raise ConfigError(f"d: an integer >= 2; got {d!r}")
    try:
        pa_t = tuple(sorted({int(p) for p in pa}))
    except (TypeError, ValueError):
        raise ConfigError(f"pa: a list of positive integers (parent lags); got {pa!r}") from None
    if not pa_t or pa_t[0] < 1 or any(isinstance(p, bool) for p in pa) or any(int(p) != p for p in pa):
        raise ConfigError(f"pa: a list of positive integers (parent lags); got {pa!r}")
    r = pa_t[-1]
    if isinstance(L, bool) or not isinstance(L, (int, np.integer)) or L < r:
        raise ConfigError(f"L: an integer >= max(pa) = {r} (the context length; the law covers x_1..x_(L+1)); got {L!r}")
    try:
        a = float(alpha)
    except (TypeError, ValueError):
        raise ConfigError(f"alpha: a number > 0 (the Dirichlet concentration); got {alpha!r}") from None
    if not (a > 0 and math.isfinite(a)):
        raise ConfigError(f"alpha: a number > 0 (the Dirichlet concentration); got {alpha!r}")
    log_n = (L + 1) * math.log(d)
    if not enumerate_all:
        return int(d), int(L), pa_t, a
    if log_n > math.log(MAX_SEQUENCES):
        raise ConfigError(f"L: the exact law enumerates d^(L+1) = {d}^{L + 1} sequences, more than {MAX_SEQUENCES}; "
                          f"give a smaller L or d, or sample sequences instead")
    if log_n + (len(pa_t) + 1) * math.log(d) > math.log(_MAX_CELLS):
        raise ConfigError(f"pa: the exact law's count table (d^(L+1) x d^(|pa|+1) = {d}^{L + 1 + len(pa_t) + 1} cells) "
                          f"exceeds {_MAX_CELLS}; give fewer parent lags or a smaller L")
    return int(d), int(L), pa_t, a


def context_codes(tokens: np.ndarray, pa: tuple, d: int, l: int) -> np.ndarray:
    """The code sum_i x_{l - p_i} d^i of the parent context of 1-based position ``l``.

    Parameters
    ----------
    tokens : ndarray of int, shape (n, >= l - 1)
        Sequences (column j is position j + 1).
    pa : tuple of int
        Parent lags, sorted (each < l).
    d : int
        Vocabulary size.
    l : int
        The 1-based position whose context is coded.

    Returns
    -------
    ndarray of int64, shape (n,)

    Example
    -------
    >>> context_codes(np.array([[1, 0, 1]]), (1, 2), 2, 3)
    array([2])
    """
    code = np.zeros(tokens.shape[0], dtype=np.int64)
    for i, p in enumerate(pa):
        code += tokens[:, l - p - 1].astype(np.int64) * d ** i
    return code


def _counts(tokens: np.ndarray, d: int, pa: tuple, last: int) -> np.ndarray:
    """n[s, z, e]: transitions z -> e at 1-based positions r+1..last of each sequence."""
    n = tokens.shape[0]
    nz = d ** len(pa)
    counts = np.zeros((n, nz, d), dtype=np.int64)
    rows = np.arange(n)
    for l in range(pa[-1] + 1, last + 1):
        np.add.at(counts, (rows, context_codes(tokens, pa, d, l), tokens[:, l - 1]), 1)
    return counts


def markov_law(d: int, L: int, pa=(1,), alpha: float = 1.0) -> SequenceLaw:
    """The exact law of x_1..x_{L+1} of the Dirichlet-prior in-context Markov chain.

    Parameters
    ----------
    d : int
        Vocabulary size (>= 2).
    L : int
        Context length (>= max(pa)); the law covers L + 1 tokens.
    pa : iterable of int
        Parent lags (positive integers).
    alpha : float
        Dirichlet concentration (> 0).

    Returns
    -------
    SequenceLaw
        ``tokens`` (d^{L+1}, L+1) int64 in lexicographic order, ``prob`` (d^{L+1},).

    Raises
    ------
    ConfigError
        A bad argument, or more than :data:`MAX_SEQUENCES` sequences (one line naming the field).

    Example
    -------
    >>> law = markov_law(2, 1, pa=(1,), alpha=1.0)
    >>> law.prob.round(12).tolist()
    [0.25, 0.25, 0.25, 0.25]
    """
    d, L, pa, a = _check(d, L, pa, alpha)
    T = L + 1
    grids = np.indices((d,) * T).reshape(T, -1).T.astype(np.int64)
    logp = _log_dirichlet_multinomial(_counts(grids, d, pa, T), a) - pa[-1] * math.log(d)
    return SequenceLaw(grids, np.exp(logp), d, L, pa, a)


def _log_dirichlet_multinomial(counts: np.ndarray, a: float) -> np.ndarray:
    """sum_z log B(a 1 + n_z) - log B(a 1) per sequence, counts (n, contexts, d); zero for absent contexts."""
    d = counts.shape[2]
    tot = counts.sum(axis=2)
    return (gammaln(a + counts) - gammaln(a)).sum(axis=(1, 2)) - (gammaln(d * a + tot) - gammaln(d * a)).sum(axis=1)


def _check_graph(d, parents, alpha):
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 2:
        raise ConfigError(f"d: an integer >= 2; got {d!r}")
    try:
        par = tuple(tuple(int(q) for q in ps) for ps in parents)
        bad = any(isinstance(q, bool) or int(q) != q for ps in parents for q in ps)
    except (TypeError, ValueError):
        par, bad = (), True
    if bad or not par or any(not (1 <= q < i + 1) or len(set(ps)) != len(ps) for i, ps in enumerate(par) for q in ps):
        raise ConfigError("parents: one list per position 1..T of distinct earlier positions (1-based, [] for a root); "
                          f"got {parents!r}")
    try:
        a = float(alpha)
    except (TypeError, ValueError):
        a = float("nan")
    if not (a > 0 and math.isfinite(a)):
        raise ConfigError(f"alpha: a number > 0 (the Dirichlet concentration); got {alpha!r}")
    T = len(par)
    if T * math.log(d) > math.log(MAX_SEQUENCES):
        raise ConfigError(f"parents: the exact law enumerates d^T = {d}^{T} sequences, more than {MAX_SEQUENCES}; "
                          f"give fewer positions or a smaller d, or sample sequences instead")
    cells = sum(d ** (k + 1) for k in {len(ps) for ps in par if ps})
    if T * math.log(d) + math.log(max(cells, 1)) > math.log(_MAX_CELLS):
        raise ConfigError(f"parents: the exact law's count tables exceed {_MAX_CELLS} cells; give fewer parents per position")
    return int(d), par, a


def _graph_counts(tokens: np.ndarray, d: int, parents: tuple, positions) -> dict:
    """{k: n[s, z, e]}: per parent count k, the pairs (parents' values z, value e) over ``positions`` (1-based)."""
    n = tokens.shape[0]
    rows = np.arange(n)
    out: dict = {}
    for i in positions:
        ps = parents[i - 1]
        if not ps:
            continue
        k = len(ps)
        if k not in out:
            out[k] = np.zeros((n, d ** k, d), dtype=np.int64)
        z = np.zeros(n, dtype=np.int64)
        for j, q in enumerate(ps):
            z += tokens[:, q - 1].astype(np.int64) * d ** j
        np.add.at(out[k], (rows, z, tokens[:, i - 1]), 1)
    return out


def graph_law(d: int, parents, alpha: float = 1.0) -> SequenceLaw:
    """The exact law of a sequence with a latent causal graph over its positions.

    Position i (1-based) with parent positions ``parents[i-1]`` (earlier
    positions, in the given order) draws x_i ~ pi_k(. | x_parents) from the
    table of its parent count k; every table row is an independent
    Dirichlet(alpha 1_d), shared by all positions with k parents; a root
    (no parent) is uniform. Integrating the prior out:
    p(x) = d^{-roots} prod_k prod_z B(alpha 1 + n_kz) / B(alpha 1).

    Parameters
    ----------
    d : int
        Vocabulary size (>= 2).
    parents : list of lists of int
        One list per position (``[]`` for a root).
    alpha : float
        Dirichlet concentration (> 0).

    Returns
    -------
    SequenceLaw
        ``tokens`` (d^T, T) in lexicographic order, ``prob``; ``L = T - 1``, ``pa`` the parents.

    Example
    -------
    >>> law = graph_law(2, [[], [1], [1]], 1.0)
    >>> round(float(law.prob.sum()), 12), law.tokens.shape
    (1.0, (8, 3))
    """
    d, par, a = _check_graph(d, parents, alpha)
    T = len(par)
    grids = np.indices((d,) * T).reshape(T, -1).T.astype(np.int64)
    logp = -sum(1 for ps in par if not ps) * math.log(d) * np.ones(grids.shape[0])
    for counts in _graph_counts(grids, d, par, range(1, T + 1)).values():
        logp += _log_dirichlet_multinomial(counts, a)
    return SequenceLaw(grids, np.exp(logp), d, T - 1, par, a)


def graph_posterior_mean(context: np.ndarray, d: int, parents, target_parents, alpha: float = 1.0) -> np.ndarray:
    """E[pi_k(. | x_target_parents) | context]: the soft target of a further position.

    (n_kz(e) + alpha) / (n_kz + d alpha), k = len(target_parents), z the
    context's values at ``target_parents``, the counts over the context's
    positions with k parents; uniform when ``target_parents`` is empty.

    Parameters
    ----------
    context : ndarray of int, shape (n, T)
    d : int
    parents : list of lists of int
        The context positions' parents (as :func:`graph_law`).
    target_parents : list of int
        The parents of the predicted position (1-based positions of the context).
    alpha : float

    Returns
    -------
    ndarray, shape (n, d)

    Example
    -------
    >>> graph_posterior_mean(np.array([[0, 0, 1]]), 2, [[], [1], [1]], [3], 1.0).tolist()
    [[0.5, 0.5]]
    """
    d, par, a = _check_graph(d, parents, alpha)
    context = np.atleast_2d(np.asarray(context, dtype=np.int64))
    tp = tuple(int(q) for q in target_parents)
    if context.shape[1] != len(par) or any(not 1 <= q <= len(par) for q in tp):
        raise ConfigError(f"target_parents: positions 1..{len(par)} of the context; got {target_parents!r}")
    n = context.shape[0]
    if not tp:
        return np.full((n, d), 1.0 / d)
    counts = _graph_counts(context, d, par, range(1, len(par) + 1)).get(len(tp), np.zeros((n, d ** len(tp), d), dtype=np.int64))
    z = np.zeros(n, dtype=np.int64)
    for j, q in enumerate(tp):
        z += context[:, q - 1] * d ** j
    row = counts[np.arange(n), z]
    return (row + a) / (row.sum(axis=1, keepdims=True) + d * a)


def posterior_mean(context: np.ndarray, d: int, pa=(1,), alpha: float = 1.0) -> np.ndarray:
    """E[pi(. | z_{L+1}) | x_1..x_L]: the soft target of the next token given a context.

    (n_z(e) + alpha) / (n_z + d alpha) with z the parent context of position
    L + 1 and the counts taken over x_1..x_L (Dirichlet conjugacy).

    Parameters
    ----------
    context : ndarray of int, shape (n, L)
        Contexts x_1..x_L (L >= max(pa)).
    d : int
        Vocabulary size.
    pa : iterable of int
        Parent lags.
    alpha : float
        Dirichlet concentration.

    Returns
    -------
    ndarray, shape (n, d)
        Rows sum to 1.

    Example
    -------
    >>> posterior_mean(np.array([[0, 0, 1, 0]]), 2, (1,), 1.0).round(6).tolist()
    [[0.5, 0.5]]
    """
    context = np.atleast_2d(np.asarray(context, dtype=np.int64))
    L = context.shape[1]
    d, L, pa, a = _check(d, L, pa, alpha, enumerate_all=False)
    counts = _counts(context, d, pa, L)
    ext = np.concatenate([context, np.zeros((context.shape[0], 1), dtype=np.int64)], axis=1)
    z = context_codes(ext, pa, d, L + 1)
    row = counts[np.arange(context.shape[0]), z]
    return (row + a) / (row.sum(axis=1, keepdims=True) + d * a)


def population_mean(f, law: SequenceLaw):
    """The exact expectation E[f(x)] = sum_x p(x) f(x) of a per-sequence function.

    Parameters
    ----------
    f : callable
        ``f(tokens) -> array`` with first axis the sequences (vectorised).
    law : SequenceLaw

    Returns
    -------
    ndarray or float

    Example
    -------
    >>> law = markov_law(2, 2, (1,), 1.0)
    >>> round(float(population_mean(lambda x: (x[:, 0] == 0).astype(float), law)), 12)
    0.5
    """
    vals = np.asarray(f(law.tokens), dtype=np.float64)
    return np.tensordot(law.prob, vals, axes=(0, 0))
