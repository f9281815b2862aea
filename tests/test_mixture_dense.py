"""The reviewers' extensions (dense configs: feature Gram, finite noisy
training sets, several neurons per head), which run through the engine
(``meanfield.engine``: the mixture family's description of the config).

Acceptance: for non-orthogonal features, a noisy finite training set and
several neurons per head, the engine's reduced GD map equals full-batch GD on
the explicit network (the engine's oracle ``meanfield.engine.oracle``, plain numpy,
on the config's description)
to 1e-10 relative over 200 steps; with Gamma = I and one neuron a dense config
equals the fast path (``meanfield.models.mixture.run.run``) to 1e-12. Also: the
sympy-derived GD map in feature coordinates with the metric Gamma equals the
engine's map;
sample weights with label probability and label noise equal a brute-force
enumeration; config errors are one line naming the field.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from meanfield.core.config import ConfigError
from meanfield.core.io import read_run
from meanfield.models.mixture.family import mixture_description
from meanfield.engine.reduce import initial_state
from meanfield.engine.system import system_of
from meanfield.engine.oracle import Oracle, embedding
from meanfield.models.mixture import kernels
from meanfield.models.mixture import run as R
from meanfield.models.mixture.config import gram_matrix, make_config
from meanfield.models.mixture.data import population_data, sample_set, training_data, training_set
from meanfield.models.mixture.measure import simulate

GRAM_SPEC = "cc:0.3,vv:0.25,cv:0.2,cvx:-0.1"


# ------------------------------------------------------------------ helpers


def _engine(cfg):
    """(description, system, layout) of a dense config: the engine runs it."""
    desc = mixture_description(cfg)
    system = system_of(desc)
    return desc, system, system.pk.lay


def _pack(lay, S, A, B, w):
    """Engine state from S, A, B (2, r, r) and w (2, n, r) (or (2, r): one neuron)
    in the description's dictionary (per head the joint Gram [[A, S], [S^T, B]])."""
    y = np.zeros(lay.size)
    w = np.asarray(w)
    for j, h in enumerate(("+", "-")):
        lay.get(y, h, "A")[...] = A[j]
        lay.get(y, h, "S")[...] = S[j]
        lay.get(y, h, "B")[...] = B[j]
        blk = lay.get(y, h, "S")
        r = blk.shape[0]
        Q = y[lay.block(h, "S").offset:lay.block(h, "S").offset + 4 * r * r].reshape(2 * r, 2 * r)
        Q[r:, :r] = S[j].T
        lay.get(y, h, "w")[...] = w[j].reshape(lay.get(y, h, "w").shape)
    return y


def _unpack(lay, y):
    """(S, A, B, w) of engine states (..., size): S, A, B (..., 2, r, r), w (..., 2, n, r)."""
    S, A, B, w = ([lay.get(y, h, nm) for h in ("+", "-")] for nm in ("S", "A", "B", "w"))
    ax = y.ndim - 1
    return (np.stack(S, axis=ax), np.stack(A, axis=ax), np.stack(B, axis=ax),
            np.stack([x[..., 0, :, :] for x in w], axis=ax))


def _project(lay, params, Q):
    """Engine state of explicit weights, reduced on the dictionary vectors Q (d, r)."""
    KQ = np.einsum("jmd,dr->jmr", params["W_K"], Q)
    QQ = np.einsum("jmd,dr->jmr", params["W_Q"], Q)
    S = np.einsum("jma,jmb->jab", KQ, QQ)
    A = np.einsum("jma,jmb->jab", KQ, KQ)
    B = np.einsum("jma,jmb->jab", QQ, QQ)
    w = params["w"] @ Q if params["w"].ndim == 2 else np.einsum("jqd,dr->jqr", params["w"], Q)
    return _pack(lay, S, A, B, w)


def _tokens(samples, E):
    """Explicit token vectors X (n, d, L): X[n, :, i] = sgn[n, i] E[:, idx[n, i]]."""
    return np.ascontiguousarray(np.transpose(E[:, samples.idx] * samples.sgn[None], (1, 0, 2)))


