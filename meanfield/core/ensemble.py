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
workers), so numba compiles once per worker, from its on-disk cache.

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

import hashlib
import json
import math
import os
import signal
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from .config import ConfigError, as_int
from .sweep import SYSTEMS, register_system, system_of  # noqa: F401 - the registry of systems, re-exported

CHUNK_FORMAT = "meanfield-chunk"
SWEEP_FORMAT = "meanfield-ensemble"
FORMAT_VERSION = 1
#: per-point status codes in chunk files and sweep.h5
STATUS = {0: "complete", 2: "diverged (non-finite state or loss)", 3: "diverged (an entry above max_abs)",
          -1: "not run", -3: "invalid config"}
#: the built-in outputs (computed in one numba kernel per launch) and their meaning
OUTPUTS = {
    "status": "0 complete, 2 diverged (non-finite), 3 diverged (above max_abs), -1 not run, -3 invalid config",
    "t_end": "time of the last record",
    "steps_end": "(solver) step of the last record",
    "loss_end": "loss at the last record",
    "min_margin_end": "smallest margin y f(X) over all samples at the last record",
    "min_margin_consistent_end": "smallest margin over the consistent samples at the last record (NaN: none)",
    "min_margin_inconsistent_end": "smallest margin over the inconsistent samples at the last record (NaN: none)",
    "T1": "neuron stage done (meanfield.models.mixture.stagetimes; NaN: not reached)",
    "T2": "attention stage done (NaN: not reached)",
    "T_loss": "first time with loss <= 0.05, interpolated between records (GD: to the step; NaN: not reached)",
    "margin_end": "margin of every sample at the last record (points x samples, NaN-padded)",
}
DEFAULT_OUTPUTS = ("status", "t_end", "steps_end", "loss_end", "min_margin_end", "min_margin_consistent_end",
                   "min_margin_inconsistent_end", "T1", "T2", "T_loss")
CHUNK_TARGET_S = 5.0  # default chunk length (s), inside the 1-30 s the chunks should take
LAUNCH_BYTES = 64 * 2**20  # record buffer of one kernel launch inside a chunk


# ------------------------------------------------------------------ the system


class EnsembleSystem(Protocol):
    """What the generic ensemble needs of a system (the core knows no system):
    the mixture's is ``meanfield.models.mixture.ensemble.MIXTURE``, any described
    model's ``meanfield.engine.sweep.ModelEnsemble(MODEL)``. It must pickle
    (tasks carry it to local and dask workers). ``cfg`` is the system's own
    config object (a ``MixtureConfig``, an engine ``Description``)."""

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
        idx = np.unravel_index(i, self.shape)
        return {k: v[j] for (k, v), j in zip(self.axes.items(), idx)}

    def points(self, lo: int, hi: int) -> list[dict]:
        if self.axes is None:
            return [_jsonable(self.point(i)) for i in range(lo, hi)]
        names = list(self.axes)
        vals = [self.axes[k] for k in names]
        multi = np.unravel_index(np.arange(lo, hi), self.shape)
        return [{k: vals[a][int(multi[a][j])] for a, k in enumerate(names)} for j in range(hi - lo)]


def validate(problem: EnsembleProblem, backend: str = "cpu") -> None:
    """One-line ConfigError before anything runs: the base config, every axis
    value on its own, and that such configs can be batched. (Combinations of
    valid values that are invalid together are marked status -3 per point.)"""
    system = problem.system

    def check(over: dict) -> None:
        why = system.batchable(system.config(problem.base, over))
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
                raise ConfigError(f"param: unknown config field {k!r}; allowed: {', '.join(sorted(names))}")
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


