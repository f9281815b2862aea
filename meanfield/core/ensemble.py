"""Ensembles of trajectories of any system: chunked, resumable, local or on a Dask cluster.

In the spirit of SciML's ``EnsembleProblem``: an :class:`EnsembleProblem` is
a base config, named grid axes (cartesian product, C order) or a
per-trajectory function, what to keep of each trajectory (``outputs``, an
optional ``output_func``) and an optional ``reduction``; :func:`solve` runs
it and writes one ``sweep.h5``::

    from meanfield.core.ensemble import EnsembleProblem, solve
    prob = EnsembleProblem({"steps": 1000, "record_every": 10},
                           axes={"omega": [0.01, 0.03, 0.1], "eta": [0.1, 0.5], "seed": list(range(8)),
                                 "width": [256]})
    res = solve(prob, "runs/phase")                      # local processes
    res = solve(prob, "runs/phase", scheduler="local:2")  # a 2-worker dask LocalCluster
    res = solve(prob, "runs/phase", scheduler="tcp://HOST:8786")  # an existing cluster
    res = solve(prob, "runs/phase", backend="cuda")      # the GPU (batched CUDA kernel)
    arrays = load(res.path)   # {"T2": array (3, 2, 8, 1), ..., "axes": {...}}

The system. This module knows no system: what is system-specific sits
behind a small adapter (:class:`EnsembleSystem`: config of a point, the
batchable check, grouping, one batch advanced by the system's batched
kernel, per-trajectory summaries, one trajectory's run file). The mixture
system's is ``meanfield.models.mixture.ensemble.MIXTURE`` (the default, for one
release), any described model's ``meanfield.engine.sweep.ModelEnsemble``::

    from meanfield.engine.sweep import ModelEnsemble
    prob = EnsembleProblem({"steps": 500, "record_every": 5}, axes={"omega": [0.05, 0.1], "seed": [0, 1]},
                           system=ModelEnsemble("meanfield/models/mixture.toml"))

How it runs. The points are cut into chunks of consecutive points (default
size from a timed probe so that a chunk runs about 5 s, within 1-30 s, and
every worker gets several). A chunk is one task: :func:`run_chunk` builds
its configs and advances them with the system's batched kernel (the
mixture's ``meanfield.models.mixture.batched.advance``, the engine's
``meanfield.engine.batched.run_batch``: CPU threads or CUDA), in launches
bounded in memory, and reduces each trajectory to its outputs (the
system's ``summaries``: T1, T2 and T_loss are those of the run files).
Workers are long-lived processes (a spawn-started local pool, or dask
workers), so numba compiles once per worker, from its on-disk cache; a small
grid runs in this process (:func:`solve`); a rerun reuses the plan's chunk size.

Results. Every chunk's outputs come back to this process, which writes
``OUT/chunks/<key>.h5`` atomically; ``key`` is a hash of the chunk's configs
(base, per-point overrides, outputs, backend, meanfield version). A rerun
skips chunks whose file exists; a chunk lost with a killed worker (dask
reruns it on another worker) or an interrupted sweep leaves no file and is
simply run again; the reduce step reads exactly the chunk files of the
current plan, so nothing is lost or counted twice. The reduce step
(:func:`reduce`) streams chunk by chunk into ``OUT/sweep.h5`` (memory flat
in the number of points): one dataset per output shaped over the grid axes,
``axes/<name>`` the axis values, ``status`` codes (see :data:`STATUS`), and
for ``keep_records`` points the full run files under ``OUT/records/``
(linked from ``sweep.h5``). An interrupted sweep still writes ``sweep.h5``
(status ``interrupted``, undone points with status -1 and NaN outputs).

Dask is optional (``pip install 'meanfield[dask]'``): it is imported only
when a ``scheduler`` is given.

Conventions of the outputs (``docs/conventions.md``; stage times as in
the systems' run files): ``status`` 0 complete, 2 diverged
(non-finite state or loss), 3 diverged (an entry above max_abs), -1 not run,
-3 invalid config (its message is in ``sweep.h5`` attribute ``invalid``);
``t_end``/``steps_end`` of the last record; ``loss_end``; ``min_margin_end``
over all samples, ``min_margin_consistent_end`` and
``min_margin_inconsistent_end`` (NaN when there is no such sample); ``T1``,
``T2``, ``T_loss`` (NaN when not reached); optional ``margin_end`` (the
final margin of every sample, NaN-padded to the largest sample set).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import signal
import sys
import threading
import time
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from .config import ConfigError
from .errors import is_signal, raise_if_signalled
from .ensemble_pools import Dask as _Dask, InProcess as _InProcess, Local as _Local
from .ensemble_pools import check_scheduler  # noqa: F401 - public here too
from .ensemble_plan import PROBE_STEPS, chunk_size_for, from_estimate
from .ensemble_store import (CHUNK_FORMAT, FORMAT_VERSION, OUTPUTS, STATUS, SWEEP_FORMAT,  # noqa: F401
                             _chunk_done, _fid, _unravel, _write_chunk, _write_json, load, paths, reduce)
from .sweep import SYSTEMS, register_system, system_of  # noqa: F401 - the registry of systems, re-exported

DEFAULT_OUTPUTS = ("status", "t_end", "steps_end", "loss_end", "min_margin_end", "min_margin_consistent_end",
                   "min_margin_inconsistent_end", "T1", "T2", "T_loss")
LAUNCH_BYTES = 64 * 2**20  # record buffer of one kernel launch inside a chunk
LAUNCH_S = 0.5  # in this process: one kernel launch takes about this long at most (a signal is seen between them)
ONE_S = 1.0  # in this process only while one trajectory is estimated under this (else a worker process runs it)
POOL_S = 4.0  # workers=None: a grid estimated under this runs in this process (a process pool takes seconds to start)
MEMO_MAX = 4096  # point configs kept by _point (this process)
FRESH_MAX = 200_000  # points of the chunks run now whose outputs the reduce takes from memory instead of the files


# ------------------------------------------------------------------ the system


class EnsembleSystem(Protocol):
    """What the generic ensemble needs of a system (the core knows no system):
    the mixture's is ``meanfield.models.mixture.ensemble.MIXTURE``, any described
    model's ``meanfield.engine.sweep.ModelEnsemble(MODEL)``. It must pickle
    (tasks carry it to local and dask workers). ``cfg`` is the system's own
    config object (a ``MixtureConfig``, an engine ``Description``). Optional:
    ``probe_point(base, over, steps)`` (a point shortened for the timed
    probe) and ``estimate_seconds(cfg)`` (one trajectory's time from its
    config: a tiny grid is then planned without a probe,
    ``meanfield.core.ensemble_plan``)."""

    name: str  # written to sweep.h5 (attribute ``system``)

    def identity(self) -> dict | None:
        """What, besides the points, determines the results (e.g. the model
        file's hash); it enters every chunk key. None: nothing."""

    def fields(self) -> list[str]:
        """The point fields (config fields, declared parameters) allowed."""

    def config(self, base: dict, over: dict) -> Any:
        """The config of one point (a one-line ConfigError if invalid)."""

    def batchable(self, cfg) -> str | None:
        """Why ``cfg`` cannot run in a batch (one line), or None."""

    def resolve_backend(self, backend: str) -> str:
        """``cpu`` | ``cuda`` | ``auto`` -> ``cpu`` or ``cuda`` (ConfigError)."""

    def group_key(self, cfg) -> Any:
        """Configs with equal keys run in one batch (one kernel launch)."""

    def capacity_key(self, cfg) -> Any:
        """Configs with equal keys have equal record buffers."""

    def record_bytes(self, cfg) -> float:
        """Bytes of one trajectory's record buffer in a batch."""

    def advance(self, cfgs: list, backend: str) -> Any:
        """Run one group's configs as one batch (the batched kernel)."""

    def summaries(self, cfgs: list, batch) -> dict:
        """The built-in outputs (:data:`OUTPUTS`) of an advanced batch, arrays
        over its trajectories; ``status`` the codes of :data:`STATUS`,
        ``margin_end`` (trajectories x samples)."""

    def trajectory(self, batch, k: int, cfg):
        """Trajectory k of a batch as the ``integrate.Trajectory`` of an unbatched run."""

    def save(self, path: Path, cfg, traj) -> None:
        """Write one trajectory's ordinary run file."""


# ------------------------------------------------------------------ the problem


@dataclass
class EnsembleProblem:
    """What to run and what to keep.

    ``base``: config fields common to every trajectory (as for ``make_config``).
    ``axes``: name -> list of values; the points are their cartesian product
    (C order: the last axis varies fastest). Or ``prob_func(i) -> dict`` of
    per-trajectory overrides for ``i < n`` (evaluated in this process).
    ``outputs``: built-in outputs to keep (:data:`OUTPUTS`). ``output_func(cfg,
    trajectory) -> {name: float}``: extra per-trajectory numbers computed in
    the worker from the ``integrate.Trajectory`` (slower: a picklable,
    module-level function). ``reduction(acc, part) -> acc``: folded over
    the chunks in the reduce step (``part``: the chunk's arrays and
    ``index``, the flat point indices), starting from ``reduction_init``;
    the result is ``EnsembleResult.reduced``. ``keep_records``: flat point
    indices whose full run files are kept under ``OUT/records/``.
    ``system``: the :class:`EnsembleSystem` the points belong to (an object,
    or the name of a registered one: :data:`SYSTEMS`); None is the mixture
    system (``meanfield.models.mixture.ensemble.MIXTURE``), kept as the default for
    one release; any described model is
    ``meanfield.engine.sweep.ModelEnsemble(MODEL.toml)``."""

    base: dict = field(default_factory=dict)
    axes: dict | None = None
    prob_func: Callable[[int], dict] | None = None
    n: int | None = None
    outputs: Sequence[str] = DEFAULT_OUTPUTS
    output_func: Callable | None = None
    reduction: Callable | None = None
    reduction_init: Any = None
    keep_records: Sequence[int] = ()
    system: Any = None

    def __post_init__(self):
        self.system = system_of(self.system)
        if (self.axes is None) == (self.prob_func is None):
            raise ConfigError("ensemble: give either axes (a grid) or prob_func with n")
        if self.axes is not None:
            if not self.axes:
                raise ConfigError("ensemble: axes is empty; give at least one NAME: [values]")
            self.axes = {str(k): list(v) for k, v in self.axes.items()}
            for k, v in self.axes.items():
                if not v:
                    raise ConfigError(f"axes: {k} has no values")
        elif self.n is None or int(self.n) < 1:
            raise ConfigError(f"n: a positive number of trajectories with prob_func, got {self.n!r}")
        bad = [o for o in self.outputs if o not in OUTPUTS]
        if bad:
            raise ConfigError(f"outputs: unknown {', '.join(map(repr, bad))}; allowed: {', '.join(OUTPUTS)}")
        self.outputs = tuple(dict.fromkeys(["status", *self.outputs]))
        self.keep_records = tuple(sorted({int(i) for i in self.keep_records}))
        if self.keep_records and not 0 <= self.keep_records[0] <= self.keep_records[-1] < self.size:
            raise ConfigError(f"keep_records: point indices in 0..{self.size - 1}, got {list(self.keep_records)}")

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(v) for v in self.axes.values()) if self.axes is not None else (int(self.n),)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    def point(self, i: int) -> dict:
        """The config overrides of point ``i`` (flat index)."""
        if self.axes is None:
            ov = self.prob_func(i)
            if not isinstance(ov, dict):
                raise ConfigError(f"prob_func({i}): must return a dict of config fields, got {type(ov).__name__}")
            return ov
        idx = _unravel(i, self.shape)
        return {k: v[j] for (k, v), j in zip(self.axes.items(), idx)}

    def points(self, lo: int, hi: int) -> list[dict]:
        if self.axes is None:
            return [_jsonable(self.point(i)) for i in range(lo, hi)]
        names = list(self.axes)
        vals = [self.axes[k] for k in names]
        multi = np.unravel_index(np.arange(lo, hi), self.shape)
        return [{k: vals[a][int(multi[a][j])] for a, k in enumerate(names)} for j in range(hi - lo)]