def _init_weights(m, d, omega, rng, w=None):
    """W_K, W_Q (2, m, d) iid N(0, omega^2/m); w (2, d) (zero unless given)."""
    sd = omega / np.sqrt(m)
    return {"W_K": rng.standard_normal((2, m, d)) * sd, "W_Q": rng.standard_normal((2, m, d)) * sd,
            "w": np.zeros((2, d)) if w is None else np.array(w, float)}


def _heads(params):
    """The oracle's per-head weights of stacked W_K, W_Q (2, m, d), w (2, d) or (2, n, d)."""
    w = params["w"] if params["w"].ndim == 3 else params["w"][:, None, :]
    return [{"a": np.array(s), "WK": params["W_K"][j], "WQ": params["W_Q"][j], "w": w[j][None]}
            for j, s in enumerate((1.0, -1.0))]


def _stacked(heads, ndim):
    return {"W_K": np.stack([p["WK"] for p in heads]), "W_Q": np.stack([p["WQ"] for p in heads]),
            "w": np.stack([p["w"][0] if ndim == 3 else p["w"][0, 0] for p in heads])}


def _mode(train_w=True, train_att=True):
    return (2 if train_w else 0) | (1 if train_att else 0)


def _advance(y, system, nsteps, eta, train_w=True, train_att=True):
    done, code = system.gd_advance(y, nsteps, eta, _mode(train_w, train_att), None)
    return done, code, system.loss_and_grads(y)[0]


def _compare(desc, system, X, params, Q, eta, nn=1, n_steps=200, every=20, tol=1e-10,
             train_w=True, train_att=True):
    """Engine GD map vs explicit GD (the oracle on ``desc`` with tokens x = Q t, which must be
    the explicit tokens X; step eta, neurons eta * nn) over n_steps."""
    lay = system.pk.lay
    net = Oracle(desc, Q)
    np.testing.assert_allclose(net.X, np.swapaxes(X, 1, 2), rtol=0, atol=1e-12)
    assert all(h.n == nn for h in net.heads)
    groups = (("values",) if train_w else ()) + (("attention",) if train_att else ())
    ndim = params["w"].ndim
    y = _project(lay, params, Q)
    y0 = y.copy()
    worst = 0.0
    for start in range(0, n_steps, every):
        k = min(every, n_steps - start)
        done, code, loss = _advance(y, system, k, eta, train_w, train_att)
        assert (done, code) == (k, 0)
        heads = _heads(params)
        for _ in range(k):
            heads = net.step(heads, eta, groups)
        params = _stacked(heads, ndim)
        ref = _project(lay, params, Q)
        err = np.max(np.abs(y - ref)) / np.max(np.abs(ref))
        worst = max(worst, err)
        assert err < tol, f"step {start + k}: relative state error {err:.2e}"
        ref_loss = net.forward(heads)[0]
        assert abs(loss - ref_loss) <= 1e-10 * abs(ref_loss)
    return y0, y, params, worst


def _moved(lay, y0, y):
    S0, A0, B0, w0 = _unpack(lay, y0)
    S1, A1, B1, w1 = _unpack(lay, y)
    return (max(np.max(np.abs(S1 - S0)), np.max(np.abs(A1 - A0)), np.max(np.abs(B1 - B0))),
            float(np.max(np.abs(w1 - w0))))


def _features(desc, lay, y):
    """Feature coordinates (the report map C of the dictionary): S, A, B (2, P, P), w (2, n, P)."""
    S, A, B, w = _unpack(lay, y)
    C = desc.dictionary.C
    f = lambda M: np.einsum("ra,...rs,sb->...ab", C, M, C)  # noqa: E731
    return {"S": f(S), "A": f(A), "B": f(B), "w_neurons": np.einsum("ra,...r->...a", C, w)}


# ------------------------------------------------- Gamma = I: the fast path


FAST_CASES = {
    "paper": dict(steps=600, record_every=20),
    "finite-width-gaussian": dict(steps=400, record_every=40, width=7, seed=3, neuron_init="gaussian:0.1"),
    "three-stage-K3L4": dict(K=3, L=4, schedule="three-stage", stage_steps=(150, 150, 100), record_every=25,
                             stage_criteria="consistent_margin>=0.05,none,none"),
    "labels": dict(steps=300, record_every=30, p=(0.7, 0.3), label_prob=0.7, label_noise=0.1),
    "rk4": dict(method="rk4", steps=150, record_every=10, neuron_init="const:0.01,0.01,0,0"),
}


