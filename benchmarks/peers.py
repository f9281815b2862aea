"""The peers of ``make bench``: what a user would write instead of the package.

Each peer is written the way a JAX or PyTorch user would write it from the
paper, independently of the package's kernels (only the sample set, the
initial reduced state and the step size are shared):

* :func:`jax_reduced` -- the reduced GD map of the mixture in JAX: the loss of
  the reduced state (S, w~) per head, its gradient by ``jax.grad``, then the
  exact map S' = S - eta (A G + G B) + eta^2 G S^T G (and A, B alike), under
  ``jax.jit``; ``lax.scan`` over steps, ``jax.vmap`` over trajectories;
* :func:`jax_network` -- the explicit width-m network (W_K, W_Q in (m, d),
  a value vector w in (d,), per head) trained by GD with ``jax.grad``,
  ``lax.scan`` over steps and ``jax.vmap`` over trajectories;
* :func:`torch_network` -- the same network in eager PyTorch (autograd, one
  step a Python call).

ReLU'(0) is the package's default 1 (a pre-activation sits exactly at the kink
at the infinite-width init with zero neurons), written as a ``custom_jvp``.
A missing library raises :class:`Skipped` (the bench reports "skipped").
"""

from __future__ import annotations

import numpy as np


class Skipped(Exception):
    """A peer whose library is not installed (reported as skipped)."""


def _jax():
    try:
        import jax

        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp
    except Exception as e:  # pragma: no cover - depends on the environment
        raise Skipped(f"jax not installed ({type(e).__name__})") from None
    return jax, jnp


def _torch():
    try:
        import torch
    except Exception as e:  # pragma: no cover
        raise Skipped(f"torch not installed ({type(e).__name__})") from None
    return torch


def _tokens(s):
    """Sample set arrays: feature index (n, L), sign (n, L), label (n,), weight (n,)."""
    return np.asarray(s.idx), np.asarray(s.sgn, float), np.asarray(s.y, float), np.asarray(s.weight, float)


def jax_reduced(s, r0: float = 1.0):
    """(step, run, run_batch): jitted functions of the reduced state (flat,
    the package's layout: S, A, B (2, P, P), w (2, P)). ``run(y, eta, n)`` ->
    (y, loss) after n steps (lax.scan); ``run_batch(Y, etas, n)`` its vmap."""
    jax, jnp = _jax()
    idx, sgn, lab, weight = (jnp.asarray(a) for a in _tokens(s))
    P = s.P
    n2 = P * P

    @jax.custom_jvp
    def relu(u):
        return jnp.where(u > 0, u, 0.0)

    @relu.defjvp
    def _relu_jvp(primals, tangents):
        (u,), (du,) = primals, tangents
        return relu(u), jnp.where(u > 0, 1.0, jnp.where(u == 0, r0, 0.0)) * du

    def loss_fn(S, w):
        # logits[h, n, i, l] = sgn_i sgn_l S[h, idx_i, idx_l]; softmax over keys i; u = mean over queries l
        Sg = S[:, idx[:, :, None], idx[:, None, :]] * (sgn[:, :, None] * sgn[:, None, :])[None]
        p = jax.nn.softmax(Sg, axis=2)
        v = w[:, idx] * sgn[None]  # (2, n, L)
        u = jnp.einsum("hnil,hni->hn", p, v) / idx.shape[1]
        f = relu(u[0]) - relu(u[1])
        return jnp.sum(weight * jnp.logaddexp(0.0, -lab * f))

    grad = jax.value_and_grad(loss_fn, argnums=(0, 1))

    def step(y, eta):
        S = y[:2 * n2].reshape(2, P, P)
        A = y[2 * n2:4 * n2].reshape(2, P, P)
        B = y[4 * n2:6 * n2].reshape(2, P, P)
        w = y[6 * n2:].reshape(2, P)
        loss, (G, dw) = grad(S, w)
        Gt, St = G.transpose(0, 2, 1), S.transpose(0, 2, 1)
        S1 = S - eta * (A @ G + G @ B) + eta**2 * (G @ St @ G)
        A1 = A - eta * (G @ St + S @ Gt) + eta**2 * (G @ B @ Gt)
        B1 = B - eta * (Gt @ S + St @ G) + eta**2 * (Gt @ A @ G)
        return jnp.concatenate([S1.ravel(), A1.ravel(), B1.ravel(), (w - eta * dw).ravel()]), loss

    def run(y, eta, n):
        y, _ = jax.lax.scan(lambda c, _: (step(c, eta)[0], None), y, None, length=n)
        return y, grad(y[:2 * n2].reshape(2, P, P), y[6 * n2:].reshape(2, P))[0]

    run_j = jax.jit(run, static_argnums=2)
    run_b = jax.jit(jax.vmap(run, in_axes=(0, 0, None)), static_argnums=2)
    return jax.jit(step), run_j, run_b


