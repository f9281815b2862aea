"""The numba kernels of the induction-head model against the plain-numpy
oracle (meanfield.models.induction.model) and finite differences."""

from __future__ import annotations

import math

import numpy as np
import pytest

from meanfield.models.induction import data as D
from meanfield.models.induction import kernels as Kn
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
    for path in ("pattern", "direct"):
        b = Kn.Batch(ds.tokens, arch, path)
        assert b.path == path
        lk, gk, _ = Kn.batch_loss_grad(theta, b)
        assert abs(lk - lo) <= 1e-10 * max(1.0, abs(lo))
        np.testing.assert_allclose(gk, go, rtol=0, atol=1e-10)
        assert Kn.batch_loss(theta, b) == pytest.approx(lk, abs=1e-14)
    b = Kn.Batch(ds.tokens, arch)
    fd = _fd(lambda t: Kn.batch_loss(t, b), theta)
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
    for path in ("pattern", "direct"):
        lk, gk, nclip = Kn.batch_loss_grad(theta, Kn.Batch(both, arch, path))
        lo2, go2 = Mo.loss_and_grad(theta, both, arch)
        assert nclip == 4
        assert lk == pytest.approx(lo2, abs=1e-10)
        np.testing.assert_allclose(gk, go2, atol=1e-10)
    # a larger floor clips earlier: loss = -log(max(y_hat, floor))
    lf, gf, nf = Kn.batch_loss_grad(theta, Kn.Batch(good, arch), yhat_floor=0.9)
    assert nf == 6 and lf == pytest.approx(-math.log(0.9)) and np.all(gf == 0)


def _args(b):
    return b.args()


def test_gd_advance_is_the_gd_map_and_stops():
    arch = Mo.Arch(3, 3, 3, 2)
    ds = D.generate(50, d=3, L=20, seed=4)
    b = Kn.Batch(ds.tokens, arch)
    theta = _theta(arch, 4)
    rates = np.array([0.5, 2.0, 0.0])
    y = theta.copy()
    expect = theta.copy()
    for _ in range(3):
        _, g, _ = Kn.batch_loss_grad(expect, b)
        r = np.concatenate([np.full(arch.nS, 0.5), np.full(arch.H * arch.M, 2.0), [0.0]])
        expect = expect - r * g
    done, code, loss = Kn.gd_advance(y, 3, rates, *_args(b), Kn.log_cap_of(1e-300), 0, 1, 0.0, np.inf)
    assert (done, code) == (3, 0)
    np.testing.assert_allclose(y, expect, atol=1e-14)
    assert loss == pytest.approx(Kn.batch_loss(y, b), abs=1e-14)
    # criterion: a >= value holds at once -> 0 steps, code 1
    y = theta.copy()
    done, code, _ = Kn.gd_advance(y, 5, rates, *_args(b), 700.0, Kn.CRITERIA["a"], 1, 1.0, np.inf)
    assert (done, code) == (0, 1) and np.array_equal(y, theta)
    # blow-up: a huge step on a exceeds max_abs -> code 3, last accepted state kept
    y = theta.copy()
    done, code, _ = Kn.gd_advance(y, 5, np.array([0.0, 0.0, 1e12]), *_args(b), 700.0, 0, 1, 0.0, 1e3)
    assert (done, code) == (0, 3) and np.array_equal(y, theta)


def test_criterion_values():
    arch = Mo.Arch(3, 3, 3, 2)
    theta = _theta(arch, 5)
    g = np.arange(arch.n_params, dtype=float)
    c, w, a = Mo.unpack(theta, arch)
    cv = lambda name: Kn.criterion_value(Kn.CRITERIA[name], 0.7, theta, g, arch.nS, arch.H, arch.M)
    assert cv("loss") == 0.7
    assert cv("a") == a
    assert cv("c_top") == pytest.approx(np.max(c ** 2) / np.sum(c ** 2))
    assert cv("rpe_top") == pytest.approx(np.min(Mo.rpe_softmax(w).max(axis=1)))
    assert cv("grad_norm") == pytest.approx(np.linalg.norm(g))
    assert cv("grad_c") == pytest.approx(np.linalg.norm(g[:7]))
    assert cv("grad_w") == pytest.approx(np.linalg.norm(g[7:16]))
    assert cv("grad_a") == pytest.approx(16.0)


def test_pattern_codes():
    arch = Mo.Arch(3, 2, 2, 1, (1, 3))
    x = np.array([[2, 0, 1, 2, 1, 0]])
    codes = Kn.pattern_codes(x, np.array(arch.first), 2, 3)
    # head 0, lags 1, 2: position l=1 none (0); l=2 one lag: offset 1 + x1 = 1 + 2; l=3: offset 4 + x2 + 3 x1
    assert codes[0, 0, 0] == 0 and codes[0, 0, 1] == 1 + 2 and codes[0, 0, 2] == 4 + 0 + 3 * 2
    # head 1, lags 3, 4: nothing before l = 4
    assert list(codes[0, 1, :3]) == [0, 0, 0] and codes[0, 1, 3] == 1 + 2
    assert Kn.n_patterns(3, 2) == 13
