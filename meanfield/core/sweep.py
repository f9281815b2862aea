"""Parameter sweeps of any system: grids over config fields, run in parallel, resumable.

``meanfield mixture sweep --param omega=1e-3:0.3:log:8 --param eta=0.1,0.5
[run options] --out DIR`` runs the cartesian grid of the given values; each
point is an ordinary run file ``DIR/points/NNNN.h5`` and ``DIR/sweep.json``
describes every point (its parameters, status and summary numbers). Re-running
the same command skips the points whose run file is finished (complete or
diverged, with the same config) and reruns the others, so an interrupted sweep
continues where it stopped.

Points run through a :class:`concurrent.futures.Executor`: by default a local
``ProcessPoolExecutor`` over the machine's cores. Pass any other executor to
:func:`run_sweep` to go further, e.g. a Dask cluster::

    from dask.distributed import Client
    client = Client("scheduler-address:8786")
    run_sweep(spec, executor=client.get_executor())

(Dask stays optional: nothing here imports it.) This module knows no system:
the grid, the folder, the index, the progress and the process pool are here;
a point's config, run file, summary and batched run come from the system's
adapter (``meanfield.core.ensemble.EnsembleSystem`` with the per-point parts;
the mixture's is ``meanfield.models.mixture.ensemble.MIXTURE``, the default of
:func:`run_sweep` for one release). ``meanfield model sweep`` shares
:func:`open_sweep`, :func:`track_sweep` and :func:`map_points`
(``meanfield.engine.sweep``).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import signal
import sys
import time
from concurrent.futures import FIRST_COMPLETED, Executor, ProcessPoolExecutor, as_completed, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from . import hooks
from .config import ConfigError, as_float, as_int
from .errors import is_signal
from .guard import excerpt, one_line

MAX_VALUES = 10**6

_RANGE = re.compile(r"^\s*([^:]+):([^:]+):(log|lin):(\d+)\s*$")


def parse_values(name: str, spec: str) -> list:
    """``A:B:log:N`` (N log-spaced values), ``A:B:lin:N`` (N evenly spaced) or
    ``V1,V2,...`` (values as given; strings stay strings for the config to
    validate)."""
    m = _RANGE.match(spec)
    if m:
        lo = as_float(f"param {name} (start)", m.group(1))
        hi = as_float(f"param {name} (stop)", m.group(2))
        n = as_int(f"param {name} (count)", m.group(4), lo=1)
        if n > MAX_VALUES:  # every value is a run file in points/: a million is already far beyond a sweep
            raise ConfigError(f"param {name} (count): at most {MAX_VALUES} values per parameter, got {n}")
        if m.group(3) == "log":
            if lo <= 0 or hi <= 0:
                raise ConfigError(f"param {name}: log ranges need positive ends, got {lo}:{hi}")
            vals = np.geomspace(lo, hi, n)
        else:
            vals = np.linspace(lo, hi, n)
        return [float(v) for v in vals]
    vals = [v.strip() for v in spec.split(",")]
    if not spec.strip() or any(not v for v in vals):
        raise ConfigError(f"param {name}: expected A:B:log:N, A:B:lin:N or V1,V2,...; got {excerpt(spec)}")
    return _one_type(vals)


def _one_type(vals: list[str]) -> list:
    """One type per parameter in sweep.json: a list of integers stays ints, a
    list of numbers becomes floats (as ranges are), anything else stays strings
    (for the config to validate: ``inf``, ``gd``, ``const:...``)."""
    if all(re.fullmatch(r"[-+]?[0-9]+", v) for v in vals):
        return [int(v) for v in vals]
    try:
        if all(v.isascii() for v in vals):
            nums = [float(v) for v in vals]
            if all(math.isfinite(x) for x in nums) and not any(v.lower() in ("inf", "nan") for v in vals):
                return nums
    except ValueError:
        pass
    return vals


def parse_params(items: list[str], allowed: list[str]) -> dict[str, list]:
    """``["omega=1e-3:0.3:log:8", "eta=0.1,0.5"]`` -> {"omega": [...], "eta": [...]}."""
    out: dict[str, list] = {}
    for it in items:
        name, eq, spec = it.partition("=")
        name = name.strip().replace("-", "_")
        if not eq:
            raise ConfigError(f"param: expected NAME=VALUES, got {it!r}")
        if name not in allowed:
            from .guard import unknown_name

            raise unknown_name("param", "config field", name, allowed, "the sweep's --help (one run flag per field)")
        if name in out:
            raise ConfigError(f"param: {name} given twice")
        out[name] = parse_values(name, spec)
    if not out:
        raise ConfigError("param: give at least one --param NAME=VALUES")
    return out


def grid(params: dict[str, list]) -> list[dict]:
    names = list(params)
    return [dict(zip(names, combo)) for combo in itertools.product(*(params[n] for n in names))]


class Progress:
    """A one-line progress bar: points done / total, elapsed, rate, ETA."""

    def __init__(self, total: int, stream=None, label: str = "sweep", quiet: bool = False):
        self.total = total
        self.done = 0
        self.skipped = 0
        self.failed = 0
        self.stream = stream if stream is not None else sys.stderr
        self.label = label
        self.quiet = quiet
        self.t0 = time.perf_counter()
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last = -math.inf

    def update(self, n: int = 1, failed: bool = False, force: bool = False) -> None:
        self.done += n
        self.failed += int(failed)
        if self.quiet:
            return
        now = time.perf_counter()
        if not force and not self._tty and now - self._last < 10 and self.done < self.total:
            return
        self._last = now
        el = now - self.t0
        new = self.done - self.skipped
        rate = new / el if el > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else (0.0 if self.done >= self.total else math.inf)
        width = 30
        filled = int(width * self.done / self.total) if self.total else width
        bar = "#" * filled + "." * (width - filled)
        extra = f", {self.failed} not complete" if self.failed else ""
        extra += f", {self.skipped} already done" if self.skipped else ""
        line = (f"{self.label} [{bar}] {self.done}/{self.total} points, {el:.1f} s elapsed, "
                f"{rate:.2f} points/s, ETA {eta:.0f} s{extra}")
        self.stream.write(("\r" + line) if self._tty else (line + "\n"))
        if self._tty and self.done >= self.total:
            self.stream.write("\n")
        self.stream.flush()


def default_executor(workers: int | None = None) -> Executor:
    n = workers or os.cpu_count() or 1
    return ProcessPoolExecutor(max_workers=n)


def _ignore_sigint():  # workers: the parent decides what an interrupt means
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def map_points(fn: Callable, items: list, executor: Executor | None = None, workers: int | None = None,
               progress: Progress | None = None, on_result: Callable | None = None,
               on_crash: Callable | None = None) -> list:
    """Apply ``fn`` to every item through an executor; results in item order.
    ``on_result(i, result)`` is called as each finishes (in the parent).
    ``workers=1`` without an executor runs in this process.

    ``on_crash(item, exc)``: with the local process pool (no ``executor``), a
    worker killed by the OS (out of memory, SIGKILL) breaks the pool; the items
    it left unfinished are then rerun each in a process of its own (``workers``
    at a time), and an item whose own process dies gets ``on_crash(item, exc)``
    as its result, so the others finish. Without ``on_crash`` the
    BrokenProcessPool is raised."""
    results: list[Any] = [None] * len(items)
    if executor is None and (workers == 1 or len(items) <= 1):
        for i, it in enumerate(items):
            results[i] = fn(it)
            if on_result:
                on_result(i, results[i])
            if progress:
                progress.update()
        return results
    own = executor is None
    ex = executor or ProcessPoolExecutor(max_workers=workers or os.cpu_count() or 1, initializer=_ignore_sigint)
    broken: list[int] = []

    def finish(i, r):
        results[i] = r
        if on_result:
            on_result(i, r)
        if progress:
            progress.update()

    try:
        futs = {ex.submit(fn, it): i for i, it in enumerate(items)}
        try:
            for f in as_completed(futs):
                i = futs[f]
                try:
                    r = f.result()
                except BrokenProcessPool:
                    if on_crash is None or not own:
                        raise
                    broken.append(i)  # a worker died: this item is rerun in a process of its own
                    continue
                finish(i, r)
        except KeyboardInterrupt:
            for f in futs:
                f.cancel()
            if own and isinstance(ex, ProcessPoolExecutor):
                _stop_workers(ex, [f for f in futs if not f.cancelled()])
            raise
    finally:
        if own:
            ex.shutdown(wait=True, cancel_futures=True)
    if broken:
        _isolated(fn, items, sorted(broken), max(1, workers or os.cpu_count() or 1), finish, on_crash)
    return results


def _isolated(fn: Callable, items: list, todo: list[int], workers: int, finish: Callable,
              on_crash: Callable) -> None:
    """Run ``items[i]`` for i in ``todo``, each in a one-process pool of its own,
    ``workers`` at a time; a dead process makes ``on_crash(item, exc)`` that
    item's result. ``finish(i, result)`` as each ends."""
    queue = list(todo)
    active: dict = {}
    try:
        while queue or active:
            while queue and len(active) < workers:
                i = queue.pop(0)
                ex = ProcessPoolExecutor(max_workers=1, initializer=_ignore_sigint)
                active[ex.submit(fn, items[i])] = (i, ex)
            done, _ = wait(list(active), return_when=FIRST_COMPLETED)
            for f in done:
                i, ex = active.pop(f)
                try:
                    r = f.result()
                except BrokenProcessPool as e:
                    r = on_crash(items[i], e)
                ex.shutdown(wait=True)
                finish(i, r)
    except KeyboardInterrupt:
        for f, (i, ex) in active.items():
            _stop_workers(ex, [f])
            ex.shutdown(wait=True, cancel_futures=True)
        raise


