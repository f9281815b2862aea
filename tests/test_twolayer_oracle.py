"""The generic two-layer network (meanfield.engine.twolayer_net, numpy, explicit backpropagation)
against the explicit network (meanfield.engine.twolayer_oracle, torch float64, autograd, no shared
code): loss and gradient to 1e-12 and 200 full-batch GD steps to 1e-10, for random descriptions
(1-2 heads per layer, rpe / bilinear / rpe+bilinear scores, softmax and linear attention,
normalisation, token / stream values, both read-outs, both losses), d = 2..3, L = 4..6, on the exact
law of the in-context Markov chain (meanfield.engine.twolayer) and on a fixed data set."""

from __future__ import annotations

import doctest

import numpy as np
import pytest

from meanfield.core.errors import ConfigError
from meanfield.engine import twolayer_net
from meanfield.engine.twolayer import markov_law, posterior_mean
from meanfield.engine.twolayer_net import Head, Net, gd, loss_grad

torch = pytest.importorskip("torch")
from meanfield.engine.twolayer_oracle import Oracle  # noqa: E402


def spec_of(net: Net) -> dict:
    return {"S": net.S, "L": net.L, "readout": net.readout, "selector": net.selector,
            "layers": [[dict(score=h.score, lags=h.lags, softmax=h.softmax, normalise=h.normalise, value=h.value,
                             query=list(h.query), key=list(h.key)) for h in hs] for hs in net.layers]}


def random_net(rng) -> Net:
    d, L = int(rng.integers(2, 4)), int(rng.integers(4, 7))
    readout = ["linear", "attention"][int(rng.integers(2))]
    layers = []
    for k in range(2):
        heads = []
        for _ in range(int(rng.integers(1, 3))):
            score = ["rpe", "bilinear", "rpe+bilinear"][int(rng.integers(3))]
            first = int(rng.integers(0, 3))
            lags = (first, first + int(rng.integers(0, 3))) if "rpe" in score or rng.random() < 0.3 else None
            heads.append(Head(score, lags, softmax=bool(rng.random() < 0.7), normalise=bool(rng.random() < 0.5),
                              value=["stream", "token"][int(rng.integers(2))]))
        layers.append(tuple(heads))
    sel = int(rng.integers(1, 3)) if readout == "attention" else None
    return Net(d, L, tuple(layers), selector=sel, readout=readout)


def data(net: Net, loss: str, alpha=0.5, pa=(1,)):
    d, L = net.S, net.L
    if loss == "soft":
        short = markov_law(d, L - 1, pa, alpha)  # x_1..x_L and the posterior mean of the next token
        return short.tokens, posterior_mean(short.tokens, d, pa, alpha), short.prob
    law = markov_law(d, L, pa, alpha)
    return law.tokens, np.eye(d)[law.tokens[:, L]], law.prob


def oracle_grad(o, theta, x, y, p):
    ps = o.from_flat(theta)
    tl = o.loss(ps, x, y, p)
    gs = torch.autograd.grad(tl, list(ps.values()), allow_unused=True)
    return float(tl.detach()), np.concatenate([(g.numpy().ravel() if g is not None else np.zeros(t.numel()))
                                               for g, t in zip(gs, ps.values())])


# the largest random draws (seeds 0, 4, 6: d = 3, L = 6 with two-head layers) take a minute each on 2 cores
@pytest.mark.parametrize("seed", [pytest.param(s, marks=pytest.mark.slow) if s in (0, 4, 6) else s for s in range(8)])
def test_random_descriptions_loss_gradient_and_200_steps(seed):
    rng = np.random.default_rng(100 + seed)
    net = random_net(rng)
    loss = ["nll", "soft"][seed % 2]
    print(seed, net, loss)
    x, y, p = data(net, loss)
    o = Oracle(spec_of(net))
    theta0 = rng.normal(0, 0.3, net.size)
    l, g = loss_grad(theta0, net, x, y, p)
    tl, tg = oracle_grad(o, theta0, x, y, p)
    assert abs(l - tl) <= 1e-12 * max(1.0, abs(tl)) and np.abs(g - tg).max() <= 1e-12
    eta = 0.2
    th, ls = gd(theta0, net, x, y, p, eta, 200)
    ref, rls = o.gd(theta0, x, y, p, eta, 200)
    assert np.abs(th - ref).max() <= 1e-10, (net, loss)
    assert np.abs(ls - rls).max() <= 1e-10 * max(1.0, np.abs(rls).max())
    assert np.isfinite(th).all() and ls[-1] <= ls[0] + 1e-12