@pytest.mark.parametrize("case", list(FAST_CASES))
def test_identity_gram_one_neuron_equals_fast_path(case, tmp_path):
    """A dense config runs through the engine; with Gamma = I and one neuron
    it is the fast path's config: same states (1e-12), run files, stage times."""
    base = make_config({}, **FAST_CASES[case])
    assert not base.dense
    cfg = make_config(base.to_dict() | {"feature_gram": "cc:0"})
    assert cfg.dense and np.array_equal(gram_matrix(cfg.feature_gram, cfg.K), np.eye(cfg.P))
    a = R.run(base)
    b = R.run(cfg)
    ya = a.arrays()["y"]
    _, _, lay = _engine(cfg)
    S, A, B, w = _unpack(lay, b.arrays()["y"])
    yb = np.stack([kernels.pack(S[k], A[k], B[k], w[k][:, 0]) for k in range(len(S))])
    assert ya.shape == yb.shape and np.array_equal(a.arrays()["t"], b.arrays()["t"])
    assert a.stage_ends == b.stage_ends
    assert np.max(np.abs(ya - yb)) <= 1e-12 * np.max(np.abs(ya))
    # run files: same recorded quantities and stage times
    fa = read_run(R.save(tmp_path / "a.h5", base, a))
    fb = read_run(R.save(tmp_path / "b.h5", cfg, b))
    for k in ("S", "A", "B", "w", "loss", "margin", "u"):
        np.testing.assert_allclose(fb[k], fa[k], rtol=0, atol=1e-12 * max(1.0, np.max(np.abs(fa[k]))))
    for k in ("T1", "T2", "T_loss"):
        assert (math.isnan(fa.attrs[k]) and math.isnan(fb.attrs[k])) or abs(fa.attrs[k] - fb.attrs[k]) < 1e-12
    assert fb.attrs["dense_path"] == 1 and "dense_path" not in fa.attrs
    assert "engine" not in fb.attrs  # the mixture system's own file
    assert np.array_equal(fb["samples"]["weight"], fa["samples"]["weight"])


def test_default_config_stays_on_fast_path():
    cfg = make_config({})
    assert not cfg.dense
    assert (cfg.label_prob, cfg.label_noise, cfg.feature_gram, cfg.noise_sigma, cfg.n_train, cfg.n_neurons) == \
        (0.5, 0.0, None, 0.0, None, 1)
    s = sample_set(2, 3)
    np.testing.assert_array_equal(s.weight, np.full(8, 0.125))
    assert not s.is_flipped.any()


# ------------------------------------------------- non-orthogonal features


def _gram_setup(K, L, m, seed, gram_spec, d_extra=3, w_sd=0.3, omega=0.8):
    gram = gram_matrix(gram_spec, K)
    rng = np.random.default_rng(seed)
    d = 2 * K + d_extra
    Eo = embedding(np.eye(2 * K), d, rng)
    E = Eo @ np.linalg.cholesky(gram).T        # E^T E = gram
    samples = sample_set(K, L)
    X = _tokens(samples, E)
    params = _init_weights(m, d, omega, rng, w=rng.standard_normal((2, d)) * w_sd)
    desc, system, lay = _engine(make_config({}, K=K, L=L, feature_gram=gram_spec))
    np.testing.assert_array_equal(desc.dictionary.Gamma, gram)
    return desc, system, samples, X, params, E


@pytest.mark.parametrize("m", [1, 3, 50])
@pytest.mark.parametrize("K,L", [(2, 3), (3, 4)])
def test_gram_reduced_gd_equals_explicit_gd(K, L, m):
    """Engine state in feature coordinates (Gamma metric): S = E^T W_K^T W_Q E, w~ = E^T w."""
    desc, system, samples, X, params, E = _gram_setup(K, L, m, seed=500 + 10 * K + m, gram_spec=GRAM_SPEC)
    np.testing.assert_allclose(E.T @ E, gram_matrix(GRAM_SPEC, K), atol=1e-14)
    y0, y, params, worst = _compare(desc, system, X, params, E, eta=0.4)
    att, w = _moved(system.pk.lay, y0, y)
    assert att > 0.05 and w > 0.3


