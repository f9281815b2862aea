"""Theory side of the induction system (meanfield.models.induction.theory): exact
stationary laws, the modified chi-square MI against hand-derived values, the
GIH / Bayes / unigram predictors against their definitions, and the GIH as
the trained model's limit on a constructed case."""

from __future__ import annotations

import math

import numpy as np
import pytest

from meanfield.models.induction import generic as G
from meanfield.models.induction import theory as T
from meanfield.models.induction.data import generate, sample_chain
from meanfield.models.induction.model import Arch, pack, predict


def copy_kernel(q: float) -> np.ndarray:
    """d = 2, pa = (1,): keep the previous token with probability q."""
    return np.array([[q, 1 - q], [1 - q, q]])


# ----------------------------------------------------------------- hand values


@pytest.mark.parametrize("q", [0.9, 0.7, 0.5, 0.2])
def test_chi2_copy_kernel_hand_values(q):
    # stationary law uniform; mu(e | x_{l-1}) = q or 1-q; two steps: same token w.p. q^2 + (1-q)^2
    #   I~_2({1})   = sum_z (1/2)^2 (2 (q^2 + (1-q)^2) - 1)            = (2q-1)^2 / 2
    #   I~_2({2})   = (2 q2 - 1)^2 / 2 with 2 q2 - 1 = (2q-1)^2          = (2q-1)^4 / 2
    #   I~_2({1,2}) = sum_z mu(z)^2 (2q-1)^2, mu(z) in {q/2, (1-q)/2} x2 = (2q-1)^2 (q^2 + (1-q)^2) / 2
    #   exponent 1 (chi-square MI): (2q-1)^2, (2q-1)^4, (2q-1)^2
    J, bad = T.joint_law(copy_kernel(q)[None], (1,), 2, W=2)
    assert not bad.any()
    g = (2 * q - 1) ** 2
    want2 = {(1,): g / 2, (2,): g**2 / 2, (1, 2): g * (q**2 + (1 - q) ** 2) / 2, (): 0.0}
    want1 = {(1,): g, (2,): g**2, (1, 2): g, (): 0.0}
    for S, v in want2.items():
        assert T.chi2_mi(J, S, 2, 2.0)[0] == pytest.approx(v, abs=1e-14)
    for S, v in want1.items():
        assert T.chi2_mi(J, S, 2, 1.0)[0] == pytest.approx(v, abs=1e-14)


def test_chi2_asymmetric_two_state_chain():
    # pi(1|0) = 0.3, pi(0|1) = 0.6: mu = (2/3, 1/3);
    # z = 0: 0.7^2/(2/3) + 0.3^2/(1/3) - 1 = 0.005; z = 1: 0.6^2/(2/3) + 0.4^2/(1/3) - 1 = 0.02
    # I~_2 = (4/9) 0.005 + (1/9) 0.02 = 1/225; I~_1 = (2/3) 0.005 + (1/3) 0.02 = 0.01 = (1 - 0.3 - 0.6)^2
    K = np.array([[0.7, 0.3], [0.6, 0.4]])
    mu, bad = T.stationary(T.window_transition(K, (1,), 2, 1))
    np.testing.assert_allclose(mu, [2 / 3, 1 / 3], atol=1e-15)
    J, _ = T.joint_law(K, (1,), 2)
    assert T.chi2_mi(J[None], (1,), 1, 2.0)[0] == pytest.approx(1 / 225, abs=1e-15)
    assert T.chi2_mi(J[None], (1,), 1, 1.0)[0] == pytest.approx(0.01, abs=1e-15)


def test_deterministic_kernels():
    # flip (q = 0): periodic but irreducible, uniform law, I~_2({1}) = 1/2
    J, bad = T.joint_law(copy_kernel(0.0)[None], (1,), 2)
    assert not bad.any()
    assert T.chi2_mi(J, (1,), 1)[0] == pytest.approx(0.5, abs=1e-14)
    # copy (q = 1): two absorbing states, no unique law: Cesaro average from the uniform start
    J, bad = T.joint_law(copy_kernel(1.0)[None], (1,), 2)
    assert bad.all()
    np.testing.assert_allclose(J[0], [[0.5, 0.0], [0.0, 0.5]], atol=1e-14)
    assert T.chi2_mi(J, (1,), 1)[0] == pytest.approx(0.5, abs=1e-14)


# ----------------------------------------------------------------- stationary law