STOP_GRACE_S = 1.5  # a sweep exits within 2 s of a signal: busy workers get this long to write their point


def _stop_workers(ex: ProcessPoolExecutor, running: list, grace_s: float = STOP_GRACE_S) -> None:
    """Stop a local process pool now. Workers ignore SIGINT between points; a
    running point's monitor catches it and writes its file as interrupted. The
    pool has already handed a few queued points to its workers, so SIGINT is
    repeated until every handed-out point has returned, and a worker still
    busy after ``grace_s`` is killed (still compiling or still writing: its
    point has no file, or a stale tmp file that the next run removes; a
    rerun of the same sweep runs it; the finished points are kept)."""
    procs = list((getattr(ex, "_processes", None) or {}).values())
    t_end = time.perf_counter() + grace_s
    while time.perf_counter() < t_end and not all(f.done() for f in running):
        for proc in procs:
            try:
                os.kill(proc.pid, signal.SIGINT)
            except (OSError, AttributeError):
                pass
        time.sleep(0.25)
    for proc in procs:
        try:
            if proc.is_alive() and not all(f.done() for f in running):
                proc.kill()
        except (OSError, AttributeError, ValueError):
            pass


# ------------------------------------------------------------------ sweeps of any system


#: systems known by name (``module:attribute`` of their adapter, imported on first use): the table of
#: ``meanfield.core.hooks``, filled by the plug-ins (``meanfield.engine.registry.register_ensemble_system``)
SYSTEMS = hooks.ENSEMBLE_SYSTEMS