@pytest.mark.parametrize("schedule", [(True, False), (False, True)])
def test_gram_stagewise_modes(schedule):
    desc, system, samples, X, params, E = _gram_setup(2, 3, 4, seed=9, gram_spec="cv:0.4,vv:-0.3")
    y0, y, _, _ = _compare(desc, system, X, params, E, eta=0.5, n_steps=60, every=30,
                           train_w=schedule[0], train_att=schedule[1])
    att, w = _moved(system.pk.lay, y0, y)
    assert (att > 0) == schedule[1] and (w > 0) == schedule[0]


def test_gram_feature_map_equals_sympy_derivation():
    """The sympy-derived GD map in feature coordinates (metric Gamma), fed with
    G = dLoss/dS_feat from the FAST kernels (exact in feature coordinates for
    signed-feature tokens), equals the engine's map at random states."""
    from meanfield.models.mixture import symbolic_gram as SG

    res = SG.derive()
    assert all(res["matches_expected"].values())
    assert all(v != 0 for v in res["mismatch"].values())
    tex = SG.latex()
    assert r"A' &= A - \eta\left(\Gamma G S^{T} + S G^{T} \Gamma\right) + \eta^{2}\,\Gamma G B G^{T} \Gamma" in tex
    committed = Path(__file__).resolve().parent.parent / "derivations" / "generated" / "gram_metric.tex"
    assert committed.read_text().endswith(tex), "regenerate: python derivations/gram_metric.py"
    K, L = 2, 3
    gram = gram_matrix(GRAM_SPEC, K)
    desc, system, lay = _engine(make_config({}, K=K, L=L, feature_gram=GRAM_SPEC))
    smp = sample_set(K, L)
    rng = np.random.default_rng(3)
    for trial in range(4):
        eta = 0.3 + 0.2 * trial
        MK, MQ = rng.standard_normal((2, 5, 4)), rng.standard_normal((2, 5, 4))
        S0, A0, B0 = (np.einsum("jma,jmb->jab", MK, MQ), np.einsum("jma,jmb->jab", MK, MK),
                      np.einsum("jma,jmb->jab", MQ, MQ))
        w0 = rng.standard_normal((2, 4))
        y = _pack(lay, S0, A0, B0, w0)
        loss, G, dw, _, _ = kernels.loss_and_grads(kernels.pack(S0, A0, B0, w0), 4, smp.idx, smp.sgn, smp.y,
                                                   smp.weight, 1.0)
        y1 = y.copy()
        assert system.gd_advance(y1, 1, eta, 3, None) == (1, 0)
        S1e, A1e, B1e, w1e = _unpack(lay, y1)
        for j in range(2):
            S1, A1, B1, w1 = SG.gd_map_features(S0[j], A0[j], B0[j], w0[j], G[j], dw[j], gram, eta)
            for got, want in ((S1e[j], S1), (A1e[j], A1), (B1e[j], B1), (w1e[j, 0], w1)):
                np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * max(1.0, np.max(np.abs(want))))
        # the first-proposed A' differs at a generic state (the test can tell them apart)
        import sympy as sp
        fA = sp.lambdify((SG.S, SG.A, SG.B, SG.WT, SG.G, SG.GW, SG.GAMMA, SG.ETA), SG.PROPOSED["A"], "numpy")
        bad = fA(S0[0], A0[0], B0[0], w0[0][:, None], G[0], dw[0][:, None], gram, eta)
        assert np.max(np.abs(bad - A1e[0])) > 1e-6


def test_gram_infinite_width_init_in_feature_coordinates():
    cfg = make_config({}, feature_gram=GRAM_SPEC, omega=0.3, neuron_init="const:0.1,0.2,0.3,0.4")
    desc, _, lay = _engine(cfg)
    f = _features(desc, lay, initial_state(desc, lay))
    gram = gram_matrix(GRAM_SPEC, 2)
    np.testing.assert_allclose(f["A"][0], 0.09 * gram, atol=1e-15)   # omega^2 Gamma, not omega^2 I
    np.testing.assert_allclose(f["S"], 0.0)
    np.testing.assert_allclose(f["w_neurons"][1, 0], [0.1, 0.2, 0.3, 0.4], atol=1e-15)


