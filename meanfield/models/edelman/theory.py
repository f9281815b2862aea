"""The reference numbers of Edelman et al.'s claims, computed without the engine's law.

The in-context Markov chain with a Dirichlet(alpha 1_d) prior on every row and a
uniform first token has, by the Polya-urn (sequential Dirichlet-multinomial)
rule, p(x_1..x_n) = (1/d) prod_{l>=2} (n_{x_(l-1)}(x_l) + alpha) / (n_{x_(l-1)} + d alpha),
the counts taken over the transitions before l. This module enumerates [d]^(L+1)
with that rule (an implementation independent of ``meanfield.engine.twolayer.markov_law``,
which uses the Gamma-function form) and gives the three reference predictors of
the paper's stages and their exact losses:

* uniform: q(e) = 1/d, loss log d;
* unigram: the Bayes posterior of x_(L+1) given the unigram counts of x_1..x_L
  (the best predictor that reads only in-context unigram statistics), loss
  H(X_(L+1) | counts);
* bigram: the Bayes posterior given the whole context, (n_s(e) + alpha) / (n_s + d alpha)
  with s = x_L, loss H(X_(L+1) | x_1..x_L) (the Bayes-optimal loss).
"""

from __future__ import annotations

import itertools

import numpy as np

__all__ = ["urn_law", "strategies", "levels"]


def urn_law(d: int, L: int, alpha: float):
    """Every sequence of [d]^(L+1) and its probability by the Polya-urn rule.

    Parameters
    ----------
    d : int
        Vocabulary.
    L : int
        Context length (sequences have L + 1 tokens).
    alpha : float
        Dirichlet concentration of every row.

    Returns
    -------
    tokens : ndarray of int, shape (d^(L+1), L + 1)
    prob : ndarray, shape (d^(L+1),)

    Example
    -------
    >>> X, p = urn_law(2, 3, 1.0)
    >>> X.shape, round(float(p.sum()), 12)
    ((16, 4), 1.0)
    """
    X = np.array(list(itertools.product(range(d), repeat=L + 1)), dtype=np.int64)
    prob = np.empty(len(X))
    for i, x in enumerate(X):
        n = np.zeros((d, d))
        q = 1.0 / d
        for a, b in zip(x[:-1], x[1:]):
            q *= (n[a, b] + alpha) / (n[a].sum() + d * alpha)
            n[a, b] += 1
        prob[i] = q
    return X, prob


def strategies(X: np.ndarray, prob: np.ndarray, d: int, alpha: float) -> dict:
    """The three reference predictors at every sequence's last position.

    Parameters
    ----------
    X : ndarray of int, shape (n, L + 1)
    prob : ndarray, shape (n,)
    d : int
    alpha : float

    Returns
    -------
    dict
        ``uniform``, ``unigram``, ``bigram``: arrays (n, d), the prediction of
        x_(L+1) from x_1..x_L (row i for sequence i).

    Example
    -------
    >>> X, p = urn_law(2, 3, 1.0)
    >>> q = strategies(X, p, 2, 1.0)
    >>> np.allclose(q["bigram"].sum(1), 1), np.allclose(q["unigram"].sum(1), 1)
    (True, True)
    """
    n, L1 = X.shape
    L = L1 - 1
    ctx = X[:, :L]
    counts = np.stack([(ctx == e).sum(1) for e in range(d)], 1)
    key = counts @ (L + 1) ** np.arange(d)  # the unigram count vector as one integer
    uni = np.zeros((n, d))
    for k in np.unique(key):
        m = key == k
        joint = np.bincount(X[m, L], weights=prob[m], minlength=d)
        uni[m] = joint / joint.sum()
    s = X[:, L - 1]
    big = np.empty((n, d))
    for i in range(n):
        c = np.zeros(d)
        for a, b in zip(ctx[i, :-1], ctx[i, 1:]):
            if a == s[i]:
                c[b] += 1
        big[i] = (c + alpha) / (c.sum() + d * alpha)
    return {"uniform": np.full((n, d), 1.0 / d), "unigram": uni, "bigram": big}


def levels(d: int, L: int, alpha: float) -> dict:
    """The exact loss of each reference predictor: the three plateau levels.

    Parameters
    ----------
    d, L : int
    alpha : float

    Returns
    -------
    dict
        ``uniform`` (log d), ``unigram`` (H(X_(L+1) | unigram counts)), ``bigram`` (H(X_(L+1) | context)).

    Example
    -------
    >>> lv = levels(2, 4, 1.0)
    >>> lv["uniform"] > lv["unigram"] > lv["bigram"]
    True
    """
    X, p = urn_law(d, L, alpha)
    q = strategies(X, p, d, alpha)
    y = X[:, -1]
    return {k: float(-(p * np.log(v[np.arange(len(y)), y])).sum()) for k, v in q.items()}