def register_system(name: str, target: str, default: bool = False) -> None:
    """Make ``EnsembleProblem(system=name)`` find the adapter ``module:attribute``
    (``meanfield.core.hooks.register_ensemble_system``).

    Parameters
    ----------
    name : str
        The system's name.
    target : str or object
        ``"module:attribute"`` of the adapter, or the adapter.
    default : bool
        What ``system=None`` means.

    Returns
    -------
    None

    Example
    -------
    >>> register_system("doc_example", "math:pi")
    """
    hooks.register_ensemble_system(name, target, default=default)


def system_of(system) -> Any:
    """An adapter object (``meanfield.core.ensemble.EnsembleSystem``) from an
    object, a registered name, or None (the system a plug-in registered as the
    default: the mixture's, for one release).

    Parameters
    ----------
    system : object, str or None

    Returns
    -------
    object

    Example
    -------
    >>> system_of("mixture").name
    'mixture'
    """
    if system is None:
        system = hooks.default_ensemble_system()
    if isinstance(system, str):
        return hooks.ensemble_system(system)
    return system


def run_summary(path: Path) -> dict:
    """The summary numbers of a finished run file (any system): status,
    message, t_end, loss_end, smallest margins (all, consistent,
    inconsistent samples; every sample counts as consistent when the file
    has no such flag), T1, T2, T_loss (None: not reached)."""
    from .io import read_run

    r = read_run(path)
    m = r["margin"][-1] if len(r["t"]) else np.array([np.nan])
    c = np.asarray(r["samples"]["consistent"]).astype(bool) if "consistent" in r["samples"] else np.ones(m.size, bool)
    out = {"status": r.attrs["status"], "message": r.attrs["message"],
           "t_end": float(r["t"][-1]) if len(r["t"]) else 0.0,
           "loss_end": float(r["loss"][-1]) if len(r["t"]) else math.nan,
           "min_margin_end": float(np.min(m)),
           "min_margin_consistent_end": float(m[c].min()) if c.any() else None,
           "min_margin_inconsistent_end": float(m[~c].min()) if (~c).any() else None}
    for k in ("T1", "T2", "T_loss"):
        v = float(r.attrs.get(k, math.nan))
        out[k] = None if math.isnan(v) else v
    return out


