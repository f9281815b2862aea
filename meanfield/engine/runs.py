"""Runs of a description: in memory (:func:`run`) and to an HDF5 run file (:func:`run_to_file`).

Run file (one schema, variable groups by name): datasets ``t``, ``step``,
``stage``, ``loss`` (T,), ``margin`` (T, n), ``u`` (T, n, H, rows) and a group
``variables/<head>/<name>`` per reduced variable in report coordinates (S, A,
B (T, R, R); W (T, R, R); w (T, C, n, R); a (T, 1); other Gram blocks such as
``V.r1`` as they are), ``features`` (the report names), ``heads``, and a
``samples`` group (names, weight, target, flags). Attributes: model, family,
stage_ends, T1, T2, T_loss (``meanfield.mixture.stagetimes.stage_times_of``), width,
seed, eta, method, status, message.

The mixture family writes today's mixture schema instead (system
``mixture``: datasets S, A, B (T, 2, P, P), w (T, 2, P), u (T, n, 2), margin,
loss, the ``samples`` group, T1/T2/T_loss, and, for configs off the fast
path (``cfg.dense``), ``feature_gram``, ``w_neurons``/``u_neurons``, the
``training_set`` group and attributes dense_path, basis_dim, n_neurons), so
every reader of mixture run files reads engine runs unchanged.
``meanfield.mixture.run.save`` writes its dense configs with :func:`save`
(``engine_tag=False``: the file is exactly ``meanfield mixture run``'s).
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np

from ..core import harness, integrate
from ..core.io import write_run
from .description import Description
from .system import EngineSystem, integrate_description, observables, system_of

EXIT_CODES = harness.EXIT_CODES  # one table for every system (meanfield.core.harness)


from ..core.run import Named, Run  # noqa: E402,F401  the one run object (meanfield.Run)


def in_memory(desc: Description, system: EngineSystem, traj: integrate.Trajectory) -> Run:
    """The :class:`meanfield.Run` of a trajectory of ``desc``, in memory: the
    same object :func:`meanfield.open_run` returns for its run file (its
    datasets and attributes, what :func:`save` writes, are built on first
    use), plus ``desc``, ``system``, ``trajectory``, ``y`` (the raw flat
    states), ``obs`` (:func:`~meanfield.engine.system.observables`) and the
    reduced variables in engine coordinates (``run.S["+", "c1", "v1"]``,
    ``run.var("+", "V.r1")``).

    Parameters
    ----------
    desc : Description
    system : EngineSystem
    traj : meanfield.core.integrate.Trajectory

    Returns
    -------
    Run

    Examples
    --------
    >>> system, traj = integrate_description(desc)      # doctest: +SKIP
    >>> r = in_memory(desc, system, traj); r.S.shape    # doctest: +SKIP
    """
    arr = traj.arrays()
    r = Run(lazy=None)
    r.desc, r.system_obj, r.trajectory = desc, system, traj
    r.t, r.step, r.stage = arr["t"], arr["step"], arr["stage"]
    r.y = arr["y"] if arr["y"].size else np.empty((0, system.pk.lay.size))
    r.status, r.message, r.stage_ends = traj.status, traj.message, traj.stage_ends
    r.obs = observables(desc, system, r.y)
    r.loss = r.obs["loss"]
    r.margin = r.obs["margin"]
    r.heads = tuple(h.name for h in desc.model.heads)
    r.features = tuple(desc.dictionary.names)

    def fill():
        from .. import __version__

        system_name, config, data, attrs = file_content(desc, r)
        return data, {"format": "meanfield-run", "system": system_name, "meanfield_version": __version__,
                      "config": config, "status": r.status, "message": r.message, **attrs}

    r._lazy = fill
    return r


def run(desc: Description, y0=None, monitor: integrate.Monitor | None = None) -> Run:
    """Integrate the exact reduced dynamics of a description, in memory.

    Parameters
    ----------
    desc : Description
        A loaded description (:func:`meanfield.engine.load`); its training
        section fixes the method (GD map, flow, RK4), stages and records.
    y0 : numpy.ndarray or None
        A flat initial state (default: the description's initialisation, the
        first record).
    monitor : meanfield.core.integrate.Monitor or None
        Progress and interruption (None: none).

    Returns
    -------
    Run
        A :class:`meanfield.Run` (``r.t``, ``r.loss``, ``r.margin``, the
        reduced variables by name: ``r.S["h", "plus", "blank"]``,
        ``r.var("h", "w")``; ``r.status``, ``r.stage_ends``), the same object
        :func:`meanfield.open_run` gives for its run file.

    Examples
    --------
    >>> import meanfield.engine as me
    >>> r = me.run(me.load("docs/examples/majority.toml", steps=50))
    >>> r.status, len(r.t), round(float(r.loss[0]), 4)
    ('complete', 51, 0.6834)
    """
    system, traj = integrate_description(desc, y0, monitor)
    return in_memory(desc, system, traj)


def stage_times(desc: Description, t, obs, stage_ends, step=None) -> dict:
    """T1, T2, T_loss and the criteria of a recorded run (``obs``: :func:`observables`),
    interpolated between the two records around each crossing (GD, given the
    records' ``step``: rounded up to the step)."""
    from ..mixture.stagetimes import stage_times_of

    d = desc.data
    sched = "three-stage" if getattr(desc.parameters, "schedule", None) == "three-stage" else "simultaneous"
    if desc.family is None and len(desc.training.stages) > 1:
        sched = "three-stage"  # T1 = the end of stage 1
    return stage_times_of(t, obs["loss"], obs["margin"], d.flag("consistent"), obs["grad_w"], sched, stage_ends,
                          ~d.flag("flipped"), step=step if desc.training.method == "gd" else None)


_stage_times = stage_times  # the name meanfield.engine.sweep uses


def mixture_datasets(desc: Description, r: Run) -> tuple[dict, dict]:
    """(datasets, attributes) of a mixture-family run in the mixture system's
    schema (see the module docstring): what :func:`save` writes and what
    ``meanfield.mixture.measure.simulate`` returns for dense configs."""
    from ..mixture.data import feature_labels, samples_group

    cfg = desc.parameters
    smp = desc.data.extra["samples"]
    obs = r.obs
    blk = obs["blocks"]
    c = desc.model.heads[0].scale  # softmax_scale 1/sqrt(m): the mixture records the scaled c S, c A, c B
    S, A, B = (c * np.stack([blk[f"{h}:{nm}"] for h in ("+", "-")], axis=1) for nm in ("S", "A", "B"))
    wn = np.stack([blk[f"{h}:w"][:, 0] for h in ("+", "-")], axis=1)  # (T, 2, nn, P)
    u_n = obs["u"][..., :cfg.n_neurons]  # (T, n, 2, nn)
    data = {
        "features": np.array(feature_labels(cfg.K), dtype=object),
        "heads": np.array(["+", "-"], dtype=object),
        "t": r.t, "step": r.step, "stage": r.stage,
        "loss": obs["loss"], "w": wn.mean(axis=2), "S": S, "A": A, "B": B,
        "margin": obs["margin"], "u": u_n.mean(axis=-1),
        "samples": samples_group(smp),
    }
    attrs = {}
    if cfg.dense:
        from ..mixture.config import gram_matrix

        dd = desc.data.extra.get("dense")
        data["feature_gram"] = dd.gram if dd is not None else (gram_matrix(cfg.feature_gram, cfg.K)
                                                                if cfg.feature_gram is not None else np.eye(2 * cfg.K))
        if cfg.n_neurons > 1:
            data["w_neurons"] = wn
            data["u_neurons"] = u_n
        if dd is not None and dd.tokens is not None:
            data["training_set"] = {"E": dd.E, "tokens": dd.tokens, "Q": dd.Q}
        attrs.update({"dense_path": 1, "basis_dim": int(desc.dictionary.P), "n_neurons": cfg.n_neurons})
    return data, attrs


def _jsonable(v):
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, (np.integer, np.floating)):
        return v.item()
    if isinstance(v, tuple):
        return list(v)
    return str(v)


