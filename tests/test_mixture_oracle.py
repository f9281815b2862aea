"""The reduced mixture kernels against the explicit finite-width network oracle.

``meanfield.mixture.model`` is plain numpy on explicit d-dimensional tokens and
weights W_K, W_Q (m x d), w (d). Here we check (1) its own gradients against
finite differences and (2) that the reduced GD map ``kernels.gd_advance`` on
S, A, B, w~ is exactly (to rounding) full-batch GD on the explicit weights,
projected onto the feature basis, at several widths and schedules.
"""

from __future__ import annotations

import numpy as np
import pytest

from meanfield.mixture import kernels, model
from meanfield.mixture.data import sample_set


def _setup(K, L, m, omega, seed, w_sd=0.3, extra_d=3):
    rng = np.random.default_rng(seed)
    d = 2 * K + extra_d
    E = model.embedding(K, d, rng)
    samples = sample_set(K, L)
    X = model.tokens(samples, E)
    w0 = rng.standard_normal((2, d)) * w_sd if w_sd > 0 else None
    params = model.init_weights(m, d, omega, rng, w=w0)
    return E, samples, X, params


def _gd_advance(y, nsteps, eta, samples, r0, train_w, train_att):
    return kernels.gd_advance(
        y, nsteps, eta, samples.P, samples.idx, samples.sgn, samples.y, samples.weight,
        samples.consistent, float(r0), bool(train_w), bool(train_att), 0, 1, 0.0, np.inf)


# ---------------------------------------------------------------- oracle itself

def test_embedding_and_tokens():
    rng = np.random.default_rng(0)
    E = model.embedding(3, 9, rng)
    assert E.shape == (9, 6)
    np.testing.assert_allclose(E.T @ E, np.eye(6), atol=1e-14)
    with pytest.raises(ValueError):
        model.embedding(3, 5, rng)
    samples = sample_set(3, 4)
    X = model.tokens(samples, E)
    assert X.shape == (samples.n, 9, 4)
    # coefficients in the basis are the signed one-hot tokens
    Z = np.einsum("da,ndl->nal", E, X)
    for s in range(samples.n):
        for i in range(4):
            col = np.zeros(6)
            col[samples.idx[s, i]] = samples.sgn[s, i]
            np.testing.assert_allclose(Z[s, :, i], col, atol=1e-14)


def test_init_weights_shapes_and_scale():
    rng = np.random.default_rng(1)
    p = model.init_weights(400, 30, 0.7, rng)
    assert p["W_K"].shape == (2, 400, 30) and p["W_Q"].shape == (2, 400, 30)
    assert p["w"].shape == (2, 30) and not p["w"].any()
    # entries N(0, omega^2/m): W^T W -> omega^2 I
    for W in (p["W_K"][0], p["W_Q"][1]):
        assert abs(np.var(W) * 400 - 0.49) < 0.02
        np.testing.assert_allclose(np.diag(W.T @ W), 0.49, rtol=0.3)


@pytest.mark.parametrize("K,L,m", [(2, 3, 2), (3, 4, 3)])
def test_oracle_gradients_finite_differences(K, L, m):
    E, samples, X, params = _setup(K, L, m, omega=0.8, seed=10 + K + L + m)
    _, u, _ = model.forward(params, X, samples)
    assert np.min(np.abs(u)) > 1e-4, "test needs pre-activations away from the ReLU kink"
    grads = model.gradients(params, X, samples, relu_prime_at_zero=1.0)
    # the convention at zero must not matter away from the kink
    grads0 = model.gradients(params, X, samples, relu_prime_at_zero=0.0)
    h = 1e-5
    for name in ("W_K", "W_Q", "w"):
        np.testing.assert_array_equal(grads[name], grads0[name])
        fd = np.zeros_like(params[name])
        for ix in np.ndindex(params[name].shape):
            plus = {k: v.copy() for k, v in params.items()}
            minus = {k: v.copy() for k, v in params.items()}
            plus[name][ix] += h
            minus[name][ix] -= h
            fd[ix] = (model.forward(plus, X, samples)[0] - model.forward(minus, X, samples)[0]) / (2 * h)
        scale = np.max(np.abs(fd))
        assert scale > 1e-3, f"{name}: gradient too small to be a meaningful check"
        err = np.max(np.abs(grads[name] - fd)) / scale
        assert err < 1e-6, f"{name}: relative error {err:.2e} against finite differences"


# ------------------------------------------------ reduced kernels vs the oracle

