"""Runs in memory: the measurements that the claims, studies and escape
times read (``meanfield.models.mixture.claims``, ``studies``, ``escape``,
``robustness``).

:func:`simulate` runs a config and returns a run-like dict (the keys of a run
file; :func:`as_run` the same for a given fast-path trajectory,
:func:`as_dense_run` for an engine trajectory of a dense config); :func:`omega_sweep` measures the stage-2 duration T2 - T1 per omega.
"""

from __future__ import annotations

import math

from .config import MixtureConfig, make_config
from .data import feature_labels, samples_group
from .run import description, recorded
from .run import run as run_traj


def simulate(cfg: MixtureConfig) -> dict:
    """Run ``cfg`` and return the recorded quantities as a run-like dict
    (the same keys as a run file, computed by the same observable function).
    Dense configs run through the engine (:func:`as_dense_run`)."""
    if cfg.dense:
        desc = description(cfg)
        return as_dense_run(cfg, desc, run_traj(cfg, desc=desc))
    return as_run(cfg, run_traj(cfg))


def as_dense_run(cfg: MixtureConfig, desc, traj) -> dict:
    """The run-like dict of an engine trajectory of a dense config (``desc``
    its description, ``run.description``): the run file's datasets (S, A, B,
    w, loss, margin, u, ``feature_gram``, ...) plus ``w_neurons``,
    ``u_neurons`` (every neuron, also for one), ``g`` (T, n) = 1 / (1 +
    exp(margin)), ``grad_w`` (the ``grad_w`` criterion per record), ``y``
    (the engine's states), ``description``; ``attrs`` with the stage times,
    ``basis_dim`` and ``n_neurons``."""
    import numpy as np

    from ...engine.runs import in_memory, stage_times
    from .family import mixture_datasets
    from ...engine.system import system_of

    r = in_memory(desc, system_of(desc), traj)
    data, extra = mixture_datasets(desc, r)
    st = stage_times(desc, r.t, r.obs, traj.stage_ends, r.step)
    out = {k: v for k, v in data.items() if k not in ("features", "heads")}
    out["features"] = feature_labels(cfg.K)
    out["w_neurons"] = np.stack([r.var(h, "w")[:, 0] for h in ("+", "-")], axis=1)
    out["u_neurons"] = r.obs["u"][..., :cfg.n_neurons]
    with np.errstate(over="ignore"):
        out["g"] = 1.0 / (1.0 + np.exp(r.obs["margin"]))
    out["grad_w"] = r.obs["grad_w"]
    out["y"] = r.y
    out["description"] = desc
    out["attrs"] = {"K": cfg.K, "L": cfg.L, "omega": cfg.omega, "eta": cfg.eta, "schedule": cfg.schedule,
                    "width": math.inf if cfg.width is None else cfg.width, "stage_ends": traj.stage_ends,
                    "status": traj.status, "T1": st["T1"], "T2": st["T2"], "T_loss": st["T_loss"],
                    "basis_dim": extra["basis_dim"], "n_neurons": cfg.n_neurons}
    out["config"] = cfg
    return out


def as_run(cfg: MixtureConfig, traj) -> dict:
    """The run-like dict of a fast-path trajectory of ``cfg`` (from any start
    or system with the fast path's state layout)."""
    samples, arr, obs, st = recorded(cfg, traj)
    out = {"t": arr["t"], "step": arr["step"], "stage": arr["stage"], **obs,
           "samples": samples_group(samples), "features": feature_labels(cfg.K)}
    out["attrs"] = {"K": cfg.K, "L": cfg.L, "omega": cfg.omega, "eta": cfg.eta, "schedule": cfg.schedule,
                    "width": math.inf if cfg.width is None else cfg.width, "stage_ends": traj.stage_ends,
                    "status": traj.status, "T1": st["T1"], "T2": st["T2"], "T_loss": st["T_loss"]}
    out["config"] = cfg
    return out


def omega_sweep(omegas, base: dict, margin: float = 0.1, max_steps: int = 200000) -> list[float]:
    """Stage-2 duration T2 - T1 per omega: three-stage GD, stage 2 ended by the
    criterion inconsistent_margin >= ``margin`` (exact to one step)."""
    out = []
    for om in omegas:
        cfg = make_config(base, omega=float(om), schedule="three-stage",
                          stage_steps=(base.get("stage_steps", (1000,))[0], max_steps, 0),
                          stage_criteria=("none", f"inconsistent_margin>={margin}", "none"), record_every=1000)
        out.append(stage2_duration(run_traj(cfg)))
    return out


def stage2_duration(traj) -> float:
    """T2 - T1 of a three-stage trajectory: the end of stage 2 minus the end
    of stage 1, when stage 2 was ended by its criterion (NaN otherwise)."""
    ends = {e["stage"]: e for e in traj.stage_ends}
    if 2 in ends and ends[2]["reason"] == "criterion":
        return float(ends[2]["t"] - ends[1]["t"])
    return math.nan