def test_gram_finite_width_init_law():
    """Finite width: S_feat = (W_K E)^T (W_Q E) with W iid N(0, omega^2/m): E[A_feat] = omega^2 Gamma."""
    gram = gram_matrix(GRAM_SPEC, 2)
    acc = np.zeros((4, 4))
    n = 200
    for seed in range(n):
        desc = mixture_description(make_config({}, feature_gram=GRAM_SPEC, width=20, seed=seed, omega=1.0))
        lay = system_of(desc).pk.lay
        acc += _features(desc, lay, initial_state(desc, lay))["A"][0]
    np.testing.assert_allclose(acc / n, gram, atol=0.08)


# ------------------------------------------------- noisy finite training sets


def _train_setup(K, L, n, d, seed, sigma=0.1, **over):
    cfg = make_config({}, K=K, L=L, n_train=n, noise_sigma=sigma, ambient_d=d, data_seed=seed, **over)
    desc, system, lay = _engine(cfg)
    dd = desc.data.extra["dense"]
    return desc, system, dd


@pytest.mark.parametrize("m", [1, 3, 50])
@pytest.mark.parametrize("n,d", [(6, 7), (2, 15)])
def test_noisy_training_set_reduced_gd_equals_explicit_gd(m, n, d):
    K, L = 2, 3
    desc, system, data = _train_setup(K, L, n, d, seed=11 + m)
    ts = training_set(K, L, n, sigma=0.1, d=d, seed=11 + m)
    np.testing.assert_array_equal(data.tokens, ts.X)      # the config's training set is the sampler's
    assert data.r == min(d, n * L + 2 * K) == desc.dictionary.P
    np.testing.assert_allclose(data.Q.T @ data.Q, np.eye(data.r), atol=1e-13)
    rng = np.random.default_rng(100 + m + d)
    params = _init_weights(m, d, 0.8, rng, w=rng.standard_normal((2, d)) * 0.3)
    y0, y, params, worst = _compare(desc, system, ts.X, params, data.Q, eta=0.4)
    att, w = _moved(system.pk.lay, y0, y)
    assert att > 0.05 and w > 0.3
    # feature coordinates: projections on the clean features
    feat = _features(desc, system.pk.lay, y)
    for j in range(2):
        np.testing.assert_allclose(feat["S"][j], ts.E.T @ params["W_K"][j].T @ params["W_Q"][j] @ ts.E,
                                   atol=1e-10)


def test_noisy_training_set_with_gram_and_neurons():
    K, L, n, d, nn, m = 2, 3, 6, 7, 3, 3
    gram = gram_matrix("cc:0.2,vv:0.3", K)
    desc, system, data = _train_setup(K, L, n, d, seed=4, feature_gram="cc:0.2,vv:0.3", n_neurons=nn)
    np.testing.assert_allclose(data.E.T @ data.E, gram, atol=1e-14)
    rng = np.random.default_rng(8)
    params = _init_weights(m, d, 0.8, rng)
    params["w"] = rng.standard_normal((2, nn, d)) * 0.3
    _compare(desc, system, data.tokens, params, data.Q, eta=0.4, nn=nn)


def test_training_set_sampler():
    K, L, n = 3, 4, 20000
    ts = training_set(K, L, n, p=(0.5, 0.3, 0.2), label_prob=0.7, label_noise=0.1, sigma=0.2, d=9, seed=1)
    s = ts.samples
    assert ts.X.shape == (n, 9, L) and s.n == n and np.all(s.weight == 1.0 / n)
    np.testing.assert_allclose(np.bincount(s.group, minlength=K) / n, [0.5, 0.3, 0.2], atol=0.015)
    y_clean = s.sgn[:, 1]
    assert abs(np.mean(y_clean > 0) - 0.7) < 0.015
    assert abs(np.mean(s.is_flipped) - 0.1) < 0.01
    np.testing.assert_array_equal(s.y, np.where(s.is_flipped, -y_clean, y_clean))
    np.testing.assert_array_equal(s.consistent, np.all(s.distractor_sign == y_clean[:, None], axis=1))
    assert np.all(s.distractor_group != s.group[:, None])
    clean = np.einsum("dsl,sl->sdl", ts.E[:, s.idx], s.sgn)
    noise = ts.X - clean
    assert abs(noise.std() - 0.2) < 0.005 and abs(noise.mean()) < 0.005
    a = training_set(K, L, 50, sigma=0.1, seed=7)
    b = training_set(K, L, 50, sigma=0.1, seed=7)
    assert np.array_equal(a.X, b.X) and np.array_equal(a.samples.idx, b.samples.idx)
    # sigma = 0: tokens in the features' span, basis dimension P
    assert training_data(training_set(K, L, 30, sigma=0.0, d=12, seed=2)).r == 2 * K