def resolved(desc: Description) -> dict:
    """Every resolved parameter of ``desc`` (JSON-able): the description's
    summary (features, Gram, heads with their softmax ``scale``, loss, init,
    training) and the run knobs and declared parameters."""
    from .description import describe

    out = json.loads(json.dumps(describe(desc), default=_jsonable))
    params = desc.parameters.to_dict() if hasattr(desc.parameters, "to_dict") else {}
    out["parameters"] = json.loads(json.dumps(params, default=_jsonable))
    return out


def description_hash(desc: Description) -> str:
    """sha256 of the canonical JSON of :func:`resolved` (equal for two runs of
    the same model, data and parameters)."""
    blob = json.dumps(resolved(desc), sort_keys=True, default=_jsonable).encode()
    return hashlib.sha256(blob).hexdigest()


def variable_axes(desc: Description) -> dict:
    """The labels of every axis after time of each recorded variable,
    ``"head/name" -> [labels of axis 1, ...]`` (feature names for a feature
    axis, object names (``r1``) for a width-1 object, output and neuron
    numbers for value vectors)."""
    from .reduce import layout

    lay = layout(desc)
    feats = list(desc.dictionary.names)
    P = lay.P
    out = {}
    for k, h in enumerate(desc.model.heads):
        objs = {o[0]: o[2] for o in lay.objects[k]}
        for b in lay.blocks:
            if b.head != h.name:
                continue
            if b.kind == "gram":
                a, c = ({"A": ("K", "K"), "S": ("K", "Q"), "B": ("Q", "Q")}.get(b.name) or b.name.split(".", 1))
                out[f"{h.name}/{b.name}"] = [feats if objs[x] == P else [x] if objs[x] == 1
                                             else [f"{x}{i}" for i in range(objs[x])] for x in (a, c)]
            elif b.name == "W":
                out[f"{h.name}/W"] = [feats, feats]
            elif b.name == "w":
                C, n, _ = b.shape
                out[f"{h.name}/w"] = [[f"out{c + 1}" for c in range(C)], [f"n{j + 1}" for j in range(n)], feats]
            elif b.name == "a":
                out[f"{h.name}/a"] = ["sign"]
    return out


