"""The explicit network on the exact population loss of Gaussian prompts
(``meanfield.engine.population_oracle``): :class:`PopulationOracle`, the oracle's
weights, products and GD step with a forward and backward of the population loss
through the moment tensors of ``meanfield.engine.gaussian.Moments`` (no sampled
prompt), and the two tests of a description's data used by the particle paths.
``meanfield.engine.icl_particles`` holds the sampled (online SGD) ways."""

from __future__ import annotations

import math

import numpy as np

from ..core.config import ConfigError
from . import oracle as orc

def is_population(desc) -> bool:
    """Whether ``desc`` is the exact population of an icl_regression family.

    Parameters
    ----------
    desc : Description

    Returns
    -------
    bool

    Example
    -------
    >>> import meanfield.engine as me
    >>> is_population(me.load("meanfield/models/icl_zfb.toml"))
    True
    """
    return "population" in desc.data.extra


def is_icl(desc) -> bool:
    """Whether ``desc``'s data are the icl_regression family (exact or sampled).

    Parameters
    ----------
    desc : Description

    Returns
    -------
    bool

    Example
    -------
    >>> import meanfield.engine as me
    >>> is_icl(me.load("meanfield/models/icl_zfb.toml", samples=10))
    True
    """
    return "icl" in desc.data.extra


class PopulationOracle(orc.Oracle):
    """The explicit network (:class:`meanfield.engine.oracle.Oracle`: the same
    weights, products, GD step and projection) on the exact population loss
    (1/2) E[(yhat - y_q)^2] of Gaussian prompts.

    Forward: with the products W_K E, W_Q E (or E^T W E), M_V E, w E of the
    weights, head k reads S_k = (W_K E)^T (W_Q E) (or E^T W E) and the value
    v_k = E^T w (or (M_V E)^T r); the prediction is yhat = sum_abj T_abj G_ab x_qj
    with T = sum_k a_k scale_k v_k (x) S_k[:, x-columns], and the loss and dL/dT
    come from :meth:`meanfield.engine.gaussian.Moments.loss` / ``grad``. Backward:
    dL/dS_k = a_k scale_k sum_a v_k[a] dL/dT_a.., dL/dv_k = a_k scale_k sum S_k dL/dT,
    then the oracle's chain rule to the explicit weights (W_K: W_Q E dS^T E^T, ...).

    Parameters
    ----------
    desc : Description
        A population description (``data.extra["population"]``).
    E : numpy.ndarray
        The embedding (d x P).

    Example
    -------
    >>> import meanfield.engine as me
    >>> desc = me.load("meanfield/models/icl_zfb.toml", steps=5)
    >>> net = PopulationOracle(desc, np.eye(desc.P))
    """

    def __init__(self, desc, E):
        from .gaussian import check_heads

        check_heads(desc, exact=True)
        self.desc = desc
        self.E = np.asarray(E, float)
        d, P = self.E.shape
        if P != desc.P:
            raise ValueError(f"E: must have P = {desc.P} columns; got {P}")
        self.d, self.P = d, P
        self.ET = np.ascontiguousarray(self.E.T)
        law = desc.data.extra["population"]["law"]
        self.law = law
        self.mom = law.moments()
        self.loss_kind = "squared"
        self.r0 = float(desc.model.relu_prime_at_zero)
        z = np.zeros((1, 1))
        self.heads = [orc._Head(h.name, h.attention, h.kq, h.query, float(h.scale), h.value, int(h.n_neurons), 1,
                                bool(h.train_sign), z, z, z, z, np.ones(1)) for h in desc.model.heads]

    def _read(self, p, pe, hd):
        S = pe["WK"].T @ pe["WQ"] if hd.kq == "separate" else pe["W"]
        v = pe["w"].reshape(-1, self.P)[0] if hd.value == "linear" else np.asarray(p["r"])[0] @ pe["MV"]
        return S, v

    def forward(self, params, we=None):
        we = self.products(params) if we is None else we
        dx = self.law.d
        T = np.zeros((self.P, self.P, dx))
        parts = []
        for hd, p, pe in zip(self.heads, params, we):
            S, v = self._read(p, pe, hd)
            c = float(p["a"]) * hd.scale
            T += c * np.einsum("a,bj->abj", v, S[:, :dx])        # the query token is (x_q, 0)
            parts.append((S, v))
        loss = self.mom.loss(T)
        return loss, {"T": T, "parts": parts, "we": we, "loss": loss,
                      "f": np.array([[-math.sqrt(max(2.0 * loss, 0.0))]])}

    def _backward(self, params, cache):
        gT = self.mom.grad(cache["T"])
        dx, P = self.law.d, self.P
        grads = []
        for hd, p, pe, (S, v) in zip(self.heads, params, cache["we"], cache["parts"]):
            a = float(p["a"])
            c = a * hd.scale
            sg = np.einsum("bj,abj->a", S[:, :dx], gT)            # sum_bj S_bj dL/dT_abj
            g: dict = {"a": np.array(hd.scale * float(v @ sg))}
            dS = np.zeros((P, P))
            dS[:, :dx] = c * np.einsum("a,abj->bj", v, gT)
            dv = c * sg
            if hd.kq == "separate":
                g["WK"] = (pe["WQ"], dS.T @ self.ET)             # W_Q Z^T, Z = E dS E^T
                g["WQ"] = (pe["WK"], dS @ self.ET)
            else:
                g["W"] = self.E @ dS @ self.ET
            if hd.value == "linear":
                g["w"] = (dv.reshape(1, 1, P), self.ET)
            else:
                r = np.asarray(p["r"])
                g["r"] = (pe["MV"] @ dv)[None, :]
                g["MV"] = (np.outer(r[0], dv), self.ET)
            grads.append(g)
        return grads

    def margins(self, f):
        return np.asarray(f)[:, 0]

    def criterion_value(self, params, name: str, consistent=None, we=None) -> float:
        if name in ("consistent_margin", "inconsistent_margin"):
            raise ConfigError("criterion: the population has no consistent/inconsistent sequences; give loss, "
                              "min_margin or grad_w")
        if name == "min_margin":
            return float(-math.sqrt(max(2.0 * self.forward(params, we)[0], 0.0)))
        return super().criterion_value(params, name, consistent, we)
