"""The reduced mixture dynamics as systems for ``meanfield.core.integrate``, and how
a config maps to them.

:class:`MixtureSystem` adapts the numba kernels (``meanfield.models.mixture.kernels``)
to the shared steppers; :class:`ScaledMixtureSystem` is the original model's
``softmax_scale = "1/sqrt(m)"`` (the reduction is derived in
``meanfield.models.mixture.softmax_scale``); :func:`system_and_state` picks the system
and initial state of a (non-dense) config; :func:`stages`, :func:`solver` and
:func:`save_at` turn its schedule, method and recording options into what
``integrate`` runs; :func:`samples_of` is its exact sample set.

This module runs nothing itself: ``meanfield.models.mixture.run`` integrates the
fast path with these pieces (dense configs run through the engine:
``meanfield.models.mixture.family`` / ``meanfield.engine.system``), and the
measurements (claims, studies, escape times) read their results.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...core.activations import accept_step

from ...core import integrate
from ...core.config import parse_criterion
from . import kernels
from .config import MixtureConfig
from .data import SampleSet, sample_set
from .init import initial_state

def criterion_args(criterion) -> tuple[int, int, float]:
    """(kind, op, threshold) of a parsed stage criterion for the kernels
    (kind 0: none; op +1 for >=, -1 for <=)."""
    return integrate.criterion_args(criterion, kernels.CRITERIA)


@dataclass
class MixtureSystem:
    """The reduced mixture dynamics as a system for ``meanfield.core.integrate``.
    ``mode`` of a stage is ``(train_w, train_att)``."""

    samples: SampleSet
    relu_prime_at_zero: float = 1.0
    max_abs: float = math.inf

    def _args(self):
        s = self.samples
        return s.P, s.idx, s.sgn, s.y, s.weight

    def gd_advance(self, y, nsteps, eta, mode, criterion):
        kind, op, thr = criterion_args(criterion)
        s = self.samples
        done, code, _ = kernels.gd_advance(y, int(nsteps), float(eta), s.P, s.idx, s.sgn, s.y, s.weight,
                                           s.consistent, float(self.relu_prime_at_zero), bool(mode[0]),
                                           bool(mode[1]), kind, op, thr, float(self.max_abs))
        return int(done), int(code)

    def rhs(self, y, mode):
        out = np.empty_like(y)
        kernels.flow_rhs(y, out, *self._args(), float(self.relu_prime_at_zero), bool(mode[0]), bool(mode[1]))
        return out

    def criterion_value(self, y, name):
        loss, G, dw, margin, u = kernels.loss_and_grads(np.ascontiguousarray(y), *self._args(),
                                                        float(self.relu_prime_at_zero))
        return float(kernels.criterion_value(kernels.CRITERIA[name], loss, margin, self.samples.consistent, dw))


def stages(cfg: MixtureConfig) -> list[integrate.Stage]:
    """Stages of the schedule. Lengths are steps (gd) or times (flow, rk4)."""
    gd = cfg.method == "gd"
    if cfg.schedule == "simultaneous":
        length = cfg.steps if gd else cfg.t_end
        crit = parse_criterion("criterion", cfg.criterion, kernels.CRITERIA)
        return [integrate.Stage(1, (True, True), length, crit, "simultaneous")]
    lengths = cfg.stage_steps if gd else cfg.stage_times
    modes = [(True, False), (False, True), (True, cfg.stage3 == "both")]
    names = ["neurons", "attention", "neurons" if cfg.stage3 == "neurons" else "both"]
    return [
        integrate.Stage(i + 1, modes[i], lengths[i],
                        parse_criterion("stage_criteria", cfg.stage_criteria[i], kernels.CRITERIA), names[i])
        for i in range(3)
    ]


def solver(cfg: MixtureConfig):
    """The solver of the config's method (``integrate.solver_of``)."""
    return integrate.solver_of(cfg)


def save_at(cfg: MixtureConfig) -> integrate.SaveAt:
    """The recording grid (``integrate.save_at_of``); default: about 1000
    records over the horizon."""
    return integrate.save_at_of(cfg)


def samples_of(cfg: MixtureConfig) -> SampleSet:
    """The exact sample set of a config (group weights, label probability, label noise)."""
    return sample_set(cfg.K, cfg.L, cfg.p, cfg.label_prob, cfg.label_noise)


SCALES = ("1", "1/sqrt(m)")


def logit_scale(cfg) -> float:
    """The factor c in front of the attention logits (1 unless ``1/sqrt(m)``)."""
    return 1.0 if cfg.softmax_scale == "1" else 1.0 / math.sqrt(cfg.width)


@dataclass
class ScaledMixtureSystem(MixtureSystem):
    """:class:`MixtureSystem` with the attention step (or flow speed) times
    ``att_factor``; the state is (S~, A~, B~, w~)."""

    att_factor: float = 1.0

    def gd_advance(self, y, nsteps, eta, mode, criterion):
        s = self.samples
        kind, op, thr = criterion_args(criterion)
        r0 = float(self.relu_prime_at_zero)
        woff = 6 * s.P * s.P
        k = 0
        while True:
            loss, G, dw, margin, u = kernels.loss_and_grads(y, s.P, s.idx, s.sgn, s.y, s.weight, r0)
            if not math.isfinite(loss):
                return k, 2
            if kind:
                c = kernels.criterion_value(kind, loss, margin, s.consistent, dw)
                if (op > 0 and c >= thr) or (op < 0 and c <= thr):
                    return k, 1
            if k == nsteps:
                return k, 0
            new = y.copy()
            if mode[1]:
                kernels._attention_update(y, new, s.P, G, float(eta) * self.att_factor, True)
            if mode[0]:
                new[woff:] -= float(eta) * dw.ravel()
            code = accept_step(y, new, self.max_abs)
            if code != 0:
                return k, code
            k += 1

    def rhs(self, y, mode):
        out = super().rhs(y, mode)
        out[: 6 * self.samples.P ** 2] *= self.att_factor
        return out


def system_and_state(cfg, samples, y0=None):
    """(system, initial state) of a fast-path (non-dense) config: the
    :class:`MixtureSystem` and ``init.initial_state``, or, for
    ``softmax_scale = "1/sqrt(m)"``, the :class:`ScaledMixtureSystem` and the
    initial state in the scaled variables; ``y0``, if given, is used as is
    (already scaled)."""
    if cfg.softmax_scale == "1":
        system = MixtureSystem(samples, cfg.relu_prime_at_zero, cfg.max_abs)
        return system, (initial_state(cfg) if y0 is None else np.asarray(y0, dtype=np.float64))
    c = logit_scale(cfg)
    system = ScaledMixtureSystem(samples, cfg.relu_prime_at_zero, cfg.max_abs, att_factor=c)
    if y0 is None:
        y = initial_state(cfg).copy()
        y[: 6 * cfg.P ** 2] *= c
    else:
        y = np.asarray(y0, dtype=np.float64)
    return system, y
