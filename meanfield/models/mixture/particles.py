"""The finite-width particle sampler of the mixture system: explicit GD on the two-headed network.

An independent check of the reduced system (``meanfield.models.mixture.kernels``):
here the state is the EXPLICIT finite-width network of ``docs/conventions.md``,
per head j in ("+", "-") the weights W_K, W_Q (m x d, one row per "particle" =
attention neuron) and the neuron w (d), in an ambient space R^d, d >= 2K,
whose features are the columns of a random orthonormal embedding E (d x P,
P = 2K). Its forward and backward pass are NOT written here: they are the
engine's explicit network (``meanfield.engine.oracle``, plain numpy weights,
its own forward and hand-written backward, sharing no code with any reduced
kernel), driven by the engine's particle system (``meanfield.engine.finite``)
on the mixture description of the config (``meanfield.models.mixture.family``).
This module is the mixture's adapter: the config's checks, the initial
weights from the mixture's random streams, the reduced run's stages and
record grid, and the records in the mixture's reduced layout (``kernels.pack``
of the projections), so that the run file is today's mixture run file.

Initial weights (finite width m = ``cfg.width``, seed = ``cfg.seed``); their
projection equals ``init.initial_state(cfg)`` (to rounding: E^T E = I only to
~1e-16):

* ``SeedSequence(seed).spawn(4)``: children 0 and 1 are ``init.py``'s streams
  (attention, neurons), which the engine's finite-width init of the mixture
  description draws in the same order (``reduce.initial_weights``); child 2
  draws the orthogonal parts; child 3 draws the embedding E (unless
  ``embed_seed`` is given: then ``default_rng(embed_seed)``), a QR of a
  d x P Gaussian (``oracle.embedding``).
* W = M E^T + Z (I - E E^T) with M (m x P) the engine's sampled factor and Z
  (m x d) iid N(0, omega^2/m) from child 2 (per head: Z_K then Z_Q; zero when
  d = P), so W has iid N(0, omega^2/m) entries and W E = M
  (``oracle.weights_from_engine_init``);
* w = E w~0 with w~0 the config's neuron init (no orthogonal part).

Recording: the engine's particle system holds the weights; at record times
they are projected on the features (``Oracle.project``: S = M_K^T M_Q,
A = M_K^T M_K, B = M_Q^T M_Q, w~ = E^T w per head; times the logit scale c
for ``softmax_scale``) and packed into the reduced layout with
``kernels.pack``; recorded quantities then come from THE observable function
``meanfield.models.mixture.observables.observables`` (through ``run.save``), as for
the reduced system. Agreement with the reduced system is to rounding
(~1e-15 relative over hundreds of steps; tested to 1e-10). The network computes
through the m x P products W E (every token lies in span(E)), so a step costs
O(m d P) with the weights kept explicit in R^{m x d} (``docs/engine_oracle.md``;
speed: ``benchmarks/bench_particles.py``).

The sampler covers the configs the reduced signed-feature kernels cover
(orthonormal features, one neuron per head, method gd); feature Grams,
finite training sets and several neurons per head are refused with one line
(``meanfield model particles meanfield/models/mixture.toml`` runs them).

API: :func:`run_particles` (a trajectory of projected reduced states, on the
reduced run's stages and record grid), :func:`particles_to_file` (the HDF5
run file), :func:`make_particles` / :class:`ProjectedParticles` (the system
``run_particles`` hands to the shared ``GDMap``; it holds the weights),
:func:`initial_particles`, :func:`projected_state`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...core import harness, integrate
from ...core.config import ConfigError
from . import kernels
from . import run as _run
from .config import MixtureConfig

# ----------------------------------------------------------------- setup


def default_d(K: int) -> int:
    """Default ambient dimension: 2K + 1 (one direction orthogonal to every
    feature, so that the frozen orthogonal part of the weights is exercised)."""
    return 2 * K + 1


def _check_cfg(cfg: MixtureConfig, d: int | None) -> int:
    if cfg.width is None:
        raise ConfigError("width: the particle sampler needs a finite width m (an integer >= 1), got infinite")
    if cfg.dense:
        raise ConfigError("feature_gram/n_train/n_neurons: the particle sampler covers the paper's data "
                          "(orthonormal features, one neuron per head); use the default for these fields")
    if cfg.method != "gd":
        raise ConfigError(f"method: the particle sampler runs gradient descent only (method = gd), got {cfg.method!r}")
    d = default_d(cfg.K) if d is None else d
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < cfg.P:
        raise ConfigError(f"d: the ambient dimension must be an integer >= 2K = {cfg.P}, got {d!r}")
    return int(d)


def streams(seed: int):
    """The four seed sequences (attention M, neurons, orthogonal parts, embedding):
    children 0..3 of ``SeedSequence(seed)``; 0 and 1 are ``init.py``'s."""
    return np.random.SeedSequence(seed).spawn(4)


