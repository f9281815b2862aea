"""The reference numbers of Nichani, Damian, Lee's claims, computed without the engine's law or kernels.

The data (``InContextTree`` of the official code, uniform roots): positions
1..T-1 of a tree (each position one earlier parent, or none), a token drawn
from the row pi(. | x_parent) of one transition matrix pi whose rows are iid
Dirichlet(alpha 1_d); a root is uniform; position T (the test token) is a
uniform root and the target is the row pi(. | x_T). This module gives:

* :func:`urn_graph_law`: every context x_1..x_T with its probability by the
  Polya-urn (sequential Dirichlet-multinomial) rule, token after token,
  independent of ``meanfield.engine.twolayer.graph_law`` (the Gamma-function
  form);
* :func:`soft_targets`: E[pi(. | x_T) | x_1..x_T] by counting the context's
  transitions out of x_T, and :func:`bayes_level` E[H(target | context)],
  the least loss of any predictor (a conditional entropy);
* :func:`conditional_mi`: for every pair of positions j < i, the mutual
  information of x_i and x_j given the transition matrix, E_pi[I_pi(x_i; x_j)]
  (Shannon) and E_pi[chi^2_pi(x_i; x_j)], each draw of pi exact (the
  d^T contexts enumerated under pi), the expectation over pi by Monte Carlo
  with its standard error (stated sampling: the integral over pi has no
  closed form); and, per draw, the data-processing check
  I_pi(x_i; x_parent(i)) >= I_pi(x_i; x_j) (exact for every draw: given pi a
  tree is a Markov chain along its paths);
* :func:`layer1_attention`: the first layer's softmax attention from its
  score matrix, by explicit numpy (one-hot token and position features,
  causal mask with the diagonal), averaged over the law;
* :func:`induction_init`: the induction-aligned small start of the initial
  gradient claims (docs/models.md, section 8).

Example
-------
>>> X, p = urn_graph_law(2, [[], [1], []], 1.0)
>>> X.shape, round(float(p.sum()), 12)
((8, 3), 1.0)
"""

from __future__ import annotations

import itertools

import numpy as np

__all__ = ["urn_graph_law", "soft_targets", "bayes_level", "conditional_mi", "layer1_attention", "induction_init",
           "spearman", "transition_alignment"]


def urn_graph_law(d: int, parents, alpha: float):
    """Every context of a tree over positions and its probability by the Polya-urn rule.

    Position i draws x_i with probability (n_s(x_i) + alpha) / (n_s + d alpha),
    s = x_parent(i), the counts over the earlier positions that have a parent
    (one shared table); a root is uniform.

    Parameters
    ----------
    d : int
        Vocabulary.
    parents : list of lists
        One list per position (1-based earlier positions; at most one parent, ``[]`` for a root).
    alpha : float
        Dirichlet concentration.

    Returns
    -------
    tokens : ndarray of int, shape (d^T, T), lexicographic
    prob : ndarray, shape (d^T,)

    Example
    -------
    >>> X, p = urn_graph_law(2, [[], [1]], 1.0)
    >>> p.tolist()
    [0.25, 0.25, 0.25, 0.25]
    """
    T = len(parents)
    X = np.array(list(itertools.product(range(d), repeat=T)), dtype=np.int64)
    prob = np.empty(len(X))
    for k, x in enumerate(X):
        n = np.zeros((d, d))
        q = 1.0
        for i, ps in enumerate(parents):
            if not ps:
                q /= d
                continue
            s = x[ps[0] - 1]
            q *= (n[s, x[i]] + alpha) / (n[s].sum() + d * alpha)
            n[s, x[i]] += 1
        prob[k] = q
    return X, prob


def soft_targets(X: np.ndarray, d: int, parents, alpha: float) -> np.ndarray:
    """E[pi(. | x_T) | x_1..x_T]: (counts of the transitions out of x_T + alpha) / (their total + d alpha).

    Parameters
    ----------
    X : ndarray of int, shape (n, T)
        Contexts (the last column is the test token).
    d : int
    parents : list of lists
        The contexts' parents.
    alpha : float

    Returns
    -------
    ndarray, shape (n, d)

    Example
    -------
    >>> soft_targets(np.array([[0, 0, 0]]), 2, [[], [1], []], 1.0).tolist()
    [[0.6666666666666666, 0.3333333333333333]]
    """
    out = np.empty((len(X), d))
    for k, x in enumerate(X):
        c = np.zeros(d)
        for i, ps in enumerate(parents):
            if ps and x[ps[0] - 1] == x[-1]:
                c[x[i]] += 1
        out[k] = (c + alpha) / (c.sum() + d * alpha)
    return out