def test_population_data_in_a_basis():
    """The population with a feature Gram in the Cholesky basis: E = Q C, tokens sgn C[:, idx]."""
    gram = gram_matrix(GRAM_SPEC, 2)
    data = population_data(2, 3, gram=gram)
    np.testing.assert_allclose(data.C.T @ data.C, gram, atol=1e-15)
    s = data.samples
    np.testing.assert_allclose(data.X, np.transpose(data.C[:, s.idx] * s.sgn[None], (1, 2, 0)), atol=0)


# ------------------------------------------------- several neurons per head


def test_neuron_oracle_is_the_one_neuron_oracle_and_finite_differences():
    """The explicit network with several neurons per head (the engine's oracle on the
    mixture description): n equal neurons are one neuron (same loss, per-neuron
    gradient 1/n of the one neuron's, attention gradients equal); n different
    neurons: gradients against central differences."""
    rng = np.random.default_rng(2)
    K, L, m, d = 2, 3, 3, 6
    E = embedding(np.eye(2 * K), d, rng)
    params = _heads(_init_weights(m, d, 0.9, rng, w=rng.standard_normal((2, d)) * 0.5))
    one = Oracle(mixture_description(make_config({}, K=K, L=L)), E)
    three = Oracle(mixture_description(make_config({}, K=K, L=L, n_neurons=3)), E)
    copies = [dict(p, w=np.repeat(p["w"], 3, axis=1)) for p in params]
    l1, g1, c1 = one.loss_grads(params)
    l3, g3, c3 = three.loss_grads(copies)
    assert abs(l1 - l3) < 1e-14
    np.testing.assert_allclose(c3["f"], c1["f"], atol=1e-14)
    for a, b in zip(g1, g3):
        for k in ("WK", "WQ"):
            np.testing.assert_allclose(b[k], a[k], atol=1e-14)
        np.testing.assert_allclose(3 * b["w"], np.repeat(a["w"], 3, axis=1), atol=1e-14)
    # several different neurons: finite differences
    multi = [dict(p, w=rng.standard_normal((1, 3, d)) * 0.5) for p in params]
    _, _, cache = three.loss_grads(multi)
    assert min(np.min(np.abs(h["u"])) for h in cache["heads"]) > 1e-4
    g = three.backward(multi, cache)
    h = 1e-6
    for name in ("WK", "w"):
        for j, ix in [(0, (1, 2)), (1, (2, 4)), (0, (0, 0))]:
            ix = (0,) + ix if name == "w" else ix
            pl = [{k: v.copy() for k, v in p.items()} for p in multi]
            mi = [{k: v.copy() for k, v in p.items()} for p in multi]
            pl[j][name][ix] += h
            mi[j][name][ix] -= h
            fd = (three.forward(pl)[0] - three.forward(mi)[0]) / (2 * h)
            assert abs(fd - g[j][name][ix]) < 1e-7 * max(1.0, abs(fd))


@pytest.mark.parametrize("m", [1, 3, 50])
@pytest.mark.parametrize("nn", [2, 5])
def test_neurons_reduced_gd_equals_explicit_gd(m, nn):
    K, L = 2, 3
    rng = np.random.default_rng(20 + m + nn)
    d = 2 * K + 2
    Q = embedding(np.eye(2 * K), d, rng)
    samples = sample_set(K, L)
    X = _tokens(samples, Q)
    params = _init_weights(m, d, 0.8, rng)
    params["w"] = rng.standard_normal((2, nn, d)) * 0.3
    desc, system, lay = _engine(make_config({}, K=K, L=L, n_neurons=nn))
    y0, y, params, _ = _compare(desc, system, X, params, Q, eta=0.4, nn=nn)
    att, w = _moved(lay, y0, y)
    assert att > 0.05 and w > 0.3
    feat = _features(desc, lay, y)
    np.testing.assert_allclose(feat["w_neurons"], np.einsum("da,jqd->jqa", Q, params["w"]), atol=1e-10)


