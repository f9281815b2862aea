"""The induction model's loss and gradient on the engine's generic two-layer network (what the claims measure with).

The copier-selector-classifier TF(M, H, d, D) is the generic two-layer network
(:mod:`meanfield.engine.twolayer_net`) with H rpe heads on the windows
``first[h] .. first[h] + M - 1`` (softmax over the lags that exist, token
values, normalised), the selector over subsets of at most D heads and the
attention read-out (the induction description, ``description.build``, builds
the same network). This module maps the induction layout theta = (c, w, a)
(``model.pack``) to the generic one (w per head, c, a) and back and evaluates
the loss (nll with its log(0) guard, or the official cross-entropy) on any data set and length, so the
claims' measurements (the phase-1 velocities, the model's held-out losses, the
best a) and every run file's losses run on the engine's path. Held equal to
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
import math

import numpy as np

from ...core.errors import ConfigError
from ...engine.twolayer_net import Head, Net, forward, loss_grad, loss_only

__all__ = ["net_of", "to_generic", "from_generic_grad", "loss", "loss_and_grad", "losses_by_sequence"]


@functools.lru_cache(maxsize=32)
def _net(d: int, L: int, first: tuple, M: int, D: int, ce: str, log_cap: float) -> Net:
    heads = tuple(Head("rpe", (f, f + M - 1), softmax=True, normalise=True, value="token") for f in first)
    return Net(d, L, (heads,), selector=D, readout="attention", ce=ce, log_cap=log_cap)


LOSSES = ("nll", "official-ce")


def net_of(arch, L: int, loss: str = "nll", yhat_floor: float = 1e-300) -> Net:
    """The generic network of ``arch`` on contexts of length ``L``, trained on ``loss`` (``nll`` with the
    log(0) guard ``yhat_floor``, or ``official-ce``)."""
    if loss not in LOSSES:
        raise ConfigError(f"loss: one of {', '.join(LOSSES)}; got {loss!r}")
    if not 0.0 < float(yhat_floor) < 1.0:
        raise ConfigError(f"yhat_floor: a float in (0, 1); got {yhat_floor!r}")
    return _net(int(arch.d), int(L), tuple(int(f) for f in arch.first), int(arch.M), int(arch.D),
                "softmax" if loss == "official-ce" else "log", -math.log(float(yhat_floor)))


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


def _targets(tokens: np.ndarray, d: int):
    tokens = np.asarray(tokens)
    L = tokens.shape[1] - 1
    return tokens, L, np.eye(d)[tokens[:, L]], np.full(len(tokens), 1.0 / len(tokens))


def loss(theta, tokens, arch, yhat_floor: float = 1e-300, loss: str = "nll") -> float:
    """The mean loss of the model on ``tokens`` (n, L + 1): the target is the last column."""
    tokens, L, y, p = _targets(tokens, arch.d)
    return loss_only(to_generic(theta, arch), net_of(arch, L, loss, yhat_floor), tokens, y, p)


def loss_and_grad(theta, tokens, arch, yhat_floor: float = 1e-300, loss: str = "nll"):
    """(loss, gradient in the induction layout) on ``tokens``."""
    tokens, L, y, p = _targets(tokens, arch.d)
    l, g = loss_grad(to_generic(theta, arch), net_of(arch, L, loss, yhat_floor), tokens, y, p)
    return l, from_generic_grad(g, arch)


def losses_by_sequence(theta, tokens, arch, yhat_floor: float = 1e-300, loss: str = "nll") -> np.ndarray:
    """Each sequence's loss: the guarded nll min(-log y_hat[target], -log yhat_floor) (a clipped one: the guard),
    or with ``official-ce`` lse(y_hat) - y_hat[target] (never clipped)."""
    tokens, L, y, p = _targets(tokens, arch.d)
    net = net_of(arch, L, loss, yhat_floor)
    yhat, _ = forward(to_generic(theta, arch), net, tokens, y, p)
    tgt = yhat[np.arange(len(tokens)), tokens[:, L]]
    if loss == "official-ce":
        m = yhat.max(axis=1)
        return m + np.log(np.exp(yhat - m[:, None]).sum(axis=1)) - tgt
    with np.errstate(divide="ignore"):
        nl = -np.log(tgt)
    return np.minimum(nl, net.log_cap)