def _initial_blocks(desc: Description, r: Run) -> dict:
    """Every recorded variable at the initial state ("head:name" -> array)."""
    if r.step.size and int(r.step[0]) == 0 and r.t.size and float(r.t[0]) == 0.0:
        return {k: np.asarray(v[0]) for k, v in r.obs["blocks"].items()}
    from .reduce import initial_state

    obs = observables(desc, r.system_obj, initial_state(desc)[None, :])
    return {k: np.asarray(v[0]) for k, v in obs["blocks"].items()}


def file_content(desc: Description, r: Run, status: str | None = None, message: str | None = None,
                 extra_attrs: dict | None = None, engine_tag: bool = True) -> tuple[str, dict, dict, dict]:
    """(system, config, datasets, attributes) of the run file of ``r``: what
    :func:`save` writes (schema in the module docstring and ``docs/run-files.md``)."""
    st = stage_times(desc, r.t, r.obs, r.stage_ends, r.step)
    d = desc.data
    common = {
        "eta": desc.training.eta, "method": desc.training.method,
        "width": math.inf if desc.init.width is None else desc.init.width, "seed": desc.init.seed,
        "n_samples": d.n, "stage_ends": r.stage_ends,
        "stopped_at_step": int(r.step[-1]) if r.step.size else 0,
        "stopped_at_t": float(r.t[-1]) if r.t.size else 0.0,
        "warnings": list(r.trajectory.warnings),
        "T1": st["T1"], "T2": st["T2"], "T_loss": st["T_loss"], "stage_time_criteria": st["criteria"],
        "head_scales": {h.name: float(h.scale) for h in desc.model.heads},
        "description": resolved(desc), "description_hash": description_hash(desc),
    }
    tokens = {"tokens": np.asarray(d.tokens, dtype=float), "counts": d.count_array}
    init = _initial_blocks(desc, r)
    if engine_tag:
        common.update({"engine": 1, "model": desc.name})
    if desc.family == "mixture":
        cfg = desc.parameters
        data, attrs = mixture_datasets(desc, r)
        c = desc.model.heads[0].scale
        data["samples"] = {**data["samples"], **tokens}
        data["initial_state"] = {nm: (c if nm != "w" else 1.0) * np.stack(
            [init[f"{h}:{nm}"] if nm != "w" else init[f"{h}:w"][0].mean(axis=0) for h in ("+", "-")])
            for nm in ("S", "A", "B", "w")}
        attrs.update({"K": cfg.K, "L": cfg.L, "omega": cfg.omega, "schedule": cfg.schedule})
        attrs.update(common)
        attrs.update(extra_attrs or {})
        return "mixture", cfg.to_dict(), data, attrs
    variables, init_g = {}, {}
    for key, arr in r.obs["blocks"].items():
        h, nm = key.split(":", 1)
        variables.setdefault(h, {})[nm] = arr
        init_g.setdefault(h, {})[nm] = init[key]
    samples = {"weight": d.weight, "target": d.target,
               "names": np.array(d.names if d.names is not None else [f"x{i}" for i in range(d.n)], dtype=object),
               **tokens}
    for k, v in d.flags.items():
        samples[k] = np.asarray(v).astype(np.int8)
    data = {"features": np.array(desc.dictionary.names, dtype=object),
            "heads": np.array([h.name for h in desc.model.heads], dtype=object),
            "t": r.t, "step": r.step, "stage": r.stage, "loss": r.loss, "margin": r.margin, "u": r.obs["u"],
            "variables": variables, "initial_state": init_g, "samples": samples}
    attrs = dict(common)
    attrs["family"] = desc.family or ""
    attrs["variable_axes"] = variable_axes(desc)
    attrs.update(extra_attrs or {})
    config = {"parameters": desc.parameters.to_dict() if hasattr(desc.parameters, "to_dict") else {},
              "declared": {k: list(v) if isinstance(v, tuple) else v for k, v in desc.declared},
              "source": desc.source}
    return "engine", config, data, attrs