@pytest.mark.parametrize("K,L", [(2, 3), (3, 4), (2, 4), (3, 3)])
@pytest.mark.parametrize("m", [1, 3, 50])
def test_forward_matches_oracle(K, L, m):
    E, samples, X, params = _setup(K, L, m, omega=0.9, seed=100 + 7 * K + L + m)
    y = model.project(params, E)
    u = np.empty((samples.n, 2))
    margin = np.empty(samples.n)
    loss = kernels.forward(y, samples.P, samples.idx, samples.sgn, samples.y, samples.weight, u, margin)
    loss_o, u_o, margin_o = model.forward(params, X, samples)
    assert abs(loss - loss_o) <= 1e-12 * abs(loss_o)
    np.testing.assert_allclose(u, u_o, rtol=0, atol=1e-12 * np.max(np.abs(u_o)))
    np.testing.assert_allclose(margin, margin_o, rtol=0, atol=1e-12 * np.max(np.abs(margin_o)))


def test_project_layout():
    E, samples, X, params = _setup(2, 3, 4, omega=0.7, seed=5)
    y = model.project(params, E)
    assert y.shape == (kernels.state_size(4),)
    S, A, B, w = kernels.unpack(y)
    j = 1
    WK, WQ = params["W_K"][j], params["W_Q"][j]
    a, b = 0, 3  # c1 key, v2 query
    assert np.isclose(S[j, a, b], E[:, a] @ WK.T @ WQ @ E[:, b], rtol=1e-13)
    assert np.isclose(A[j, a, b], E[:, a] @ WK.T @ WK @ E[:, b], rtol=1e-13)
    assert np.isclose(B[j, a, b], E[:, a] @ WQ.T @ WQ @ E[:, b], rtol=1e-13)
    assert np.isclose(w[j, b], params["w"][j] @ E[:, b], rtol=1e-13)


def _compare_trajectories(K, L, m, omega, eta, train_w, train_att, r0, w_sd, n_steps,
                          every, seed, tol=1e-10):
    E, samples, X, params = _setup(K, L, m, omega, seed, w_sd=w_sd)
    y = model.project(params, E)
    y0 = y.copy()
    worst = 0.0
    for start in range(0, n_steps, every):
        nsteps = min(every, n_steps - start)
        done, code, loss = _gd_advance(y, nsteps, eta, samples, r0, train_w, train_att)
        assert (done, code) == (nsteps, 0)
        for _ in range(nsteps):
            params = model.gd_step(params, X, samples, eta, train_w=train_w, train_att=train_att,
                                   relu_prime_at_zero=r0)
        ref = model.project(params, E)
        err = np.max(np.abs(y - ref)) / np.max(np.abs(ref))
        worst = max(worst, err)
        assert err < tol, f"step {start + nsteps}: relative state error {err:.2e}"
        assert np.isclose(loss, model.forward(params, X, samples)[0], rtol=1e-10, atol=0)
    return y0, y, worst


SCHEDULES = {"simultaneous": (True, True), "neurons_only": (True, False), "attention_only": (False, True)}


@pytest.mark.parametrize("schedule", list(SCHEDULES))
@pytest.mark.parametrize("m", [1, 3, 50])
@pytest.mark.parametrize("K,L", [(2, 3), (2, 4), (3, 3), (3, 4)])
def test_reduced_gd_equals_explicit_gd(K, L, m, schedule):
    """Acceptance: the reduced GD map is exact GD of the explicit finite-width network."""
    train_w, train_att = SCHEDULES[schedule]
    seed = 1000 + 100 * K + 10 * L + m + 7 * list(SCHEDULES).index(schedule)
    omega = 0.5 + 0.5 * ((seed % 5) / 4)        # 0.5 .. 1.0
    eta = 0.2 + 0.3 * ((seed % 7) / 6)          # 0.2 .. 0.5
    y0, y, _ = _compare_trajectories(K, L, m, omega, eta, train_w, train_att, r0=1.0, w_sd=0.3,
                                     n_steps=200, every=20, seed=seed)
    # the run must actually move the trained blocks (and only those)
    S0, A0, B0, w0 = kernels.unpack(y0)
    S1, A1, B1, w1 = kernels.unpack(y)
    att_move = max(np.max(np.abs(S1 - S0)), np.max(np.abs(A1 - A0)), np.max(np.abs(B1 - B0)))
    w_move = np.max(np.abs(w1 - w0))
    if train_att:
        assert att_move > 0.05
    else:
        assert att_move == 0.0
    if train_w:
        assert w_move > 0.5
    else:
        assert w_move == 0.0


@pytest.mark.parametrize("r0", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("K,L,m", [(2, 3, 3), (3, 4, 50)])
def test_reduced_gd_zero_neuron_init(K, L, m, r0):
    """Zero neurons: u = 0 exactly at the start, where the ReLU'(0) convention decides."""
    y0, y, _ = _compare_trajectories(K, L, m, omega=0.7, eta=0.4, train_w=True, train_att=True,
                                     r0=r0, w_sd=0.0, n_steps=50, every=5, seed=77 + K + m)
    moved = np.max(np.abs(y - y0))
    if r0 == 0.0:
        assert moved == 0.0       # nothing can move: relu'(0) = 0 and w = 0
    else:
        assert moved > 1e-2