def run_point(write: Callable[[Path], Any], path) -> dict:
    """One sweep point in a worker, the same for every system: ``write(path)``
    writes the point's run file (building its config inside, so a bad point is
    a failed point too); returns its :func:`run_summary` with ``elapsed_s``, or
    ``status: failed`` with the exception on one line (one crashing point must
    not abort the others).

    Parameters
    ----------
    write : callable
        ``write(path)``: run the point to its file.
    path : str or Path
        The point's run file.

    Returns
    -------
    dict
        The summary, with ``elapsed_s``.

    Example
    -------
    >>> s = run_point(lambda p: 1 / 0, "nowhere.h5")
    >>> s["status"], s["message"]
    ('failed', 'ZeroDivisionError: division by zero')
    """
    t0 = time.perf_counter()
    try:
        write(Path(path))
        s = run_summary(Path(path))
    except Exception as e:  # noqa: BLE001 - one crashing point must not abort the others
        if is_signal(e):  # the signal, come as SystemError (a numba kernel returned): the sweep stops
            raise KeyboardInterrupt(str(e)) from e
        s = {"status": "failed", "message": one_line(f"{type(e).__name__}: {e}", 300)}
    s["elapsed_s"] = time.perf_counter() - t0
    return s


def finished_point(path, same: Callable[[dict], bool]) -> dict | None:
    """The summary of an existing, finished (complete or diverged) point file
    whose root attributes (as stored: JSON ones as strings) ``same`` accepts,
    else None (a missing, unfinished, unreadable or different file: the point
    runs again).

    Parameters
    ----------
    path : str or Path
        The point's run file.
    same : callable
        ``same(attrs) -> bool``: the file is this point's (its config or its
        ``sweep_point`` attribute).

    Returns
    -------
    dict or None

    Example
    -------
    >>> finished_point("no/such/file.h5", lambda a: True) is None
    True
    """
    path = Path(path)
    if not path.exists():
        return None
    try:
        import h5py

        with h5py.File(path, "r") as f:
            attrs = dict(f.attrs)
        if attrs.get("status") not in ("complete", "diverged") or not same(attrs):
            return None
        return run_summary(path)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _crashed_point(job: tuple[dict, str], exc: BaseException) -> dict:
    """The summary of a point whose worker process died (killed by the OS)."""
    return {"status": "failed", "elapsed_s": None,
            "message": "the worker process running this point died (killed by the OS, e.g. out of memory; "
                       f"{type(exc).__name__}); the other points are not affected"}


@dataclass(frozen=True)
class SweepSpec:
    base: dict  # config overrides common to every point
    params: dict  # name -> list of values
    out: Path


def sweep_paths(out: Path) -> tuple[Path, Path]:
    """(index file, folder of point files) for ``--out DIR`` or ``--out FILE.json``."""
    out = Path(out)
    if out.suffix == ".json":
        return out, out.with_name(out.stem + "_points")
    if out.suffix:
        raise ConfigError(f"out: a folder or a .json file, got {str(out)!r}")
    return out / "sweep.json", out / "points"


def open_sweep(index_path: Path, folder: Path, points: list[dict], keys: list, finished, identity: dict):
    """The point files of a sweep folder: refuse a folder that holds another
    sweep (its index differs in any of ``identity``'s entries: grid, base
    config, model), never mixing a new grid with old points; then
    (paths, index entries, indices still to run), where a point whose file
    ``finished(path, key)`` accepts is marked skipped with its summary."""
    if index_path.exists():  # never mix a new grid with an old sweep's points
        try:
            old = json.loads(index_path.read_text())
        except (OSError, ValueError):
            old = None
        if not isinstance(old, dict) or old.get("format") != "meanfield-sweep":
            raise ConfigError(f"out: {index_path} exists and is not a meanfield sweep index; use another folder")
        if any(old.get(k) != _jsonable(v) for k, v in identity.items()):
            raise ConfigError(f"out: {index_path.parent} holds a sweep over another grid or base config "
                              f"(params {excerpt(old.get('params'))}); use a new folder, or delete this one")
    if not index_path.exists():  # the manifest first: a signal now leaves a folder that the same command continues
        _write_index(index_path, {"format": "meanfield-sweep", "format_version": 1, "status": "starting",
                                  **{k: _jsonable(v) for k, v in identity.items()}, "n_points": len(points),
                                  "points": []})
    folder.mkdir(parents=True, exist_ok=True)
    nd = max(4, len(str(len(points) - 1)))
    paths = [folder / f"{i:0{nd}d}.h5" for i in range(len(points))]
    entries = [{"index": i, "params": _jsonable(p), "path": os.path.relpath(paths[i], index_path.parent),
                "result": None} for i, p in enumerate(points)]
    todo = []
    for i, (key, path) in enumerate(zip(keys, paths)):
        s = finished(path, key)
        if s is not None:
            entries[i]["result"] = s
            entries[i]["skipped"] = True
        else:
            todo.append(i)
    return paths, entries, todo