def _launches(system, cfgs: list, members: list[int], max_bytes: float) -> list[list[int]]:
    """Split one group's members into launches whose record buffers fit max_bytes."""
    memo: dict = {}
    out, cur, cur_bytes = [], [], 0
    for i in members:
        c = cfgs[i]
        key = system.capacity_key(c)
        if key not in memo:
            memo[key] = system.record_bytes(c)
        nb = memo[key]
        if cur and cur_bytes + nb > max_bytes:
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
        numba.set_num_threads(_worker_threads(task.get("threads")))
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
        for j, ov in enumerate(pts):
            try:
                c = system.config(base, ov)
                why = system.batchable(c)
                if why is not None:
                    raise ConfigError(why)
            except ConfigError as e:
                status[j] = -3
                invalid[j] = str(e)
                continue
            cfgs[j] = c
            groups.setdefault(system.group_key(c), []).append(j)
        for members in groups.values():
            for part in _launches(system, cfgs, members, task.get("launch_bytes", LAUNCH_BYTES)):
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
            "threads": numba.get_num_threads()}


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


def probe_chunk_size(problem: EnsembleProblem, workers: int, backend: str = "cpu", k: int = 8,
                     target_s: float = CHUNK_TARGET_S) -> tuple[int, float]:
    """(chunk size, seconds per trajectory): ``k`` points spread over the grid
    are timed in this process on one thread (after a warm-up that loads the
    compiled kernels); a chunk should take about ``target_s`` (within 1-30 s)
    while every worker still gets about four chunks. On the GPU: 16384."""
    N = problem.size
    if backend == "cuda":
        return min(N, 16384), math.nan
    idx = sorted({int(round(x)) for x in np.linspace(0, N - 1, min(k, N))})
    sub = EnsembleProblem(problem.base, prob_func=_Pick(problem, idx), n=len(idx), outputs=problem.outputs,
                          system=problem.system)
    run_chunk(dict(_task(sub, 0, 1, "cpu", 1)))  # warm-up: load / compile the kernels
    t0 = time.perf_counter()
    run_chunk(dict(_task(sub, 0, len(idx), "cpu", 1)))
    per = max((time.perf_counter() - t0) / len(idx), 1e-7)
    cs = int(round(target_s / per))
    cs = min(cs, math.ceil(N / (4 * workers)))  # several chunks per worker
    cs = max(cs, min(int(round(1.0 / per)), math.ceil(N / workers)))  # but about 1 s at least
    return max(1, min(cs, N)), per


class _Pick:
    """prob_func of a subset of another problem's points (picklable)."""

    def __init__(self, problem, idx):
        self.problem, self.idx = problem, list(idx)

    def __call__(self, i):
        return self.problem.point(self.idx[i])


# ------------------------------------------------------------------ backends


def _worker_init():
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides what an interrupt means


class _Local:
    """Long-lived local worker processes (spawned: no forked numba threads)."""

    def __init__(self, workers: int):
        import multiprocessing

        self.ex = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                      initializer=_worker_init)

    def submit(self, task):
        return self.ex.submit(run_chunk, task)

    def as_completed(self, futs):
        from concurrent.futures import as_completed

        return as_completed(futs)

    def close(self, abort: bool = False):
        if abort:
            for p in list(getattr(self.ex, "_processes", {}).values()):
                p.terminate()
        self.ex.shutdown(wait=not abort, cancel_futures=True)


class _InProcess:
    """This process, chunk after chunk (one worker, the GPU, or tests)."""

    class _Done:
        def __init__(self, fn, task):
            self.fn, self.task = fn, task

        def result(self):
            return self.fn(self.task)

    def submit(self, task):
        return self._Done(run_chunk, task)

    def as_completed(self, futs):
        return iter(list(futs))

    def close(self, abort: bool = False):
        pass