def save(path: str | Path, desc: Description, r: Run, status: str | None = None, message: str | None = None,
         extra_attrs: dict | None = None, engine_tag: bool = True) -> Path:
    """Write the run file of ``r`` (see the module docstring and
    ``docs/run-files.md``).

    Parameters
    ----------
    path : str or Path
        the run file (written atomically).
    desc : Description
    r : Run
        an in-memory run of ``desc`` (:func:`in_memory`).
    status, message : str, optional
        override the run's own.
    extra_attrs : dict, optional
        more root attributes.
    engine_tag : bool
        mark the file as an engine run (attributes ``engine``, ``model``);
        off for the mixture system's own runs of the mixture family.

    Returns
    -------
    Path

    Examples
    --------
    >>> save("runs/m.h5", desc, run(desc))     # doctest: +SKIP
    """
    system, config, data, attrs = file_content(desc, r, extra_attrs=extra_attrs, engine_tag=engine_tag)
    return write_run(path, system=system, config=config, status=status or r.status,
                     message=message or r.message, data=data, attrs=attrs)


def run_to_file(desc: Description, out: str | Path, progress: bool = True, checkpoint_s: float = 60.0,
                extra_attrs: dict | None = None, monitor_factory=None):
    """Run a description and write its run file (what ``meanfield model run`` does).

    Through the shared harness (``meanfield.core.harness.run_to_file``):
    progress on stderr for long runs, a checkpoint (status "interrupted")
    every ``checkpoint_s`` seconds, SIGINT/SIGTERM end the run with a valid
    file (status interrupted), a blow-up with status diverged.

    Parameters
    ----------
    desc : Description
        A loaded description.
    out : str or Path
        The run file (``.h5``; format: ``docs/run-files.md``).
    progress : bool
        Print progress for runs longer than 2 s.
    checkpoint_s : float
        Seconds between checkpoints.
    extra_attrs : dict or None
        More root attributes for the file.
    monitor_factory : callable or None
        Builds the run's monitor (the Python API passes a tqdm one).

    Returns
    -------
    tuple of (Run, Path)
        The run (as :func:`run`) and the path written.

    Examples
    --------
    >>> import meanfield.engine as me
    >>> desc = me.load("docs/examples/majority.toml", steps=50)
    >>> r, path = me.run_to_file(desc, "runs/majority_short.h5", progress=False)
    >>> r.status, path.name
    ('complete', 'majority_short.h5')
    """
    system = system_of(desc)
    return harness.run_to_file(
        desc.training, lambda mon: integrate_description(desc, None, mon, system)[1],
        lambda r, status=None, message=None: save(out, desc, r, status=status, message=message,
                                                  extra_attrs=extra_attrs),
        progress=progress, checkpoint_s=checkpoint_s, result=lambda traj: in_memory(desc, system, traj),
        monitor_factory=monitor_factory)
