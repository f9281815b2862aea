"""``meanfield model sweep MODEL --param NAME=VALUES ...``: a grid over a description's parameters.

Each point is an ordinary run file ``DIR/points/NNNN.h5`` of the model with
the point's parameters (the base flags plus the grid values); ``DIR/sweep.json``
lists every point with its parameters, status and summary numbers (final loss,
smallest margins, T1, T2, T_loss). Value syntax as ``meanfield mixture sweep``
(``A:B:log:N``, ``A:B:lin:N``, ``V1,V2,...``). Every point is validated before
anything runs. Re-running the same command skips the points whose file is
finished (complete or diverged) with the same parameters, so an interrupted
sweep continues where it stopped. Points run in local processes
(``--workers``; the engine's kernels are compiled once and cached, so workers
start in about a second).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np

from ..core.config import ConfigError
from ..core.errors import is_signal
from ..core.sweep import _jsonable, _write_index, grid, map_points, open_sweep, sweep_paths, track_sweep


def _write_point(model, over: dict, path: Path, specialise="auto") -> None:
    from .description import load_description
    from .runs import run_to_file

    desc = load_description(model, over)
    run_to_file(desc, path, progress=False, extra_attrs={"sweep_point": json.dumps(over, sort_keys=True)},
                specialise=specialise, background=False)  # (a point's run compiles nothing in the background)


def _run_point(job: tuple[str, dict, str, object]) -> dict:
    """Worker: one point (model file, parameter overrides, run file, specialise) -> its summary (``core.sweep.run_point``)."""
    from functools import partial

    from ..core.sweep import run_point

    model, over, path, specialise = job
    return run_point(partial(_write_point, model, over, specialise=specialise), path)


def _finished(path: Path, over: dict) -> dict | None:
    """The summary of an existing, finished point file of these overrides, else None (``core.sweep.finished_point``)."""
    from ..core.sweep import finished_point

    key, want = json.dumps(over, sort_keys=True), json.loads(json.dumps(over))

    def same(attrs: dict) -> bool:
        sp = attrs.get("sweep_point")
        return sp == key or (isinstance(sp, str) and json.loads(sp) == want)

    return finished_point(path, same)


def _fingerprint(desc) -> bytes:
    """What a batch shares (``meanfield.engine.batched``): the packed model and
    data, the training except eta, the record grid. Points with equal
    fingerprints differ only in their initial state and step size."""
    import hashlib

    from .packed import pack
    from .system import save_at

    pk = pack(desc)
    lay = pk.lay
    h = hashlib.sha256()
    for a in (lay.hi, lay.hf, lay.qv, lay.Gr, lay.grp, pk.Gam, pk.nzi, pk.nzc, pk.nzn, pk.cnt, pk.last, pk.leff,
              pk.target, pk.weight, pk.consistent):
        a = np.ascontiguousarray(a)
        h.update(repr((a.dtype.str, a.shape)).encode())
        h.update(a.tobytes())
    tr = desc.training
    h.update(repr((pk.kind, pk.r0, lay.size, tr.method, tr.normalise, tr.stages, tr.max_abs, save_at(desc))).encode())
    return h.digest()


def batch_problem(desc) -> str | None:
    """Why a sweep point cannot run batched (one line), or None."""
    from .system import save_at

    tr = desc.training
    if "population" in desc.data.extra:  # its kernels are meanfield.engine.population's, not the batch's
        return ("the exact Gaussian population (data.family icl_regression) is not batched; run the sweep "
                "without --batched / --chunked")
    if tr.method not in ("gd", "rk4"):
        return f"method {tr.method} is not batched (the batch runs methods gd and rk4)"
    if tr.method == "rk4" and any(s.criterion is not None for s in tr.stages):
        return "stop criteria with method rk4 are not batched (their event location needs dense output)"
    sv = save_at(desc)
    if sv.points is not None or not sv.every:
        return "record_log / record_dt grids are not batched; give --record-every N"
    return None


def _run_batched(model, overs, paths, todo, backend, on_result, chunk_size=256, specialise="auto", lanes=True):
    """Run the points ``todo`` batched: grouped by :func:`_fingerprint`, one
    ``run_batch`` per group (or per ``chunk_size`` points), each point written
    as the ordinary run file an unbatched sweep writes."""
    from ..core.sweep import run_summary
    from . import runs
    from .batched import _step_of, run_batch
    from .description import load_description
    from .reduce import initial_state
    from .system import save_at, system_of

    from ..core.sweep import one_line
    from .symmetry import refuse_symmetric_start

    descs = {i: load_description(model, overs[i]) for i in todo}
    groups: dict = {}
    for i in todo:
        t1 = time.perf_counter()
        try:  # the single run's check (meanfield.engine.symmetry), with the unbatched sweep's per-point outcome
            refuse_symmetric_start(descs[i], system_of(descs[i], specialise))
        except ConfigError as e:
            on_result(i, {"status": "failed", "message": one_line(f"{type(e).__name__}: {e}", 300),
                          "elapsed_s": time.perf_counter() - t1})
            continue
        groups.setdefault(_fingerprint(descs[i]), []).append(i)
    for members in groups.values():
        for lo in range(0, len(members), chunk_size):
            part = members[lo:lo + chunk_size]
            d0 = descs[part[0]]
            t0 = time.perf_counter()
            br = run_batch(d0, y0s=[initial_state(descs[i]) for i in part],
                           eta=[_step_of(descs[i]) for i in part], backend=backend,
                           record_every=int(save_at(d0).every), fast=False,  # == model run, bit for bit
                           specialise=specialise, lanes=lanes)
            per = (time.perf_counter() - t0) / len(part)
            for k, i in enumerate(part):
                t1 = time.perf_counter()
                d = descs[i]
                r = runs.in_memory(d, system_of(d), br.trajectory(k))
                runs.save(paths[i], d, r, extra_attrs={"sweep_point": json.dumps(overs[i], sort_keys=True),
                                                       "batched": backend})
                s = run_summary(Path(paths[i]))
                s["elapsed_s"] = per + time.perf_counter() - t1
                on_result(i, s)


def model_sweep(model: str | Path, base: dict, params: dict, out: str | Path, workers: int | None = None,
                progress: bool = True, stream=None, batched: bool = False, backend: str | None = None,
                specialise="auto", lanes: bool = True) -> dict:
    """Run (or continue) a sweep of ``model``; returns the index written to ``sweep.json``.
    ``batched``: the points run as batches of trajectories (``meanfield.engine.batched``
    on ``backend``), grouped by structure (points that differ only in initial
    state and eta share one batch); the files are the same. ``specialise``: as
    ``meanfield.engine.run`` (default ``"auto"``), passed to every run or batch. ``lanes`` (with
    ``batched``): as ``run_batch``'s (False: the per-trajectory drivers; the same bits)."""
    from .specialise import choice

    specialise = choice(specialise)
    from .description import load_description

    model = str(model)
    points = grid(params)
    overs = []
    if batched:
        from .batched import resolve_backend

        backend = resolve_backend(backend or "cpu")
    elif backend is not None:
        raise ConfigError("backend: only with --batched (the backend of the batched sweep: cpu, cuda or auto)")
    for p in points:  # validate every point before running anything
        over = {**base, **p}
        try:
            d = load_description(model, over)
        except ConfigError as e:
            raise ConfigError(f"sweep point {p}: {e}") from None
        if batched and (why := batch_problem(d)) is not None:
            raise ConfigError(f"batched: sweep point {p}: {why}")
        overs.append(_jsonable(over))
    index_path, folder = sweep_paths(Path(out))
    paths, entries, todo = open_sweep(index_path, folder, points, overs, _finished,
                                      {"params": params, "base": base, "model": model})
    index = {"format": "meanfield-sweep", "format_version": 1, "system": "model", "model": model,
             "base": _jsonable(base), "params": _jsonable(params), "n_points": len(points), "points": entries}
    bar, done = track_sweep(index_path, index, todo, stream, progress)

    status = "complete"
    try:
        if batched:
            def done_batched(i, s):
                bar.update()
                done(todo.index(i), s)

            _run_batched(model, overs, paths, todo, backend, done_batched, specialise=specialise, lanes=lanes)
        else:
            map_points(_run_point, [(model, overs[i], str(paths[i]), specialise) for i in todo], workers=workers,
                       progress=bar, on_result=done)
    except (KeyboardInterrupt, SystemError) as e:  # SystemError: the signal came as a numba kernel returned
        if not is_signal(e):
            raise
        status = "interrupted"
    index["status"] = status
    _write_index(index_path, index)
    return index


