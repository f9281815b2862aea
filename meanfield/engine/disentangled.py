"""A disentangled multi-layer softmax-attention model over one-hot token and position features.

The small-parameter case (a) of ``docs/engine.md`` ("Two-layer attention: which
models close"): every trainable parameter is a small matrix over the finite
feature set, so the parameters are the closed state and full-batch GD on an
exact (finite) data law is exact. This is the model class only; descriptions,
run files and claims come later (the design in the same section).

Model (sequences x_1..x_T over [S], features P = S + T):

* X_0[t] = [e(x_t), e_t] in R^P (one-hot token, one-hot position);
* layer k (heads h = 1..H_k, matrices A_kh in R^{D_k x D_k}, D_1 = P):
  Z = X_k A_kh X_k^T, alpha = softmax over j <= t of Z[t, j] (causal, the
  diagonal included), out_h = alpha X_k (the value is the identity);
  X_{k+1} = [X_k, out_1, ..., out_H] (the stream is concatenated:
  D_{k+1} = D_k (1 + H_k));
* read-out W in R^{D_final x S}: f = softmax(X_final[T] W);
* loss: sum_n p_n (- sum_e y_ne log f_ne) for weights p_n (a fixed data set:
  1/N; an exact law: the probabilities) and targets y_n (one-hot next
  tokens or soft targets such as the posterior mean of the next row).

Parameters as one flat vector (:func:`pack`): A_11, A_12, ..., A_21, ..., W,
each row-major.

Example
-------
>>> import numpy as np
>>> arch = Arch(S=2, T=3, heads=(1, 1))
>>> theta = np.zeros(arch.size)
>>> x = np.array([[0, 1, 1]]); y = np.array([[0.5, 0.5]])
>>> round(loss_grad(theta, arch, x, y, np.ones(1))[0], 12) == round(float(np.log(2)), 12)
True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.errors import ConfigError

__all__ = ["Arch", "pack", "unpack", "forward", "loss_grad", "gd"]


@dataclass(frozen=True)
class Arch:
    """Sizes of the disentangled model: vocabulary ``S``, length ``T``, heads per layer."""

    S: int
    T: int
    heads: tuple = (1, 1)

    def __post_init__(self):
        for name in ("S", "T"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ConfigError(f"{name}: a positive integer; got {v!r}")
        h = tuple(self.heads)
        if not h or any(isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1 for k in h):
            raise ConfigError(f"heads: a list of positive integers (heads per layer); got {self.heads!r}")

    @property
    def widths(self) -> tuple:
        """D_1, ..., D_final: the stream width before each layer and after the last."""
        out = [self.S + self.T]
        for k in self.heads:
            out.append(out[-1] * (1 + k))
        return tuple(out)

    @property
    def shapes(self) -> list:
        """The parameter shapes in packing order."""
        D = self.widths
        return [(D[i], D[i]) for i, k in enumerate(self.heads) for _ in range(k)] + [(D[-1], self.S)]

    @property
    def size(self) -> int:
        """The number of parameters."""
        return int(sum(a * b for a, b in self.shapes))


def unpack(theta: np.ndarray, arch: Arch) -> list:
    """The parameter arrays (views of ``theta``) in packing order: A_11, ..., W.

    Parameters
    ----------
    theta : ndarray, shape (arch.size,)
    arch : Arch

    Returns
    -------
    list of ndarray

    Example
    -------
    >>> [a.shape for a in unpack(np.zeros(Arch(2, 2, (1,)).size), Arch(2, 2, (1,)))]
    [(4, 4), (8, 2)]
    """
    out, i = [], 0
    for a, b in arch.shapes:
        out.append(theta[i:i + a * b].reshape(a, b))
        i += a * b
    return out


def pack(arrays, arch: Arch) -> np.ndarray:
    """The flat parameter vector of arrays in packing order (inverse of :func:`unpack`).

    Parameters
    ----------
    arrays : list of ndarray
    arch : Arch

    Returns
    -------
    ndarray

    Example
    -------
    >>> arch = Arch(2, 2, (1,)); th = np.arange(arch.size, dtype=float)
    >>> bool((pack(unpack(th, arch), arch) == th).all())
    True
    """
    if [tuple(np.shape(a)) for a in arrays] != arch.shapes:
        raise ValueError(f"pack: shapes {arch.shapes}")
    return np.concatenate([np.asarray(a, dtype=np.float64).ravel() for a in arrays])


def _embed(x: np.ndarray, arch: Arch) -> np.ndarray:
    n, T = x.shape
    X = np.zeros((n, T, arch.S + T))
    X[np.arange(n)[:, None], np.arange(T)[None, :], x] = 1.0
    X[:, np.arange(T), arch.S + np.arange(T)] = 1.0
    return X


def forward(theta: np.ndarray, arch: Arch, x: np.ndarray):
    """The read-out distribution f (n, S) and the per-layer cache.

    Parameters
    ----------
    theta : ndarray
    arch : Arch
    x : ndarray of int, shape (n, T)

    Returns
    -------
    f : ndarray, shape (n, S)
    cache : list of (X_k, [alpha per head])

    Example
    -------
    >>> arch = Arch(2, 2, (1,)); f, _ = forward(np.zeros(arch.size), arch, np.array([[0, 1]]))
    >>> f.tolist()
    [[0.5, 0.5]]
    """
    x = np.asarray(x)
    if x.ndim != 2 or x.shape[1] != arch.T:
        raise ConfigError(f"tokens: an (n, T = {arch.T}) integer array; got shape {x.shape}")
    params = unpack(theta, arch)
    X = _embed(x, arch)
    mask = np.tril(np.ones((arch.T, arch.T), dtype=bool))
    cache, i = [], 0
    for k in arch.heads:
        alphas, outs = [], []
        for _ in range(k):
            Z = np.einsum("ntd,de,nse->nts", X, params[i], X)
            i += 1
            Z = np.where(mask, Z, -np.inf)
            Z = Z - Z.max(axis=2, keepdims=True)
            al = np.exp(Z)
            al /= al.sum(axis=2, keepdims=True)
            alphas.append(al)
            outs.append(al @ X)
        cache.append((X, alphas))
        X = np.concatenate([X] + outs, axis=2)
    logits = X[:, -1, :] @ params[-1]
    logits -= logits.max(axis=1, keepdims=True)
    f = np.exp(logits)
    f /= f.sum(axis=1, keepdims=True)
    cache.append((X, None))
    return f, cache


def loss_grad(theta: np.ndarray, arch: Arch, x: np.ndarray, y: np.ndarray, p: np.ndarray):
    """Loss sum_n p_n (- sum_e y_ne log f_ne) and its gradient (explicit backpropagation).

    Parameters
    ----------
    theta : ndarray, shape (arch.size,)
    arch : Arch
    x : ndarray of int, shape (n, T)
        Sequences.
    y : ndarray, shape (n, S)
        Targets (rows: distributions).
    p : ndarray, shape (n,)
        Weights (1/N for a data set, probabilities for an exact law).

    Returns
    -------
    loss : float
    grad : ndarray, shape (arch.size,)

    Example
    -------
    >>> arch = Arch(2, 2, (1,))
    >>> l, g = loss_grad(np.zeros(arch.size), arch, np.array([[0, 1]]), np.array([[1.0, 0.0]]), np.ones(1))
    >>> g.shape == (arch.size,)
    True
    """
    params = unpack(theta, arch)
    f, cache = forward(theta, arch, x)
    with np.errstate(divide="ignore"):
        logf = np.log(f)
    terms = np.where(y > 0, y * logf, 0.0)
    loss = -float(p @ terms.sum(axis=1))
    grads = [np.zeros_like(a) for a in params]
    Xf = cache[-1][0]
    dlogits = (f * y.sum(axis=1, keepdims=True) - y) * p[:, None]
    grads[-1] = Xf[:, -1, :].T @ dlogits
    dX = np.zeros_like(Xf)
    dX[:, -1, :] = dlogits @ params[-1].T
    i = sum(arch.heads)
    for layer in range(len(arch.heads) - 1, -1, -1):
        X, alphas = cache[layer]
        D = X.shape[2]
        dXk = dX[:, :, :D].copy()
        for h in range(len(alphas) - 1, -1, -1):
            i -= 1
            al = alphas[h]
            dout = dX[:, :, D * (1 + h):D * (2 + h)]
            dal = dout @ X.transpose(0, 2, 1)
            dXk += al.transpose(0, 2, 1) @ dout
            dZ = al * (dal - (al * dal).sum(axis=2, keepdims=True))
            A = params[i]
            grads[i] = np.einsum("ntd,nts,nse->de", X, dZ, X)
            dXk += dZ @ X @ A.T + dZ.transpose(0, 2, 1) @ X @ A
        dX = dXk
    return loss, pack(grads, arch)


def gd(theta: np.ndarray, arch: Arch, x, y, p, eta: float, steps: int):
    """``steps`` full-batch GD steps theta' = theta - eta grad L; returns (theta, losses).

    Parameters
    ----------
    theta : ndarray
    arch : Arch
    x, y, p : see :func:`loss_grad`
    eta : float
        Learning rate.
    steps : int

    Returns
    -------
    theta : ndarray
    losses : ndarray, shape (steps + 1,)
        The loss before each step and after the last.

    Example
    -------
    >>> arch = Arch(2, 2, (1,))
    >>> th, ls = gd(np.zeros(arch.size), arch, np.array([[0, 1]]), np.array([[1.0, 0.0]]), np.ones(1), 0.5, 3)
    >>> bool(ls[-1] < ls[0])
    True
    """
    theta = np.array(theta, dtype=np.float64)
    losses = []
    for _ in range(int(steps)):
        l, g = loss_grad(theta, arch, x, y, p)
        losses.append(l)
        theta -= eta * g
    losses.append(loss_grad(theta, arch, x, y, p)[0])
    return theta, np.array(losses)
