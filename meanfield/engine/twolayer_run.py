"""Runs of a two-layer description: the exact GD map / flow on the parameters, and its run file.

The state is the flat parameter vector theta (``meanfield.engine.twolayer_net``);
a stage's mode is the 0/1 mask of the blocks it trains. GD: theta' = theta -
eta mask grad L(theta) (:class:`meanfield.core.integrate.GDMap`, each stage its
own eta); flow: d theta / dt = - mask grad L (the core's RK4 / Dopri5). The run
file (``system = "twolayer"``, written by :func:`meanfield.core.io.write_run`):

* datasets ``t``, ``step``, ``stage``, ``loss`` (T,), ``theta`` (T, size),
  ``variables/<group>/<block>`` (T, block shape) with group ``layer1.head1``,
  ``selector``, ``readout``, ``initial_state`` (the same groups, the first
  record), ``tokens`` (the sequences) and ``prob`` (their weights);
* attributes ``blocks`` (names and shapes), ``stage_names``, ``stage_ends``,
  ``data`` (the law: family, d, L, pa, alpha, start, exact or sampled),
  ``loss_kind``, ``description`` (the tables as given), ``variable_axes``.

Example
-------
>>> from meanfield.engine.twolayer_desc import twolayer_from_dict
>>> raw = {"model": {"class": "twolayer"}, "data": {"d": 2, "L": 3}, "layers": [{"heads": [{}]}],
...        "training": {"steps": 4, "eta": 0.5}}
>>> r = run(twolayer_from_dict(raw))
>>> r.status, len(r.t), bool(r.loss[-1] < r.loss[0])
('complete', 5, True)
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ..core import harness, integrate
from ..core.criteria import holds
from ..core.io import write_run
from ..core.run import Run
from .twolayer_desc import TwoLayerDescription
from .twolayer_net import loss_grad, loss_only, prepare

from .twolayer_wide import flow_rhs, gd_step

__all__ = ["TwoLayerSystem", "run", "run_to_file", "file_content"]


class TwoLayerSystem:
    """The core solver's system of a two-layer description (GD map, flow right-hand side, criteria)."""

    def __init__(self, desc: TwoLayerDescription):
        self.desc = desc
        self.max_abs = desc.training.max_abs
        #: a GD call returns to the solver after this many seconds, so that a signal ends the run within 2 s
        self.chunk_s = 0.25
        self._masks = {}
        #: the positions grouped by window pattern, once per data set (the pattern path of twolayer_net)
        self.prep = prepare(desc.net, desc.x)
        self._prep_test = None
        #: GD steps taken so far over the run (the step index of a plug-in's ``batches``)
        self.steps_done = 0

    @property
    def prep_test(self):
        """:func:`meanfield.engine.twolayer_net.prepare` of the held-out set (once), or None."""
        if self._prep_test is None and self.desc.test is not None:
            self._prep_test = prepare(self.desc.test_net, self.desc.test[0])
        return self._prep_test

    def mask(self, train: tuple) -> np.ndarray:
        """The 0/1 vector of the entries of the blocks in ``train``."""
        key = tuple(train)
        if key not in self._masks:
            m, i = np.zeros(self.desc.net.size), 0
            for name, shape in self.desc.net.blocks:
                k = int(np.prod(shape))
                if name in key:
                    m[i:i + k] = 1.0
                i += k
            self._masks[key] = m
        return self._masks[key]

    def loss_grad(self, y):
        """(loss, gradient) at state ``y`` on the data (x, y, p)."""
        d = self.desc
        return loss_grad(y, d.net, d.x, d.y, d.p, prep=self.prep)

    def step_loss_grad(self, y, step: int):
        """(loss, gradient) on the batch GD step ``step`` trains on: the plug-in's ``batches(step)``, or the data."""
        d = self.desc
        if d.batches is None:
            return self.loss_grad(y)
        x = np.asarray(d.batches(int(step)), dtype=np.int64)
        if x.ndim != 2 or x.shape[1] != d.net.L + 1:
            raise ValueError(f"batches({step}): token sequences of shape (n, L + 1 = {d.net.L + 1}); got {x.shape}")
        n = x.shape[0]
        return loss_grad(y, d.net, x, np.eye(d.net.S)[x[:, d.net.L]], np.full(n, 1.0 / n), prep=prepare(d.net, x))

    def _value(self, name, y, loss, g):
        return loss if name == "loss" else float(self.desc.criteria[name](y, loss, g))

    def gd_advance(self, y, nsteps, eta, mode, criterion):
        """Up to ``nsteps`` GD steps in place; (done, code) as :class:`meanfield.core.integrate.System`.

        Before each step: a non-finite loss stops the run (code 2), then the stage's criterion is evaluated at
        the current state on the step's batch (code 1)."""
        m = self.mask(mode)
        t0 = time.perf_counter()
        for k in range(int(nsteps)):
            if k and time.perf_counter() - t0 > self.chunk_s:  # back to the monitor (signals, progress, checkpoints)
                return k, 0
            loss, g = self.step_loss_grad(y, self.steps_done)
            if not np.isfinite(loss):
                return k, 2
            if criterion is not None and holds(self._value(criterion[0], y, loss, g), criterion[1], criterion[2]):
                return k, 1
            new = gd_step(y, g, self.desc.net, eta, m)  # y - eta m g; a wide head's Gram: (I - eta G^) Q (I - eta G^)
            if not np.isfinite(new).all():
                return k, 2
            if np.abs(new).max(initial=0.0) > self.max_abs:
                return k, 3
            y[:] = new
            self.steps_done += 1
        return int(nsteps), 0

    def rhs(self, y, mode):
        """d theta / dt = - mask grad L."""
        return flow_rhs(y, self.loss_grad(y)[1], self.desc.net, self.mask(mode))  # -m g; -(G^ Q + Q G^)

    def criterion_value(self, y, name):
        """The quantity of the criterion ``name`` at ``y``: the loss, or a plug-in's own criterion."""
        loss, g = self.loss_grad(y)
        return self._value(name, y, loss, g)