# ------------------------------------------------------------------ chunked ensembles


class ModelEnsemble:
    """A described model as an ensemble system (``meanfield.core.ensemble``;
    ``meanfield model sweep MODEL --chunked``): a point's config is the
    description with the point's parameters (``load_description``), points
    that differ only in initial state and step size (:func:`_fingerprint`)
    run as one batch of the engine's batched kernel
    (``meanfield.engine.batched.run_batch``: CPU threads or CUDA), and each
    trajectory's outputs are computed by the code that writes its run file
    (``runs.Run`` observables and ``runs._stage_times``), so they equal
    the numbers of ``meanfield model run`` of the same point: bit for bit on
    the CPU (the generic batch kernels, ``run_batch(..., fast=False)``, equal
    single runs bit for bit; a family's batch fast path would agree to
    rounding only), to rounding on a GPU. ``vector_exp=True``
    (``model sweep --vector-exp``): the lanes' exp by
    ``meanfield.core.lane_exp.exp_lane`` (``run_batch(..., vector_exp=True)``:
    faster, to rounding only; it is part of the identity, so chunks of the two
    never mix: a rerun with the other setting reuses none).

    Picklable (the model path and the file's hash); the chunk keys include
    the hash, so an edited description reruns every chunk."""

    name = "model"
    group_fields = "their model, data or training (all but the initial state and eta)"  # _fingerprint

    def probe_point(self, base: dict, over: dict, steps: int):
        """(overrides, factor): the point shortened to ``steps`` GD steps for the
        chunk-size probe (``meanfield.core.ensemble.probe_seconds``), or None
        (not one GD stage longer than that, or no steps / record_every
        parameter: it runs whole)."""
        d = self.config(base, over)
        st = d.training.stages
        if (d.training.method != "gd" or len(st) != 1 or not isinstance(st[0].length, int)
                or st[0].length <= steps or not {"steps", "record_every"} <= set(self.fields())):
            return None
        short = {**over, "steps": steps, "record_every": steps}
        try:
            st2 = self.config(base, short).training.stages
        except ConfigError:
            return None
        if len(st2) != 1 or st2[0].length != steps:
            return None
        return short, st[0].length / steps

    def __init__(self, model: str | Path, specialise: bool | str = "auto", vector_exp: bool = False,
                 lanes: bool = True):
        import hashlib

        self.model = str(model)
        self.vector_exp = bool(vector_exp)  # run_batch(..., vector_exp=...): other bits, in the identity
        self.lanes = bool(lanes)  # run_batch(..., lanes=...): the same bits, not in the identity
        from .specialise import choice

        self.specialise = choice(specialise)  # run_batch(..., specialise=...): the same bits, not in the identity
        try:
            self.sha256 = hashlib.sha256(Path(self.model).read_bytes()).hexdigest()
        except OSError as e:
            raise ConfigError(f"model: cannot read {self.model!r} ({e.strerror or e})") from None

    def identity(self) -> dict:
        ident = {"system": "model", "model": Path(self.model).name, "sha256": self.sha256}
        return {**ident, "vector_exp": True} if self.vector_exp else ident  # (the default: the identity as before)

    def fields(self) -> list[str]:
        import dataclasses

        from .description import declared_parameters, parameter_class, read_raw

        raw = read_raw(self.model)
        return [f.name for f in dataclasses.fields(parameter_class(raw))] + list(declared_parameters(raw))

    def config(self, base: dict, over: dict):
        from .description import load_description

        return load_description(self.model, {**base, **over})

    def batchable(self, desc) -> str | None:
        """Why ``desc`` cannot run in a chunk: not batchable, or a symmetric start the
        single run refuses (``meanfield.engine.symmetry``: the sweep is refused at its
        base, a point with status -3 and the message otherwise)."""
        why = batch_problem(desc)
        if why is not None:
            return why
        from .symmetry import refuse_symmetric_start

        from .system import system_of

        try:
            refuse_symmetric_start(desc, system_of(desc, self.specialise))
        except ConfigError as e:
            return str(e)
        return None

    def resolve_backend(self, backend: str) -> str:
        from .batched import resolve_backend

        return resolve_backend(backend)

    def group_key(self, desc) -> bytes:
        return _fingerprint(desc)

    def capacity_key(self, desc) -> tuple:
        from .batched import _step_of
        from .reduce import layout
        from .system import save_at

        tr = desc.training
        return (tr.method, repr(tr.stages), int(save_at(desc).every), _step_of(desc), layout(desc).size)

    def record_bytes(self, desc) -> float:
        from .batched import _step_of, record_capacity
        from .reduce import layout
        from .system import save_at

        return record_capacity(desc, _step_of(desc), int(save_at(desc).every)) * layout(desc).size * 8

    def advance(self, descs: list, backend: str):
        from .batched import _step_of, run_batch
        from .reduce import initial_state
        from .system import save_at

        d0 = descs[0]
        return run_batch(d0, y0s=[initial_state(d) for d in descs], eta=[_step_of(d) for d in descs],
                         backend=backend, record_every=int(save_at(d0).every), max_bytes=math.inf,
                         fast=False, specialise=self.specialise,
                         vector_exp=self.vector_exp, lanes=self.lanes)  # outputs: model run's bits (vector_exp: to rounding)

    def summaries(self, descs: list, br) -> dict:
        """Outputs per trajectory from its records, by the run file's own code."""
        from . import runs
        from .system import system_of

        B = len(descs)
        sysm = system_of(descs[0])  # one packed system per batch (equal fingerprints: equal packed arrays)
        o = {k: np.full(B, np.nan) for k in ("t_end", "loss_end", "min_margin_end", "min_margin_consistent_end",
                                             "min_margin_inconsistent_end", "T1", "T2", "T_loss")}
        o["status"] = np.asarray(br.code)
        o["steps_end"] = np.zeros(B, np.int64)
        o["margin_end"] = np.full((B, descs[0].data.n), np.nan)
        for k, d in enumerate(descs):
            r = runs.in_memory(d, sysm, br.trajectory(k))
            st = runs._stage_times(d, r.t, r.obs, r.stage_ends, r.step)
            m = r.margin[-1]
            c = d.data.flag("consistent")
            o["t_end"][k] = r.t[-1]
            o["steps_end"][k] = r.step[-1]
            o["loss_end"][k] = r.loss[-1]
            o["margin_end"][k] = m
            o["min_margin_end"][k] = m.min()
            o["min_margin_consistent_end"][k] = m[c].min() if c.any() else math.nan
            o["min_margin_inconsistent_end"][k] = m[~c].min() if (~c).any() else math.nan
            for name in ("T1", "T2", "T_loss"):
                o[name][k] = st[name]
        return o

    def trajectory(self, br, k: int, desc):
        return br.trajectory(k)

    def save(self, path: Path, desc, traj) -> None:
        from . import runs
        from .system import system_of

        runs.save(path, desc, runs.in_memory(desc, system_of(desc), traj))