def network_init(s, m: int, B: int, seed: int = 0, omega: float = 0.1):
    """B explicit networks (d = P + 1 embedding, orthonormal feature columns E
    (d, P)): W_K, W_Q (B, 2, m, d) iid N(0, omega^2 / m), w (B, 2, d) small."""
    rng = np.random.default_rng(seed)
    P = s.P
    d = P + 1
    E = np.linalg.qr(rng.normal(size=(d, d)))[0][:, :P]
    WK = rng.normal(scale=omega / np.sqrt(m), size=(B, 2, m, d))
    WQ = rng.normal(scale=omega / np.sqrt(m), size=(B, 2, m, d))
    w = rng.normal(scale=0.01, size=(B, 2, d))
    return E, WK, WQ, w


def _network_loss(np_, E, idx, sgn, lab, weight, WK, WQ, w, softmax, relu):
    X = (E.T[idx] * sgn[..., None])  # (n, L, d) tokens
    K = np_.einsum("hmd,nid->hnim", WK, X)
    Q = np_.einsum("hmd,nld->hnlm", WQ, X)
    logits = np_.einsum("hnim,hnlm->hnil", K, Q)  # key i, query l
    p = softmax(logits)
    v = np_.einsum("hd,nid->hni", w, X)
    u = np_.einsum("hnil,hni->hn", p, v) / idx.shape[1]
    f = relu(u[0]) - relu(u[1])
    return (weight * np_.logaddexp(np_.zeros_like(f), -lab * f)).sum()


def jax_network(s, E):
    """(run, run_batch) of the explicit network's GD in JAX: ``run(WK, WQ, w,
    eta, n)`` -> (WK, WQ, w, loss) (lax.scan); ``run_batch`` its vmap."""
    jax, jnp = _jax()
    idx, sgn, lab, weight = (jnp.asarray(a) for a in _tokens(s))
    Ej = jnp.asarray(E)

    def loss(WK, WQ, w):
        return _network_loss(jnp, Ej, idx, sgn, lab, weight, WK, WQ, w, lambda z: jax.nn.softmax(z, axis=2),
                             jax.nn.relu)

    g = jax.value_and_grad(loss, argnums=(0, 1, 2))

    def run(WK, WQ, w, eta, n):
        def body(c, _):
            _, (a, b, c_) = g(*c)
            return (c[0] - eta * a, c[1] - eta * b, c[2] - eta * c_), None

        (WK, WQ, w), _ = jax.lax.scan(body, (WK, WQ, w), None, length=n)
        return WK, WQ, w, loss(WK, WQ, w)

    return jax.jit(run, static_argnums=4), jax.jit(jax.vmap(run, in_axes=(0, 0, 0, 0, None)), static_argnums=4)


def torch_network(s, E):
    """``step(params, eta)`` -> loss: one eager PyTorch GD step of the explicit
    network in place (params: [WK, WQ, w] leaf tensors, float64)."""
    torch = _torch()
    idx = torch.as_tensor(np.array(s.idx))
    sgn, lab, weight = (torch.as_tensor(np.array(a)) for a in _tokens(s)[1:])
    Et = torch.as_tensor(np.array(E))

    class _T:  # the numpy-like names _network_loss uses
        einsum = staticmethod(torch.einsum)
        zeros_like = staticmethod(torch.zeros_like)
        logaddexp = staticmethod(torch.logaddexp)

    def step(params, eta):
        for q in params:
            q.grad = None
        loss = _network_loss(_T, Et, idx, sgn, lab, weight, *params, lambda z: torch.softmax(z, dim=2),
                             torch.relu)
        loss.backward()
        with torch.no_grad():
            for q in params:
                q -= eta * q.grad
        return float(loss.detach())

    return step
