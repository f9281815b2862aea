"""One mixture run, from a validated config to an HDF5 run file.

The system, stages, solver and recording grid of a config come from
``meanfield.models.mixture.system`` (re-exported here: ``run.MixtureSystem``,
``run.stages``, ...); :func:`run` integrates and :func:`save` writes the
public run format.

Configs that need general token vectors or several neurons per head
(``cfg.dense``: ``feature_gram``, ``n_train`` / ``noise_sigma`` or
``n_neurons > 1``) run through the engine: :func:`description` is the
mixture family's description of the config (``meanfield.models.mixture.family``),
integrated by ``meanfield.engine.system`` and written by
``meanfield.engine.runs.save`` in this system's schema (the same file the
mixture's former dense path wrote). Every other config runs here on the fast
path (``meanfield.models.mixture.kernels``), the optimised special case that the
tests hold equal to the engine.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ...core import harness, integrate
from ...core.io import write_run
from . import kernels
from .config import MixtureConfig
from .data import feature_labels, samples_group
from .init import initial_state  # noqa: F401 (re-exported)
from .observables import observables
from .stagetimes import stage_times
from .system import MixtureSystem, samples_of, save_at, solver, stages, system_and_state  # noqa: F401 (re-exported)

EXIT_CODES = harness.EXIT_CODES  # one table for every system (meanfield.core.harness)


def description(cfg: MixtureConfig):
    """The engine description of ``cfg`` (the mixture family's)."""
    from .family import mixture_description

    return mixture_description(cfg)


def run(cfg: MixtureConfig, y0: np.ndarray | None = None, monitor: integrate.Monitor | None = None,
        desc=None) -> integrate.Trajectory:
    """Integrate the reduced dynamics for ``cfg`` (from ``y0`` if given).
    Dense configs (``cfg.dense``) run through the engine (``desc``: their
    description, default :func:`description`); their states ``y`` are the
    engine's (``meanfield.engine.reduce``: per head the joint Gram
    [[A, S], [S^T, B]] and the neurons, in the description's dictionary)."""
    if cfg.dense:
        from ...engine.system import integrate_description

        return integrate_description(desc if desc is not None else description(cfg), y0, monitor)[1]
    system, y = system_and_state(cfg, samples_of(cfg), y0)
    return solver(cfg).solve(system, y, stages(cfg), save_at(cfg), monitor)


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
                     obs["B"], obs["w"], samples, cfg.schedule, traj.stage_ends, cfg.relu_prime_at_zero,
                     step=arr["step"] if cfg.method == "gd" else None)
    return samples, arr, obs, st


def save(path: str | Path, cfg: MixtureConfig, traj: integrate.Trajectory, status: str | None = None,
         message: str | None = None, extra_attrs: dict | None = None, desc=None) -> Path:
    """Write the run file (public format, see the README). Dense configs are
    written by ``meanfield.engine.runs.save`` (same datasets, in feature
    coordinates, plus ``feature_gram``, ``w_neurons``/``u_neurons``, the
    ``training_set`` group and attributes dense_path, basis_dim, n_neurons)."""
    if cfg.dense:
        from ...engine import runs
        from ...engine.system import system_of

        desc = desc if desc is not None else description(cfg)
        return runs.save(path, desc, runs.in_memory(desc, system_of(desc), traj), status, message, extra_attrs,
                         engine_tag=False)
    samples, arr, obs, st = recorded(cfg, traj)
    data = {
        "features": np.array(feature_labels(cfg.K), dtype=object),
        "heads": np.array(["+", "-"], dtype=object),
        "t": arr["t"], "step": arr["step"], "stage": arr["stage"],
        "loss": obs["loss"], "w": obs["w"], "S": obs["S"], "A": obs["A"], "B": obs["B"],
        "margin": obs["margin"], "u": obs["u"],
        "samples": {**samples_group(samples), **sample_tokens(samples)},
        "initial_state": {nm: np.asarray(obs[nm][0]) for nm in ("S", "A", "B", "w")},
    }
    attrs = {
        "K": cfg.K, "L": cfg.L, "omega": cfg.omega, "eta": cfg.eta, "method": cfg.method,
        "schedule": cfg.schedule, "width": math.inf if cfg.width is None else cfg.width, "seed": cfg.seed,
        "n_samples": samples.n, "stage_ends": traj.stage_ends,
        "stopped_at_step": int(arr["step"][-1]) if arr["step"].size else 0,
        "stopped_at_t": float(arr["t"][-1]) if arr["t"].size else 0.0,
        "warnings": list(traj.warnings),
        **self_contained(cfg),
    }
    attrs.update({"T1": st["T1"], "T2": st["T2"], "T_loss": st["T_loss"], "stage_time_criteria": st["criteria"]})
    attrs.update(extra_attrs or {})
    return write_run(path, system="mixture", config=cfg.to_dict(), status=status or traj.status,
                     message=message or traj.message, data=data, attrs=attrs)


def sample_tokens(samples) -> dict:
    """``tokens`` (n, L, 2K) coefficient vectors over the features (token l of
    sample i is ``sgn[i, l] e_{idx[i, l]}``) and ``counts`` (n, L) (all 1) of
    a mixture sample set: the run file's copy of what was trained on."""
    n, L = samples.idx.shape
    tok = np.zeros((n, L, 2 * samples.K))
    np.put_along_axis(tok, samples.idx[..., None], samples.sgn[..., None], axis=2)
    return {"tokens": tok, "counts": np.ones((n, L))}


def self_contained(cfg: MixtureConfig) -> dict:
    """The attributes that make a fast-path run file self-contained: the
    softmax scale of each head (``head_scales``; the recorded S, A, B are the
    scaled ones), the resolved config (``description``) and its sha256
    (``description_hash``: canonical JSON)."""
    import hashlib
    import json
    import math

    c = 1.0 if cfg.softmax_scale == "1" else 1.0 / math.sqrt(cfg.width)
    d = cfg.to_dict()
    return {"head_scales": {"+": c, "-": c}, "description": d,
            "description_hash": hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()}


def run_to_file(cfg: MixtureConfig, out: str | Path, progress: bool = True, checkpoint_s: float = 60.0):
    """Run and write ``out`` through the shared harness
    (``meanfield.core.harness.run_to_file``): progress on stderr for long
    runs, a checkpoint file (status "interrupted") every ``checkpoint_s``
    seconds so that even a killed process leaves a valid file. Returns
    (trajectory, path)."""
    dk = {"desc": description(cfg)} if cfg.dense else {}  # dense: one description for the run and every save
    return harness.run_to_file(
        cfg, lambda mon: run(cfg, monitor=mon, **dk),
        lambda traj, status=None, message=None: save(out, cfg, traj, status=status, message=message, **dk),
        progress=progress, checkpoint_s=checkpoint_s)
