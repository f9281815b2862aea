"""The attention's ridge penalty (``ridge = lambda``, ``--ridge``; meanfield.engine.ridge):
the engine's reduced map against explicit numpy networks trained on
loss + lambda ||W||^2 (merged) or loss + lambda (||K||^2 + ||Q||^2) (separate), with
plain and normalised GD (the authors' step: the whole gradient, penalty included,
normalised), at finite and infinite width; and the failure paths."""

from __future__ import annotations

import numpy as np
import pytest
from test_engine_normalise import EPS, STEPS, _engine, _forward, _raw

LAM = 0.05  # large enough to change every trajectory by O(1) over 40 steps
TOL = 1e-10


def _gd(P, g, eta, normalised):
    return P - eta * g / (np.linalg.norm(g) + EPS) if normalised else P - eta * g


@pytest.mark.parametrize("normalised", [False, True])
def test_ridge_merged_equals_explicit_network(normalised):
    eta = 0.1 if normalised else 1.0
    over = {"ridge": LAM, "eta": eta, **({"normalise": "parameter"} if normalised else {})}
    d, r = _engine(_raw("merged"), over)
    X, Y, v = np.asarray(d.data.tokens), np.asarray(d.data.target), np.eye(d.P)[0]
    W = np.zeros((d.P, d.P))
    Ws = [W]
    for _ in range(STEPS):
        gW, _ = _forward(X, Y, W, v)
        W = _gd(W, gW + 2 * LAM * W, eta, normalised)
        Ws.append(W)
    We = np.asarray(r.W)[:, 0]
    assert np.abs(We - np.array(Ws)).max() <= TOL * np.abs(Ws).max()
    _, r0 = _engine(_raw("merged"), {k: v for k, v in over.items() if k != "ridge"})
    assert np.abs(np.asarray(r0.W)[-1, 0] - We[-1]).max() > 0.05  # the penalty is not a no-op


@pytest.mark.parametrize("m,normalised", [(4, True), (7, True), (5, False)])
def test_ridge_separate_finite_width_equals_explicit_network(m, normalised):
    from meanfield.engine.reduce import initial_weights

    eta = 0.1 if normalised else 1.0
    over = {"ridge": LAM, "eta": eta, "width": m, "seed": 3, "omega": 0.2,
            **({"normalise": "parameter", "omega_q": 0.0} if normalised else {})}
    d, r = _engine(_raw("separate"), over)
    U = initial_weights(d)[0]
    P = d.P
    K, Q = U[:, :P].copy(), U[:, P:2 * P].copy()
    X, Y, v = np.asarray(d.data.tokens), np.asarray(d.data.target), np.eye(P)[0]
    Ss = [K.T @ Q]
    for _ in range(STEPS):
        dS, _ = _forward(X, Y, K.T @ Q, v)
        K, Q = (_gd(K, Q @ dS.T + 2 * LAM * K, eta, normalised),  # dL/dK = Q dS^T + 2 lambda K
                _gd(Q, K @ dS + 2 * LAM * Q, eta, normalised))
        Ss.append(K.T @ Q)
    Se = np.asarray(r.S)[:, 0]
    assert np.abs(Se - np.array(Ss)).max() <= TOL * np.abs(Ss).max()
    A = np.asarray(r.var("h", "A"))[-1] if hasattr(r, "var") else None
    if A is not None:  # K^T K: the penalty shrinks the keys too
        assert np.abs(A - K.T @ K).max() <= TOL * max(1.0, np.abs(K.T @ K).max())


def test_ridge_separate_infinite_width_equals_explicit_network_with_the_same_gram():
    d, r = _engine(_raw("separate"), {"ridge": LAM, "normalise": "parameter", "eta": 0.1, "omega": 0.2,
                                      "omega_q": 0.0})
    P = d.P
    K, Q = 0.2 * np.eye(P), np.zeros((P, P))
    X, Y, v = np.asarray(d.data.tokens), np.asarray(d.data.target), np.eye(P)[0]
    Ss = [K.T @ Q]
    for _ in range(STEPS):
        dS, _ = _forward(X, Y, K.T @ Q, v)
        K, Q = _gd(K, Q @ dS.T + 2 * LAM * K, 0.1, True), _gd(Q, K @ dS + 2 * LAM * Q, 0.1, True)
        Ss.append(K.T @ Q)
    assert np.abs(np.asarray(r.S)[:, 0] - np.array(Ss)).max() <= TOL * np.abs(Ss).max()


def test_ridge_failure_paths(tmp_path):
    import copy

    from cli_cases import run_cases

    from meanfield.core.config import ConfigError
    from meanfield.engine.description import description_from_dict
    from meanfield.engine.finite import make_particles

    with pytest.raises(ConfigError, match="ridge: must be >= 0"):
        description_from_dict(_raw(), {"ridge": -1})
    raw = copy.deepcopy(_raw())
    raw["dictionary"]["gram"] = (np.eye(4) + 0.1 * (np.ones((4, 4)) - np.eye(4))).tolist()
    with pytest.raises(ConfigError, match="ridge: only with an orthonormal dictionary"):
        description_from_dict(raw, {"ridge": 1e-3})
    description_from_dict(raw, {})  # the same Gram without a ridge is fine
    with pytest.raises(ConfigError, match="ridge: the explicit network"):
        make_particles(description_from_dict(_raw("separate"), {"ridge": 1e-3, "width": 4}))
    out = tmp_path / "r.h5"
    res, _ = run_cases([("neg", ["model", "run", "maxmargin", "--ridge", "-1", "--out", str(out)]),
                        ("txt", ["model", "run", "maxmargin", "--ridge", "tiny", "--out", str(out)])], cwd=tmp_path)
    for cid in ("neg", "txt"):
        x = res[cid]
        assert x["rc"] == 2 and len(x["stderr"].strip().splitlines()) == 1 and "ridge" in x["stderr"], x
    assert not out.exists()
