"""The induction-head model on the engine's generic two-layer network (meanfield.models.induction.generic,
what every induction run trains on since the hand kernels were retired) against the plain-numpy oracle
(meanfield.models.induction.model) and finite differences; the stop criteria on the generic layout
(description.criteria_of) against their definitions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from meanfield.models.induction import data as D
from meanfield.engine.twolayer_net import loss_grad as net_loss_grad
from meanfield.models.induction import generic as G
from meanfield.models.induction import model as Mo

ARCHS = [
    # d, H, M, D, first lags, pa, L
    (3, 3, 3, 2, None, (1, 2), 20),         # the reference case of the brief
    (3, 3, 3, 3, (1, 2, 4), (1, 3), 20),    # per-head windows, full subsets
    (2, 4, 2, 1, (1, 1, 2, 3), (2,), 15),
    (4, 2, 3, 0, None, (1,), 12),           # only the empty set: K constant
    (5, 1, 4, 1, (3,), (1, 2), 9),          # late window: positions with no lag
]


def _theta(arch, seed, scale=0.5):
    rng = np.random.default_rng(seed)
    return Mo.init_params(arch, 2.0, 0.0, 1.0, 2.0) + scale * rng.standard_normal(arch.n_params)


def _fd(f, theta, h=1e-6):
    g = np.zeros_like(theta)
    for i in range(theta.size):
        e = np.zeros_like(theta)
        e[i] = h
        g[i] = (f(theta + e) - f(theta - e)) / (2 * h)
    return g


@pytest.mark.parametrize("case", range(len(ARCHS)))
def test_kernels_equal_oracle_and_finite_differences(case):
    d, H, M, Dd, first, pa, L = ARCHS[case]
    arch = Mo.Arch(d, H, M, Dd, first)
    ds = D.generate(40, d=d, L=L, pa=pa, alpha=0.5, seed=case)
    theta = _theta(arch, case)
    lo, go = Mo.loss_and_grad(theta, ds.tokens, arch)
    assert np.isfinite(lo) and lo > 0
    L_ = ds.tokens.shape[1] - 1
    y, p = np.eye(d)[ds.tokens[:, L_]], np.full(len(ds.tokens), 1 / len(ds.tokens))
    for path in ("auto", "direct"):  # both paths of the generic network (auto: the pattern path where it applies)
        lk, gk = net_loss_grad(G.to_generic(theta, arch), G.net_of(arch, L_), ds.tokens, y, p, path=path)
        gk = G.from_generic_grad(gk, arch)
        assert abs(lk - lo) <= 1e-10 * max(1.0, abs(lo))
        np.testing.assert_allclose(gk, go, rtol=0, atol=1e-10)
        assert G.loss(theta, ds.tokens, arch) == pytest.approx(lk, abs=1e-14)
    fd = _fd(lambda t: G.loss(t, ds.tokens, arch), theta)
    np.testing.assert_allclose(gk, fd, rtol=0, atol=1e-6)
    np.testing.assert_allclose(go, fd, rtol=0, atol=1e-6)


def test_oracle_finite_differences_reference_case():
    # the oracle against finite differences of itself (d=3, L=20, H=3, D=2, window 3)
    arch = Mo.Arch(3, 3, 3, 2)
    ds = D.generate(8, d=3, L=20, seed=42)
    theta = _theta(arch, 1, scale=1.0)
    _, g = Mo.loss_and_grad(theta, ds.tokens, arch)
    fd = _fd(lambda t: Mo.loss(t, ds.tokens, arch), theta)
    np.testing.assert_allclose(g, fd, rtol=0, atol=1e-6)


def test_subsets_canonical_order_and_layout():
    assert Mo.subsets(3, 2) == [(), (0,), (1,), (2,), (0, 1), (0, 2), (1, 2)]
    assert [Mo.subset_label(s) for s in Mo.subsets(3, 2)] == ["{}", "{1}", "{2}", "{3}", "{1,2}", "{1,3}", "{2,3}"]
    arch = Mo.Arch(3, 3, 3, 2, (1, 2, 4))
    np.testing.assert_array_equal(arch.lags, [[1, 2, 3], [2, 3, 4], [4, 5, 6]])
    assert arch.n_params == 7 + 9 + 1
    c, w, a = Mo.unpack(np.arange(17.0), arch)
    np.testing.assert_array_equal(c, np.arange(7.0))
    assert w[1, 2] == 7 + 1 * 3 + 2 and a == 16
    assert Mo.default_start(Mo.Arch(3, 4, 3, 2)) == (1, 2, 3, 1)
    assert Mo.default_start(arch) == (1, 2, 6)  # lag 3 is outside 4..6: first + (h-1) mod M
    with pytest.raises(ValueError):
        Mo.init_params(arch, 2.0, 0.0, 1.0, 1.0, start=(1, 1, 1))


def test_features_no_lag_is_zero_and_unit_norm_elsewhere():
    arch = Mo.Arch(3, 2, 3, 2, (1, 2))
    x = D.generate(1, d=3, L=10, seed=0).tokens[0]
    _, w, _ = Mo.unpack(_theta(arch, 0), arch)
    u, s, p = Mo.features(x, w, arch)
    assert np.all(u[0] == 0)                # l = 1: no lag exists for either head
    assert np.all(u[1, 1] == 0)             # l = 2: head 2 (first lag 2) has none
    np.testing.assert_allclose(np.linalg.norm(u[1, 0]), 1.0)
    np.testing.assert_allclose(np.linalg.norm(u[2:], axis=-1), 1.0)
    np.testing.assert_allclose(s.sum(-1)[2:], 1.0)
    assert len(p[1][0]) == 1 and len(p[2][0]) == 2 and len(p[5][0]) == 3


def test_predict_matches_loss_and_is_a_distribution():
    arch = Mo.Arch(3, 3, 3, 2)
    ds = D.generate(5, d=3, L=20, seed=9)
    theta = _theta(arch, 2)
    for x in ds.tokens:
        y = Mo.predict(theta, x, arch)
        assert y.sum() == pytest.approx(1.0) and np.all(y >= 0)
        loss, _, clipped = Mo.loss_and_grad_one(theta, x, arch)
        assert not clipped
        assert loss == pytest.approx(-math.log(y[x[-1]]), rel=1e-12)


def test_log_zero_guard():
    # the target never occurs in the context: y_hat = 0, loss clipped at -log(yhat_floor), zero gradient
    arch = Mo.Arch(3, 3, 3, 2)
    rng = np.random.default_rng(0)
    ctx = rng.integers(0, 2, size=(4, 20))
    tokens = np.concatenate([ctx, np.full((4, 1), 2)], axis=1)
    good = D.generate(6, d=3, L=20, seed=3).tokens
    both = np.concatenate([tokens, good])
    theta = _theta(arch, 3)
    cap = -math.log(1e-300)
    lo, go = Mo.loss_and_grad(theta, tokens, arch)
    assert lo == pytest.approx(cap) and np.all(go == 0)
    lk, gk = G.loss_and_grad(theta, both, arch)
    lo2, go2 = Mo.loss_and_grad(theta, both, arch)
    assert int((G.losses_by_sequence(theta, both, arch) >= cap).sum()) == 4
    assert lk == pytest.approx(lo2, abs=1e-10)
    np.testing.assert_allclose(gk, go2, atol=1e-10)
    # a larger floor clips earlier: loss = -log(max(y_hat, floor))
    lf, gf = G.loss_and_grad(theta, good, arch, yhat_floor=0.9)
    assert (G.losses_by_sequence(theta, good, arch, 0.9) >= -math.log(0.9)).sum() == 6
    assert lf == pytest.approx(-math.log(0.9)) and np.all(gf == 0)
    assert lf == pytest.approx(Mo.loss(theta, good, arch, 0.9))


def test_criterion_values():
    from meanfield.models.induction.description import criteria_of

    arch = Mo.Arch(3, 3, 3, 2)
    theta = _theta(arch, 5)
    g = np.arange(arch.n_params, dtype=float)
    c, w, a = Mo.unpack(theta, arch)
    crit = criteria_of(arch)
    th, gg = G.to_generic(theta, arch), G.to_generic(g, arch)  # the generic layout (w, c, a)
    cv = lambda name: crit[name](th, 0.7, gg)
    assert set(crit) == {"grad_norm", "a", "c_top", "rpe_top", "grad_c", "grad_w", "grad_a"}
    assert cv("a") == a
    assert cv("c_top") == pytest.approx(np.max(c ** 2) / np.sum(c ** 2))
    assert cv("rpe_top") == pytest.approx(np.min(Mo.rpe_softmax(w).max(axis=1)))
    assert cv("grad_norm") == pytest.approx(np.linalg.norm(g))
    assert cv("grad_c") == pytest.approx(np.linalg.norm(g[:7]))
    assert cv("grad_w") == pytest.approx(np.linalg.norm(g[7:16]))
    assert cv("grad_a") == pytest.approx(16.0)
