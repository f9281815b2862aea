"""Nichani, Damian, Lee (ICML 2024) on the engine: the reference numbers against independent
computations, claims that can fail, refusals and the quick check from the command line.

References used here are independent of what they check: the engine's Gamma-function law and
posterior mean (against the Polya-urn enumeration of ``theory``), a Gauss-Jacobi quadrature over
the Beta rows of pi with closed-form pair laws (against the Monte Carlo conditional MI, 5 standard
errors), the engine's attention kernel (against ``theory.layer1_attention``) and the explicit torch
network with autograd (against the engine's gradient and GD map).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.special import roots_jacobi

from meanfield.engine import twolayer_net
from meanfield.engine.twolayer import graph_law, graph_posterior_mean
from meanfield.models.nichani import claims, theory

ROOT = Path(__file__).resolve().parents[1]
TOML = ROOT / "meanfield" / "models" / "nichani.toml"


@pytest.mark.parametrize("d,parents,alpha", [(3, [[], [1], [1], [2], [3], []], 0.1), (2, [[], [1], [2], [1], []], 1.0),
                                             (2, [[], [], [1], [2], [3], [2], []], 0.5)])
def test_urn_law_and_soft_targets_equal_the_engine_law(d, parents, alpha):
    X, p = theory.urn_graph_law(d, parents, alpha)
    law = graph_law(d, parents, alpha)
    assert (law.tokens == X).all()
    np.testing.assert_allclose(p, law.prob, rtol=1e-12, atol=0)
    y = theory.soft_targets(X, d, parents, alpha)
    np.testing.assert_allclose(y, graph_posterior_mean(X, d, parents, [len(parents)], alpha), rtol=1e-12)
    lv = theory.bayes_level(d, parents, alpha)
    assert 0 < lv < np.log(d)


def _beta_nodes(alpha, n=60):
    t, w = roots_jacobi(n, alpha - 1, alpha - 1)  # the Beta(alpha, alpha) weight on u = (1 + t) / 2
    return (1 + t) / 2, w / w.sum()


def _mi(J):
    a, b = J.sum(1, keepdims=True), J.sum(0, keepdims=True)
    m = J > 0
    return float((J[m] * np.log(J[m] / (a * b)[m])).sum())


def test_conditional_mi_against_quadrature_over_pi():
    """d = 2, the chain 1 -> 2 -> 3: I(x2; x1 | pi) = I of one transition from a uniform x1,
    I(x3; x1 | pi) of pi^2, I(x3; x2 | pi) of pi from x2's marginal; E over the two Beta rows by a
    60 x 60 Gauss-Jacobi rule; the Monte Carlo of theory within 5 standard errors."""
    alpha = 0.5
    u, w = _beta_nodes(alpha)
    ref = np.zeros((3, 3))
    for ua, wa in zip(u, w):
        for ub, wb in zip(u, w):
            pi = np.array([[1 - ua, ua], [ub, 1 - ub]])
            m1 = np.full(2, 0.5)
            m2 = m1 @ pi
            ref[1, 0] += wa * wb * _mi(m1[:, None] * pi)            # (x1, x2)
            ref[2, 0] += wa * wb * _mi(m1[:, None] * (pi @ pi))     # (x1, x3)
            ref[2, 1] += wa * wb * _mi(m2[:, None] * pi)            # (x2, x3)
    r = theory.conditional_mi(2, [[], [1], [2]], alpha, 40_000, seed=5)
    for i, j in ((1, 0), (2, 0), (2, 1)):
        assert abs(r["mi"][i, j] - ref[i, j]) < 5 * r["mi_se"][i, j], (i, j, r["mi"][i, j], ref[i, j], r["mi_se"][i, j])
    assert r["dpi_violation"] <= 1e-12
    assert ref[2, 1] > ref[2, 0]  # the data-processing inequality in the reference too


def test_layer1_attention_equals_the_engine_kernel():
    desc = claims._load(TOML, steps=1)
    rng = np.random.default_rng(2)
    theta = 0.7 * rng.standard_normal(desc.net.size)
    T = desc.net.T
    mine = theory.layer1_attention(desc.net.unpack(theta)["layer1.head1.A"], desc.x[:, :T], desc.p, desc.net.S)
    _, cache = twolayer_net.forward(theta, desc.net, desc.x)
    al = cache["layers"][0][1][0]["al"]  # (n, T, lags 0..T-1): position t attends to t - lag
    eng = np.zeros((T, T))
    for t in range(T):
        for lag in range(t + 1):
            eng[t, t - lag] = float(desc.p @ al[:, t, lag])
    np.testing.assert_allclose(mine, eng, atol=1e-13)


def _oracle(desc):
    from meanfield.engine.twolayer_oracle import Oracle

    net = desc.net
    return Oracle({"S": net.S, "L": net.L, "readout": net.readout, "selector": net.selector,
                   "layers": [[dict(score=h.score, lags=h.lags, softmax=h.softmax, normalise=h.normalise,
                                    value=h.value) for h in hs] for hs in net.layers]})


def test_initial_gradient_equals_autograd_of_the_explicit_network():
    torch = pytest.importorskip("torch")
    desc = claims._load(TOML, steps=1)
    net = desc.net
    theta = np.zeros(net.size)
    theory.induction_init(net.unpack(theta), net.S, net.T, claims.BETA0, claims.GAMMA0)
    orc = _oracle(desc)
    params = orc.from_flat(theta)
    loss = orc.loss(params, desc.x, desc.y, desc.p)
    g = torch.autograd.grad(loss, [params["layer1.head1.A"]])[0].numpy()
    G = claims.initial_gradient(desc)
    scale = np.abs(G).max()
    assert scale > 0
    np.testing.assert_allclose(G, -g[net.S:, net.S:], atol=1e-10 * scale)


def test_shipped_description_equals_the_explicit_torch_network():
    """nichani.toml's run (the engine's GD map on the exact law) equals the explicit network over 200 steps
    (issue 24's acceptance length)."""
    pytest.importorskip("torch")
    desc = claims._load(TOML, steps=200)
    r = claims.twolayer_run.run(desc)
    ref, rls = _oracle(desc).gd(desc.theta0, desc.x, desc.y, desc.p, desc.training.eta, 200)
    assert int(r["step"][-1]) == 200
    assert np.abs(np.asarray(r["theta"])[-1] - ref).max() <= 1e-10
    assert abs(float(r.loss[0]) - float(rls[0])) <= 1e-12


def test_recovery_claim_can_fail(tmp_path):
    """One GD step from zero moves only the read-out (the attention stays uniform: no parent wins), and a
    trained first layer read against a wrong graph is not that graph."""
    desc = claims._load(TOML, steps=1)
    r = claims.twolayer_run.run(desc)
    assert not claims.recovery(desc, np.asarray(r["theta"])[-1])["recovered"]
    desc = claims._load(TOML, steps=300)
    th = np.asarray(claims.twolayer_run.run(desc)["theta"])[-1]
    assert claims.recovery(desc, th)["recovered"]
    wrong = claims._load(TOML, {"parents": [[], [1], [2], [1], [3], [], [6]]}, steps=1)  # 3's parent is 2, 4's is 1
    assert not claims.recovery(wrong, th)["recovered"]


def test_quick_check_from_the_command_line(tmp_path):
    out = tmp_path / "chk"
    r = subprocess.run([sys.executable, "-m", "meanfield", "model", "check", "nichani", "--quick", "--out", str(out)],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    rep = json.loads((out / "report.json").read_text())
    by = {c["name"]: c for c in rep["claims"]}
    assert set(by) == {"layer1_recovers_graph", "law_and_bayes_floor", "mi_parent_largest",
                       "initial_gradient_parent_largest", "initial_gradient_ranks_by_mi",
                       "initial_gradient_orders_ancestors_by_mi"}
    assert {k: c["source"] for k, c in by.items()} == {
        "layer1_recovers_graph": "shown", "law_and_bayes_floor": "proved", "mi_parent_largest": "proved",
        "initial_gradient_parent_largest": "expected", "initial_gradient_ranks_by_mi": "expected",
        "initial_gradient_orders_ancestors_by_mi": "expected"}
    rows = next(iter(by["layer1_recovers_graph"]["numbers"].values()))["rows"]
    assert [(x["position"], x["parent"]) for x in rows] == [(2, 1), (3, 1), (4, 2), (5, 3)]
    assert by["law_and_bayes_floor"]["status"] == "PASS"
    assert (out / "report.md").exists() and (out / "nichani_graph.png").exists()


@pytest.mark.parametrize("old,new,field", [('loss = "soft"', 'loss = "nll"', "model.loss"),
                                           ("[[], [1], [1], [2], [3], [], [6]]", "[[], [1], [1, 2], [2], [3], [], [6]]",
                                            "data.parents"),
                                           ("[[], [1], [1], [2], [3], [], [6]]", "[[], [1], [1], [2], [3], [], [5]]",
                                            "data.parents"),
                                           ('value = "stream"', 'value = "token"', "layers")])
def test_check_refuses_a_description_the_claims_do_not_describe(tmp_path, old, new, field):
    bad = tmp_path / "nichani.toml"
    text = TOML.read_text()
    assert old in text
    bad.write_text(text.replace(old, new, 1))
    r = subprocess.run([sys.executable, "-m", "meanfield", "model", "check", str(bad), "--quick", "--out",
                        str(tmp_path / "o")], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0] and "Traceback" not in r.stderr, r.stderr
    assert not any((tmp_path / "o").glob("*"))  # nothing written


def test_ancestor_ordering_fails_on_the_binary_chain():
    """The full check's chain (d = 2, alpha = 0.1): the parent holds the largest initial gradient entry at every
    position, but along the path to the root the entries alternate in sign while the MI falls (the claim can fail)."""
    desc = claims._load(TOML, claims.CHAIN, steps=1)
    gm = claims.gradient_vs_mi(desc, 2000)
    rows = {r["position"]: r for r in gm["rows"]}
    assert all(r["parent_largest"] for r in gm["rows"])
    r = rows[9]
    assert r["ancestors"] == [8, 7, 6, 5, 4, 3, 2, 1]
    assert all(np.diff(r["mi_ancestors"]) < 0)  # the data-processing inequality along the chain
    signs = np.sign(r["gradient_ancestors"])
    assert (signs == [(-1) ** k for k in range(8)]).all()  # odd distance > 0, even distance < 0
    assert not r["ancestors_in_mi_order"]
