"""The disentangled two-layer attention model (meanfield.engine.disentangled) against an
independent explicit network (torch float64, autograd for the gradient), on the exact
population of an in-context Markov chain (meanfield.engine.twolayer): the loss, the
gradient, and 200 full-batch GD steps to 1e-10."""

from __future__ import annotations

import doctest

import numpy as np
import pytest

from meanfield.core.errors import ConfigError
from meanfield.engine import disentangled
from meanfield.engine.disentangled import Arch, gd, loss_grad, unpack
from meanfield.engine.twolayer import markov_law, population_mean, posterior_mean

torch = pytest.importorskip("torch")


def _torch_loss(params, S, T, heads, x, y, p):
    """The explicit network, written from the model's definition (no code shared)."""
    n = x.shape[0]
    tok = torch.nn.functional.one_hot(torch.as_tensor(x), S).double()
    pos = torch.eye(T, dtype=torch.float64).expand(n, T, T)
    X = torch.cat([tok, pos], dim=2)
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    i = 0
    for k in heads:
        outs = []
        for _ in range(k):
            Z = X @ params[i] @ X.transpose(1, 2)
            i += 1
            Z = Z.masked_fill(~causal, float("-inf"))
            outs.append(torch.softmax(Z, dim=2) @ X)
        X = torch.cat([X] + outs, dim=2)
    logf = torch.log_softmax(X[:, -1, :] @ params[-1], dim=1)
    return -(torch.as_tensor(p) * (torch.as_tensor(y) * logf).sum(dim=1)).sum()


def _exact_population(d, L, pa, alpha):
    short = markov_law(d, L - 1, pa, alpha)  # x_1..x_L
    return short.tokens, posterior_mean(short.tokens, d, pa, alpha), short.prob


@pytest.mark.parametrize("heads", [(1, 1), (2, 1), (1,)])
def test_loss_and_gradient_equal_the_explicit_network(heads):
    d, L = 2, 4
    x, y, p = _exact_population(d, L, (1,), 0.5)
    arch = Arch(S=d, T=L, heads=heads)
    rng = np.random.default_rng(3)
    theta = rng.normal(0, 0.3, arch.size)
    loss, grad = loss_grad(theta, arch, x, y, p)
    params = [torch.tensor(a.copy(), requires_grad=True) for a in unpack(theta, arch)]
    tl = _torch_loss(params, d, L, heads, x, y, p)
    tl.backward()
    tg = np.concatenate([t.grad.numpy().ravel() for t in params])
    assert abs(loss - tl.item()) <= 1e-12
    assert np.abs(grad - tg).max() <= 1e-12


def test_soft_target_loss_is_the_population_next_token_loss():
    # sum_x p(x_1..x_L) CE(posterior mean, f) = E[-log f(x_1..x_L)[x_{L+1}]] over the law of x_1..x_{L+1}
    d, L, pa, alpha = 3, 3, (1,), 0.7
    x, y, p = _exact_population(d, L, pa, alpha)
    arch = Arch(S=d, T=L, heads=(1, 1))
    theta = np.random.default_rng(5).normal(0, 0.5, arch.size)
    loss, _ = loss_grad(theta, arch, x, y, p)
    full = markov_law(d, L, pa, alpha)

    def nll(tokens):
        f, _ = disentangled.forward(theta, arch, tokens[:, :L])
        return -np.log(f[np.arange(len(tokens)), tokens[:, L]])

    assert abs(loss - population_mean(nll, full)) <= 1e-12


def test_200_gd_steps_equal_the_explicit_network():
    d, L, heads, eta, steps = 2, 4, (1, 1), 0.5, 200
    x, y, p = _exact_population(d, L, (1,), 0.5)
    arch = Arch(S=d, T=L, heads=heads)
    theta0 = np.random.default_rng(11).normal(0, 0.1, arch.size)
    theta, losses = gd(theta0, arch, x, y, p, eta, steps)
    params = [torch.tensor(a.copy(), requires_grad=True) for a in unpack(theta0, arch)]
    for _ in range(steps):
        tl = _torch_loss(params, d, L, heads, x, y, p)
        gs = torch.autograd.grad(tl, params)
        with torch.no_grad():
            for a, g in zip(params, gs):
                a -= eta * g
    ref = np.concatenate([t.detach().numpy().ravel() for t in params])
    assert np.abs(theta - ref).max() <= 1e-10
    assert losses[-1] < losses[0]


def test_bad_sizes_are_one_line_refusals():
    for kwargs, field in [(dict(S=0, T=3), "S:"), (dict(S=2, T=1.5), "T:"), (dict(S=2, T=3, heads=()), "heads:"),
                          (dict(S=2, T=3, heads=(0,)), "heads:")]:
        with pytest.raises(ConfigError) as e:
            Arch(**kwargs)
        assert str(e.value).startswith(field) and "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="^tokens:"):
        disentangled.forward(np.zeros(Arch(2, 3).size), Arch(2, 3), np.zeros((2, 4), dtype=int))


def test_doctests():
    r = doctest.testmod(disentangled)
    assert r.failed == 0 and r.attempted > 0