def track_sweep(index_path: Path, index: dict, todo: list[int], stream=None, progress: bool = True):
    """Write the sweep's index and start its progress bar (finished points
    counted as skipped); returns (bar, record) where ``record(k, summary)``
    stores the summary of the k-th point still to run, counts a point that did
    not complete as failed and rewrites the index."""
    _write_index(index_path, index)
    n = index["n_points"]
    bar = Progress(n, stream=stream, quiet=not progress)
    bar.skipped = n - len(todo)
    bar.update(bar.skipped, force=True)

    def record(k, s):
        entry = index["points"][todo[k]]
        entry["result"] = s
        entry.pop("skipped", None)
        if s["status"] != "complete":
            bar.failed += 1
        _write_index(index_path, index)

    return bar, record


def run_sweep(spec: SweepSpec, executor: Executor | None = None, workers: int | None = None,
              progress: bool = True, stream=None, backend: str = "cpu", batched: bool = False,
              system=None) -> dict:
    """Run (or continue) a sweep; returns the index written to ``sweep.json``.

    ``system``: the points' system (``meanfield.core.ensemble.EnsembleSystem``
    with the per-point parts ``point_key``, ``finished``, ``point_runner``
    and ``run_batched``; None: the mixture system, for one release).
    ``backend``: ``cpu`` runs the points through ``executor`` (default: local
    processes), or, with ``batched``, as batches of trajectories in this
    process with numba threads (the system's batched kernel; GD/RK4 points
    only); ``cuda`` runs them batched on the GPU; ``auto`` is ``cuda`` when a
    GPU is present, else ``cpu``. Batched runs see an interrupt between chunks."""
    system = system_of(system)
    be = system.resolve_backend(backend)
    index_path, folder = sweep_paths(spec.out)
    points = grid(spec.params)
    cfgs = []
    for p in points:  # validate every point before running anything
        try:
            cfgs.append(system.point_key(spec.base, p))
        except ConfigError as e:
            raise ConfigError(f"sweep point {p}: {e}") from None
    if be == "cuda" or batched:
        for p, c in zip(points, cfgs):
            why = system.batchable(system.config(c, {}))
            if why is not None:
                raise ConfigError(f"sweep point {p}: backend {be}: {why}")
    paths, entries, todo = open_sweep(index_path, folder, points, cfgs, system.finished,
                                      {"params": spec.params, "base": spec.base})
    index = {"format": "meanfield-sweep", "format_version": 1, "system": system.name,
             "base": _jsonable(spec.base), "params": _jsonable(spec.params),
             "fields": list(system.fields()), "n_points": len(points), "points": entries}
    bar, record = track_sweep(index_path, index, todo, stream, progress)

    def done(k, s):
        record(k, s)
        if s["status"] == "interrupted":  # a point run in this process caught the signal
            raise KeyboardInterrupt

    term: list = []  # a SIGTERM seen by this handler (a SystemError after it is that signal too)

    def on_term(signum, frame):
        term.append(signum)
        raise KeyboardInterrupt(f"signal {signum}")

    status = "complete"
    try:
        old = signal.signal(signal.SIGTERM, on_term)
    except ValueError:  # not the main thread
        old = None
    try:
        if be == "cuda" or batched:
            system.run_batched(cfgs, paths, todo, be, done, bar)
        else:
            map_points(system.point_runner(), [(cfgs[i], str(paths[i])) for i in todo], executor=executor,
                       workers=workers, progress=bar, on_result=done, on_crash=_crashed_point)
    except (KeyboardInterrupt, SystemError) as e:  # SystemError: the signal came as a numba kernel returned
        if not (is_signal(e) or term):
            raise
        status = "interrupted"
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)
    index["status"] = status
    index["n_done"] = sum(e["result"] is not None for e in entries)
    _write_index(index_path, index)
    return index


def _jsonable(x):
    return json.loads(json.dumps(x, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o)))


def _write_index(path: Path, index: dict) -> None:
    from .io import write_bytes_atomic

    write_bytes_atomic(path, json.dumps(index, indent=1).encode())  # a full disk: one OSError naming the path
