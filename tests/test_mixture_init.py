"""Initial reduced states: infinite width, the finite-width law, neuron specs.

Finite width m: W_K, W_Q have iid N(0, omega^2/m) entries, so with orthonormal
features M_K = W_K E, M_Q = W_Q E are m x P with iid N(0, omega^2/m) entries and
    S = M_K^T M_Q,  A = M_K^T M_K,  B = M_Q^T M_Q.
Moments (computed here by hand, not by the package):
    E[A] = E[B] = omega^2 I,  E[S] = 0,
    Var S[a,b] = m (omega^2/m)^2 = omega^4/m,
    Var A[a,a] = m * 2 (omega^2/m)^2 = 2 omega^4/m,  Var A[a,b] = omega^4/m (a != b).
"""

from __future__ import annotations

import numpy as np
import pytest

from meanfield.core.config import ConfigError
from meanfield.models.mixture import kernels
from meanfield.models.mixture.config import make_config, parse_neuron_init
from meanfield.models.mixture.init import attention_init, initial_state, neuron_init


@pytest.mark.parametrize("K", [2, 3])
@pytest.mark.parametrize("omega", [1e-3, 0.1, 2.0])
def test_infinite_width(K, omega):
    S, A, B = attention_init(K, omega, None, seed=5)
    P = 2 * K
    assert S.shape == A.shape == B.shape == (2, P, P)
    assert np.all(S == 0)
    for h in range(2):
        np.testing.assert_array_equal(A[h], omega**2 * np.eye(P))
        np.testing.assert_array_equal(B[h], omega**2 * np.eye(P))
    # the seed does not matter at infinite width
    S2, A2, B2 = attention_init(K, omega, None, seed=99)
    np.testing.assert_array_equal(A, A2)


def test_initial_state_layout_infinite_width():
    cfg = make_config(K=2, omega=0.3, neuron_init="const:1,2,3,4")
    y = initial_state(cfg)
    P = 4
    assert y.shape == (6 * P * P + 2 * P,)
    # layout [S (2,P,P), A, B, w (2,P)] written out by hand
    n2 = 2 * P * P
    assert np.all(y[:n2] == 0)
    np.testing.assert_array_equal(y[n2:2 * n2].reshape(2, P, P), np.stack([0.09 * np.eye(P)] * 2))
    np.testing.assert_array_equal(y[2 * n2:3 * n2].reshape(2, P, P), np.stack([0.09 * np.eye(P)] * 2))
    np.testing.assert_array_equal(y[3 * n2:].reshape(2, P), [[1, 2, 3, 4], [1, 2, 3, 4]])


def test_finite_width_law_over_seeds():
    K, m, omega, N = 2, 3, 0.7, 3000
    P = 2 * K
    draws = [attention_init(K, omega, m, seed=s) for s in range(N)]
    S = np.array([d[0] for d in draws])  # (N, 2, P, P)
    A = np.array([d[1] for d in draws])
    B = np.array([d[2] for d in draws])
    s4 = omega**4
    var_S = s4 / m
    # means, 5 standard errors per entry
    se_S = np.sqrt(var_S / N)
    assert np.all(np.abs(S.mean(0)) < 5 * se_S)
    var_A = np.where(np.eye(P, dtype=bool), 2 * s4 / m, s4 / m)
    for M in (A, B):
        assert np.all(np.abs(M.mean(0) - omega**2 * np.eye(P)) < 5 * np.sqrt(var_A / N))
    # variances: Var S[a,b] = omega^4/m; SE of a sample variance of S[a,b]:
    # Var(S^2) = E S^4 - (E S^2)^2 with E S^4 = 9 m s^8 + 3 m (m-1) s^8, s^2 = omega^2/m
    s2 = omega**2 / m
    ES4 = 9 * m * s2**4 + 3 * m * (m - 1) * s2**4
    se_var = np.sqrt((ES4 - var_S**2) / N)
    v = S.var(0)
    assert np.all(np.abs(v - var_S) < 5 * se_var), (v, var_S)
    assert abs(v.mean() / var_S - 1) < 0.05
    vA = np.concatenate([A.var(0), B.var(0)])
    assert np.all(np.abs(vA / var_A - 1) < 0.2)
    assert abs(np.mean(vA[:, np.eye(P, dtype=bool)]) / (2 * s4 / m) - 1) < 0.07
    # heads are independent draws
    c = np.corrcoef(S[:, 0].reshape(N, -1)[:, 0], S[:, 1].reshape(N, -1)[:, 0])[0, 1]
    assert abs(c) < 5 / np.sqrt(N)


@pytest.mark.parametrize("m", [1, 3, 6])
def test_finite_width_joint_gram_structure(m):
    """[[A, S], [S^T, B]] is the Gram matrix of [M_K, M_Q] (m rows): symmetric
    PSD of rank <= m; A, B symmetric."""
    K, omega = 2, 0.5
    P = 2 * K
    S, A, B = attention_init(K, omega, m, seed=11)
    for h in range(2):
        G = np.block([[A[h], S[h]], [S[h].T, B[h]]])
        np.testing.assert_allclose(A[h], A[h].T, atol=1e-15)
        np.testing.assert_allclose(B[h], B[h].T, atol=1e-15)
        ev = np.linalg.eigvalsh(G)
        assert ev.min() > -1e-12
        rank = int(np.sum(ev > 1e-10 * ev.max()))
        assert rank == min(m, 2 * P)
        # Cauchy-Schwarz on the Gram: S[a,b]^2 <= A[a,a] B[b,b]
        assert np.all(S[h] ** 2 <= np.outer(np.diag(A[h]), np.diag(B[h])) * (1 + 1e-12))