_MEMO: dict = {}
_PLAIN = (str, int, float, bool)


def _point(system, base: dict, over: dict, base_key: str | None = None) -> list:
    """[config, why not batchable, group key (computed on first use)] of one point, memoised in this process (the
    validation, the shape check and the chunk build the same points: one config each); a ConfigError is not."""
    if base_key is None:
        base_key = _base_key(system, base)
    o = {k: v.tolist() if isinstance(v, (np.generic, np.ndarray)) else v for k, v in over.items()}  # as chunks see
    plain = all(type(v) in _PLAIN for v in o.values())  # a grid's values: no JSON text
    key = (base_key, tuple(sorted((k, type(v).__name__, repr(v)) for k, v in o.items())) if plain  # 2 != 2.0
           else json.dumps(o, sort_keys=True, default=str))  # (repr: -0.0 != 0.0, nan == nan, as JSON)
    hit = _MEMO.get(key)
    if hit is None:
        c = system.config(base, o)
        hit = [c, system.batchable(c), _NO_KEY]
        if len(_MEMO) >= MEMO_MAX:
            _MEMO.clear()
        _MEMO[key] = hit
    return hit


_NO_KEY = object()


def _group_of(system, hit: list):
    if hit[2] is _NO_KEY:
        hit[2] = system.group_key(hit[0])
    return hit[2]