class _Dask:
    """A dask.distributed client: ``local:N`` (a LocalCluster of N one-thread
    worker processes) or the address of a running scheduler."""

    def __init__(self, scheduler: str):
        try:
            import distributed
        except ImportError:
            raise ConfigError("scheduler: needs dask.distributed; pip install 'meanfield[dask]'") from None
        self.cluster = None
        if scheduler.startswith("local:"):
            import logging

            n = as_int("scheduler", scheduler[len("local:"):], lo=1)
            self.cluster = distributed.LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                                    dashboard_address=":0", silence_logs=logging.ERROR)
            self.client = distributed.Client(self.cluster)
        else:
            try:
                self.client = distributed.Client(scheduler, timeout="20s")
            except (OSError, TimeoutError) as e:
                raise ConfigError(f"scheduler: cannot reach {scheduler} ({type(e).__name__}: "
                                  f"{str(e).splitlines()[0] if str(e) else 'no answer'})") from None
        self._dist = distributed

    @property
    def workers(self) -> int:
        n = sum(self.client.nthreads().values())
        return max(1, n)

    def submit(self, task):
        return self.client.submit(run_chunk, task, key=f"meanfield-chunk-{task['key']}", pure=False)

    def as_completed(self, futs):
        return self._dist.as_completed(list(futs))

    def close(self, abort: bool = False):
        try:
            self.client.close()
        finally:
            if self.cluster is not None:
                self.cluster.close()


def check_scheduler(scheduler: str | None) -> None:
    """One-line ConfigError for a malformed ``scheduler`` (before anything runs)."""
    if scheduler is None:
        return
    s = str(scheduler)
    try:
        if s.startswith("local:"):
            as_int("scheduler", s[6:], lo=1)
            return
    except ConfigError:
        pass
    else:
        if (s.startswith("tcp://") or s.startswith("tls://")) and s.split("://", 1)[1].rpartition(":")[2].isdigit():
            return
    raise ConfigError(f"scheduler: expected tcp://HOST:PORT or local:N (N workers >= 1), got {s!r}")


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


def paths(out: str | Path) -> dict:
    out = Path(out)
    if out.suffix:
        raise ConfigError(f"out: a folder (sweep.h5 and chunks/ go inside), got {str(out)!r}")
    return {"dir": out, "sweep": out / "sweep.h5", "plan": out / "ensemble.json", "chunks": out / "chunks",
            "records": out / "records"}


