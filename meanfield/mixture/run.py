"""One mixture run, from a validated config to an HDF5 run file.

:class:`MixtureSystem` adapts the numba kernels to the shared steppers of
``meanfield.integrate``; :func:`stages` turns a schedule into stages;
:func:`run` integrates and :func:`save` writes the public run format.

Configs that need general token vectors or several neurons per head
(``cfg.dense``: ``feature_gram``, ``n_train`` / ``noise_sigma`` or
``n_neurons > 1``) are handed to ``meanfield.mixture.dense`` by :func:`run`
and :func:`save`; every other config runs here, unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import integrate
from ..config import parse_criterion
from ..io import write_run
from . import kernels
from .config import MixtureConfig
from .data import SampleSet, feature_labels, sample_set
from .init import initial_state
from .observables import observables
from .stagetimes import stage_times

EXIT_CODES = {"complete": 0, "diverged": 3, "interrupted": 130}


@dataclass
class MixtureSystem:
    """The reduced mixture dynamics as a system for ``meanfield.integrate``.
    ``mode`` of a stage is ``(train_w, train_att)``."""

    samples: SampleSet
    relu_prime_at_zero: float = 1.0
    max_abs: float = math.inf

    def _args(self):
        s = self.samples
        return s.P, s.idx, s.sgn, s.y, s.weight

    def gd_advance(self, y, nsteps, eta, mode, criterion):
        kind, op, thr = 0, 1, 0.0
        if criterion is not None:
            kind = kernels.CRITERIA[criterion[0]]
            op = 1 if criterion[1] == ">=" else -1
            thr = float(criterion[2])
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
    if cfg.method == "gd":
        return integrate.GDMap(cfg.eta)
    if cfg.method == "rk4":
        return integrate.RK4(cfg.dt)
    return integrate.Dopri5(rtol=cfg.rtol, atol=cfg.atol, h_min=cfg.h_min or 0.0)


def save_at(cfg: MixtureConfig) -> integrate.SaveAt:
    """The recording grid; default: about 1000 records over the horizon."""
    gd = cfg.method == "gd"
    H = cfg.horizon
    if cfg.record_every is not None:
        return integrate.SaveAt(every=cfg.record_every)
    if cfg.record_log is not None:
        return integrate.SaveAt.log(cfg.record_log, H, integer=gd, t_min=None if gd else min(cfg.eta, H) * 1e-2)
    if cfg.record_dt is not None:
        return integrate.SaveAt.uniform(cfg.record_dt, H)
    if gd:
        return integrate.SaveAt(every=max(1, int(H) // 1000))
    return integrate.SaveAt.uniform(H / 1000, H)


def samples_of(cfg: MixtureConfig) -> SampleSet:
    """The exact sample set of a config (group weights, label probability, label noise)."""
    return sample_set(cfg.K, cfg.L, cfg.p, cfg.label_prob, cfg.label_noise)


def run(cfg: MixtureConfig, y0: np.ndarray | None = None, monitor: integrate.Monitor | None = None) -> integrate.Trajectory:
    """Integrate the reduced dynamics for ``cfg`` (from ``y0`` if given).
    Dense configs (``cfg.dense``) run on ``meanfield.mixture.dense``: their
    states are in that module's basis coordinates."""
    if cfg.dense:
        from . import dense

        return dense.run(cfg, y0, monitor)
    samples = samples_of(cfg)
    if cfg.softmax_scale != "1":  # the original 1/sqrt(m) model, in scaled variables
        from .softmax_scale import system_and_state

        system, y = system_and_state(cfg, samples, y0)
        return solver(cfg).solve(system, y, stages(cfg), save_at(cfg), monitor)
    system = MixtureSystem(samples, cfg.relu_prime_at_zero, cfg.max_abs)
    y = initial_state(cfg) if y0 is None else np.asarray(y0, dtype=np.float64)
    return solver(cfg).solve(system, y, stages(cfg), save_at(cfg), monitor)