def _base_key(system, base: dict) -> str:
    return json.dumps([system.name, system.identity(), base], sort_keys=True, default=str)


def shared_shape(problem: EnsembleProblem) -> str | None:
    """Why the points of ``problem`` do not share one shape (one line), or None
    when they do: every point batchable and all in one group (one sample set
    and method: one batched kernel); a grid of more than :data:`MEMO_MAX`
    points is judged by the base and each axis value alone (a combination
    that cannot run is then a point with status -3). ``meanfield mixture
    sweep`` and ``model sweep`` run chunked by default when they share one,
    one run file per point otherwise. An invalid config raises its ConfigError.

    Parameters
    ----------
    problem : EnsembleProblem

    Returns
    -------
    str or None

    Example
    -------
    >>> shared_shape(EnsembleProblem({"steps": 10}, axes={"omega": [0.1, 0.2]})) is None
    True
    >>> shared_shape(EnsembleProblem({"steps": 10}, axes={"K": [2, 3]}))
    'the points differ in K, L, p, label_prob, label_noise or method (their batched kernel): K=3'
    """
    system = problem.system
    bk = _base_key(system, problem.base)
    first = None
    if problem.axes is not None and problem.size > MEMO_MAX:  # a large grid: the base and each axis value alone
        overs = [{}] + [{k: v} for k, vals in problem.axes.items() for v in vals]
    else:
        overs = (problem.point(i) for i in range(problem.size))
    for ov in overs:
        hit = _point(system, problem.base, ov, bk)
        if hit[1] is not None:
            return f"point {_jsonable(ov)}: {hit[1]}"
        g = _group_of(system, hit)
        if first is None:
            first = g
        elif g != first:
            what = getattr(system, "group_fields", "their data or model")
            return (f"the points differ in {what} (their batched kernel): "
                    + ", ".join(f"{k}={v}" for k, v in _jsonable(ov).items()))
    return None


