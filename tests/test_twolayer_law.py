"""The exact sequence law of the two-layer class (meanfield.engine.twolayer) against
independent brute-force expectations over the Dirichlet prior: Gauss-Jacobi
quadrature over the transition rows at d = 2 (the integrand is a polynomial of
degree <= L in each row, so the quadrature is exact to rounding), Monte Carlo over
the prior at d = 3 (within 5 standard errors per sequence)."""

from __future__ import annotations

import doctest
import itertools

import numpy as np
import pytest
from scipy.special import roots_jacobi

from meanfield.core.errors import ConfigError
from meanfield.engine import twolayer
from meanfield.engine.twolayer import MAX_SEQUENCES, markov_law, population_mean, posterior_mean


def _beta_nodes(alpha: float, n: int):
    """Nodes and weights of E_{theta ~ Beta(alpha, alpha)}[g(theta)] (exact for polynomials of degree < 2n)."""
    x, w = roots_jacobi(n, alpha - 1.0, alpha - 1.0)
    return (1.0 + x) / 2.0, w / w.sum()


def _chain_prob(x, rows, pa):
    """p(x | pi) by the definition: x_1..x_r uniform, then pi(x_l | context). rows[z] = pi(. | z)."""
    d = rows.shape[-1]
    r = max(pa)
    p = d ** -float(r)
    for l in range(r + 1, len(x) + 1):  # 1-based position l
        z = sum(x[l - q - 1] * d ** i for i, q in enumerate(sorted(pa)))
        p = p * rows[..., z, x[l - 1]]
    return p


def _quadrature_law(L, pa, alpha, n_nodes=8):
    """E_prior[p(x | pi)] at d = 2 for every x by a product Gauss-Jacobi rule over the 2^|pa| rows."""
    nz = 2 ** len(pa)
    th, w = _beta_nodes(alpha, n_nodes)
    grid = np.array(list(itertools.product(range(n_nodes), repeat=nz)))
    theta = th[grid]                       # (G, nz): pi(0 | z)
    weight = np.prod(w[grid], axis=1)      # (G,)
    rows = np.stack([theta, 1.0 - theta], axis=-1)  # (G, nz, 2)
    out = {}
    for x in itertools.product(range(2), repeat=L + 1):
        out[x] = (weight * _chain_prob(x, rows, pa)).sum(), rows, weight
    return out


@pytest.mark.parametrize("L,pa,alpha", [(3, (1,), 1.0), (5, (1,), 0.3), (4, (2,), 2.5), (5, (1, 2), 0.7)])
def test_law_equals_quadrature_d2(L, pa, alpha):
    law = markov_law(2, L, pa, alpha)
    ref = _quadrature_law(L, pa, alpha)
    assert law.tokens.shape == (2 ** (L + 1), L + 1)
    for x, p in zip(law.tokens, law.prob):
        assert abs(p - ref[tuple(int(v) for v in x)][0]) <= 1e-12
    assert abs(law.prob.sum() - 1.0) <= 1e-12


def test_law_equals_monte_carlo_d3():
    d, L, pa, alpha = 3, 3, (1,), 0.8
    law = markov_law(d, L, pa, alpha)
    rng = np.random.default_rng(7)
    n = 200_000
    rows = rng.dirichlet(alpha * np.ones(d), size=(n, d))  # (n, z, e)
    worst = 0.0
    for x, p in zip(law.tokens, law.prob):
        s = _chain_prob(tuple(int(v) for v in x), rows, pa)
        se = s.std(ddof=1) / np.sqrt(n)
        worst = max(worst, abs(s.mean() - p) / se)
    assert worst < 5.0, worst


def test_marginal_consistency_and_posterior_mean():
    d, L, pa, alpha = 3, 4, (1, 2), 0.6
    law = markov_law(d, L, pa, alpha)
    short = markov_law(d, L - 1, pa, alpha)
    marg = law.prob.reshape(-1, d)          # lexicographic order: the last token varies fastest
    assert np.allclose(marg.sum(axis=1), short.prob, rtol=0, atol=1e-15)
    # the predictive law of x_{L+1} is the posterior mean of the next row
    pred = marg / marg.sum(axis=1, keepdims=True)
    post = posterior_mean(short.tokens, d, pa, alpha)
    assert np.abs(pred - post).max() <= 1e-12


def test_posterior_mean_equals_quadrature_d2():
    L, pa, alpha = 4, (1,), 0.45
    ref = _quadrature_law(L - 1, pa, alpha)
    for x, (p, rows, weight) in ref.items():
        z = x[-1]
        num = (weight * _chain_prob(x, rows, pa) * rows[:, z, 0]).sum()
        post = posterior_mean(np.array([x]), 2, pa, alpha)[0]
        assert abs(post[0] - num / p) <= 1e-12
        assert abs(post.sum() - 1.0) <= 1e-14


def test_population_mean_is_the_weighted_sum():
    law = markov_law(2, 4, (1,), 1.3)
    f = lambda x: (x[:, -1] == x[:, -2]).astype(float)
    ref = sum(p * float(x[-1] == x[-2]) for x, p in zip(law.tokens, law.prob))
    assert abs(population_mean(f, law) - ref) <= 1e-14
    # the chain repeats its last token with probability E[pi(e|e)] = 1/d plus a positive
    # in-context correlation (alpha finite), so the mean is above 1/2
    assert population_mean(f, law) > 0.5