def test_large_width_approaches_infinite_width():
    K, omega, m = 2, 0.4, 40000
    S, A, B = attention_init(K, omega, m, seed=1)
    tol = 6 * omega**2 * np.sqrt(2 / m)
    assert np.abs(A - omega**2 * np.eye(4)).max() < tol
    assert np.abs(B - omega**2 * np.eye(4)).max() < tol
    assert np.abs(S).max() < tol
    assert np.abs(S).max() > 0


def test_determinism_per_seed():
    a = attention_init(3, 0.2, 5, seed=7)
    b = attention_init(3, 0.2, 5, seed=7)
    c = attention_init(3, 0.2, 5, seed=8)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert not np.allclose(a[0], c[0])
    np.testing.assert_array_equal(neuron_init(2, "gaussian:0.3", 4), neuron_init(2, "gaussian:0.3", 4))
    assert not np.allclose(neuron_init(2, "gaussian:0.3", 4), neuron_init(2, "gaussian:0.3", 5))
    y1 = initial_state(make_config(width=4, seed=3, neuron_init="gaussian:1"))
    y2 = initial_state(make_config(width=4, seed=3, neuron_init="gaussian:1"))
    np.testing.assert_array_equal(y1, y2)


def test_neuron_stream_independent_of_attention():
    """Changing the neuron init leaves the sampled attention unchanged, and the
    gaussian neurons do not depend on the width of the attention."""
    ys = [initial_state(make_config(width=5, seed=2, omega=0.3, neuron_init=spec))
          for spec in ("zero", "gaussian:1", "gaussian:0.01", "const:1,2,3,4")]
    S0, A0, B0, _ = kernels.unpack(ys[0])
    for y in ys[1:]:
        S, A, B, _ = kernels.unpack(y)
        np.testing.assert_array_equal(S, S0)
        np.testing.assert_array_equal(A, A0)
        np.testing.assert_array_equal(B, B0)
    w_a = kernels.unpack(initial_state(make_config(width=5, seed=2, neuron_init="gaussian:1")))[3]
    w_b = kernels.unpack(initial_state(make_config(width=50, seed=2, neuron_init="gaussian:1")))[3]
    w_c = kernels.unpack(initial_state(make_config(width=None, seed=2, neuron_init="gaussian:1")))[3]
    np.testing.assert_array_equal(w_a, w_b)
    np.testing.assert_array_equal(w_a, w_c)


def test_const_neuron_init():
    np.testing.assert_array_equal(neuron_init(2, "const:1,-2,0.5,3"), [[1, -2, 0.5, 3], [1, -2, 0.5, 3]])
    np.testing.assert_array_equal(neuron_init(2, "const:1,2,3,4,5,6,7,8"), [[1, 2, 3, 4], [5, 6, 7, 8]])
    w = neuron_init(3, "const:" + ",".join(str(i) for i in range(12)))
    np.testing.assert_array_equal(w, np.arange(12).reshape(2, 6))
    np.testing.assert_array_equal(neuron_init(2, "zero"), np.zeros((2, 4)))
    assert parse_neuron_init(" const:1,1,1,1 ", 2) == ("const", ((1.0,) * 4, (1.0,) * 4))


def test_gaussian_neuron_init():
    w1 = neuron_init(2, "gaussian:1", seed=3)
    w2 = neuron_init(2, "gaussian:2.5", seed=3)
    assert w1.shape == (2, 4)
    np.testing.assert_allclose(w2, 2.5 * w1, rtol=1e-15)
    np.testing.assert_array_equal(neuron_init(2, "gaussian:0", seed=3), np.zeros((2, 4)))
    W = np.array([neuron_init(2, "gaussian:0.5", seed=s) for s in range(2000)])
    assert abs(W.mean()) < 5 * 0.5 / np.sqrt(W.size)
    assert abs(W.var() / 0.25 - 1) < 0.05


@pytest.mark.parametrize("spec", [
    "ones", "const:", "const:1,2,3", "const:1,2,3,4,5", "const:a,b,c,d", "const:1,2,nan,4",
    "gaussian:", "gaussian:-1", "gaussian:abc", "gaussian:inf", "gauss:1", "zero:1", "const:1:2", "",
])
def test_bad_neuron_specs(spec):
    with pytest.raises(ConfigError, match="neuron_init"):
        parse_neuron_init(spec, 2)
    with pytest.raises(ConfigError, match="neuron_init"):
        neuron_init(2, spec)
    with pytest.raises(ConfigError, match="neuron_init"):
        make_config(neuron_init=spec)


def test_neuron_spec_length_depends_on_K():
    neuron_init(3, "const:1,1,1,1,1,1")
    with pytest.raises(ConfigError, match="neuron_init"):
        make_config(K=3, neuron_init="const:1,1,1,1")
