"""The explicit network of a Gaussian in-context regression description (``meanfield.engine.icl_particles``).

``meanfield model particles`` on an ``icl_regression`` description trains the
explicit network (``meanfield.engine.oracle``: numpy weights in R^d, d > P,
tokens x = E t) in one of three ways:

* exact population (no ``samples``, no ``--batch``): full-batch GD on the
  population loss itself, ``meanfield.engine.population_oracle.PopulationOracle`` (the oracle's weights,
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
from .particle_system import ParticleSystem
from .population_oracle import is_icl, is_population


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