def _description(cfg: MixtureConfig):
    from .family import mixture_description

    return mixture_description(cfg)


def _embedding(cfg: MixtureConfig, d: int, embed_seed: int | None) -> np.ndarray:
    from ...engine.oracle import embedding

    seed = streams(cfg.seed)[3] if embed_seed is None else embed_seed
    return np.ascontiguousarray(embedding(np.eye(cfg.P), d, seed))


def _engine_weights(cfg: MixtureConfig, desc, E: np.ndarray) -> list[dict]:
    from ...engine.oracle import weights_from_engine_init

    orth = streams(cfg.seed)[2] if E.shape[0] > E.shape[1] else None
    return weights_from_engine_init(desc, E, seed_orth=orth)


def _stacked(params: list[dict]):
    """(W_K (2, m, d), W_Q (2, m, d), w (2, d)) of the engine's per-head weights."""
    return (np.stack([p["WK"] for p in params]), np.stack([p["WQ"] for p in params]),
            np.stack([p["w"][0, 0] for p in params]))


def initial_particles(cfg: MixtureConfig, d: int | None = None, embed_seed: int | None = None):
    """(E (d, P), W_K (2, m, d), W_Q (2, m, d), w (2, d)) for a finite-width config
    (see the module docstring for the streams); their projection equals
    ``init.initial_state(cfg)`` to rounding."""
    d = _check_cfg(cfg, d)
    E = _embedding(cfg, d, embed_seed)
    return (E,) + _stacked(_engine_weights(cfg, _description(cfg), E))


def projected_state(E, WK, WQ, w) -> np.ndarray:
    """The reduced flat state of explicit weights: S, A, B, w~ per head, packed
    with ``kernels.pack`` (the reduced layout; nothing else of kernels is used)."""
    MK, MQ = np.asarray(WK) @ E, np.asarray(WQ) @ E
    tr = (0, 2, 1)
    return kernels.pack(MK.transpose(tr) @ MQ, MK.transpose(tr) @ MK, MQ.transpose(tr) @ MQ, np.asarray(w) @ E)


# ----------------------------------------------------------------- the system


def _engine_mode(mode) -> int:
    """The mixture's stage mode (train_w, train_att) as the engine's group bits
    (``reduce.GROUP_BIT``: attention 1, values 2)."""
    return (2 if mode[0] else 0) | (1 if mode[1] else 0)


class ProjectedParticles:
    """The explicit network as a ``meanfield.core.integrate`` system whose ``y`` is the
    PROJECTED reduced state in the mixture's layout: it holds the engine's particle
    system (``meanfield.engine.finite.ParticleSystem``, which holds the weights) and
    :meth:`gd_advance` advances it and writes the projection into ``y``. So the
    shared :class:`GDMap` drives the mixture's stages, criteria and record grid
    exactly as for the reduced run, while records stay small. GD only: :meth:`rhs`
    raises NotImplementedError. ``logit_scale`` c (softmax_scale): the network's
    logits are c X_i^T W_K^T W_Q X_l and the projection reports c S, c A, c B (the
    variables of the reduced run, ``meanfield.models.mixture.softmax_scale``)."""

    def __init__(self, psys, logit_scale: float = 1.0):
        self.psys = psys
        self.logit_scale = float(logit_scale)
        self._scratch = np.empty(psys.lay.size)

    @property
    def max_abs(self) -> float:
        return self.psys.max_abs

    @property
    def E(self) -> np.ndarray:
        return self.psys.E

    @property
    def weights(self):
        """(W_K (2, m, d), W_Q (2, m, d), w (2, d)) of the held weights (copies)."""
        return _stacked(self.psys.params)

    def projection(self) -> np.ndarray:
        """The reduced flat state (mixture layout) of the held weights."""
        y, lay = self.psys.projection(), self.psys.lay
        c = self.logit_scale
        S, A, B = (c * np.stack([lay.get(y, h, k) for h in ("+", "-")]) for k in ("S", "A", "B"))
        return kernels.pack(S, A, B, np.stack([lay.get(y, h, "w").reshape(-1) for h in ("+", "-")]))

    def gd_advance(self, y, nsteps, eta, mode, criterion):
        out = self.psys.gd_advance(self._scratch, nsteps, eta, _engine_mode(mode), criterion)
        y[:] = self.projection()
        return out

    def rhs(self, y, mode):
        raise NotImplementedError("the particle sampler runs gradient descent only (method = gd)")

    def criterion_value(self, y, name):
        """Evaluated on the held weights by the network itself (``y`` is their projection)."""
        return self.psys.criterion_value(y, name)