def test_fixed_data_set_with_a_stage_mask_and_block_step_sizes():
    rng = np.random.default_rng(7)
    net = Net(3, 5, ((Head("rpe", (1, 2), normalise=True, value="token"), Head("rpe", (2, 3), normalise=True,
                                                                               value="token")),),
              selector=2, readout="attention")
    x = rng.integers(0, 3, size=(40, 6))
    y, p = np.eye(3)[x[:, 5]], np.full(40, 1 / 40)
    theta0 = np.concatenate([rng.normal(0, 0.3, net.size - 1), [1.0]])
    train = np.zeros(net.size)
    train[net.offset("selector.c"):] = 1.0  # only the selector and the read-out move
    eta = np.where(np.arange(net.size) >= net.offset("readout.a"), 0.5, 0.1)
    th, _ = gd(theta0, net, x, y, p, eta, 200, train)
    ref, _ = Oracle(spec_of(net)).gd(theta0, x, y, p, eta, 200, train)
    assert np.abs(th - ref).max() <= 1e-10
    assert (th[:net.offset("selector.c")] == theta0[:net.offset("selector.c")]).all()


def test_one_layer_stream_model_is_the_disentangled_model():
    # the first block model (meanfield.engine.disentangled) is the special case: bilinear softmax heads, stream values
    from meanfield.engine.disentangled import Arch
    from meanfield.engine.disentangled import loss_grad as dl

    x, y, p = data(Net(2, 4, ((Head(),),)), "soft")
    net = Net(2, 4, ((Head(),), (Head(), Head())))
    theta = np.random.default_rng(2).normal(0, 0.3, net.size)
    assert np.abs(np.array(loss_grad(theta, net, x, y, p)[1]) - dl(theta, Arch(2, 4, (1, 2)), x, y, p)[1]).max() <= 1e-12


def test_bad_blocks_are_one_line_refusals():
    cases = [(lambda: Head("conv"), "score:"), (lambda: Head("rpe"), "lags:"), (lambda: Head("rpe", (2, 1)), "lags:"),
             (lambda: Head(value="hidden"), "value:"), (lambda: Net(2, 3, ((Head(),),), readout="attention"), "selector:"),
             (lambda: Net(2, 3, ((Head(),),), selector=1), "selector:"), (lambda: Net(2, 3, ()), "layers:"),
             (lambda: Net(2, 3, ((Head("rpe", (5, 6)),),)), "layers[0].heads[0].lags:"),
             (lambda: Net(0, 3, ((Head(),),)), "S:")]
    for make, field in cases:
        with pytest.raises(ConfigError) as e:
            make()
        assert str(e.value).startswith(field) and "\n" not in str(e.value)
    net = Net(2, 3, ((Head(),),))
    with pytest.raises(ConfigError, match="^tokens:"):
        loss_grad(np.zeros(net.size), net, np.full((2, 3), 2), np.ones((2, 2)), np.ones(2))


def test_doctests():
    from meanfield.engine import twolayer_oracle

    for mod in (twolayer_net, twolayer_oracle):
        r = doctest.testmod(mod)
        assert r.failed == 0 and r.attempted > 0


def _induction_like(d=3, L=6):
    return Net(d, L, ((Head("rpe", (1, 2), normalise=True, value="token"), Head("rpe", (2, 3), normalise=True,
                                                                               value="token")),),
               selector=2, readout="attention")