@pytest.mark.parametrize("kwargs,field", [
    (dict(d=1, L=3), "d:"), (dict(d=2.5, L=3), "d:"), (dict(d=True, L=3), "d:"),
    (dict(d=2, L=0), "L:"), (dict(d=2, L=2, pa=(3,)), "L:"), (dict(d=2, L=3, pa=(0,)), "pa:"),
    (dict(d=2, L=3, pa=("a",)), "pa:"), (dict(d=2, L=3, pa=()), "pa:"), (dict(d=2, L=3, alpha=0.0), "alpha:"),
    (dict(d=2, L=3, alpha=float("nan")), "alpha:"), (dict(d=2, L=3, alpha="x"), "alpha:"),
    (dict(d=3, L=40), "L:"), (dict(d=2, L=200), "L:"),
])
def test_bad_arguments_are_one_line_refusals(kwargs, field):
    with pytest.raises(ConfigError) as e:
        markov_law(**kwargs)
    msg = str(e.value)
    assert msg.startswith(field) and "\n" not in msg


def test_size_refused_before_allocating():
    # d^(L+1) far beyond memory: refused from the estimate, immediately
    with pytest.raises(ConfigError, match=str(MAX_SEQUENCES)):
        markov_law(10, 30)


def test_doctests():
    r = doctest.testmod(twolayer)
    assert r.failed == 0 and r.attempted > 0


# ------------------------------------------------------------------ latent causal graphs

from meanfield.engine.twolayer import graph_law, graph_posterior_mean  # noqa: E402

GRAPH = [[], [1], [1], [2, 3], [3], [4, 1]]  # one root; rows of the 1-parent and the 2-parent tables shared by several positions


def _graph_quadrature(parents, alpha, n_nodes=7):
    """E_prior[p(x | pi)] at d = 2 by a product Gauss-Jacobi rule over every row of every table."""
    ks = sorted({len(ps) for ps in parents if ps})
    slots = [(k, z) for k in ks for z in range(2 ** k)]
    th, w = _beta_nodes(alpha, n_nodes)
    grid = np.array(list(itertools.product(range(n_nodes), repeat=len(slots))))
    theta = th[grid]
    weight = np.prod(w[grid], axis=1)
    col = {s: i for i, s in enumerate(slots)}

    def prob(x):
        p = np.full(len(weight), 1.0)
        for i, ps in enumerate(parents):
            if not ps:
                p = p * 0.5
                continue
            z = sum(x[q - 1] * 2 ** j for j, q in enumerate(ps))
            t = theta[:, col[(len(ps), z)]]
            p = p * (t if x[i] == 0 else 1.0 - t)
        return p

    return prob, weight, theta, col


def test_graph_law_equals_quadrature_d2():
    alpha = 0.8
    law = graph_law(2, GRAPH, alpha)
    prob, weight, _, _ = _graph_quadrature(GRAPH, alpha)
    for x, p in zip(law.tokens, law.prob):
        assert abs(p - (weight * prob(tuple(int(v) for v in x))).sum()) <= 1e-12
    assert abs(law.prob.sum() - 1.0) <= 1e-12


def test_graph_posterior_mean_equals_quadrature_d2():
    alpha, target = 1.7, [5, 2]  # a further position with parents (5, 2): the 2-parent table
    prob, weight, theta, col = _graph_quadrature(GRAPH, alpha)
    law = graph_law(2, GRAPH, alpha)
    post = graph_posterior_mean(law.tokens, 2, GRAPH, target, alpha)
    for x, pm in zip(law.tokens, post):
        x = tuple(int(v) for v in x)
        px = weight * prob(x)
        z = x[target[0] - 1] + 2 * x[target[1] - 1]
        assert abs(pm[0] - (px * theta[:, col[(2, z)]]).sum() / px.sum()) <= 1e-12


def test_graph_law_equals_monte_carlo_d3():
    d, alpha, parents = 3, 0.9, [[], [1], [2], [1, 3]]
    law = graph_law(d, parents, alpha)
    rng = np.random.default_rng(21)
    n = 200_000
    t1 = rng.dirichlet(alpha * np.ones(d), size=(n, d))
    t2 = rng.dirichlet(alpha * np.ones(d), size=(n, d * d))
    worst = 0.0
    for x, p in zip(law.tokens, law.prob):
        x = [int(v) for v in x]
        s = (1.0 / d) * t1[:, x[0], x[1]] * t1[:, x[1], x[2]] * t2[:, x[0] + d * x[2], x[3]]
        worst = max(worst, abs(s.mean() - p) / (s.std(ddof=1) / np.sqrt(n)))
    assert worst < 5.0, worst


def test_graph_law_of_lag_parents_is_the_markov_law():
    d, L, pa, alpha = 2, 5, (1, 3), 0.4
    parents = [[] if l <= 3 else [l - 1, l - 3] for l in range(1, L + 2)]
    assert np.abs(graph_law(d, parents, alpha).prob - markov_law(d, L, pa, alpha).prob).max() <= 1e-15


@pytest.mark.parametrize("parents", [[[1]], [[], [2]], [[], [0]], [[], [1, 1]], "x", [], [[], ["a"]], [[], [True]]])
def test_bad_graphs_are_one_line_refusals(parents):
    with pytest.raises(ConfigError) as e:
        graph_law(2, parents, 1.0)
    assert str(e.value).startswith("parents:") and "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="^alpha:"):
        graph_law(2, [[], [1]], -1.0)
    with pytest.raises(ConfigError, match="^parents:.*sequences"):
        graph_law(2, [[]] * 40, 1.0)
    with pytest.raises(ConfigError, match="^target_parents:"):
        graph_posterior_mean(np.zeros((1, 2), dtype=int), 2, [[], [1]], [3], 1.0)
