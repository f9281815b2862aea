"""The pattern path of the generic two-layer network (meanfield.engine.twolayer_pattern) against the
direct path (per-position heads, meanfield.engine.twolayer_kernels) and the explicit network
(meanfield.engine.twolayer_oracle, torch float64, autograd, no shared code): loss and gradient to 1e-12
on random descriptions covering every combination the pattern path accepts (rpe token heads, softmax
and linear attention, normalised or not, first lag 0 with the query's blank token, one or two layers,
mixed with bilinear / stream heads, both read-outs, the fused pattern read-out with subsets of size
0..3, the log(0) guard), and its fallbacks and refusals."""

from __future__ import annotations

import doctest

import numpy as np
import pytest

from meanfield.core.errors import ConfigError
from meanfield.engine import twolayer_pattern as tp
from meanfield.engine.twolayer_net import Head, Net, gd, loss_grad, loss_only, prepare


def _pattern_head(rng, T):
    first = int(rng.integers(0, min(3, T)))
    return Head("rpe", (first, first + int(rng.integers(0, 3))), softmax=bool(rng.random() < 0.7),
                normalise=bool(rng.random() < 0.6), value="token")


def _other_head(rng):
    score = ["bilinear", "rpe+bilinear", "rpe"][int(rng.integers(3))]
    first = int(rng.integers(0, 3))
    lags = (first, first + int(rng.integers(0, 3))) if "rpe" in score else None
    return Head(score, lags, softmax=bool(rng.random() < 0.7), normalise=bool(rng.random() < 0.5),
                value="stream" if score == "rpe" else ["stream", "token"][int(rng.integers(2))])


def random_net(rng, fused: bool) -> Net:
    """A random network with pattern heads; ``fused``: every head a pattern head and the attention read-out."""
    d, L = int(rng.integers(2, 4)), int(rng.integers(4, 8))
    readout = "attention" if fused else ["linear", "attention"][int(rng.integers(2))]
    T = L + 1 if readout == "attention" else L
    layers = []
    for k in range(int(rng.integers(1, 3))):
        heads = [_pattern_head(rng, T) if fused or rng.random() < 0.6 else _other_head(rng)
                 for _ in range(int(rng.integers(1, 4 if fused else 3)))]
        layers.append(tuple(heads))
    H = sum(len(hs) for hs in layers)
    sel = int(rng.integers(1, min(H, 3) + 1)) if readout == "attention" else None
    net = Net(d, L, tuple(layers), selector=sel, readout=readout)
    if not fused and not any(tp.accepts(net, hd) for _, _, hd in net.heads):
        return random_net(rng, fused)
    return net


def _data(rng, net, n=40):
    x = rng.integers(0, net.S, size=(n, net.L + 1))
    y = np.eye(net.S)[x[:, net.L]]
    p = rng.random(n)
    return x, y, p / p.sum()


def _close(a, b):
    (la, ga), (lb, gb) = a, b
    return abs(la - lb) <= 1e-12 * max(1.0, abs(lb)) and np.abs(ga - gb).max() <= 1e-12


@pytest.mark.parametrize("seed", range(24))
def test_pattern_equals_direct_on_random_descriptions(seed):
    rng = np.random.default_rng(500 + seed)
    fused = seed % 2 == 0
    net = random_net(rng, fused)
    x, y, p = _data(rng, net)
    prep = prepare(net, x, "pattern")
    assert prep.heads and (len(prep.heads) == len(net.heads) or not fused)
    for _ in range(2):
        theta = rng.normal(0, 0.8, net.size)
        direct = loss_grad(theta, net, x, y, p, path="direct")
        assert _close(loss_grad(theta, net, x, y, p, prep=prep), direct), (net, seed)
        assert _close(loss_grad(theta, net, x, y, p, path="pattern"), direct)
        assert _close(loss_grad(theta, net, x, y, p), direct)  # auto: pattern where it applies
        assert abs(loss_only(theta, net, x, y, p, prep=prep) - direct[0]) <= 1e-12 * max(1.0, abs(direct[0]))


def test_the_fused_read_out_with_clipped_sequences_and_a_subset_of_three_heads():
    rng = np.random.default_rng(7)
    heads = (Head("rpe", (1, 2), normalise=True, value="token"), Head("rpe", (0, 1), value="token"),
             Head("rpe", (2, 3), softmax=False, normalise=True, value="token"))
    net = Net(3, 6, (heads,), selector=3, readout="attention")
    x = rng.integers(0, 3, size=(60, 7))
    x[:10, :6] = 0  # the target never occurs in these contexts when it is not 0: the log(0) guard clips them
    x[:10, 6] = 1
    y, p = np.eye(3)[x[:, 6]], np.full(60, 1 / 60)
    prep = prepare(net, x)
    assert prep.heads == (0, 1, 2) and len(net.subsets) == 8  # {}, 3 singletons, 3 pairs, the triple
    theta = rng.normal(0, 0.5, net.size)
    direct = loss_grad(theta, net, x, y, p, path="direct")
    assert direct[0] > 10 * tp.math.log(1e300) / 60 * 0.9  # the ten clipped sequences count log_cap each
    assert _close(loss_grad(theta, net, x, y, p, prep=prep), direct)