def validate(problem: EnsembleProblem, backend: str = "cpu") -> None:
    """One-line ConfigError before anything runs: the base config, every axis
    value on its own, and that such configs can be batched. (Combinations of
    valid values that are invalid together are marked status -3 per point.)"""
    system = problem.system
    bk = _base_key(system, problem.base)

    def check(over: dict) -> None:
        why = _point(system, problem.base, over, bk)[1]
        if why is not None:
            raise ConfigError(f"backend ensemble: {why}")

    names = set(system.fields())
    for k in problem.base:
        if k not in names:
            raise ConfigError(f"base: unknown config field {k!r}")
    check({})
    if problem.axes is not None:
        for k, vals in problem.axes.items():
            if k not in names:
                from .guard import unknown_name

                raise unknown_name("param", "config field", k, sorted(names), "the sweep's --help")
            for v in vals:
                try:
                    check({k: v})
                except ConfigError as e:
                    raise ConfigError(f"param {k}={v}: {e}") from None
    else:
        for i in range(min(problem.size, 4)):
            try:
                check(problem.point(i))
            except ConfigError as e:
                raise ConfigError(f"prob_func({i}): {e}") from None


# ------------------------------------------------------------------ the worker side

_LOCK = threading.Lock()  # one chunk at a time per process (its numba threads do the parallel work)


def _launches(system, cfgs: list, members: list[int], max_bytes: float, max_n: int | None = None) -> list[list[int]]:
    """Split one group's members into launches whose record buffers fit max_bytes,
    of at most ``max_n`` trajectories each (None: any number)."""
    memo: dict = {}
    out, cur, cur_bytes = [], [], 0
    for i in members:
        c = cfgs[i]
        key = system.capacity_key(c)
        if key not in memo:
            memo[key] = system.record_bytes(c)
        nb = memo[key]
        if cur and (cur_bytes + nb > max_bytes or (max_n is not None and len(cur) >= max_n)):
            out.append(cur)
            cur, cur_bytes = [], 0
        cur.append(i)
        cur_bytes += nb
    if cur:
        out.append(cur)
    return out