def samples_group(samples: SampleSet) -> dict:
    out = {
        "idx": samples.idx, "sgn": samples.sgn, "y": samples.y, "group": samples.group,
        "weight": samples.weight, "consistent": samples.consistent.astype(np.int8),
        "distractor_group": samples.distractor_group, "distractor_sign": samples.distractor_sign,
        "description": np.array([samples.describe(i) for i in range(samples.n)], dtype=object),
    }
    if samples.is_flipped.any():
        out["flipped"] = samples.is_flipped.astype(np.int8)
    return out


def recorded(cfg: MixtureConfig, traj: integrate.Trajectory):
    """What a run records, in one place for run files and in-memory runs:
    (samples, trajectory arrays, observables, stage times) of a fast-path
    trajectory. Margins of flipped labels (label noise) do not count for the
    stage times."""
    samples = samples_of(cfg)
    arr = traj.arrays()
    Y = arr["y"] if arr["y"].size else np.empty((0, kernels.state_size(cfg.P)))
    obs = observables(samples, Y)
    clean = ~samples.is_flipped
    st = stage_times(arr["t"], obs["loss"], obs["margin"][:, clean], samples.consistent[clean], obs["S"], obs["A"],
                     obs["B"], obs["w"], samples, cfg.schedule, traj.stage_ends, cfg.relu_prime_at_zero)
    return samples, arr, obs, st


def save(path: str | Path, cfg: MixtureConfig, traj: integrate.Trajectory, status: str | None = None,
         message: str | None = None, extra_attrs: dict | None = None) -> Path:
    """Write the run file (public format, see the README). Dense configs are
    written by ``meanfield.mixture.dense.save`` (same datasets, in feature
    coordinates, plus the dense path's extras)."""
    if cfg.dense:
        from . import dense

        return dense.save(path, cfg, traj, status, message, extra_attrs)
    samples, arr, obs, st = recorded(cfg, traj)
    data = {
        "features": np.array(feature_labels(cfg.K), dtype=object),
        "heads": np.array(["+", "-"], dtype=object),
        "t": arr["t"], "step": arr["step"], "stage": arr["stage"],
        "loss": obs["loss"], "w": obs["w"], "S": obs["S"], "A": obs["A"], "B": obs["B"],
        "margin": obs["margin"], "u": obs["u"],
        "samples": samples_group(samples),
    }
    attrs = {
        "K": cfg.K, "L": cfg.L, "omega": cfg.omega, "eta": cfg.eta, "method": cfg.method,
        "schedule": cfg.schedule, "width": -1 if cfg.width is None else cfg.width, "seed": cfg.seed,
        "n_samples": samples.n, "stage_ends": traj.stage_ends,
        "stopped_at_step": int(arr["step"][-1]) if arr["step"].size else 0,
        "stopped_at_t": float(arr["t"][-1]) if arr["t"].size else 0.0,
        "warnings": list(traj.warnings),
    }
    attrs.update({"T1": st["T1"], "T2": st["T2"], "T_loss": st["T_loss"], "stage_time_criteria": st["criteria"]})
    attrs.update(extra_attrs or {})
    return write_run(path, system="mixture", config=cfg.to_dict(), status=status or traj.status,
                     message=message or traj.message, data=data, attrs=attrs)


def run_to_file(cfg: MixtureConfig, out: str | Path, progress: bool = True, checkpoint_s: float = 60.0):
    """Run and write ``out``; progress on stderr for long runs, a checkpoint
    file (status "interrupted") every ``checkpoint_s`` seconds so that even a
    killed process leaves a valid file. Returns (trajectory, path)."""
    unit = "step" if cfg.method == "gd" else "t"

    def ckpt(traj):
        last = traj.step[-1] if unit == "step" else traj.t[-1]
        where = max(float(getattr(mon, "done", last) or last), float(last))  # the step reached, not the last record
        save(out, cfg, traj, status="interrupted",
             message=f"checkpoint at {unit} {where:.6g} (last record at {unit} {last:.6g}): "
                     f"the run was still going when this was written; if you read this, it ended early")

    mon = integrate.Monitor(total=cfg.horizon, unit=unit, quiet_s=2.0 if progress else math.inf,
                            checkpoint=ckpt, checkpoint_s=checkpoint_s)
    with mon:
        traj = run(cfg, monitor=mon)
    path = save(out, cfg, traj)
    return traj, path