def test_stationary_law_of_a_sparse_chain_matches_simulation():
    d, pa = 3, (1, 3)
    K = generate(4, d, 5, pa, 0.5, seed=11, kernels=True).kernels
    W = 4
    P = T.window_transition(K, pa, d, W)
    np.testing.assert_allclose(P.sum(axis=2), 1.0, atol=1e-14)
    mu, bad = T.stationary(P)
    assert not bad.any()
    np.testing.assert_allclose(np.einsum("bi,bij->bj", mu, P), mu, atol=1e-14)
    J, _ = T.joint_law(K, pa, d, W)
    # marginal of x_l equals marginal of x_{l-1} (stationarity), total mass 1
    np.testing.assert_allclose(J.sum(axis=(1, 2, 3, 4)), J.sum(axis=(2, 3, 4, 5)), atol=1e-14)
    np.testing.assert_allclose(J.sum(axis=(1, 2, 3, 4, 5)), 1.0, atol=1e-14)
    # a long chain's frequencies of (x_{l-3}, x_l) match the exact law
    x = sample_chain(K[0], pa, 300000, seed=3)
    emp = np.zeros((d, d))
    np.add.at(emp, (x[:-3], x[3:]), 1.0)
    emp /= emp.sum()
    exact = T.marginal(J[:1], (3,), W)[0]
    np.testing.assert_allclose(emp, exact, atol=6e-3)


def test_stationary_is_accurate_with_tiny_entries():
    # alpha = 0.05: kernel entries far below machine epsilon; GTH has no subtraction
    K = generate(50, 3, 3, (1, 2), 0.05, seed=2, kernels=True).kernels
    P = T.window_transition(K, (1, 2), 3, 2)
    mu, bad = T.stationary(P)
    assert np.all(mu >= 0) and not bad.any()
    res = np.abs(np.einsum("bi,bij->bj", mu, P) - mu) / np.maximum(mu, 1e-300)
    assert np.max(res[mu > 1e-200]) < 1e-9


# ----------------------------------------------------------------- chi2 table


def test_chi2_table_ranking_and_reproducibility():
    r = T.chi2_table(3, (1, 2), 0.1, (1, 2, 3), 2, n_kernels=600, seed=5, exponents=(1, 2))
    assert r.subsets == [(), (1,), (2,), (3,), (1, 2), (1, 3), (2, 3)]
    assert r.S_star(2) == (1, 2) and r.S_star(1) == (1, 2)
    assert r.mean[2.0][0] == 0.0 and r.ranking(2)[-1] == ()
    assert r.gap_in_se(2) > 3
    # exponent 1 is the chi-square MI: adding a lag never lowers it (kernel by kernel)
    v = r.values[1.0]
    assert np.all(v[:, 4] >= v[:, 1] - 1e-12) and np.all(v[:, 4] >= v[:, 2] - 1e-12)
    r2 = T.chi2_table(3, (1, 2), 0.1, (1, 2, 3), 2, n_kernels=600, seed=5, exponents=(2,), chunk=128)
    np.testing.assert_allclose(r2.mean[2.0], r.mean[2.0], rtol=1e-12)
    # kernels are the generator's
    np.testing.assert_array_equal(T.sample_kernels(7, 3, (1, 2), 0.1, 4),
                                  generate(7, 3, 50, (1, 2), 0.1, 4, kernels=True).kernels)
    d = r.to_dict()
    assert d["exponents"]["2.0"]["S_star"] == [1, 2] and len(d["exponents"]["1.0"]["se"]) == 7
    assert T.candidate_lags(3) == (1, 2, 3) and T.candidate_lags(2, (1, 4)) == (1, 2, 4, 5)


# ----------------------------------------------------------------- predictors


def _gih_loop(x, d, lags, a):
    L = len(x) - 1
    y = np.zeros(d)
    w = []
    for l in range(1, L + 1):
        m = all(l - s >= 1 and x[l - s - 1] == x[L - s] for s in lags)
        w.append(m)
    w = np.array(w)
    if math.isinf(a):
        if w.any():
            for l in np.flatnonzero(w):
                y[x[l]] += 1
        else:
            for l in range(L):
                y[x[l]] += 1
        return y / y.sum()
    for l in range(L):
        y[x[l]] += math.exp(a * w[l])
    return y / y.sum()