def _worker_threads(threads) -> int:
    import numba

    if threads in (None, "auto"):
        threads = numba.config.NUMBA_NUM_THREADS
        if "distributed" in sys.modules:  # inside a dask worker: its thread count
            try:
                from distributed import get_worker

                threads = get_worker().state.nthreads
            except Exception:
                pass
    return max(1, min(int(threads), numba.config.NUMBA_NUM_THREADS))


def run_chunk(task: dict) -> dict:
    """Worker: run one chunk (``task``: system, base, points, outputs, backend,
    ...) and return its outputs (arrays over the chunk's points). Never raises
    for a bad point (status -3); other errors propagate to the caller."""
    import numba

    system = system_of(task.get("system"))
    t0 = time.perf_counter()
    base, pts, outputs = task["base"], task["points"], tuple(task["outputs"])
    n = len(pts)
    with _LOCK:
        threads_before = numba.get_num_threads()  # put back after (in this process: the caller's setting)
        numba.set_num_threads(_worker_threads(task.get("threads")))
        try:
            status = np.full(n, -1, np.int8)
            res = {k: np.full(n, np.nan) for k in ("t_end", "loss_end", "min_margin_end", "min_margin_consistent_end",
                                                   "min_margin_inconsistent_end", "T1", "T2", "T_loss")}
            steps_end = np.full(n, -1, np.int64)
            margins: dict[int, np.ndarray] = {}
            invalid: dict[int, str] = {}
            extra: dict[str, np.ndarray] = {}
            records: dict[int, Any] = {}
            keep = set(task.get("keep", ()))
            cfgs: list = [None] * n
            groups: dict = {}
            bk = _base_key(system, base)
            for j, ov in enumerate(pts):
                try:
                    hit = _point(system, base, ov, bk)
                    if hit[1] is not None:
                        raise ConfigError(hit[1])
                except ConfigError as e:
                    status[j] = -3
                    invalid[j] = str(e)
                    continue
                cfgs[j] = hit[0]
                groups.setdefault(_group_of(system, hit), []).append(j)
            for members in groups.values():
                for part in _launches(system, cfgs, members, task.get("launch_bytes", LAUNCH_BYTES),
                                      task.get("launch_n")):
                    raise_if_signalled()
                    pc = [cfgs[j] for j in part]
                    r = system.advance(pc, task.get("backend", "cpu"))
                    o = system.summaries(pc, r)
                    pa = np.asarray(part)
                    status[pa] = o["status"]
                    steps_end[pa] = o["steps_end"]
                    for k in res:
                        res[k][pa] = o[k]
                    if "margin_end" in outputs:
                        for k, j in enumerate(part):
                            margins[j] = o["margin_end"][k]
                    if task.get("output_func") is not None or keep:
                        for k, j in enumerate(part):
                            want = j + task["lo"] in keep
                            if task.get("output_func") is None and not want:
                                continue
                            tr = system.trajectory(r, k, pc[k])
                            if want:
                                records[j + task["lo"]] = tr
                            if task.get("output_func") is not None:
                                for name, v in dict(task["output_func"](pc[k], tr)).items():
                                    extra.setdefault(str(name), np.full(n, np.nan))[j] = float(v)
                    del r, o
            threads_used = numba.get_num_threads()
        finally:
            numba.set_num_threads(threads_before)
    out: dict[str, Any] = {"status": status, "steps_end": steps_end}
    out.update(res)
    out = {k: v for k, v in out.items() if k in outputs}
    if "margin_end" in outputs:
        width = max([len(v) for v in margins.values()], default=1)
        me = np.full((n, width), np.nan)
        for j, v in margins.items():
            me[j, : len(v)] = v
        out["margin_end"] = me
    for k, v in extra.items():
        out["x_" + k] = v
    elapsed = time.perf_counter() - t0
    return {"key": task["key"], "lo": task["lo"], "hi": task["lo"] + n, "arrays": out, "invalid": invalid,
            "records": records, "elapsed_s": elapsed, "pid": os.getpid(), "host": os.uname().nodename,
            "threads": threads_used}


# ------------------------------------------------------------------ planning


def chunk_key(base: dict, points: list[dict], outputs: Sequence[str], backend: str, extra: str = "") -> str:
    """Hash of everything that determines a chunk's results."""
    from .. import __version__

    blob = json.dumps({"format": CHUNK_FORMAT, "v": FORMAT_VERSION, "meanfield": __version__, "base": base,
                       "points": points, "outputs": list(outputs), "backend": backend, "extra": extra},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def _jsonable(x):
    return json.loads(json.dumps(x, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o)))


