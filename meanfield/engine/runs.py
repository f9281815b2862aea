"""Runs of a description: in memory (:func:`run`) and to an HDF5 run file (:func:`run_to_file`).

Run file (one schema, variable groups by name): datasets ``t``, ``step``,
``stage``, ``loss`` (T,), ``margin`` (T, n), ``u`` (T, n, H, rows) and a group
``variables/<head>/<name>`` per reduced variable in report coordinates (S, A,
B (T, R, R); W (T, R, R); w (T, C, n, R); a (T, 1); other Gram blocks such as
``V.r1`` as they are), ``features`` (the report names), ``heads``, and a
``samples`` group (names, weight, target, flags); with a held-out set
``test_loss`` (T,), ``test_margin`` (T, n_test), ``test_error`` (T,;
classification losses) and a ``test_samples`` group. Attributes: model, family,
stage_ends, T1, T2, T_loss (``meanfield.core.stagetimes.stage_times_of``), width,
seed, eta, method, status, message.

A family registered with a ``run_file`` hook (``meanfield.engine.registry``)
writes its own schema instead (the mixture family: the mixture system's run
file, so every reader of those files reads engine runs unchanged); the hook
gets the attributes common to every run (:func:`save`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..core import harness, integrate
from ..core.io import write_run
from .description import Description
from .system import EngineSystem, integrate_description, observables, system_of

EXIT_CODES = harness.EXIT_CODES  # one table for every system (meanfield.core.harness)


class Named:
    """A named array: ``x["+", "c1", "v1"]`` indexes by record-free labels
    (head name, then feature names for each P-axis); ``x.values`` is the array
    (T, ...)."""

    def __init__(self, values: np.ndarray, axes: list[tuple[str, ...]]):
        self.values = values
        self.axes = axes

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        idx = [slice(None)]
        for i, k in enumerate(key):
            labels = self.axes[i]
            if isinstance(k, str):
                if k not in labels:
                    raise KeyError(f"{k!r} not in {labels}")
                idx.append(labels.index(k))
            else:
                idx.append(k)
        return self.values[tuple(idx)]

    @property
    def shape(self):
        return self.values.shape

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.values, dtype=dtype)

    def __repr__(self):
        return f"Named(shape={self.values.shape}, axes={self.axes})"


class Run:
    """An in-memory run: ``t``, ``step``, ``stage``, ``loss``, ``margin``,
    ``status``, ``message``, ``stage_ends``; every reduced variable by name,
    stacked over heads where every head has it: ``run.S["+", "c1", "v1"]``
    (T,), ``run.w["-", "v1"]``; ``run.var("+", "V.r1")`` for any block;
    ``run.y`` the raw states and ``run.trajectory`` the integrate.Trajectory;
    with a held-out set (``meanfield.engine.heldout``) ``test_loss`` (T,),
    ``test_margin`` (T, n_test) and ``test_error`` (T,; classification), else None."""

    def __init__(self, desc: Description, system: EngineSystem, traj: integrate.Trajectory):
        self.desc = desc
        self.system = system
        self.trajectory = traj
        arr = traj.arrays()
        self.t, self.step, self.stage = arr["t"], arr["step"], arr["stage"]
        self.y = arr["y"] if arr["y"].size else np.empty((0, system.pk.lay.size))
        self.status, self.message, self.stage_ends = traj.status, traj.message, traj.stage_ends
        self.obs = observables(desc, system, self.y)
        self.loss = self.obs["loss"]
        self.margin = self.obs["margin"]
        self.heads = tuple(h.name for h in desc.model.heads)
        self.features = tuple(desc.dictionary.names)
        from .heldout import observables as test_observables

        self.test = test_observables(desc, self.y) if desc.test is not None else None  # the held-out set
        self.test_loss = None if self.test is None else self.test["loss"]
        self.test_margin = None if self.test is None else self.test["margin"]
        self.test_error = None if self.test is None else self.test.get("error")

    def var(self, head: str, name: str) -> np.ndarray:
        return self.obs["blocks"][f"{head}:{name}"]

    def _stacked(self, name: str):
        try:
            vals = np.stack([self.var(h, name) for h in self.heads], axis=1)
        except KeyError:
            raise AttributeError(name) from None
        axes = [self.heads]
        if name in ("S", "A", "B", "W"):
            axes += [self.features, self.features]
        elif name == "w":
            nn = {h.n_neurons for h in self.desc.model.heads}
            if self.desc.model.heads[0].outputs == 1 and nn == {1}:
                vals = vals[:, :, 0, 0]
                axes += [self.features]
            else:
                axes += [tuple(map(str, range(vals.shape[2]))), tuple(map(str, range(vals.shape[3]))), self.features]
        return Named(vals, axes)

    def __getattr__(self, name):
        if name in ("S", "A", "B", "W", "w", "a"):
            return self._stacked(name)
        raise AttributeError(name)


def run(desc: Description, y0=None, monitor: integrate.Monitor | None = None) -> Run:
    """Integrate ``desc`` (from ``y0`` if given) and return a :class:`Run`."""
    system, traj = integrate_description(desc, y0, monitor)
    return Run(desc, system, traj)


def stage_times(desc: Description, t, obs, stage_ends) -> dict:
    """T1, T2, T_loss and the criteria of a recorded run (``obs``: :func:`observables`)."""
    from ..core.stagetimes import stage_times_of

    d = desc.data
    sched = "three-stage" if getattr(desc.parameters, "schedule", None) == "three-stage" else "simultaneous"
    if desc.family is None and len(desc.training.stages) > 1:
        sched = "three-stage"  # T1 = the end of stage 1
    return stage_times_of(t, obs["loss"], obs["margin"], d.flag("consistent"), obs["grad_w"], sched, stage_ends,
                          ~d.flag("flipped"))


_stage_times = stage_times  # the name meanfield.engine.sweep uses


def save(path: str | Path, desc: Description, r: Run, status: str | None = None, message: str | None = None,
         extra_attrs: dict | None = None, engine_tag: bool = True) -> Path:
    """Write the run file of ``r`` (see the module docstring). ``engine_tag``:
    mark the file as an engine run (attributes ``engine``, ``model``); off for
    a paper's own command writing its family's runs through the engine."""
    st = stage_times(desc, r.t, r.obs, r.stage_ends)
    common = {
        "eta": desc.training.eta, "method": desc.training.method,
        "width": -1 if desc.init.width is None else desc.init.width, "seed": desc.init.seed,
        "n_samples": desc.data.n, "stage_ends": r.stage_ends,
        "stopped_at_step": int(r.step[-1]) if r.step.size else 0,
        "stopped_at_t": float(r.t[-1]) if r.t.size else 0.0,
        "warnings": list(r.trajectory.warnings),
        "T1": st["T1"], "T2": st["T2"], "T_loss": st["T_loss"], "stage_time_criteria": st["criteria"],
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
    if desc.family is not None:  # a family with its own run-file schema writes it (meanfield.engine.registry)
        from . import registry

        writer = registry.family(desc.family).hook("run_file")
        if writer is not None:
            return writer(path, desc, r, common, status=status or r.status, message=message or r.message,
                          extra_attrs=extra_attrs)
    d = desc.data
    variables = {}
    for key, arr in r.obs["blocks"].items():
        h, nm = key.split(":", 1)
        variables.setdefault(h, {})[nm] = arr
    samples = {"weight": d.weight, "target": d.target,
               "names": np.array(d.names if d.names is not None else [f"x{i}" for i in range(d.n)], dtype=object)}
    for k, v in d.flags.items():
        samples[k] = np.asarray(v).astype(np.int8)
    data = {"features": np.array(desc.dictionary.names, dtype=object),
            "heads": np.array([h.name for h in desc.model.heads], dtype=object),
            "t": r.t, "step": r.step, "stage": r.stage, "loss": r.loss, "margin": r.margin, "u": r.obs["u"],
            "variables": variables, "samples": samples}
    if r.test is not None:  # the held-out set (meanfield.engine.heldout): never trained on
        td = desc.test
        data["test_loss"], data["test_margin"] = r.test["loss"], r.test["margin"]
        if "error" in r.test:
            data["test_error"] = r.test["error"]
        data["test_samples"] = {"weight": td.weight, "target": td.target, "names": np.array(
            td.names if td.names is not None else [f"t{i}" for i in range(td.n)], dtype=object)}
    attrs = dict(common)
    attrs["family"] = desc.family or ""
    if hasattr(r.system, "extra_datasets"):  # the exact population (meanfield.engine.population)
        more, more_attrs = r.system.extra_datasets(r)
        data.update(more)
        attrs.update(more_attrs)
    attrs.update(desc.data.extra.get("sampled") or {})  # sampled prompts: "sampled, not exact"
    attrs.update(extra_attrs or {})
    config = {"parameters": desc.parameters.to_dict() if hasattr(desc.parameters, "to_dict") else {},
              "declared": {k: list(v) if isinstance(v, tuple) else v for k, v in desc.declared},
              "source": desc.source}
    return write_run(path, system="engine", config=config, status=status or r.status,
                     message=message or r.message, data=data, attrs=attrs)


def run_to_file(desc: Description, out: str | Path, progress: bool = True, checkpoint_s: float = 60.0,
                extra_attrs: dict | None = None):
    """Run and write ``out`` through the shared harness
    (``meanfield.core.harness.run_to_file``): progress on stderr for long
    runs, a checkpoint (status "interrupted") every ``checkpoint_s`` seconds,
    SIGINT/SIGTERM end the run with a valid file (status interrupted), a
    blow-up with status diverged. Returns (Run, path)."""
    system = system_of(desc)
    return harness.run_to_file(
        desc.training, lambda mon: integrate_description(desc, None, mon, system)[1],
        lambda r, status=None, message=None: save(out, desc, r, status=status, message=message,
                                                  extra_attrs=extra_attrs),
        progress=progress, checkpoint_s=checkpoint_s, result=lambda traj: Run(desc, system, traj))