@pytest.mark.parametrize("path", ["direct", "pattern"])
def test_official_cross_entropy_and_another_floor_against_the_explicit_network(path):
    # ce = softmax: torch's own cross_entropy on y_hat taken as logits (the official induction code's loss);
    # log_cap: a y_hat floor of 1e-3 clips the worst sequences (their terms have no gradient), on both paths
    import dataclasses

    rng = np.random.default_rng(11)
    base = _induction_like()
    x = rng.integers(0, 3, size=(60, 7))
    y, p = np.eye(3)[x[:, 6]], np.full(60, 1 / 60)
    theta0 = np.concatenate([rng.normal(0, 0.8, base.size - 1), [2.0]])
    for net, spec in [(dataclasses.replace(base, ce="softmax"), {"ce": "softmax"}),
                      (dataclasses.replace(base, log_cap=-np.log(1e-3)), {"log_cap": -np.log(1e-3)})]:
        o = Oracle({**spec_of(net), **spec})
        l, g = loss_grad(theta0, net, x, y, p, path=path)
        tl, tg = oracle_grad(o, theta0, x, y, p)
        assert abs(l - tl) <= 1e-12 * max(1.0, abs(tl)) and np.abs(g - tg).max() <= 1e-12, spec
        assert abs(twolayer_net.loss_only(theta0, net, x, y, p, path=path) - tl) <= 1e-12 * max(1.0, abs(tl))
        th, _ = gd(theta0, net, x, y, p, 0.3, 200)
        ref, _ = o.gd(theta0, x, y, p, 0.3, 200)
        assert np.abs(th - ref).max() <= 1e-10, spec
    # the floor bites: some sequence is clipped at the start, so the two losses differ
    capped = dataclasses.replace(base, log_cap=-np.log(1e-3))
    assert twolayer_net.loss_only(theta0, capped, x, y, p) < twolayer_net.loss_only(theta0, base, x, y, p)
    with pytest.raises(ConfigError, match="^ce:"):
        dataclasses.replace(base, ce="hinge")
    with pytest.raises(ConfigError, match="^log_cap:"):
        dataclasses.replace(base, log_cap=0.0)


@pytest.mark.parametrize("query,key", [(("token",), ("layer1.head1",)), (("token", "position"), ("token",)),
                                       ("stream", ("layer1.head2", "position"))])
def test_a_restricted_query_and_key_against_the_explicit_network(query, key):
    # score X_t[q]^T A[q, k] X_j[k]: the explicit network indexes those columns of the stream and of A (no mask);
    # the engine masks A. Loss, gradient, 200 GD steps; the entries outside q x k never move
    net = Net(3, 5, ((Head("rpe", (1, 2), value="token", normalise=True), Head("rpe", (1, 1), value="token")),
                     (Head("bilinear", query=query, key=key, value="token", normalise=True),)),
              selector=2, readout="attention")
    x, y, p = data(net, "nll")
    rng = np.random.default_rng(len(key))
    theta0 = rng.normal(0, 0.4, net.size)
    o = Oracle(spec_of(net))
    l, g = loss_grad(theta0, net, x, y, p)
    tl, tg = oracle_grad(o, theta0, x, y, p)
    assert abs(l - tl) <= 1e-12 * max(1.0, abs(tl)) and np.abs(g - tg).max() <= 1e-12
    th, _ = gd(theta0, net, x, y, p, 0.3, 200)
    ref, _ = o.gd(theta0, x, y, p, 0.3, 200)
    assert np.abs(th - ref).max() <= 1e-10
    i = net.offset("layer2.head1.A")
    D = net.widths[1]
    mk = net.score_mask(1, net.layers[1][0]).ravel().astype(bool)
    A0, A1 = theta0[i:i + D * D], th[i:i + D * D]
    assert np.array_equal(A0[~mk], A1[~mk]) and np.abs(A1[mk] - A0[mk]).max() > 1e-3


def test_query_and_key_refusals():
    for make, field in [(lambda: Net(2, 3, ((Head(key=("layer1.head1",)),),)), "layers[0].heads[0].key:"),
                        (lambda: Net(2, 3, ((Head("rpe", (1, 1), query=("token",)),),)), "query:"),
                        (lambda: Net(2, 3, ((Head(),), (Head(key=("layer2.head1",)),))), "layers[1].heads[0].key:"),
                        (lambda: Head(key=("token", "token")), "key:")]:
        with pytest.raises(ConfigError) as e:
            make()
        assert str(e.value).startswith(field) and "\n" not in str(e.value), str(e.value)