def _task(problem: EnsembleProblem, lo: int, hi: int, backend: str, threads) -> dict:
    pts = _jsonable(problem.points(lo, hi))
    of = problem.output_func
    ofname = "" if of is None else f"{of.__module__}.{getattr(of, '__qualname__', repr(of))}"
    keep = [i for i in problem.keep_records if lo <= i < hi]
    ident = problem.system.identity()
    extra = ofname if ident is None else json.dumps([ofname, ident], sort_keys=True, default=str)
    key = chunk_key(_jsonable(problem.base), pts, problem.outputs, backend, extra)
    return {"key": key, "lo": lo, "base": _jsonable(problem.base), "points": pts, "outputs": list(problem.outputs),
            "backend": backend, "threads": threads, "output_func": of, "keep": keep, "system": problem.system}


def seconds_per_trajectory(problem: EnsembleProblem) -> tuple[float, str]:
    """(seconds per trajectory, ``"estimate"`` or ``"probe"``): the system's
    estimate where ``ensemble_plan.from_estimate`` takes it (a grid of at most
    :data:`MEMO_MAX` points, estimated under 0.25 s), else :func:`probe_seconds`.

    Example
    -------
    >>> seconds_per_trajectory(EnsembleProblem({"steps": 20}, axes={"omega": [0.1, 0.2]}))[1]
    'estimate'
    """
    est = getattr(problem.system, "estimate_seconds", None)
    if est is not None and problem.size <= MEMO_MAX:
        bk = _base_key(problem.system, problem.base)
        per = from_estimate(est, (_point(problem.system, problem.base, problem.point(i), bk)[0]
                                  for i in range(problem.size)))
        if per is not None:
            return per, "estimate"
    return probe_seconds(problem), "probe"


def probe_seconds(problem: EnsembleProblem, k: int = 8) -> float:
    """Seconds per trajectory of ``problem``, estimated in this process on one
    thread: ``k`` points spread over the grid, after a warm-up that loads the
    compiled kernels. A system with ``probe_point(base, over, steps) ->
    (over, factor)`` runs each probe point shortened to about
    :data:`PROBE_STEPS` steps (``factor``: how much longer the real point is),
    so the probe takes milliseconds and a signal stops it within a second
    whatever the points' length; without it the points run whole. The faster
    of two runs counts (the first also loads or compiles the kernels).

    Parameters
    ----------
    problem : EnsembleProblem
    k : int
        Probe points.

    Returns
    -------
    float

    Example
    -------
    >>> probe_seconds(EnsembleProblem({"steps": 50}, axes={"omega": [0.1, 0.2]})) > 0
    True
    """
    N = problem.size
    idx = sorted({int(round(x)) for x in np.linspace(0, N - 1, min(k, N))})
    shorten = getattr(problem.system, "probe_point", None)
    pts, factors = [], []
    for i in idx:
        ov = problem.point(i)
        r = shorten(problem.base, ov, PROBE_STEPS) if shorten is not None else None
        pts.append(ov if r is None else r[0])
        factors.append(1.0 if r is None else float(r[1]))
    sub = EnsembleProblem(problem.base, prob_func=_Fixed(pts), n=len(pts), outputs=problem.outputs,
                          system=problem.system)
    best = math.inf
    for _ in range(2):  # the first also loads / compiles the kernels (a batch's kernel may depend on its size)
        t0 = time.perf_counter()
        run_chunk(dict(_task(sub, 0, len(pts), "cpu", 1)))
        best = min(best, time.perf_counter() - t0)
    return max(best / len(pts) * float(np.mean(factors)), 1e-7)


class _Fixed:
    """prob_func of a fixed list of point dicts (picklable)."""

    def __init__(self, pts):
        self.pts = list(pts)

    def __call__(self, i):
        return self.pts[i]


# ------------------------------------------------------------------ driving


@dataclass
class EnsembleResult:
    path: Path
    status: str  # complete | interrupted | incomplete (chunks failed)
    n_points: int
    n_done: int
    counts: dict
    chunk_size: int
    n_chunks: int
    n_chunks_run: int
    elapsed_s: float
    seconds_per_trajectory: float = math.nan
    errors: list = field(default_factory=list)
    reduced: Any = None