def test_neurons_gaussian_init_and_run_file(tmp_path):
    cfg = make_config({}, n_neurons=4, neuron_init="gaussian:0.05", steps=200, record_every=50, seed=5)
    desc, _, lay = _engine(cfg)
    w = _unpack(lay, initial_state(desc, lay))[3]
    rng = np.random.default_rng(np.random.SeedSequence(5).spawn(2)[1])  # the neurons' stream
    np.testing.assert_array_equal(w, 0.05 * rng.standard_normal((2, 4, 4)))
    # one neuron: the numbers of init.neuron_init
    from meanfield.models.mixture.init import neuron_init
    one = make_config({}, n_neurons=1, neuron_init="gaussian:0.05", seed=5, feature_gram="cc:0")
    d1, _, l1 = _engine(one)
    np.testing.assert_array_equal(_unpack(l1, initial_state(d1, l1))[3][:, 0], neuron_init(2, "gaussian:0.05", 5))
    traj = R.run(cfg)
    f = read_run(R.save(tmp_path / "n.h5", cfg, traj))
    T = len(f["t"])
    assert f["w_neurons"].shape == (T, 2, 4, 4) and f["w"].shape == (T, 2, 4)
    np.testing.assert_allclose(f["w"], f["w_neurons"].mean(axis=2), atol=1e-15)
    assert f["u_neurons"].shape == (T, 8, 2, 4) and f["S"].shape == (T, 2, 4, 4)
    assert f.attrs["n_neurons"] == 4 and f.attrs["basis_dim"] == 4


def test_flow_rhs_is_the_eta_derivative_of_the_gd_map():
    cfg = make_config({}, n_neurons=3, neuron_init="gaussian:0.3", feature_gram=GRAM_SPEC, width=6, seed=2)
    desc, sysm, lay = _engine(cfg)
    y = initial_state(desc, lay)
    rhs = sysm.rhs(y, 3)
    eta = 1e-7
    y1 = y.copy()
    sysm.gd_advance(y1, 1, eta, 3, None)
    np.testing.assert_allclose((y1 - y) / eta, rhs, atol=1e-6 * np.max(np.abs(rhs)))


def test_dense_flow_and_criteria_run():
    cfg = make_config({}, feature_gram="vv:0.3", n_neurons=2, neuron_init="gaussian:0.1", method="flow",
                      t_end=20.0, criterion="min_margin>=0.05", record_every=5)
    traj = R.run(cfg)
    assert traj.status == "complete"
    y = traj.arrays()["y"][-1]
    if traj.stage_ends[-1]["reason"] == "criterion":
        assert abs(_engine(cfg)[1].criterion_value(y, "min_margin") - 0.05) < 1e-6


# ------------------------------------------------- label probability and label noise


def _brute_force_weights(K, L, p, q, rho):
    """Enumerate ordered token sequences: (group, observed label, flipped?, clean tokens) -> probability."""
    p = np.asarray(p) / np.sum(p)
    out = {}
    others = lambda k: [kk for kk in range(K) if kk != k]  # noqa: E731
    for k in range(K):
        for y in (1.0, -1.0):
            py = q if y > 0 else 1 - q
            for dist in itertools.product(*[[(kk, e) for kk in others(k) for e in (-1.0, 1.0)]] * (L - 2)):
                pr = p[k] * py * (1.0 / (2 * (K - 1))) ** (L - 2)
                toks = tuple(sorted([(k, 1.0), (K + k, y)] + [(K + kk, e) for kk, e in dist]))
                for flip, pf in ((False, 1 - rho), (True, rho)):
                    if pf == 0:
                        continue
                    key = (k, -y if flip else y, flip, toks)
                    out[key] = out.get(key, 0.0) + pr * pf
    return out


@pytest.mark.parametrize("K,L,p,q,rho", [(2, 3, (0.7, 0.3), 0.7, 0.0), (2, 4, None, 0.5, 0.2),
                                         (3, 4, (0.2, 0.5, 0.3), 0.35, 0.1), (3, 2, None, 0.6, 0.3)])