def _stages(desc):
    return harness.stages_of(desc.stages)


def _solve(desc, monitor=None, system=None):
    system = system or TwoLayerSystem(desc)
    return harness.solve(desc.training, system, desc.theta0, _stages(desc), monitor=monitor)


def _blocks(desc, Y):
    """group -> {block: (T, shape)} of the recorded states."""
    out, i = {}, 0
    for name, shape in desc.net.blocks:
        k = int(np.prod(shape))
        group, _, blk = name.rpartition(".")
        out.setdefault(group, {})[blk] = Y[:, i:i + k].reshape((Y.shape[0],) + tuple(shape))
        i += k
    return out


def _axes(desc) -> dict:
    net, out = desc.net, {}
    for k, h, hd in net.heads:
        if "rpe" in hd.score:
            out[f"layer{k + 1}.head{h + 1}/w"] = [[f"lag{j}" for j in range(hd.lags[0], hd.lags[1] + 1)]]
    if net.selector is not None:
        out["selector/c"] = [["{" + ",".join(str(h + 1) for h in s) + "}" for s in net.subsets]]
    return out


def file_content(desc: TwoLayerDescription, traj: integrate.Trajectory, system: TwoLayerSystem | None = None):
    """(datasets, attributes) of the run file of a trajectory.

    Parameters
    ----------
    desc : TwoLayerDescription
    traj : meanfield.core.integrate.Trajectory
    system : TwoLayerSystem or None
        The run's system (its prepared data sets are reused; else prepared here).

    Returns
    -------
    data : dict
    attrs : dict

    Example
    -------
    >>> from meanfield.engine.twolayer_desc import twolayer_from_dict
    >>> raw = {"model": {"class": "twolayer"}, "data": {"d": 2, "L": 2}, "layers": [{"heads": [{}]}],
    ...        "training": {"steps": 1}}
    >>> desc = twolayer_from_dict(raw)
    >>> data, attrs = file_content(desc, _solve(desc))
    >>> sorted(data["variables"]), attrs["stage_names"]
    (['layer1.head1', 'readout'], ['train'])
    """
    arr = traj.arrays()
    Y = arr["y"] if arr["y"].size else np.empty((0, desc.net.size))
    system = system or TwoLayerSystem(desc)
    cache = traj.__dict__.setdefault("_twolayer_losses", {})  # (step, state bytes) -> loss, kept with the trajectory
    loss = np.empty(len(Y))
    for r, (st, y) in enumerate(zip(arr["step"], Y)):  # each record's loss once (checkpoints reuse them)
        key = (int(st), y.tobytes())
        if key not in cache:
            cache[key] = loss_only(y, desc.net, desc.x, desc.y, desc.p, prep=system.prep)
        loss[r] = cache[key]
    test = desc.test
    if test is not None:  # the held-out loss of every record (never trained on)
        loss_test = np.empty(len(Y))
        for r, (st, y) in enumerate(zip(arr["step"], Y)):
            key = ("test", int(st), y.tobytes())
            if key not in cache:
                cache[key] = loss_only(y, desc.test_net, *test, prep=system.prep_test)
            loss_test[r] = cache[key]
    init = _blocks(desc, desc.theta0[None, :])
    data = {"t": arr["t"], "step": arr["step"], "stage": arr["stage"], "loss": loss, "theta": Y,
            "variables": _blocks(desc, Y), "initial_state": {g: {b: a[0] for b, a in v.items()} for g, v in init.items()},
            "tokens": np.asarray(desc.x, dtype=np.int64), "prob": np.asarray(desc.p, dtype=np.float64)}
    if test is not None:
        data["loss_test"] = loss_test
        data["test_tokens"] = np.asarray(test[0], dtype=np.int64)
    attrs = {"blocks": [[n, list(s)] for n, s in desc.net.blocks], "stage_names": [s.name for s in desc.stages],
             "stage_ends": traj.stage_ends, "data": {k: v for k, v in desc.data.items() if k != "test"},
             "loss_kind": desc.loss, "description": _raw_without_tokens(desc.raw), "variable_axes": _axes(desc), "method": desc.training.method,
             "eta": desc.training.eta, "model_class": "twolayer", "name": desc.name,
             "sampled": "" if desc.exact or desc.data.get("fixed") else
             f"sampled: {desc.data.get('samples')} sequences (seed {desc.data.get('seed')}), not the exact population"}
    return data, attrs