def system_of_weights(cfg: MixtureConfig, E: np.ndarray, params: list[dict], desc=None) -> ProjectedParticles:
    """The particle system of ``cfg`` started at the given explicit weights (the
    engine's per-head dicts ``{"a", "WK", "WQ", "w" (1, 1, d)}``) in the embedding E."""
    from ...engine.finite import ParticleSystem

    from .softmax_scale import logit_scale

    desc = _description(cfg) if desc is None else desc
    return ProjectedParticles(ParticleSystem(desc, E, params, cfg.max_abs), logit_scale(cfg))


def head_weights(WK, WQ, w) -> list[dict]:
    """The engine's per-head weight dicts of stacked mixture weights (head "+" then "-")."""
    return [{"a": np.array(s), "WK": np.array(WK[h], float), "WQ": np.array(WQ[h], float),
             "w": np.array(w[h], float)[None, None, :]} for h, s in enumerate((1.0, -1.0))]


# ----------------------------------------------------------------- runs


def make_particles(cfg: MixtureConfig, d: int | None = None, embed_seed: int | None = None,
                   threads: int | None = None) -> ProjectedParticles:
    """The initialised particle system of a finite-width GD config (memory:
    about 32 m d bytes of weights; with d < 4P = 8K the steps write two sets in
    turn, with larger d they update one in place).
    ``threads``: accepted for compatibility and ignored (the engine's network is
    numpy; its per-step products over the m rows go in blocks small enough that
    BLAS runs each on the calling thread)."""
    d = _check_cfg(cfg, d)
    desc = _description(cfg)
    E = _embedding(cfg, d, embed_seed)
    return system_of_weights(cfg, E, _engine_weights(cfg, desc, E), desc)


def run_particles(cfg: MixtureConfig, d: int | None = None, embed_seed: int | None = None,
                  monitor: integrate.Monitor | None = None, threads: int | None = None) -> integrate.Trajectory:
    """Train the explicit width-``cfg.width`` network in R^d (default 2K + 1) by
    full-batch GD with the stages and record grid of ``run.run(cfg)`` (the
    shared ``GDMap``, ``run.stages``, ``run.save_at``); returns the trajectory
    of PROJECTED reduced states (the reduced run's layout). ``cfg`` must have
    a finite width and method gd (else :class:`ConfigError`)."""
    system = make_particles(cfg, d, embed_seed, threads)
    y0 = system.projection()
    return _run.solver(cfg).solve(system, y0, _run.stages(cfg), _run.save_at(cfg), monitor)


def _attrs(cfg: MixtureConfig, d: int, embed_seed: int | None) -> dict:
    return {"particles": 1, "d": int(d), "width": int(cfg.width), "seed": int(cfg.seed),
            "embed_seed": -1 if embed_seed is None else int(embed_seed)}


def particles_to_file(cfg: MixtureConfig, out: str | Path, d: int | None = None, progress: bool = True,
                      embed_seed: int | None = None, checkpoint_s: float = 60.0, threads: int | None = None):
    """Run the particle sampler and write ``out`` in the mixture run format
    (``run.save``: system "mixture", recorded quantities from the shared
    observable function) with attrs particles = 1, d, width, seed, embed_seed
    (-1: E drawn from child 3 of SeedSequence(seed)). Progress on stderr and a
    checkpoint file (status "interrupted", naming the step reached) every
    ``checkpoint_s`` seconds, through the shared harness
    (``meanfield.core.harness.run_to_file``, as ``run.run_to_file``: a
    checkpoint that fails is a warning and the run goes on). Returns
    (trajectory, path)."""
    d = _check_cfg(cfg, d)
    attrs = _attrs(cfg, d, embed_seed)
    return harness.run_to_file(
        cfg, lambda mon: run_particles(cfg, d, embed_seed, monitor=mon, threads=threads),
        lambda traj, status=None, message=None: _run.save(out, cfg, traj, status=status, message=message,
                                                          extra_attrs=attrs),
        progress=progress, checkpoint_s=checkpoint_s, label="particles ")
