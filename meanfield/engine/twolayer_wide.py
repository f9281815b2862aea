"""Wide bilinear heads of the two-layer class: case (b) 1 of ``docs/engine.md``, the Gram that closes.

A head whose bilinear score X_t^T A X_{t-lag} is wide, A = W_Q^T W_K with
W_Q, W_K in R^{m x D} (m the ``width``, D the stream width before its layer,
the stream in its fixed basis: one-hot tokens, one-hot positions and the
earlier heads' outputs), is read by the loss only through the Gram
Q = U^T U of U = [W_Q, W_K] (m x 2D): A is its cross block Q[:D, D:]. With
G = dL/dA, dL/dW_Q = W_K G^T and dL/dW_K = W_Q G, so dL/dU = U G^ with the
symmetric G^ = [[0, G], [G^T, 0]], and one GD step on the weights,
U' = U (I - eta G^), moves the Gram by

    Q' = (I - eta G^) Q (I - eta G^),       (the flow: dQ/dt = -(G^ Q + Q G^)),

a map of Q alone: the state is the (2D)^2 Gram, whatever m. At init W_Q, W_K
have iid N(0, omega^2 / m) entries: Q_0 = omega^2 I at infinite width (A_0 = 0),
U_0^T U_0 of one draw at finite m. The explicit network
(:mod:`meanfield.engine.twolayer_oracle`, ``width``) trains W_Q and W_K
themselves and is held equal to this map (``tests/test_twolayer_wide.py``).

In the flat parameter vector the head's block ``layer{k}.head{h}.Q`` holds Q
(row-major) and its gradient entry holds G^ (the symmetrised dL/dQ); every
other block steps theta - eta grad as before.

A wide value matrix is the same object (case (b) 3): the output V u with
V = W_O M_V, W_O^T, M_V in R^{m x w} (w the value's width, the stream in its
fixed basis), is the cross block QV[:w, w:] of the Gram of [W_O^T, M_V]
(block ``layer{k}.head{h}.QV``), moved by the same map with G = dL/dV. Two
wide objects of one head (W_Q, W_K and W_O, M_V) need no Gram entry across
the pairs: the loss reads A and V only.

Example
-------
>>> import numpy as np
>>> from meanfield.engine.twolayer_net import Head, Net
>>> net = Net(2, 2, ((Head("bilinear", width=math.inf),),))
>>> [b for b, _ in net.blocks]
['layer1.head1.Q', 'readout.W']
>>> Q = initial_gram(4, 0.5, math.inf)
>>> float(Q[0, 0]), float(Q[0, 2])
(0.25, 0.0)
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["to_merged", "expand_grad", "gd_step", "flow_rhs", "initial_gram", "wide_blocks"]


def _is_gram(name: str) -> bool:
    return name.endswith(".Q") or name.endswith(".QV")


def wide_blocks(net) -> list:
    """(offset, D) of every wide Gram block in the flat vector (its shape (2D, 2D)).

    Example
    -------
    >>> from meanfield.engine.twolayer_net import Head, Net
    >>> wide_blocks(Net(2, 2, ((Head("bilinear", width=3),),)))
    [(0, 4)]
    """
    out, i = [], 0
    for name, shape in net.blocks:
        if _is_gram(name):
            out.append((i, shape[0] // 2))
        i += int(np.prod(shape))
    return out


def to_merged(theta: np.ndarray, net) -> np.ndarray:
    """The flat vector of ``net.merged``: every wide Gram replaced by its cross block (A = Q[:D, D:], V = QV[:w, w:])."""
    theta = np.asarray(theta, dtype=np.float64)
    parts, i = [], 0
    for name, shape in net.blocks:
        k = int(np.prod(shape))
        blk = theta[i:i + k]
        if _is_gram(name):
            D = shape[0] // 2
            blk = blk.reshape(shape)[:D, D:].ravel()
        parts.append(blk)
        i += k
    return np.concatenate(parts) if parts else np.zeros(0)


def expand_grad(gm: np.ndarray, net) -> np.ndarray:
    """The gradient of ``net`` from that of ``net.merged``: a wide head's dL/dA = G becomes G^ = [[0, G], [G^T, 0]]."""
    parts, i = [], 0
    for name, shape in net.blocks:
        if _is_gram(name):
            D = shape[0] // 2
            G = gm[i:i + D * D].reshape(D, D)
            Gh = np.zeros(shape)
            Gh[:D, D:] = G
            Gh[D:, :D] = G.T
            parts.append(Gh.ravel())
            i += D * D
        else:
            k = int(np.prod(shape))
            parts.append(gm[i:i + k])
            i += k
    return np.concatenate(parts) if parts else np.zeros(0)


