"""The ONE observable function of the mixture system.

Every path that produces a trajectory (the reduced dynamics at any width, the
explicit finite-width particle network after projecting its weights on the
features) turns reduced states into recorded quantities here, so theory and
simulation can never drift apart.
"""

from __future__ import annotations

import numpy as np

from . import kernels
from .data import SampleSet


def observables(samples: SampleSet, Y: np.ndarray) -> dict[str, np.ndarray]:
    """Recorded quantities of the reduced states ``Y`` (T, n_state).

    Returns S, A, B (T, 2, P, P), w (T, 2, P), loss (T,), margin (T, n) = y f(X),
    u (T, n, 2) pre-activations per head, g (T, n) = -l'(y f) = 1/(1+exp(y f)).
    """
    Y = np.atleast_2d(np.asarray(Y, dtype=np.float64))
    T = Y.shape[0]
    P = samples.P
    n = samples.n
    loss = np.empty(T)
    margin = np.empty((T, n))
    u = np.empty((T, n, 2))
    for k in range(T):
        loss[k] = kernels.forward(np.ascontiguousarray(Y[k]), P, samples.idx, samples.sgn, samples.y,
                                  samples.weight, u[k], margin[k])
    S, A, B, w = kernels.unpack(Y)
    with np.errstate(over="ignore"):
        g = 1.0 / (1.0 + np.exp(margin))
    return {"S": S.copy(), "A": A.copy(), "B": B.copy(), "w": w.copy(), "loss": loss, "margin": margin, "u": u, "g": g}