def bayes_level(d: int, parents, alpha: float) -> float:
    """E[H(pi(. | x_T) | context)]: the least expected loss of any predictor (the soft target's entropy).

    Parameters
    ----------
    d : int
    parents : list of lists
        The contexts' parents (the last position the test token, a root).
    alpha : float

    Returns
    -------
    float

    Example
    -------
    >>> round(bayes_level(2, [[], [1], []], 1.0), 6) < round(float(np.log(2)), 6)
    True
    """
    X, p = urn_graph_law(d, parents, alpha)
    y = soft_targets(X, d, parents, alpha)
    return float(-(p * (y * np.log(y)).sum(1)).sum())


def conditional_mi(d: int, parents, alpha: float, draws: int, seed: int = 0, chunk: int = 1000) -> dict:
    """E_pi of the mutual information of every pair of positions given the transition matrix.

    Parameters
    ----------
    d : int
    parents : list of lists
        A tree over positions 1..T (at most one parent each).
    alpha : float
    draws : int
        Monte Carlo draws of pi (rows iid Dirichlet(alpha 1_d)).
    seed : int
    chunk : int
        Draws per batch (memory: chunk x d^T floats).

    Returns
    -------
    dict
        ``mi``, ``mi_se``, ``chi2``, ``chi2_se``: arrays (T, T), entry [i, j] for 0-based j < i (0 elsewhere);
        ``dpi_violation``: the largest I_pi(x_i; x_j) - I_pi(x_i; x_parent(i)) over draws, positions with a
        parent and j < i (<= rounding: the data-processing inequality); ``draws``.

    Example
    -------
    >>> r = conditional_mi(2, [[], [1], [1]], 1.0, 200)
    >>> bool(r["mi"][1, 0] > r["mi"][2, 1]), r["dpi_violation"] < 1e-12
    (True, True)
    """
    T = len(parents)
    X = np.array(list(itertools.product(range(d), repeat=T)), dtype=np.int64)
    rng = np.random.default_rng(seed)
    roots = sum(1 for ps in parents if not ps)
    onehot = [np.eye(d)[X[:, i]] for i in range(T)]
    s_mi, q_mi, s_c2, q_c2 = (np.zeros((T, T)) for _ in range(4))
    worst = -np.inf
    done = 0
    while done < draws:
        m = min(chunk, draws - done)
        pi = rng.dirichlet(np.full(d, float(alpha)), size=(m, d))
        P = np.full((m, len(X)), float(d) ** -roots)
        for i, ps in enumerate(parents):
            if ps:
                P *= pi[:, X[:, ps[0] - 1], X[:, i]]
        mi = np.zeros((m, T, T))
        c2 = np.zeros((m, T, T))
        for i in range(T):
            for j in range(i):
                J = np.einsum("mn,na,nb->mab", P, onehot[i], onehot[j])
                Q = J.sum(2, keepdims=True) * J.sum(1, keepdims=True)
                with np.errstate(divide="ignore", invalid="ignore"):
                    mi[:, i, j] = np.where(J > 0, J * np.log(J / np.where(Q > 0, Q, 1.0)), 0.0).sum((1, 2))
                    c2[:, i, j] = np.where(Q > 0, J * J / np.where(Q > 0, Q, 1.0), 0.0).sum((1, 2)) - 1.0
        for i, ps in enumerate(parents):
            if ps and i > 1:
                others = [j for j in range(i) if j != ps[0] - 1]
                worst = max(worst, float((mi[:, i, others].max(1) - mi[:, i, ps[0] - 1]).max()))
        s_mi += mi.sum(0)
        q_mi += (mi ** 2).sum(0)
        s_c2 += c2.sum(0)
        q_c2 += (c2 ** 2).sum(0)
        done += m

    def mean_se(s, q):
        mu = s / draws
        var = np.maximum(q / draws - mu ** 2, 0.0) * draws / max(draws - 1, 1)
        return mu, np.sqrt(var / draws)

    mu, se = mean_se(s_mi, q_mi)
    cm, cse = mean_se(s_c2, q_c2)
    return {"mi": mu, "mi_se": se, "chi2": cm, "chi2_se": cse, "dpi_violation": worst if np.isfinite(worst) else 0.0,
            "draws": int(draws)}