def _scalar(eta, off: int) -> float:
    e = np.asarray(eta, dtype=np.float64)
    return float(e) if e.ndim == 0 else float(e[off])


def gd_step(theta: np.ndarray, g: np.ndarray, net, eta, mask: np.ndarray) -> np.ndarray:
    """One GD step: theta - eta mask grad, and Q' = (I - eta G^) Q (I - eta G^) for a trained wide head.

    Parameters
    ----------
    theta, g : ndarray
        The state and :func:`meanfield.engine.twolayer_net.loss_grad`'s gradient there.
    net : Net
    eta : float or ndarray
        The step size (an array: one per entry).
    mask : ndarray
        1 where an entry is trained.

    Returns
    -------
    ndarray
        The new state (a new array).

    Example
    -------
    >>> from meanfield.engine.twolayer_net import Head, Net
    >>> net = Net(2, 2, ((Head("bilinear", width=math.inf),),))
    >>> th = np.concatenate([initial_gram(4, 1.0, math.inf).ravel(), np.zeros(net.size - 64)])
    >>> g = np.zeros(net.size); g[4] = g[32] = 1.0           # G^ of dL/dA = G with one entry G_(0,0) = 1
    >>> new = gd_step(th, g, net, 0.1, np.ones(net.size))
    >>> round(float(new[4]), 12), round(float(new[0]), 12)   # -eta (G^ Q + Q G^), and eta^2 (G^ Q G^)
    (-0.2, 1.01)
    """
    new = theta - np.asarray(eta) * mask * g
    for off, D in wide_blocks(net):
        n = 4 * D * D
        if not mask[off]:
            continue
        Q = theta[off:off + n].reshape(2 * D, 2 * D)
        M = np.eye(2 * D) - _scalar(eta, off) * g[off:off + n].reshape(2 * D, 2 * D)
        new[off:off + n] = (M @ Q @ M).ravel()
    return new


def flow_rhs(theta: np.ndarray, g: np.ndarray, net, mask: np.ndarray) -> np.ndarray:
    """d theta / dt of the gradient flow: -mask grad, and -(G^ Q + Q G^) for a trained wide head."""
    out = -mask * g
    for off, D in wide_blocks(net):
        n = 4 * D * D
        if not mask[off]:
            continue
        Q = theta[off:off + n].reshape(2 * D, 2 * D)
        Gh = g[off:off + n].reshape(2 * D, 2 * D)
        out[off:off + n] = -(Gh @ Q + Q @ Gh).ravel()
    return out


def initial_gram(D: int, omega: float, width, seed=0) -> np.ndarray:
    """Q_0 of a wide head: omega^2 I at infinite width; U_0^T U_0 for U_0 in R^{m x 2D} with iid N(0, omega^2/m)
    entries (``default_rng(seed)``) at finite m; columns 0..D-1 are W_Q's, D..2D-1 W_K's.

    Parameters
    ----------
    D : int
        The stream width the head reads.
    omega : float
        The init scale.
    width : int or inf
        m.
    seed : int or sequence of int
        The draw's seed (finite m).

    Returns
    -------
    ndarray, shape (2D, 2D)
    """
    if width == math.inf:
        return omega ** 2 * np.eye(2 * D)
    U = initial_weights(D, omega, int(width), seed)
    return U.T @ U


#: the largest draw of a finite width's wide weights (m x 2D float64), in bytes
MAX_DRAW_BYTES = 2 << 30


def check_width(D: int, m, field: str = "width") -> None:
    """Refuse (one line naming ``field``) a finite width whose draw of the wide weights would not fit.

    Example
    -------
    >>> check_width(4, 10**9)
    Traceback (most recent call last):
    ...
    meanfield.core.errors.ConfigError: width: m = 1000000000 needs 64 GB for the draw of the wide weights (m x 2D = 8 numbers a row); at most 2 GiB (m <= 33554432 here)
    """
    from ..core.errors import ConfigError

    if m == math.inf:
        return
    need = 8.0 * float(m) * 2 * D
    if need > MAX_DRAW_BYTES:
        raise ConfigError(f"{field}: m = {m} needs {need / 1e9:.3g} GB for the draw of the wide weights (m x 2D = "
                          f"{2 * D} numbers a row); at most 2 GiB (m <= {MAX_DRAW_BYTES // (16 * D)} here)")


def initial_weights(D: int, omega: float, m: int, seed=0) -> np.ndarray:
    """U_0 = [W_Q, W_K] in R^{m x 2D}, iid N(0, omega^2/m) (the explicit network's start at finite m)."""
    check_width(D, m)
    return np.random.default_rng(seed).normal(0.0, omega / math.sqrt(m), size=(m, 2 * D))
