"""The induction model's loss and gradient on the engine's generic two-layer network (what the claims measure with).

The copier-selector-classifier TF(M, H, d, D) is the generic two-layer network
(:mod:`meanfield.engine.twolayer_net`) with H rpe heads on the windows
``first[h] .. first[h] + M - 1`` (softmax over the lags that exist, token
values, normalised), the selector over subsets of at most D heads and the
attention read-out (the induction description, ``description.build``, builds
the same network). This module maps the induction layout theta = (c, w, a)
(``model.pack``) to the generic one (w per head, c, a) and back and evaluates
the loss (nll, the log(0) guard of 1e-300) on any data set and length, so the
claims' measurements (the phase-1 velocities, the model's held-out losses, the
best a) run on the engine's path, not on the hand kernels. Held equal to
``meanfield.models.induction.model`` (the plain-numpy oracle) in
``tests/test_induction_claims.py``.

Example
-------
>>> import numpy as np
>>> from meanfield.models.induction.model import Arch, init_params
>>> arch = Arch(d=2, H=2, M=2, D=1)
>>> th = init_params(arch, 2.0, 0.0, 1.0, 1.0)
>>> tok = np.array([[0, 1, 0, 1, 0]])
>>> round(loss(th, tok, arch), 6) == round(loss(th, tok, arch), 6)
True
"""

from __future__ import annotations

import functools

import numpy as np

from ...core.errors import ConfigError
from ...engine.twolayer_net import LOG_CAP, Head, Net, forward, loss_grad, loss_only

__all__ = ["net_of", "to_generic", "from_generic_grad", "loss", "loss_and_grad", "losses_by_sequence"]


@functools.lru_cache(maxsize=32)
def _net(d: int, L: int, first: tuple, M: int, D: int) -> Net:
    heads = tuple(Head("rpe", (f, f + M - 1), softmax=True, normalise=True, value="token") for f in first)
    return Net(d, L, (heads,), selector=D, readout="attention")


def net_of(arch, L: int) -> Net:
    """The generic network of ``arch`` on contexts of length ``L``."""
    return _net(int(arch.d), int(L), tuple(int(f) for f in arch.first), int(arch.M), int(arch.D))


def to_generic(theta: np.ndarray, arch) -> np.ndarray:
    """(c, w, a) of the induction layout -> (w per head, c, a) of the generic one."""
    from .model import unpack

    c, w, a = unpack(np.asarray(theta, dtype=np.float64), arch)
    return np.concatenate([np.ravel(w), np.ravel(c), [float(a)]])


def from_generic_grad(g: np.ndarray, arch) -> np.ndarray:
    """A generic gradient (w, c, a) -> the induction layout (c, w, a)."""
    from .model import pack

    HM = arch.H * arch.M
    return pack(g[HM:HM + arch.nS], g[:HM].reshape(arch.H, arch.M), g[HM + arch.nS])


def _check(yhat_floor: float) -> None:
    if yhat_floor != 1e-300:
        raise ConfigError(f"yhat_floor: the generic network's log(0) guard is 1e-300; got {yhat_floor!r}")


def _targets(tokens: np.ndarray, d: int):
    tokens = np.asarray(tokens)
    L = tokens.shape[1] - 1
    return tokens, L, np.eye(d)[tokens[:, L]], np.full(len(tokens), 1.0 / len(tokens))


def loss(theta, tokens, arch, yhat_floor: float = 1e-300) -> float:
    """The mean guarded nll of the model on ``tokens`` (n, L + 1): the target is the last column."""
    _check(yhat_floor)
    tokens, L, y, p = _targets(tokens, arch.d)
    return loss_only(to_generic(theta, arch), net_of(arch, L), tokens, y, p)


def loss_and_grad(theta, tokens, arch, yhat_floor: float = 1e-300):
    """(loss, gradient in the induction layout) on ``tokens``."""
    _check(yhat_floor)
    tokens, L, y, p = _targets(tokens, arch.d)
    l, g = loss_grad(to_generic(theta, arch), net_of(arch, L), tokens, y, p)
    return l, from_generic_grad(g, arch)


def losses_by_sequence(theta, tokens, arch, yhat_floor: float = 1e-300) -> np.ndarray:
    """Each sequence's guarded nll, min(-log y_hat[target], -log 1e-300) (a clipped one: the guard)."""
    _check(yhat_floor)
    tokens, L, y, p = _targets(tokens, arch.d)
    yhat, _ = forward(to_generic(theta, arch), net_of(arch, L), tokens, y, p)
    with np.errstate(divide="ignore"):
        nl = -np.log(yhat[np.arange(len(tokens)), tokens[:, L]])
    return np.minimum(nl, LOG_CAP)