def layer1_attention(A: np.ndarray, X: np.ndarray, prob: np.ndarray, d: int) -> np.ndarray:
    """The first layer's attention, averaged over the law: [i, j] = E[softmax_j<=i(e_i^T A e_j)].

    Parameters
    ----------
    A : ndarray, shape (d + T, d + T)
        The first layer's score matrix over [one-hot token, one-hot position] (query row, key column).
    X : ndarray of int, shape (n, T)
        Contexts.
    prob : ndarray, shape (n,)
    d : int

    Returns
    -------
    ndarray, shape (T, T): row i the mean attention of position i + 1 over positions 1..i + 1.

    Example
    -------
    >>> X, p = urn_graph_law(2, [[], [1]], 1.0)
    >>> layer1_attention(np.zeros((4, 4)), X, p, 2).tolist()
    [[1.0, 0.0], [0.5, 0.5]]
    """
    n, T = X.shape
    E = np.zeros((n, T, d + T))
    E[np.arange(n)[:, None], np.arange(T)[None, :], X] = 1.0
    E[:, np.arange(T), d + np.arange(T)] = 1.0
    z = np.einsum("nia,ab,njb->nij", E, A, E)
    z = np.where(np.tril(np.ones((T, T), dtype=bool)), z, -np.inf)
    z -= z.max(2, keepdims=True)
    a = np.exp(z)
    a /= a.sum(2, keepdims=True)
    return np.einsum("n,nij->ij", prob, a)


def induction_init(blocks: dict, d: int, T: int, beta0: float, gamma0: float) -> None:
    """Set the induction-aligned start in place: A1 = 0, the layer-2 score beta0 on (query token e, key's
    layer-1 token e), the read-out gamma0 on (layer-2 output token e -> logit e); every other entry 0.

    Parameters
    ----------
    blocks : dict
        Block name -> array view (``Net.unpack``) of the CatFormer-shaped network (two bilinear heads, stream values,
        linear read-out).
    d, T : int
        Vocabulary and positions (D0 = d + T).
    beta0, gamma0 : float

    Returns
    -------
    None

    Example
    -------
    >>> b = {"layer1.head1.A": np.ones((4, 4)), "layer2.head1.A": np.zeros((8, 8)), "readout.W": np.zeros((16, 2))}
    >>> induction_init(b, 2, 2, 0.1, 0.2); float(b["layer2.head1.A"][1, 5]), float(b["readout.W"][9, 1])
    (0.1, 0.2)
    """
    D0 = d + T
    for v in blocks.values():
        v[...] = 0.0
    for e in range(d):
        blocks["layer2.head1.A"][e, D0 + e] = beta0
        blocks["readout.W"][2 * D0 + e, e] = gamma0


def transition_alignment(d: int, alpha: float, kmax: int, draws: int, seed: int = 0) -> dict:
    """a_k = E_pi <pi^k - J, pi - J>_F (J = 1/d everywhere): how the k-step relation of an ancestor at distance k
    lines up with the one-step transition the target reads, for k = 1..kmax (Monte Carlo over pi).

    Parameters
    ----------
    d : int
    alpha : float
    kmax : int
    draws : int
    seed : int

    Returns
    -------
    dict
        ``a`` (kmax,), ``se`` (kmax,), ``draws``.

    Example
    -------
    >>> r = transition_alignment(2, 0.1, 3, 2000)
    >>> bool(r["a"][0] > r["a"][1] < r["a"][2])
    True
    """
    rng = np.random.default_rng(seed)
    pi = rng.dirichlet(np.full(d, float(alpha)), size=(draws, d))
    J = np.full((d, d), 1.0 / d)
    P = pi.copy()
    vals = []
    for _ in range(kmax):
        vals.append(((P - J) * (pi - J)).sum((1, 2)))
        P = P @ pi
    v = np.array(vals)
    return {"a": v.mean(1), "se": v.std(1, ddof=1) / np.sqrt(draws), "draws": int(draws)}


def spearman(a, b) -> float:
    """The Spearman rank correlation (average ranks for ties); nan when a side is constant.

    Parameters
    ----------
    a, b : array-like of equal length

    Returns
    -------
    float

    Example
    -------
    >>> spearman([1, 2, 3], [10, 30, 20])
    0.5
    """
    from scipy.stats import rankdata

    ra, rb = rankdata(a), rankdata(b)
    if np.std(ra) == 0 or np.std(rb) == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])