def solve(problem: EnsembleProblem, out: str | Path, *, backend: str = "cpu", scheduler: str | None = None,
          workers: int | None = None, chunk_size: int | None = None, progress: bool = True, stream=None,
          launch_bytes: float = LAUNCH_BYTES) -> EnsembleResult:
    """Run (or continue) the ensemble into ``out`` (a folder) and reduce it to
    ``out/sweep.h5``. ``backend``: ``cpu``, ``cuda`` or ``auto`` (the
    batched kernel's target); ``scheduler``: None (local processes,
    ``workers`` of them, default every core; ``workers=1`` runs in this
    process), ``local:N`` or ``tcp://HOST:PORT`` (dask.distributed).
    ``chunk_size``: points per chunk (default: from a timed probe)."""
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
    ex: Any
    if scheduler is not None:
        ex = _Dask(scheduler)
        nw, threads = ex.workers, "auto"
    elif be == "cuda" or workers == 1 or (workers is None and ncpu == 1):
        ex, nw, threads = _InProcess(), 1, (1 if be == "cuda" else ncpu if workers is None else 1)
    else:
        nw = int(workers or ncpu)
        ex, threads = None, max(1, ncpu // nw)  # the pool starts after the probe
    try:
        per = math.nan
        if chunk_size is None:
            chunk_size, per = probe_chunk_size(problem, nw, be)
        cs = int(chunk_size)
        bounds = [(lo, min(lo + cs, N)) for lo in range(0, N, cs)]
        tasks = [_task(problem, lo, hi, be, threads) for lo, hi in bounds]
        for t in tasks:
            t["launch_bytes"] = launch_bytes
        P["chunks"].mkdir(parents=True, exist_ok=True)
        plan = {"format": SWEEP_FORMAT, "format_version": FORMAT_VERSION, "base": _jsonable(problem.base),
                "axes": _jsonable(problem.axes) if problem.axes is not None else None,
                "n": N, "shape": list(problem.shape), "outputs": list(problem.outputs), "backend": be,
                "chunk_size": cs, "chunks": [[t["lo"], t["lo"] + len(t["points"]), t["key"]] for t in tasks],
                "keep_records": list(problem.keep_records), "system": problem.system.name}
        if problem.system.identity() is not None:
            plan["system_identity"] = _jsonable(problem.system.identity())
        _write_json(P["plan"], plan)
        todo = [t for t in tasks if not _chunk_done(P["chunks"] / f"{t['key']}.h5", t["key"])]
        n_run = len(todo)
        bar = Progress(N, stream=stream, quiet=not progress, label="sweep (chunked)")
        bar.skipped = N - sum(len(t["points"]) for t in todo)
        bar.update(bar.skipped, force=True)
        if ex is None:
            ex = _Local(nw) if todo else _InProcess()
        status, errors = "complete", []

        def on_term(signum, frame):
            raise KeyboardInterrupt

        try:
            old = signal.signal(signal.SIGTERM, on_term)
        except ValueError:  # not the main thread
            old = None
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
                        errors.append(f"chunk {t['lo']}-{t['lo'] + len(t['points'])}: {type(e).__name__}: {e}")
                        bar.failed += len(t["points"])
                        bar.update(len(t["points"]))
                        continue
                    _write_chunk(P, problem, r)
                    bar.failed += int(np.count_nonzero(r["arrays"]["status"] != 0))
                    bar.update(len(t["points"]))
                if not lost:
                    break
                ex.close(abort=True)
                if attempt == 2:
                    errors += [f"chunk {t['lo']}-{t['lo'] + len(t['points'])}: its worker process died 3 times"
                               for t in lost]
                    ex = _InProcess()
                    break
                ex, todo = _Local(nw), lost
        except KeyboardInterrupt:
            status, aborted = "interrupted", True
            if hasattr(ex, "client"):
                try:
                    ex.client.cancel(futs)
                except Exception:
                    pass
        finally:
            if old is not None:
                signal.signal(signal.SIGTERM, old)
        ex.close(abort=aborted)
        ex = None
        if errors and status == "complete":
            status = "incomplete"
        red = reduce(P["dir"], problem=problem, status=status)
        return EnsembleResult(P["sweep"], status, N, red["n_done"], red["counts"], cs, len(tasks), n_run,
                              time.perf_counter() - t_start, per, errors, red.get("reduced"))
    finally:
        if ex is not None:
            ex.close(abort=True)


def _fid(f):
    return getattr(f, "key", None) or id(f)  # dask futures: their key; others: the object


def _write_json(path: Path, obj) -> None:
    from .io import write_bytes_atomic

    write_bytes_atomic(path, json.dumps(obj).encode())  # a full disk: one OSError naming the path, no tmp left


def _chunk_done(path: Path, key: str) -> bool:
    if not path.exists():
        return False
    try:
        import h5py

        with h5py.File(path, "r") as f:
            return f.attrs.get("format") == CHUNK_FORMAT and f.attrs.get("key") == key
    except (OSError, ValueError):
        return False


def _write_chunk(P: dict, problem: EnsembleProblem, r: dict) -> None:
    from .io import write_h5_atomic

    system = problem.system
    for i, tr in r["records"].items():  # full run files of the kept points, before the chunk counts as done
        system.save(P["records"] / f"{i:07d}.h5", system.config(problem.base, problem.point(i)), tr)
    data = dict(r["arrays"])
    data["index"] = np.arange(r["lo"], r["hi"], dtype=np.int64)
    attrs = {"format": CHUNK_FORMAT, "format_version": FORMAT_VERSION, "key": r["key"], "lo": r["lo"],
             "hi": r["hi"], "elapsed_s": r["elapsed_s"], "host": r["host"], "pid": r["pid"],
             "threads": r["threads"], "invalid": {str(k + r["lo"]): v for k, v in r["invalid"].items()}}
    write_h5_atomic(P["chunks"] / f"{r['key']}.h5", attrs, data)


# ------------------------------------------------------------------ reduce


def _slabs(lo: int, hi: int, shape: tuple[int, ...]):
    """The C-order flat range [lo, hi) of an array of ``shape`` as hyperslabs:
    yields (index tuple, flat start, flat stop), each index selecting a block
    whose C-order elements are exactly flat [start, stop)."""
    if lo >= hi:
        return
    if len(shape) == 1:
        yield (slice(lo, hi),), lo, hi
        return
    inner = int(np.prod(shape[1:]))
    a, ra = divmod(lo, inner)
    b, rb = divmod(hi, inner)
    if a == b:
        for sl, l2, h2 in _slabs(ra, rb, shape[1:]):
            yield (a, *sl), a * inner + l2, a * inner + h2
        return
    if ra:
        for sl, l2, h2 in _slabs(ra, inner, shape[1:]):
            yield (a, *sl), a * inner + l2, a * inner + h2
        a += 1
    if b > a:
        yield (slice(a, b), *(slice(None),) * (len(shape) - 1)), a * inner, b * inner
    if rb:
        for sl, l2, h2 in _slabs(0, rb, shape[1:]):
            yield (b, *sl), b * inner + l2, b * inner + h2


def _axis_values(vals: list) -> np.ndarray:
    try:
        return np.array([float(v) for v in vals], np.float64)
    except (TypeError, ValueError):
        return np.array([str(v) for v in vals], dtype=object)


def _room_for(path: Path, chunks: Path, plan: dict) -> None:
    """sweep.h5 is streamed through h5py (one chunk in memory at a time), which
    cannot fail cleanly on a full disk: refuse before writing when the free
    space is below the chunk files' total size (sweep.h5 holds what they hold,
    plus the axes), as one OSError naming the path."""
    import errno
    import shutil

    need = sum(f.stat().st_size for f in chunks.glob("*.h5")) + 8 * int(plan.get("n", 0)) + (1 << 20)
    try:
        free = shutil.disk_usage(path.parent).free
    except OSError:  # pragma: no cover - the folder vanished: the write below says so
        return
    if need > free:
        raise OSError(errno.ENOSPC, f"no space left for sweep.h5 (needs about {need / 2**20:.3g} MiB, "
                                    f"{free / 2**20:.3g} MiB free); the chunk files are kept: free space and "
                                    "rerun the same command (finished chunks are not run again)", str(path))


def reduce(out: str | Path, problem: EnsembleProblem | None = None, status: str | None = None) -> dict:
    """Stream the plan's chunk files into ``out/sweep.h5`` (written atomically),
    one chunk in memory at a time. Without ``problem`` the plan
    ``out/ensemble.json`` of the last solve is used (no user reduction)."""
    import h5py

    from .. import __version__

    P = paths(out)
    plan = json.loads(P["plan"].read_text())
    shape = tuple(plan["shape"])
    N = int(plan["n"])
    outputs = plan["outputs"]
    tmp = P["sweep"].with_name(f"sweep.h5.tmp-{os.getpid()}")
    _room_for(P["sweep"], P["chunks"], plan)  # a full disk under h5py is a crash: refuse it before writing
    counts: dict[str, int] = {}
    invalid: dict[str, str] = {}
    acc = problem.reduction_init if problem is not None else None
    n_done = 0
    try:
        with h5py.File(tmp, "w") as f:
            dsets: dict = {}

            def dset(name, dtype, tail=()):
                if name not in dsets:
                    fill = -1 if name == "status" else (-1 if np.dtype(dtype).kind == "i" else np.nan)
                    dsets[name] = f.create_dataset(name, shape=shape + tuple(tail), dtype=dtype, fillvalue=fill)
                return dsets[name]

            dset("status", np.int8)
            for o in outputs:
                if o not in ("status", "margin_end"):
                    dset(o, np.int64 if o == "steps_end" else np.float64)
            for lo, hi, key in plan["chunks"]:
                cp = P["chunks"] / f"{key}.h5"
                if not _chunk_done(cp, key):
                    continue
                with h5py.File(cp, "r") as c:
                    part = {k: c[k][()] for k in c.keys()}
                    invalid.update(json.loads(c.attrs.get("invalid", "{}")))
                if not np.array_equal(part["index"], np.arange(lo, hi)):  # pragma: no cover - keys hash the range
                    raise RuntimeError(f"chunk file {cp} does not hold points {lo}..{hi - 1}")
                for name, arr in part.items():
                    if name == "index":
                        continue
                    ds = dset(name, arr.dtype, arr.shape[1:])
                    if name == "margin_end" and arr.shape[1] > ds.shape[-1]:  # pragma: no cover - one K, L
                        arr = arr[:, : ds.shape[-1]]
                    for sl, a, b in _slabs(lo, hi, shape):
                        blk = tuple(len(range(*x.indices(n))) for x, n in zip(sl, shape) if isinstance(x, slice))
                        ds[sl] = arr[a - lo:b - lo].reshape(blk + arr.shape[1:])
                st = part["status"]
                for code in np.unique(st):
                    nm = STATUS.get(int(code), str(int(code)))
                    counts[nm] = counts.get(nm, 0) + int(np.count_nonzero(st == code))
                n_done += int(np.count_nonzero(st != -1))
                if problem is not None and problem.reduction is not None:
                    acc = problem.reduction(acc, part)
                del part
            missing = N - n_done
            if missing:
                counts[STATUS[-1]] = counts.get(STATUS[-1], 0) + missing
            ax = f.create_group("axes")
            if plan["axes"] is not None:
                names = list(plan["axes"])
                for k, v in plan["axes"].items():
                    vals = _axis_values(v)
                    if vals.dtype == object:
                        ax.create_dataset(k, data=vals.astype(str).astype(object), dtype=h5py.string_dtype())
                    else:
                        ax.create_dataset(k, data=vals)
            else:
                names = ["point"]
                ax.create_dataset("point", data=np.arange(N))
            if plan.get("keep_records"):
                rg = f.create_group("records")
                for i in plan["keep_records"]:
                    rp = P["records"] / f"{i:07d}.h5"
                    if rp.exists():
                        rg[str(i)] = h5py.ExternalLink(os.path.relpath(rp, P["dir"]), "/")
            if status is None:
                status = "complete" if missing == 0 else "incomplete"
            attrs = {"format": SWEEP_FORMAT, "format_version": FORMAT_VERSION, "meanfield_version": __version__,
                     "system": plan.get("system", "mixture"), "axes": json.dumps(names),
                     "base": json.dumps(plan["base"]),
                     "n_points": N, "n_done": n_done, "status": status, "counts": json.dumps(counts),
                     "status_codes": json.dumps({str(k): v for k, v in STATUS.items()}),
                     "outputs": json.dumps({k: OUTPUTS.get(k, "output_func") for k in dsets}),
                     "invalid": json.dumps(invalid), "backend": plan["backend"], "chunk_size": plan["chunk_size"],
                     "n_chunks": len(plan["chunks"])}
            for k, v in attrs.items():
                f.attrs[k] = v
        os.replace(tmp, P["sweep"])
    finally:
        if tmp.exists():
            tmp.unlink()
    return {"path": P["sweep"], "n_done": n_done, "counts": counts, "status": status, "reduced": acc}


def load(path: str | Path) -> dict:
    """``sweep.h5`` as a dict: every output array (over the grid axes),
    ``axes`` (name -> values, in order) and ``attrs``."""
    import h5py

    with h5py.File(path, "r") as f:
        if f.attrs.get("format") != SWEEP_FORMAT:
            raise ValueError(f"{path}: not a meanfield ensemble file (format {f.attrs.get('format')!r})")
        out = {k: f[k][()] for k in f.keys() if isinstance(f[k], h5py.Dataset)}
        names = json.loads(f.attrs["axes"])
        out["axes"] = {k: f["axes"][k][()] for k in names}
        for k, v in out["axes"].items():
            if v.dtype == object:
                out["axes"][k] = np.array([x.decode() if isinstance(x, bytes) else x for x in v], dtype=object)
        out["attrs"] = {k: (json.loads(v) if k in ("axes", "base", "counts", "status_codes", "outputs", "invalid")
                            else v) for k, v in f.attrs.items()}
    return out