def test_label_prob_and_noise_weights_by_enumeration(K, L, p, q, rho):
    s = sample_set(K, L, p, label_prob=q, label_noise=rho)
    want = _brute_force_weights(K, L, p if p is not None else np.ones(K), q, rho)
    got = {}
    for i in range(s.n):
        toks = tuple(sorted(zip(s.idx[i].tolist(), s.sgn[i].tolist())))
        key = (int(s.group[i]), float(s.y[i]), bool(s.is_flipped[i]), toks)
        assert key not in got
        got[key] = float(s.weight[i])
        # consistent refers to the tokens: distractor signs == sign of the v_k token
        assert s.consistent[i] == all(e == s.sgn[i, 1] for e in s.distractor_sign[i])
    assert set(got) == set(want)
    for key in want:
        assert abs(got[key] - want[key]) < 1e-15
    assert abs(s.weight.sum() - 1.0) < 1e-14
    n0 = s.n // 2 if rho > 0 else s.n
    assert not s.is_flipped[:n0].any() and s.is_flipped[n0:].all()


def test_label_noise_run_stage_times_use_clean_margins(tmp_path):
    cfg = make_config({}, label_noise=0.1, steps=3000, record_every=30)
    assert not cfg.dense
    f = read_run(R.save(tmp_path / "ln.h5", cfg, R.run(cfg)))
    assert f["margin"].shape[1] == 16 and "flipped" in f["samples"]
    assert np.isfinite(f.attrs["T1"]) and np.isfinite(f.attrs["T2"])


# ------------------------------------------------- config validation


@pytest.mark.parametrize("bad,field", [
    (dict(label_prob=0.0), "label_prob"), (dict(label_prob=1.2), "label_prob"),
    (dict(label_noise=0.5), "label_noise"), (dict(label_noise=-0.1), "label_noise"),
    (dict(feature_gram="cc:0.2,xx:1"), "feature_gram"), (dict(feature_gram="cc:2"), "feature_gram"),
    (dict(feature_gram="cc:0.2,cc:0.1"), "feature_gram"),
    (dict(feature_gram=[[1, 0.1], [0.1, 1]]), "feature_gram"),
    (dict(feature_gram=[[1, 0.1, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]), "feature_gram"),
    (dict(feature_gram=[[1, 0, 0, 0], [0, -1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]), "feature_gram"),
    (dict(noise_sigma=0.1), "n_train"), (dict(noise_sigma=-1, n_train=4), "noise_sigma"),
    (dict(n_train=0), "n_train"), (dict(ambient_d=8), "ambient_d"), (dict(n_train=4, ambient_d=3), "ambient_d"),
    (dict(data_seed=-1), "data_seed"), (dict(n_neurons=0), "n_neurons"), (dict(n_neurons=1.5), "n_neurons"),
])
def test_config_errors(bad, field):
    with pytest.raises(ConfigError) as e:
        make_config({}, **bad)
    msg = str(e.value)
    assert msg.startswith(field) and "\n" not in msg


def test_config_extensions_roundtrip():
    cfg = make_config({"feature_gram": [[1, 0.2, 0, 0], [0.2, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]],
                       "noise_sigma": 0.1, "n_train": 8, "ambient_d": 9, "n_neurons": 3})
    assert cfg.dense and cfg.feature_gram[0][1] == 0.2
    again = make_config(cfg.to_dict())
    assert again == cfg
    assert make_config({}, feature_gram="identity").feature_gram is None
    assert make_config({}, n_train=5).dense


def test_simulate_matches_run_file(tmp_path):
    cfg = make_config({}, n_train=12, noise_sigma=0.2, data_seed=3, steps=400, record_every=20, label_noise=0.1)
    sim = simulate(cfg)
    f = read_run(R.save(tmp_path / "s.h5", cfg, R.run(cfg)))
    for k in ("S", "w", "loss", "margin"):
        np.testing.assert_array_equal(sim[k], f[k])
    for k in ("T1", "T2", "T_loss"):
        a, b = sim["attrs"][k], f.attrs[k]
        assert (math.isnan(a) and math.isnan(b)) or a == b
    assert f["training_set"]["tokens"].shape == (12, 8, 3) and f.attrs["basis_dim"] == 8