def _raw_without_tokens(raw: dict) -> dict:
    """The description's tables for the ``description`` attribute, a fixed data set's sequences left out
    (they are the ``tokens`` / ``test_tokens`` datasets; an HDF5 attribute holds 64 kB)."""
    data = raw.get("data")
    if not isinstance(data, dict) or not any(k in data for k in ("tokens", "test_tokens")):
        return raw
    out = dict(raw)
    out["data"] = {k: (f"(the {k} dataset)" if k in ("tokens", "test_tokens") else v) for k, v in data.items()}
    return out


def run(desc: TwoLayerDescription, monitor=None) -> Run:
    """Run a two-layer description in memory.

    Parameters
    ----------
    desc : TwoLayerDescription
    monitor : meanfield.core.integrate.Monitor or None

    Returns
    -------
    meanfield.core.run.Run
        ``system = "twolayer"``; ``r.t``, ``r.loss``, ``r.entries``, ``r["theta"]``.

    Example
    -------
    >>> from meanfield.engine.twolayer_desc import twolayer_from_dict
    >>> raw = {"model": {"class": "twolayer"}, "data": {"d": 2, "L": 2}, "layers": [{"heads": [{}]}],
    ...        "training": {"steps": 2}}
    >>> run(twolayer_from_dict(raw)).system
    'twolayer'
    """
    system = TwoLayerSystem(desc)
    traj = _solve(desc, monitor, system)
    data, attrs = file_content(desc, traj, system)
    attrs.update(system="twolayer", status=traj.status, message=traj.message)
    return Run(data, attrs)


def run_to_file(desc: TwoLayerDescription, out, progress: bool = True, checkpoint_s: float = 60.0,
                monitor_factory=None):
    """Run and write the run file (what ``meanfield model run`` does for a two-layer description).

    Parameters
    ----------
    desc : TwoLayerDescription
    out : str or Path
        The run file (.h5), written atomically; checkpoints and signals as every run.
    progress : bool
        A progress line on stderr for runs over 2 s.
    checkpoint_s : float
        Seconds between checkpoint files.
    monitor_factory : callable or None
        Another monitor (the Python API's tqdm bar).

    Returns
    -------
    (Trajectory, Path)

    Example
    -------
    >>> from meanfield.engine.twolayer_desc import twolayer_from_dict
    >>> raw = {"model": {"class": "twolayer"}, "data": {"d": 2, "L": 2}, "layers": [{"heads": [{}]}],
    ...        "training": {"steps": 2}}
    >>> traj, path = run_to_file(twolayer_from_dict(raw), "runs/tl_doctest.h5", progress=False)
    >>> traj.status, path.name
    ('complete', 'tl_doctest.h5')
    """
    system = TwoLayerSystem(desc)

    def save(traj, status=None, message=None):
        data, attrs = file_content(desc, traj, system)
        return write_run(out, system="twolayer", config={"source": desc.source, "name": desc.name},
                         status=status or traj.status, message=message or traj.message, data=data, attrs=attrs)

    traj, path = harness.run_to_file(desc.training, lambda mon: _solve(desc, mon, system), save, progress=progress,
                                     checkpoint_s=checkpoint_s, label=desc.name, monitor_factory=monitor_factory)
    return traj, Path(path)