def test_gih_bayes_unigram_match_their_definitions():
    ds = generate(40, 3, 25, (1, 2), 0.3, seed=9)
    tok = ds.tokens
    for lags in [(1,), (1, 2), (2, 3), ()]:
        for a in [0.0, 1.7, 40.0, math.inf]:
            got = T.gih_predict(tok, 3, lags, a)
            want = np.array([_gih_loop(x, 3, lags, a) for x in tok])
            np.testing.assert_allclose(got, want, atol=1e-12)
    np.testing.assert_allclose(T.gih_predict(tok, 3, (1, 2), 0.0), T.unigram_predict(tok, 3), atol=1e-15)
    # a -> inf with no match: unigram fallback (a context that never repeats its last two tokens)
    x = np.array([[0, 1, 2, 0, 2, 1, 0, 0]])
    assert not T.match_matrix(x, (1, 2)).any()
    np.testing.assert_allclose(T.gih_predict(x, 3, (1, 2), math.inf), T.unigram_predict(x, 3))
    # Bayes: Dirichlet posterior mean of the current parent context's row
    alpha = 0.3
    got = T.bayes_predict(tok, 3, (1, 2), alpha)
    L = 25
    for n, x in enumerate(tok):
        cnt = np.zeros(3)
        for l in range(3, L + 1):
            if x[l - 2] == x[L - 1] and x[l - 3] == x[L - 2]:
                cnt[x[l - 1]] += 1
        np.testing.assert_allclose(got[n], (cnt + alpha) / (cnt.sum() + 3 * alpha), atol=1e-15)
    out = T.losses(got, tok)
    assert out["n_clipped"] == 0 and out["N"] == 40 and out["loss"] > 0
    # the GIH's best a on its own data is a minimum
    ab = T.gih_best_a(tok, 3, (1, 2))
    f = T.gih_loss(tok, 3, (1, 2), ab)
    assert f <= T.gih_loss(tok, 3, (1, 2), ab * 1.3) and f <= T.gih_loss(tok, 3, (1, 2), ab * 0.7)


def _one_hot_model(arch: Arch, lag_of_head: dict, S_heads: tuple, a: float, big: float = 40.0):
    c = np.array([1.0 if S == S_heads else 0.0 for S in arch.subsets])
    w = np.zeros((arch.H, arch.M))
    for h in range(arch.H):
        w[h] = -big
        w[h, lag_of_head.get(h, arch.first[h]) - arch.first[h]] = big
    return pack(c, w, a)


def test_gih_is_the_model_limit_on_a_constructed_case():
    """c all on the subset of heads {1, 2}, one-hot RPE on the parent lags 1 and 2:
    the model's y_hat equals the GIH's on S* = {1, 2} for every a, and for
    a -> infinity equals the in-context frequency after matching histories
    (unigram when none matches)."""
    d, L = 3, 30
    tok = generate(25, d, L, (1, 2), 0.2, seed=4).tokens
    # (a) each head's window starts at its lag: exact at every position
    arch = Arch(d, 2, 1, 2, first=(1, 2))
    for a in (0.0, 2.5, 9.0):
        th = _one_hot_model(arch, {0: 1, 1: 2}, (0, 1), a)
        got = np.array([predict(th, x, arch) for x in tok])
        np.testing.assert_allclose(got, T.gih_predict(tok, d, (1, 2), a), atol=1e-12)
        # and the model's loss (the engine's generic network) is the GIH's loss
        assert G.loss(th, tok, arch) == pytest.approx(T.losses(T.gih_predict(tok, d, (1, 2), a),
                                                                                 tok)["loss"], rel=1e-12)
    th = _one_hot_model(arch, {0: 1, 1: 2}, (0, 1), 1e4)  # exp(-1e4) == 0: the limit itself
    got = np.array([predict(th, x, arch) for x in tok])
    np.testing.assert_allclose(got, T.gih_predict(tok, d, (1, 2), math.inf), atol=1e-12)
    # a context with no matching history: both fall back to the unigram frequency
    x = np.array([[0, 1, 2, 0, 2, 1, 0, 0, 1]])
    assert not T.match_matrix(x, (1, 2)).any()
    np.testing.assert_allclose(predict(th, x[0], arch), T.unigram_predict(x, d)[0], atol=1e-12)
    # (b) the default architecture TF(3, 3, 3, 2) with windows 1..3: head 1 on lag 1, head 2 on lag 2;
    # equal wherever position 2 is not a spurious boundary match (head 2 sees only lag 1 there)
    arch = Arch(d, 3, 3, 2)
    keep = ~((tok[:, 0] == tok[:, L - 1]) & (tok[:, 0] == tok[:, L - 2]))
    assert keep.sum() >= 15
    for a in (3.0, 1e4):
        th = _one_hot_model(arch, {0: 1, 1: 2, 2: 3}, (0, 1), a)
        got = np.array([predict(th, x, arch) for x in tok[keep]])
        np.testing.assert_allclose(got, T.gih_predict(tok[keep], d, (1, 2), math.inf if a > 1e3 else a), atol=1e-12)