def _oracle(net, theta, x, y, p):
    torch = pytest.importorskip("torch")
    from meanfield.engine.twolayer_oracle import Oracle

    o = Oracle({"S": net.S, "L": net.L, "readout": net.readout, "selector": net.selector,
                "layers": [[dict(score=h.score, lags=h.lags, softmax=h.softmax, normalise=h.normalise, value=h.value)
                            for h in hs] for hs in net.layers]})
    ps = o.from_flat(theta)
    tl = o.loss(ps, x, y, p)
    gs = torch.autograd.grad(tl, list(ps.values()), allow_unused=True)
    return float(tl.detach()), np.concatenate([(g.numpy().ravel() if g is not None else np.zeros(t.numel()))
                                               for g, t in zip(gs, ps.values())])


@pytest.mark.parametrize("seed", range(8))
def test_pattern_equals_the_explicit_network(seed):
    rng = np.random.default_rng(900 + seed)
    net = random_net(rng, fused=seed % 2 == 0)
    x, y, p = _data(rng, net, n=15)
    theta = rng.normal(0, 0.5, net.size)
    assert _close(loss_grad(theta, net, x, y, p, path="pattern"), _oracle(net, theta, x, y, p)), net


def test_gd_on_the_pattern_path_equals_the_direct_path():
    rng = np.random.default_rng(3)
    net = random_net(rng, fused=True)
    x, y, p = _data(rng, net)
    theta0 = rng.normal(0, 0.3, net.size)
    a, la = gd(theta0, net, x, y, p, 0.3, 30, path="pattern")
    b, lb = gd(theta0, net, x, y, p, 0.3, 30, path="direct")
    assert np.abs(a - b).max() <= 1e-12 and np.abs(la - lb).max() <= 1e-12


def test_fallbacks_and_refusals():
    x = np.zeros((3, 7), dtype=np.int64)
    big = Net(3, 6, ((Head("rpe", (1, 5), value="token"), Head("rpe", (1, 2), value="token")),))
    assert tp.n_patterns(big, big.layers[0][0]) == 364 and prepare(big, x).heads == (0, 1)
    huge = Net(4, 6, ((Head("rpe", (1, 5), value="token"), Head("rpe", (1, 2), value="token")),))
    assert tp.n_patterns(huge, huge.layers[0][0]) == 1365 > tp.PATTERN_MAX
    assert prepare(huge, x).heads == (1,)  # auto: the large window falls back to the direct path
    with pytest.raises(ConfigError, match="path: 'pattern' needs at most 512"):
        prepare(huge, x, "pattern")
    none = Net(3, 6, ((Head("bilinear"), Head("rpe", (1, 2), value="stream")),))
    assert prepare(none, x).heads == () and prepare(big, x, "direct").heads == ()
    with pytest.raises(ConfigError, match="path: 'pattern' applies to rpe heads with a token value"):
        prepare(none, x, "pattern")
    with pytest.raises(ConfigError, match="path: one of auto, direct, pattern"):
        loss_grad(np.zeros(big.size), big, x, np.ones((3, 3)) / 3, np.ones(3), path="fast")
    with pytest.raises(ConfigError, match="prep: prepared for 3 sequences; got 2"):
        loss_grad(np.zeros(big.size), big, x[:2], np.ones((2, 3)) / 3, np.ones(2), prep=prepare(big, x))
    # a huge window is exact on the direct path: auto equals direct
    rng = np.random.default_rng(1)
    xr = rng.integers(0, 4, size=(20, 7))
    yr, pr = np.eye(4)[xr[:, 6]], np.full(20, 0.05)
    theta = rng.normal(0, 0.3, huge.size)
    assert _close(loss_grad(theta, huge, xr, yr, pr), loss_grad(theta, huge, xr, yr, pr, path="direct"))


def test_doctests():
    import meanfield.engine.twolayer_pattern as mod

    assert doctest.testmod(mod).failed == 0


def test_the_chunked_read_out_on_threads_equals_the_direct_path(monkeypatch):
    # the fused read-out cuts the sequences into chunks run on threads (each with its own d loss / d G);
    # with chunks of 7 sequences: equal to the per-position direct path to 1e-12, and bit for bit the same
    # whatever the thread count (the cut depends on the sizes only)
    import numba

    from meanfield.engine import twolayer_pattern as tp
    from meanfield.engine.twolayer_net import Head, Net, loss_grad

    net = Net(3, 9, ((Head("rpe", (1, 2), value="token", normalise=True), Head("rpe", (1, 3), value="token")),),
              selector=2, readout="attention")
    rng = np.random.default_rng(8)
    x = rng.integers(0, 3, size=(61, 10))
    y, p = np.eye(3)[x[:, 9]], rng.dirichlet(np.ones(61))
    theta = rng.normal(0, 0.5, net.size)
    ref_l, ref_g = loss_grad(theta, net, x, y, p, path="direct")
    monkeypatch.setattr(tp, "MIN_CHUNK", 7)
    assert len(tp.chunks(61, 10)) == 8
    out = {}
    for threads in (1, 2):
        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
        out[threads] = loss_grad(theta, net, x, y, p, path="pattern")
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    l, g = out[1]
    assert abs(l - ref_l) <= 1e-12 and np.abs(g - ref_g).max() <= 1e-12
    assert out[2][0] == l and np.array_equal(out[2][1], g)
