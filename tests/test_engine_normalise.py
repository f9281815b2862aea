"""Normalised GD (``normalise = "parameter"``, ``--normalise parameter``) and the
queries' own init scale (``omega_q``, ``--omega-q``): the engine's reduced map
against explicit numpy networks that take the authors' step
(Tarzanagh et al.'s experiments: each trained parameter matrix moves by
eta * grad / (||grad||_F + eps), K and Q separately), and the failure paths."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from cli_cases import run_cases

MODELS = Path(__file__).resolve().parent.parent / "meanfield" / "models"
EPS = np.finfo(float).eps
STEPS = 40


def _raw(kq="merged", train=("attention",)):
    from meanfield.engine.description import _read

    raw = copy.deepcopy(_read(next(MODELS.rglob("maxmargin.toml"))))
    for h in raw["heads"]:
        h["kq"] = kq
    raw["parameters"].pop("kq", None)
    raw["parameters"].pop("record_log", None)
    raw["training"]["stages"][0]["train"] = list(train)
    raw["training"]["stages"][0]["steps"] = STEPS
    return raw


def _forward(X, Y, S, v):
    """Logistic loss of f(X) = v^T X^T softmax(X S z), z = the last token; returns the
    gradients dL/dS (d x d) and dL/dv."""
    n = len(Y)
    z = X[:, -1]
    lg = np.einsum("itd,de,ie->it", X, S, z)
    p = np.exp(lg - lg.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    xv = X @ v
    f = (p * xv).sum(1)
    df = -Y / (1 + np.exp(Y * f)) / n
    dS = np.einsum("it,itd,ie->de", df[:, None] * p * (xv - f[:, None]), X, z)
    dv = np.einsum("i,it,itd->d", df, p, X)
    return dS, dv


def _step(P, g, eta):
    return P - eta * g / (np.linalg.norm(g) + EPS)


def _engine(raw, over):
    from meanfield.engine.api import run
    from meanfield.engine.description import description_from_dict

    d = description_from_dict(raw, dict(over, record_every=1))
    r = run(d)
    assert r.status == "complete", r.message
    return d, r


def test_normalised_gd_merged_with_values_equals_explicit_network():
    # W and the value vector v trained together: each its own normalised step
    d, r = _engine(_raw("merged", ("attention", "values")), {"normalise": "parameter", "eta": 0.1})
    X, Y = np.asarray(d.data.tokens), np.asarray(d.data.target)
    W, v = np.zeros((d.P, d.P)), np.eye(d.P)[0]
    Ws = [W]
    for _ in range(STEPS):
        gW, gv = _forward(X, Y, W, v)
        W, v = _step(W, gW, 0.1), _step(v, gv, 0.1)
        Ws.append(W)
    We = np.asarray(r.W)[:, 0]
    assert We.shape == (STEPS + 1, d.P, d.P)
    assert np.abs(We - np.array(Ws)).max() <= 1e-11 * np.abs(Ws).max()
    assert np.abs(np.asarray(r.W)[-1, 0]).max() > 1.0  # it moved: 40 steps of length 0.1


@pytest.mark.parametrize("m", [4, 7])
def test_normalised_gd_separate_finite_width_equals_explicit_network(m):
    # the authors' init: Q = 0 (omega_q = 0), K random; S = K^T Q
    from meanfield.engine.reduce import initial_weights

    d, r = _engine(_raw("separate"), {"normalise": "parameter", "eta": 0.1, "width": m, "seed": 3,
                                      "omega": 0.2, "omega_q": 0.0})
    U = initial_weights(d)[0]
    P = d.P
    K, Q = U[:, :P].copy(), U[:, P:2 * P].copy()
    assert np.all(Q == 0) and np.abs(K).max() > 0
    X, Y, v = np.asarray(d.data.tokens), np.asarray(d.data.target), np.eye(P)[0]
    Ss = [K.T @ Q]
    for _ in range(STEPS):
        dS, _ = _forward(X, Y, K.T @ Q, v)
        K, Q = _step(K, Q @ dS.T, 0.1), _step(Q, K @ dS, 0.1)  # dL/dK = Q dS^T, dL/dQ = K dS
        Ss.append(K.T @ Q)
    Se = np.asarray(r.S)[:, 0]
    assert np.abs(Se - np.array(Ss)).max() <= 1e-11 * np.abs(Ss).max()
    assert np.abs(Ss[-1]).max() > 1.0


def test_normalised_gd_separate_infinite_width_equals_explicit_network_with_the_same_gram():
    # at infinite width the initial Gram is K^T K = omega^2 I, Q = 0, K^T Q = 0: the explicit network
    # K = omega I_d, Q = 0 (m = d) has exactly that Gram, so the same normalised-GD trajectory
    d, r = _engine(_raw("separate"), {"normalise": "parameter", "eta": 0.1, "omega": 0.2, "omega_q": 0.0})
    assert d.init.width is None
    P = d.P
    K, Q = 0.2 * np.eye(P), np.zeros((P, P))
    X, Y, v = np.asarray(d.data.tokens), np.asarray(d.data.target), np.eye(P)[0]
    Ss = [K.T @ Q]
    for _ in range(STEPS):
        dS, _ = _forward(X, Y, K.T @ Q, v)
        K, Q = _step(K, Q @ dS.T, 0.1), _step(Q, K @ dS, 0.1)
        Ss.append(K.T @ Q)
    Se = np.asarray(r.S)[:, 0]
    assert np.abs(Se - np.array(Ss)).max() <= 1e-11 * np.abs(Ss).max()


def test_plain_gd_is_not_normalised():
    # the same run without normalise differs from the normalised one (the option is not a no-op)
    _, r0 = _engine(_raw("merged"), {"eta": 0.1})
    _, r1 = _engine(_raw("merged"), {"eta": 0.1, "normalise": "parameter"})
    assert np.abs(np.asarray(r0.W)[-1] - np.asarray(r1.W)[-1]).max() > 0.1


def test_omega_q_sets_the_queries_scale_only():
    from meanfield.engine.description import description_from_dict
    from meanfield.engine.reduce import initial_weights, layout

    raw = _raw("separate")
    d = description_from_dict(raw, {"omega": 0.3, "omega_q": 0.05})
    names = {name: (s, w) for name, s, w, g in layout(d).objects[0]}
    (sK, wK), (sQ, wQ) = names["K"], names["Q"]
    dm = description_from_dict(raw, {"omega": 0.3, "omega_q": 0.05, "width": 20000, "seed": 1})
    U = initial_weights(dm)[0]
    # finite width: entries N(0, omega^2 / m) for K, N(0, omega_q^2 / m) for Q (sample Gram within 5 sigma)
    GK, GQ = U[:, sK:sK + wK].T @ U[:, sK:sK + wK], U[:, sQ:sQ + wQ].T @ U[:, sQ:sQ + wQ]
    tol = 5 * np.sqrt(2 / 20000)
    assert np.abs(GK / 0.3 ** 2 - np.eye(wK)).max() < tol and np.abs(GQ / 0.05 ** 2 - np.eye(wQ)).max() < tol
    assert d.init.omega_q == 0.05 and dm.init.omega == 0.3
    # (infinite width, omega_q = 0: the test above against the explicit K = omega I, Q = 0 network)


def test_normalise_failure_paths(tmp_path):
    from meanfield.core.config import ConfigError
    from meanfield.engine.description import description_from_dict

    with pytest.raises(ConfigError, match="normalise"):
        description_from_dict(_raw(), {"normalise": "parameter", "method": "flow"})
    with pytest.raises(ConfigError, match="normalise"):
        description_from_dict(_raw(), {"normalise": "frobenius"})
    with pytest.raises(ConfigError, match="omega_q"):
        description_from_dict(_raw(), {"omega_q": -1})
    d = description_from_dict(_raw("separate"), {"normalise": "parameter", "width": 4})
    from meanfield.engine.finite import make_particles

    with pytest.raises(ConfigError, match="normalise"):
        make_particles(d)
    out = tmp_path / "r.h5"
    cases = [("bad", ["model", "run", "maxmargin", "--normalise", "frobenius", "--out", str(out)]),
             ("flow", ["model", "run", "maxmargin", "--normalise", "parameter", "--method", "flow",
                       "--out", str(out)]),
             ("oq", ["model", "run", "maxmargin", "--omega-q", "-0.1", "--out", str(out)])]
    res, _ = run_cases(cases, cwd=tmp_path)
    for cid, flag in (("bad", "normalise"), ("flow", "normalise"), ("oq", "omega_q")):
        r = res[cid]
        assert r["rc"] == 2, r
        assert len(r["stderr"].strip().splitlines()) == 1 and flag in r["stderr"], r["stderr"]
    assert not out.exists()
