"""The explicit network of a Gaussian in-context regression description (``meanfield.engine.icl_particles``).

``meanfield model particles`` on an ``icl_regression`` description trains the
explicit network (``meanfield.engine.oracle``: numpy weights in R^d, d > P,
tokens x = E t) in one of three ways:

* exact population (no ``samples``, no ``--batch``): full-batch GD on the
  population loss itself, :class:`PopulationOracle` (the oracle's weights,
  products and update, with a forward and backward of the population loss
  through the moment tensors of ``meanfield.engine.gaussian.Moments``, no
  sampled prompt). Its projected run is the engine's run at width m up to
  rounding (``width-sweep`` then measures the finite-width error alone);
* online SGD (``--batch B``, seed ``--batch-seed``): before every step a fresh
  batch of B prompts is drawn from the law, and the step is the oracle's GD step
  on (1/2) mean (yhat - y_q)^2 over that batch (:class:`OnlineParticleSystem`):
  the authors' usual simulation. Softmax heads run too;
* a fixed sampled set (``samples = n`` in the data): full-batch GD on those n
  prompts (the engine's ordinary particle path), or, with ``--batch B``,
  minibatches of B of them drawn without replacement at every step.

The recorded ``loss`` is always the engine's loss of the projected state: for a
population description (the first two ways) the EXACT population loss of the
explicit network's weights (attribute ``loss_of_record``), for a sampled one the
loss on the sampled set.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ..core.config import ConfigError, as_int
from . import oracle as orc
from .finite import ParticleSystem


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
        from .population import check_heads

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


def batch_data(desc, tokens, target):
    """``desc`` with its data replaced by sampled prompts (weights 1/n).

    Parameters
    ----------
    desc : Description
    tokens : numpy.ndarray
        (n, N + 1, P) prompts as engine tokens, the query (x_q, 0) last.
    target : numpy.ndarray
        (n,) the query labels y_q.

    Returns
    -------
    Description

    Example
    -------
    >>> import meanfield.engine as me
    >>> desc = me.load("meanfield/models/icl_zfb.toml")
    >>> Z, yq = desc.data.extra["population"]["law"].tokens(4, np.random.default_rng(0))
    >>> batch_data(desc, Z, yq).data.tokens.shape
    (4, 9, 4)
    """
    from .objects import make_data

    data = make_data(tokens, target, None, None, None, None, desc.P)
    return replace(desc, data=replace(data, extra={"sampled": {}, "icl": desc.data.extra.get("icl", {})}))


class OnlineParticleSystem(ParticleSystem):
    """The explicit network trained by SGD: every step on a new batch of ``batch``
    prompts, drawn fresh from the law (``pool`` None) or without replacement from
    a fixed sampled set ``pool = (tokens, targets)``, with ``default_rng(seed)``.

    Parameters
    ----------
    desc : Description
        The description (population or sampled; its heads and stages).
    E : numpy.ndarray
        The embedding (d x P).
    params : list of dict
        Initial explicit weights (:func:`meanfield.engine.oracle.weights_from_engine_init`).
    batch : int
        Prompts per step.
    seed : int
        Seed of the batches.
    max_abs : float
        Divergence bound on the projection.
    pool : tuple or None
        A fixed sampled set to draw the batches from.

    Example
    -------
    >>> # OnlineParticleSystem(desc, E, params, batch=256, seed=0)
    """

    def __init__(self, desc, E, params, batch: int, seed: int, max_abs: float = math.inf, pool=None):
        self.law = (desc.data.extra.get("population") or {}).get("law") or desc.data.extra.get("law")
        self.batch = int(batch)
        self.rng = np.random.default_rng([int(seed), 23])
        self.pool = pool
        self.base = desc
        super().__init__(desc, E, params, max_abs)
        self.net = self._next_net()

    def _next_net(self):
        if self.pool is None:
            Z, yq = self.law.tokens(self.batch, self.rng)
        else:
            idx = self.rng.choice(self.pool[0].shape[0], size=self.batch, replace=False)
            Z, yq = self.pool[0][idx], self.pool[1][idx]
        return orc.Oracle(batch_data(self.base, Z, yq), self.E)

    def gd_advance(self, y, nsteps, eta, mode, criterion):
        done = 0
        for _ in range(int(nsteps)):
            k, code = super().gd_advance(y, 1, eta, mode, criterion)
            done += k
            if code != 0 or k == 0:
                return done, code
            self.net = self._next_net()
        return done, 0


def check_batch(desc, batch, batch_seed):
    """The ``--batch`` / ``--batch-seed`` of ``particles``, checked (a one-line ConfigError otherwise).

    Parameters
    ----------
    desc : Description
    batch : int, str or None
        Prompts per SGD step (None: no online SGD).
    batch_seed : int, str or None
        Seed of the batches (only with ``batch``; default 0).

    Returns
    -------
    (int or None, int)

    Example
    -------
    >>> import meanfield.engine as me
    >>> check_batch(me.load("meanfield/models/icl_zfb.toml"), "64", None)
    (64, 0)
    """
    if batch is None:
        if batch_seed is not None:
            raise ConfigError("batch-seed: only with --batch B (online SGD on sampled batches)")
        return None, 0
    if not is_icl(desc):
        raise ConfigError("batch: only for a description whose data are family icl_regression (fresh Gaussian "
                          "prompts per step); other descriptions train on their own data")
    if desc.training.method != "gd":
        raise ConfigError("batch: online SGD steps only (method = gd)")
    b = as_int("batch", batch, lo=1)
    n = desc.data.tokens.shape[0] if not is_population(desc) else None
    if n is not None and b > n:
        raise ConfigError(f"batch: at most the {n} sampled prompts of the description (data.samples); got {b}")
    law = (desc.data.extra.get("population") or {}).get("law") or desc.data.extra.get("law")
    from .gaussian import sampled_bytes

    if sampled_bytes(law, b) > 4e9:
        raise ConfigError(f"batch: {b} prompts of N = {law.N} need {sampled_bytes(law, b) / 1e9:.1f} GB per step; "
                          "choose a smaller batch")
    s = as_int("batch-seed", batch_seed, lo=0) if batch_seed is not None else 0
    return b, s


def make_system(desc, E, params, batch, batch_seed):
    """The online-SGD particle system of an icl_regression description, or None without ``batch``.

    Parameters
    ----------
    desc : Description
    E : numpy.ndarray
        The embedding (d x P).
    params : list of dict
        Initial explicit weights.
    batch : int or None
    batch_seed : int

    Returns
    -------
    OnlineParticleSystem or None

    Example
    -------
    >>> # make_system(desc, E, params, 256, 0)
    """
    if batch is None:
        return None
    pool = None if is_population(desc) else (np.asarray(desc.data.tokens, float), np.asarray(desc.data.target, float))
    return OnlineParticleSystem(desc, E, params, batch, batch_seed, desc.training.max_abs, pool)


def attrs_of(desc, batch, batch_seed) -> dict:
    """Run-file attributes of an icl particle run: how it was trained, what its loss is.

    Parameters
    ----------
    desc : Description
    batch : int or None
    batch_seed : int

    Returns
    -------
    dict

    Example
    -------
    >>> import meanfield.engine as me
    >>> attrs_of(me.load("meanfield/models/icl_zfb.toml"), None, 0)["particles_training"][:15]
    'full-batch GD o'
    """
    if batch is not None:
        src = ("fresh Gaussian prompts" if is_population(desc) else
               f"the {desc.data.tokens.shape[0]} sampled prompts of the description")
        mode = f"online SGD: every step a new batch of {batch} prompts from {src} (seed {batch_seed})"
    elif is_population(desc):
        mode = "full-batch GD on the exact population loss (closed-form Gaussian moments)"
    else:
        mode = f"full-batch GD on the {desc.data.tokens.shape[0]} sampled prompts of the description"
    out = {"particles_training": mode,
           "loss_of_record": ("the exact population loss of the explicit network's weights" if is_population(desc)
                              else "the loss on the sampled prompts")}
    if batch is not None:
        out["batch"] = int(batch)
        out["batch_seed"] = int(batch_seed)
    return out