def check_steps_time(desc: TwoLayerDescription, force: bool = False) -> dict:
    """Refuse a GD run whose steps would take beyond the time rule
    (``meanfield.core.limits.check_size``: 10 minutes without ``force``), before
    it starts: the time of one loss and gradient at the initial state (measured
    once the kernels are compiled: the second of two calls) times the steps of
    every GD stage. Issue 26: ``model run edelman --steps 1e9`` ran for weeks.
    Flow and rk4 stages (adaptive or time-based) are bounded by the horizon
    ceiling instead.

    Parameters
    ----------
    desc : TwoLayerDescription
        The description.
    force : bool
        Go past the estimate on purpose.

    Returns
    -------
    dict
        ``seconds`` (the estimate) and ``steps``.

    Example
    -------
    >>> from meanfield.engine.twolayer_desc import twolayer_from_dict
    >>> raw = {"model": {"class": "twolayer"}, "data": {"d": 2, "L": 2}, "layers": [{"heads": [{}]}],
    ...        "training": {"steps": 2}}
    >>> check_steps_time(twolayer_from_dict(raw))["steps"]
    2.0
    """
    import time

    from ..core.limits import check_size

    steps = float(sum(float(s.length) for s in desc.stages)) if desc.training.method == "gd" else 0.0
    est = {"seconds": 0.0, "steps": steps}
    if steps <= 0:
        return est
    system = TwoLayerSystem(desc)
    system.loss_grad(desc.theta0)  # compiles on a first use
    t0 = time.perf_counter()
    system.loss_grad(desc.theta0)
    est["seconds"] = steps * (time.perf_counter() - t0)
    check_size(est, "steps", force, f" ({desc.name}: {steps:.3g} GD steps, {est['seconds'] / steps:.2g} s each)")
    return est


def cli_run(args, out, desc: TwoLayerDescription) -> int:
    """``meanfield model run FILE.toml`` for a two-layer description (``out``: the checked output path).

    Parameters
    ----------
    args : argparse.Namespace
        The verb's arguments (``model``, ``plot``, ``quiet``, the parameter flags).
    out : Path
        The run file.
    desc : TwoLayerDescription
        The description, built by the command from ``args.model`` and its flags.

    Returns
    -------
    int
        The exit code of the run's status (0 complete, 3 diverged, 130 interrupted).

    Example
    -------
    >>> import argparse                                             # doctest: +SKIP
    >>> cli_run(argparse.Namespace(plot=None, quiet=True), Path("runs/m.h5"), desc)  # doctest: +SKIP
    0
    """
    from ..core.errors import ConfigError

    if getattr(args, "specialise", False) is True:
        from .specialise import refuse_twolayer

        refuse_twolayer()
    if getattr(args, "plot", None):
        raise ConfigError("plot: no figures for a two-layer run yet (its run file has every block: meanfield.open_run)")
    from ..core.guard import first_use_notice
    from . import twolayer_kernels as tk
    from . import twolayer_pattern as tp

    first_use_notice(tk._fwd, tk._bwd, tk._readout, tp._codes, tp._readout, tp._gather_back, seconds=15)  # "compiling kernels, about 15 s, once"
    check_steps_time(desc, bool(getattr(args, "force", False)))
    traj, p = run_to_file(desc, out, progress=not args.quiet)
    print(f"{p}: {traj.status}: {traj.message}")
    arr = traj.arrays()
    if arr["y"].size:
        sysm = TwoLayerSystem(desc)
        kind = "exact population" if desc.exact else "fixed data set" if desc.data.get("fixed") else "sampled data set"
        print(f"loss {sysm.loss_grad(arr['y'][0])[0]:.6g} -> {sysm.loss_grad(arr['y'][-1])[0]:.6g} "
              f"({kind})")
    return harness.EXIT_CODES[traj.status]