def _old_plan(P: dict, plan: dict) -> dict | None:
    """The plan of an earlier solve of the same problem in this folder (its chunk size is reused, so that a
    rerun finds its chunks), else None."""
    try:
        old = json.loads(P["plan"].read_text())
    except (OSError, ValueError):
        return None
    same = ("format", "base", "axes", "n", "shape", "outputs", "backend", "keep_records", "system", "system_identity")
    if not isinstance(old, dict) or any(old.get(k) != plan.get(k) for k in same) or plan["axes"] is None:
        return None
    return old if isinstance(old.get("chunk_size"), int) and old["chunk_size"] >= 1 else None


def solve(problem: EnsembleProblem, out: str | Path, *, backend: str = "cpu", scheduler: str | None = None,
          workers: int | None = None, chunk_size: int | None = None, progress: bool = True, stream=None,
          launch_bytes: float = LAUNCH_BYTES) -> EnsembleResult:
    """Run (or continue) the ensemble into ``out`` (a folder) and reduce it to
    ``out/sweep.h5``. ``backend``: ``cpu``, ``cuda`` or ``auto`` (the
    batched kernel's target); ``scheduler``: None (local processes,
    ``workers`` of them), ``local:N`` or ``tcp://HOST:PORT`` (dask.distributed).
    ``chunk_size``: points per chunk (default: from a timed probe, or the
    chunk size of an earlier solve of the same problem in ``out``, so a
    rerun finds its chunks).

    Where the chunks run, without a scheduler: ``workers=None`` runs the grid
    in this process (numba threads over the trajectories) when the probe
    estimates it under :data:`POOL_S` seconds, else in a pool of one process
    per core; ``workers=1`` in this process; ``workers=N`` a pool of N. In
    this process each kernel launch is kept under about :data:`LAUNCH_S`
    seconds, so a signal stops the solve within 2 s (a grid whose single
    trajectory is estimated over :data:`ONE_S` runs in worker processes
    instead, which an interrupt terminates at once).

    Parameters
    ----------
    problem : EnsembleProblem
    out : str or Path
        The folder.

    Returns
    -------
    EnsembleResult

    Example
    -------
    >>> import tempfile
    >>> r = solve(EnsembleProblem({"steps": 20}, axes={"omega": [0.1, 0.2]}), tempfile.mkdtemp(), progress=False)
    >>> r.status, r.n_done
    ('complete', 2)
    """
    from .sweep import Progress

    t_start = time.perf_counter()
    be = problem.system.resolve_backend(backend)
    check_scheduler(scheduler)
    if chunk_size is not None and int(chunk_size) < 1:
        raise ConfigError(f"chunk_size: a positive number of points, got {chunk_size!r}")
    if workers is not None and int(workers) < 1:
        raise ConfigError(f"workers: a positive number of processes, got {workers!r}")
    P = paths(out)
    validate(problem, be)
    N = problem.size
    ncpu = os.cpu_count() or 1
    plan = {"format": SWEEP_FORMAT, "format_version": FORMAT_VERSION, "base": _jsonable(problem.base),
            "axes": _jsonable(problem.axes) if problem.axes is not None else None,
            "n": N, "shape": list(problem.shape), "outputs": list(problem.outputs), "backend": be,
            "keep_records": list(problem.keep_records), "system": problem.system.name}
    if problem.system.identity() is not None:
        plan["system_identity"] = _jsonable(problem.system.identity())
    ex: Any = None
    try:
        per = math.nan
        old = _old_plan(P, plan) if chunk_size is None else None
        if old is not None:  # a rerun: the same chunks
            chunk_size = old["chunk_size"]
            sp = old.get("seconds_per_trajectory")
            per = float(sp) if isinstance(sp, (int, float)) else math.nan
        elif be != "cuda" and (chunk_size is None or scheduler is None):
            per, plan["seconds_per_trajectory_from"] = seconds_per_trajectory(problem)
        slow = per > ONE_S  # one trajectory longer than a launch may take here: worker processes
        if scheduler is not None:
            ex = _Dask(scheduler, run_chunk)
            nw, threads = ex.workers, "auto"
        elif be == "cuda":
            nw, threads = 1, 1
        elif workers is None:
            small = not per * N > POOL_S  # NaN (unknown): as before the probe existed, the pool
            nw = 1 if (ncpu == 1 or (small and not slow)) else ncpu
            threads = ncpu if nw == 1 else max(1, ncpu // nw)
        else:
            nw = int(workers)
            threads = 1 if nw == 1 else max(1, ncpu // nw)
        in_process = scheduler is None and (be == "cuda" or (nw == 1 and not slow))
        if chunk_size is None:
            chunk_size = min(N, 16384) if be == "cuda" else chunk_size_for(per, N, nw)
        cs = int(chunk_size)
        bounds = [(lo, min(lo + cs, N)) for lo in range(0, N, cs)]
        tasks = [_task(problem, lo, hi, be, threads) for lo, hi in bounds]
        launch_n = None
        if in_process and be != "cuda" and per == per:  # bounded launches: a signal is seen within LAUNCH_S
            launch_n = max(1, int(LAUNCH_S / per))
        for t in tasks:
            t["launch_bytes"] = launch_bytes
            if launch_n is not None:
                t["launch_n"] = launch_n
        plan.update({"chunk_size": cs, "chunks": [[t["lo"], t["lo"] + len(t["points"]), t["key"]] for t in tasks]})
        if per == per:
            plan["seconds_per_trajectory"] = per
        P["dir"].mkdir(parents=True, exist_ok=True)
        _write_json(P["plan"], plan)  # the manifest first: a signal from here on leaves a folder the rerun continues
        P["chunks"].mkdir(exist_ok=True)
        todo = [t for t in tasks if not _chunk_done(P["chunks"] / f"{t['key']}.h5", t["key"])]
        n_run = len(todo)
        bar = Progress(N, stream=stream, quiet=not progress, label="sweep (chunked)")
        bar.skipped = N - sum(len(t["points"]) for t in todo)
        bar.update(bar.skipped, force=True)
        if ex is None:
            ex = _InProcess(run_chunk) if (in_process or not todo) else _Local(nw, run_chunk)
        status, errors = "complete", []
        fresh, n_fresh, term = {}, 0, []  # fresh: the chunks run now (the reduce takes them from memory)

        def on_term(signum, frame):  # (errors.PENDING not set: ``term`` says a SystemError is this signal)
            term.append(signum)
            raise KeyboardInterrupt

        try:
            old_h = signal.signal(signal.SIGTERM, on_term)
        except ValueError:  # not the main thread
            old_h = None
        aborted = False
        futs: list = []
        try:
            for attempt in range(3):
                lost = []  # chunks of a local worker process that died (killed, out of memory): run again
                futs = [ex.submit(t) for t in todo]
                by = {_fid(f): t for f, t in zip(futs, todo)}
                for f in ex.as_completed(futs):
                    t = by[_fid(f)]
                    try:
                        r = f.result()
                    except KeyboardInterrupt:
                        raise
                    except BrokenProcessPool:
                        lost.append(t)
                        continue
                    except Exception as e:  # a failed chunk: reported, the rest goes on, a rerun retries it
                        if is_signal(e) or term:  # the signal, come as SystemError: a numba kernel returned
                            raise KeyboardInterrupt(str(e)) from e
                        errors.append(f"chunk {t['lo']}-{t['lo'] + len(t['points'])}: {type(e).__name__}: {e}")
                        bar.failed += len(t["points"])
                        bar.update(len(t["points"]))
                        continue
                    _write_chunk(P, problem, r)
                    raise_if_signalled()
                    if n_fresh + len(t["points"]) <= FRESH_MAX:
                        fresh[r["key"]] = r
                        n_fresh += len(t["points"])
                    bar.failed += int(np.count_nonzero(r["arrays"]["status"] != 0))
                    bar.update(len(t["points"]))
                if not lost:
                    break
                ex.close(abort=True)
                if attempt == 2:
                    errors += [f"chunk {t['lo']}-{t['lo'] + len(t['points'])}: its worker process died 3 times"
                               for t in lost]
                    ex = _InProcess(run_chunk)
                    break
                ex, todo = _Local(nw, run_chunk), lost
        except KeyboardInterrupt:
            status, aborted = "interrupted", True
            if hasattr(ex, "client"):
                with contextlib.suppress(Exception):
                    ex.client.cancel(futs)
        finally:
            if old_h is not None:
                signal.signal(signal.SIGTERM, old_h)
        ex.close(abort=aborted)
        ex = None
        if errors and status == "complete":
            status = "incomplete"
        red = reduce(P["dir"], problem=problem, status=status, fresh=fresh)
        return EnsembleResult(P["sweep"], status, N, red["n_done"], red["counts"], cs, len(tasks), n_run,
                              time.perf_counter() - t_start, per, errors, red.get("reduced"))
    finally:
        if ex is not None:
            ex.close(abort=True)
