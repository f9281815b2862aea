"""The reduced mixture kernels against the explicit finite-width network oracle.

The oracle is the engine's explicit network (``meanfield.engine.oracle.Oracle``)
on the mixture description (``meanfield.models.mixture.family.mixture_description``):
plain numpy on explicit d-dimensional tokens x = E t and weights W_K, W_Q
(m x d), w (d) per head, its own forward and hand-written backward pass; it
shares no code with the reduced kernels. Here we check (1) its gradients on the
mixture against finite differences and (2) that the reduced GD map
``kernels.gd_advance`` on S, A, B, w~ is exactly (to rounding) full-batch GD on
the explicit weights, projected onto the feature basis, at several widths and
schedules.
"""

from __future__ import annotations

import numpy as np
import pytest

from meanfield.models.mixture.family import mixture_description
from meanfield.engine.oracle import Oracle, embedding
from meanfield.models.mixture import kernels
from meanfield.models.mixture.config import make_config
from meanfield.models.mixture.data import sample_set


class _Net:
    """The engine oracle of the K, L mixture in R^d with ReLU'(0) = r0, and the
    mixture's view of it (forward, GD step, projection in the reduced layout)."""

    def __init__(self, K, L, E, r0=1.0):
        self.desc = mixture_description(make_config({}, K=K, L=L, relu_prime_at_zero=r0))
        self.oracle = Oracle(self.desc, E)

    def forward(self, params):
        """(loss, u (n, 2), margin (n,))."""
        loss, cache = self.oracle.forward(params)
        u = np.stack([h["u"][:, 0, 0] for h in cache["heads"]], axis=1)
        return loss, u, self.oracle.margins(cache["f"])

    def gd_step(self, params, eta, train_w, train_att):
        groups = (("values",) if train_w else ()) + (("attention",) if train_att else ())
        return self.oracle.step(params, eta, groups)

    def project(self, params):
        pr = self.oracle.project(params)
        return kernels.pack(*(np.stack([p[k] for p in pr]) for k in ("S", "A", "B")),
                            np.stack([p["w"][0, 0] for p in pr]))


def _setup(K, L, m, omega, seed, w_sd=0.3, extra_d=3, r0=1.0):
    rng = np.random.default_rng(seed)
    d = 2 * K + extra_d
    E = embedding(np.eye(2 * K), d, rng)
    samples = sample_set(K, L)
    net = _Net(K, L, E, r0)
    w0 = rng.standard_normal((2, d)) * w_sd if w_sd > 0 else np.zeros((2, d))
    params = [{"a": np.array(s), "WK": rng.normal(scale=omega / np.sqrt(m), size=(m, d)),
               "WQ": rng.normal(scale=omega / np.sqrt(m), size=(m, d)), "w": w0[h][None, None, :]}
              for h, s in enumerate((1.0, -1.0))]
    return E, samples, net, params


def _gd_advance(y, nsteps, eta, samples, r0, train_w, train_att):
    return kernels.gd_advance(
        y, nsteps, eta, samples.P, samples.idx, samples.sgn, samples.y, samples.weight,
        samples.consistent, float(r0), bool(train_w), bool(train_att), 0, 1, 0.0, np.inf)


# ---------------------------------------------------------------- oracle itself


@pytest.mark.parametrize("K,L,m", [(2, 3, 2), (3, 4, 3)])
def test_oracle_gradients_finite_differences(K, L, m):
    E, samples, net, params = _setup(K, L, m, omega=0.8, seed=10 + K + L + m)
    _, u, _ = net.forward(params)
    assert np.min(np.abs(u)) > 1e-4, "test needs pre-activations away from the ReLU kink"
    _, grads, _ = net.oracle.loss_grads(params)
    # the convention at zero must not matter away from the kink
    _, grads0, _ = _Net(K, L, E, 0.0).oracle.loss_grads(params)
    h = 1e-5
    for name in ("WK", "WQ", "w"):
        for j in range(2):
            np.testing.assert_array_equal(grads[j][name], grads0[j][name])
            fd = np.zeros_like(params[j][name])
            for ix in np.ndindex(params[j][name].shape):
                plus = [{k: v.copy() for k, v in p.items()} for p in params]
                minus = [{k: v.copy() for k, v in p.items()} for p in params]
                plus[j][name][ix] += h
                minus[j][name][ix] -= h
                fd[ix] = (net.forward(plus)[0] - net.forward(minus)[0]) / (2 * h)
            scale = np.max(np.abs(fd))
            assert scale > 1e-3, f"{name}: gradient too small to be a meaningful check"
            err = np.max(np.abs(grads[j][name] - fd)) / scale
            assert err < 1e-6, f"{name}: relative error {err:.2e} against finite differences"


# ------------------------------------------------ reduced kernels vs the oracle

@pytest.mark.parametrize("K,L", [(2, 3), (3, 4), (2, 4), (3, 3)])
@pytest.mark.parametrize("m", [1, 3, 50])
def test_forward_matches_oracle(K, L, m):
    E, samples, net, params = _setup(K, L, m, omega=0.9, seed=100 + 7 * K + L + m)
    y = net.project(params)
    u = np.empty((samples.n, 2))
    margin = np.empty(samples.n)
    loss = kernels.forward(y, samples.P, samples.idx, samples.sgn, samples.y, samples.weight, u, margin)
    loss_o, u_o, margin_o = net.forward(params)
    assert abs(loss - loss_o) <= 1e-12 * abs(loss_o)
    np.testing.assert_allclose(u, u_o, rtol=0, atol=1e-12 * np.max(np.abs(u_o)))
    np.testing.assert_allclose(margin, margin_o, rtol=0, atol=1e-12 * np.max(np.abs(margin_o)))


def test_project_layout():
    E, samples, net, params = _setup(2, 3, 4, omega=0.7, seed=5)
    y = net.project(params)
    assert y.shape == (kernels.state_size(4),)
    S, A, B, w = kernels.unpack(y)
    j = 1
    WK, WQ = params[j]["WK"], params[j]["WQ"]
    a, b = 0, 3  # c1 key, v2 query
    assert np.isclose(S[j, a, b], E[:, a] @ WK.T @ WQ @ E[:, b], rtol=1e-13)
    assert np.isclose(A[j, a, b], E[:, a] @ WK.T @ WK @ E[:, b], rtol=1e-13)
    assert np.isclose(B[j, a, b], E[:, a] @ WQ.T @ WQ @ E[:, b], rtol=1e-13)
    assert np.isclose(w[j, b], params[j]["w"][0, 0] @ E[:, b], rtol=1e-13)


def _compare_trajectories(K, L, m, omega, eta, train_w, train_att, r0, w_sd, n_steps,
                          every, seed, tol=1e-10):
    E, samples, net, params = _setup(K, L, m, omega, seed, w_sd=w_sd, r0=r0)
    y = net.project(params)
    y0 = y.copy()
    worst = 0.0
    for start in range(0, n_steps, every):
        nsteps = min(every, n_steps - start)
        done, code, loss = _gd_advance(y, nsteps, eta, samples, r0, train_w, train_att)
        assert (done, code) == (nsteps, 0)
        for _ in range(nsteps):
            params = net.gd_step(params, eta, train_w, train_att)
        ref = net.project(params)
        err = np.max(np.abs(y - ref)) / np.max(np.abs(ref))
        worst = max(worst, err)
        assert err < tol, f"step {start + nsteps}: relative state error {err:.2e}"
        assert np.isclose(loss, net.forward(params)[0], rtol=1e-10, atol=0)
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
