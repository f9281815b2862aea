"""Runs of a description: in memory (:func:`run`) and to an HDF5 run file (:func:`run_to_file`).

Run file (one schema, variable groups by name): datasets ``t``, ``step``,
``stage``, ``loss`` (T,), ``margin`` (T, n), ``u`` (T, n, H, rows) and a group
``variables/<head>/<name>`` per reduced variable in report coordinates (S, A,
B (T, R, R); W (T, R, R); w (T, C, n, R); a (T, 1); other Gram blocks such as
``V.r1`` as they are), its ``initial_state/<head>/<name>``, ``features`` (the
report names), ``heads``, and a ``samples`` group (names, weight, target,
flags, tokens, counts); with a held-out set ``test_loss`` (T,),
``test_margin`` (T, n_test), ``test_error`` (T,; classification losses) and a
``test_samples`` group. Attributes: model, family, stage_ends, T1, T2, T_loss
(``meanfield.core.stagetimes.stage_times_of``), width (inf at infinite
width), seed, eta, method, head_scales, description, description_hash,
variable_axes, status, message (``docs/run-files.md``).

A family registered with a ``run_file`` hook (``meanfield.engine.registry``)
writes its own schema instead (the mixture family: the mixture system's run
file, so every reader of those files reads engine runs unchanged); the hook
gets the attributes common to every run (:func:`common_attrs`).
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
from .packed import EngineSystem
from .system import integrate_description, observables, system_of
from .symmetry import refuse_symmetric_start

EXIT_CODES = harness.EXIT_CODES  # one table for every system (meanfield.core.harness)


from ..core.run import Named, Run, SystemName  # noqa: E402,F401  the one run object (meanfield.Run)


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
    if hasattr(system, "reduce"):  # trainable embeddings: ambient states -> the reduced ones (engine.embeddings)
        r.y_ambient = r.y
        r.y = system.reduce(r.y)
        r.embedding_gram = system.embedding_gram(r.y_ambient)
    r.status, r.message, r.stage_ends = traj.status, traj.message, traj.stage_ends
    r.obs = observables(desc, system, r.y)
    r.loss = r.obs["loss"]
    r.margin = r.obs["margin"]
    r.heads = tuple(h.name for h in desc.model.heads)
    r.features = tuple(desc.dictionary.names)
    r._system_name = SystemName("engine", system)  # r.system == "engine", and r.system.T(y) etc. as before
    from .heldout import observables as test_observables

    r.test = test_observables(desc, r.y) if desc.test is not None else None  # the held-out set
    r.test_loss = None if r.test is None else r.test["loss"]
    r.test_margin = None if r.test is None else r.test["margin"]
    r.test_error = None if r.test is None else r.test.get("error")

    def fill():
        from .. import __version__

        system_name, config, data, attrs = file_content(desc, r)
        return data, {"format": "meanfield-run", "system": system_name, "meanfield_version": __version__,
                      "config": config, "status": r.status, "message": r.message, **attrs}

    r._lazy = fill
    return r


def compile_notice(desc: Description, echo: bool = False) -> bool:
    """Say "compiling kernels, about N s, once" when the engine kernels a run
    of ``desc`` needs are neither compiled in this process nor cached
    (``meanfield.core.guard.first_use_notice``). Returns whether they compile now."""
    from ..core.guard import first_use_notice
    from . import kernels
    from .population_oracle import is_population

    if is_population(desc):  # the exact Gaussian population runs its own kernels (engine/population.py)
        from . import population

        used = ((population.pop_gd_advance,) if desc.training.method == "gd"
                else (population.pop_loss_grads, kernels.eng_update))
        return first_use_notice(*used, family="engine", echo=echo)
    return first_use_notice(kernels.gd_advance if desc.training.method == "gd" else kernels.flow_rhs,
                            kernels.loss_and_grads, family="engine", echo=echo)


def run(desc: Description, y0=None, monitor: integrate.Monitor | None = None, specialise: bool | str = "auto",
        background: bool = True) -> Run:
    """Integrate the exact reduced dynamics of a description, in memory.

    Parameters
    ----------
    desc : Description
        A loaded description (:func:`meanfield.engine.load`); its training
        section fixes the method (GD map, flow, RK4), stages and records.
    y0 : numpy.ndarray or None
        A flat initial state (default: the description's initialisation, the
        first record). From the description's own start, a start that GD
        cannot leave by symmetry is refused first (``meanfield.engine.symmetry``).
    monitor : meanfield.core.integrate.Monitor or None
        Progress and interruption (None: none).
    specialise : bool or "auto"
        True: GD by the loop compiled for this description (``meanfield.engine.specialise``: the same
        kernels with the description's arrays as constants, equal bit for bit and faster; about 20 s
        to compile the first time, then cached). Refused in one line where it does not apply
        (``meanfield.engine.specialise``: flow / RK4, the Gaussian population, trainable
        embeddings, two-layer descriptions, data or tables too large to compile in). ``"auto"``
        (default): that loop where one is ready (compiled before, in this process or on disk),
        else the generic loop, never waiting for a compile (after 10 s there, a long run has the loop
        compiled by a second process and goes on in it: ``meanfield.engine.background``, the same
        bits); False: the generic loop.
    background : bool
        With ``"auto"``: that background compile (default); False: not (a width sweep's reduced runs).

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
    system = system_of(desc, specialise, background=background)
    if y0 is None:
        refuse_symmetric_start(desc, system)
        _, traj = integrate_description(desc, None, monitor, system)
        return in_memory(desc, system, traj)
    _, traj = integrate_description(desc, y0, monitor, system)
    return in_memory(desc, system, traj)


def stage_times(desc: Description, t, obs, stage_ends, step=None) -> dict:
    """T1, T2, T_loss and the criteria of a recorded run (``obs``: :func:`observables`),
    interpolated between the two records around each crossing (GD, given the
    records' ``step``: rounded up to the step)."""
    from ..core.stagetimes import stage_times_of

    d = desc.data
    sched = "three-stage" if getattr(desc.parameters, "schedule", None) == "three-stage" else "simultaneous"
    if desc.family is None and len(desc.training.stages) > 1:
        sched = "three-stage"  # T1 = the end of stage 1
    return stage_times_of(t, obs["loss"], obs["margin"], d.flag("consistent"), obs["grad_w"], sched, stage_ends,
                          ~d.flag("flipped"), step=step if desc.training.method == "gd" else None)


_stage_times = stage_times  # the name meanfield.engine.sweep uses


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


def common_attrs(desc: Description, r: Run, engine_tag: bool = True) -> dict:
    """The attributes of every engine-run file (a family's ``run_file`` hook gets them too)."""
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
    if engine_tag:
        common.update({"engine": 1, "model": desc.name})
    if desc.family is None:  # what a file must share to start another run (meanfield.engine.initfrom)
        from .initfrom import structure

        common["structure"] = structure(desc)
    from .rates import has_rates, stage_group_rates

    if has_rates(desc.training):  # each stage's rate per group and schedule (meanfield.engine.rates)
        tr = desc.training
        common["stage_rates"] = [{"stage": s.name, "eta": stage_group_rates(tr, s),
                                  "eta_schedule": s.eta_schedule or tr.eta_schedule} for s in tr.stages]
    return common


def initial_blocks(desc: Description, r: Run) -> dict:
    """Every recorded variable at the initial state, ``"head:name" -> array``
    (the run file's ``initial_state``; a family's hook writes it in its schema)."""
    return _initial_blocks(desc, r)


def file_content(desc: Description, r: Run, extra_attrs: dict | None = None,
                 engine_tag: bool = True) -> tuple[str, dict, dict, dict]:
    """(system, config, datasets, attributes) of the general engine run file
    of ``r`` (schema in the module docstring and ``docs/run-files.md``); the
    in-memory :class:`Run` of any description shows this schema."""
    d = desc.data
    common = common_attrs(desc, r, engine_tag)
    tokens = {"tokens": np.asarray(d.tokens, dtype=float), "counts": d.count_array}
    init = _initial_blocks(desc, r)
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
    if r.test is not None:  # the held-out set (meanfield.engine.heldout): never trained on
        td = desc.test
        data["test_loss"], data["test_margin"] = r.test["loss"], r.test["margin"]
        if "error" in r.test:
            data["test_error"] = r.test["error"]
        data["test_samples"] = {"weight": td.weight, "target": td.target, "names": np.array(
            td.names if td.names is not None else [f"t{i}" for i in range(td.n)], dtype=object)}
    attrs = dict(common)
    attrs["family"] = desc.family or ""
    attrs["variable_axes"] = variable_axes(desc)
    if hasattr(r.system_obj, "extra_datasets"):  # the exact population, trainable embeddings
        more, more_attrs = r.system_obj.extra_datasets(r)
        data.update(more)
        attrs.update(more_attrs)
    attrs.update(desc.data.extra.get("sampled") or {})  # sampled prompts: "sampled, not exact"
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
    if desc.family is not None:  # a family with its own run-file schema writes it (meanfield.engine.registry)
        from . import registry

        writer = registry.family(desc.family).hook("run_file")
        if writer is not None:
            return writer(path, desc, r, common_attrs(desc, r, engine_tag), status=status or r.status,
                          message=message or r.message, extra_attrs=extra_attrs)
    system, config, data, attrs = file_content(desc, r, extra_attrs=extra_attrs, engine_tag=engine_tag)
    return write_run(path, system=system, config=config, status=status or r.status,
                     message=message or r.message, data=data, attrs=attrs)


def run_to_file(desc: Description, out: str | Path, progress: bool = True, checkpoint_s: float = 60.0,
                extra_attrs: dict | None = None, monitor_factory=None, specialise: bool | str = "auto",
                background: bool = True):
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
    specialise : bool or "auto"
        GD by the loop compiled for this description (as :func:`run`; default ``"auto"``).
    background : bool
        With ``"auto"``: a long run's loop compiled by a second process after ``background.AFTER_S``
        seconds in the generic loop (as :func:`run`); False: not (the points of a per-point sweep).

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
    system = system_of(desc, specialise, background=background)
    refuse_symmetric_start(desc, system)  # before anything is written
    return harness.run_to_file(
        desc.training, lambda mon: integrate_description(desc, None, mon, system)[1],
        lambda r, status=None, message=None: save(out, desc, r, status=status, message=message,
                                                  extra_attrs=extra_attrs),
        progress=progress, checkpoint_s=checkpoint_s, result=lambda traj: in_memory(desc, system, traj),
        monitor_factory=monitor_factory)
