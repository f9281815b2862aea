"""Batched trajectories: many independent mixture runs advanced together.

Sweeps over omega, eta, m and seeds are thousands of independent trajectories
of one small ODE. This module advances B of them at once, one trajectory per
thread:

* ``cpu``: the trajectories split over threads (``numba.set_num_threads``
  chooses how many), each running a compiled loop that releases the GIL;
* ``cuda``: a ``numba.cuda`` kernel, one GPU thread per trajectory, its
  scratch in ``cuda.local.array`` sized by compile-time constants (one kernel
  per (P, L, number of samples)).

Both run the SAME mathematics: the per-trajectory drivers
(:func:`gd_trajectory`, :func:`rk4_trajectory`: the one step/record loop of
``meanfield.core.batched``, shared with the engine's batch, instantiated here
over the mixture's hooks :func:`mix_gd_stage` and :func:`mix_rhs_stage`) and
the per-step functions of ``meanfield.models.mixture.kernels`` are ``@portable``
plain-Python functions,
compiled with ``numba.njit`` for the CPU and, only when the CUDA backend is
asked for, with ``numba.cuda.jit(device=True)`` for the GPU
(``meanfield.core.activations.compile_portable``). Importing this module never imports CUDA.

What a batch supports (:func:`batchable` says why a config is refused):

* method ``gd`` (the exact GD map), simultaneous and three-stage schedules,
  stage criteria and ``criterion``, records on ``record_every`` and/or the
  integer points of ``record_log`` (the default grid of ``run``);
* method ``rk4`` (fixed step ``dt``) with ``record_every``, without criteria;
* per-trajectory omega, eta (dt), width, seed, neuron init, ReLU'(0),
  max_abs, stage lengths and modes; one sample set (K, L, p, label_prob,
  label_noise) and method per kernel launch (:func:`run_batch` groups
  configs by them).

Not batched: the dense path (``cfg.dense``: feature_gram, n_train,
n_neurons > 1), method ``flow`` (adaptive Dormand-Prince), rk4 with criteria
(their event location needs dense output) and rk4 with ``record_dt`` /
``record_log`` (interpolated records). Run those unbatched.

Records follow ``meanfield.core.integrate`` exactly (GDMap / RK4 with ``SaveAt``):
the initial state, every ``every``-th step (and the given points), every
stage end and the final (or last accepted) state, a record at the same
(step, t) as the previous one replacing it. CPU batched results equal
``meanfield.models.mixture.run.run`` bit for bit on the per-trajectory loop
(and on the trajectory-vectorised blocks with the C library's exp); the
default blocks (``meanfield.models.mixture.vectorised``, method gd, and
``vectorised_rk4``, method rk4; every batch) compute the softmax's and the
loss's exp within an ulp of it and
multiply by each softmax's reciprocal sum, so they agree to rounding (<= 1e-13
relative in the tests); their bits do not depend on the batch, its chunks,
the block width or the number of threads. Divergence (a non-finite state or
loss, or an entry above ``max_abs``) stops that trajectory only, with its
status, stop step and stage.

Entry points: :func:`run_batch` (configs -> ``integrate.Trajectory`` list,
what ``run.run`` returns), :func:`advance` (one group -> raw (B, T, state)
arrays, :class:`BatchResult`), :func:`resolve_backend`, :func:`cuda_available`,
:func:`batchable`. A batch has no progress line and an interrupt (SIGINT) is
only seen when a launch returns: give ``run_batch`` a ``chunk_size`` to get
control back between chunks.

CUDA numerics: NVVM contracts a*b + c into fused multiply-adds by default,
which breaks the exact cancellations the reduced dynamics rely on (a
pre-activation sitting exactly at the ReLU kink). The kernel is therefore
compiled with NVVM ``-fma=0`` (numba-cuda has no public option for it yet:
NVIDIA/numba-cuda#118; we add it while our kernel compiles). ``exp``/``log1p``
come from libdevice, not the CPU's libm, so GPU results agree with the CPU to
rounding, not bit for bit.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
from numba import njit

from ...core import batched as core_batched
from ...core.activations import compile_portable, portable
from ...core import integrate
from ...core.config import ConfigError
from . import kernels
from .config import MixtureConfig
from .init import initial_state
from .kernels import flow_rhs_into, gd_advance_into

#: backends, per-trajectory status codes (0 complete, 2 non-finite state or loss, 3 an entry above max_abs,
#: 4 record buffer full: a bug), the backend choice and the CUDA launcher: every system's (meanfield.core.batched)
from ...core.batched import (BACKENDS, COMPLETE, MAXABS, NONFINITE, OVERFLOW, THREADS_PER_BLOCK,  # noqa: F401,E402
                             cuda_available, launch_cuda, nvvm_no_fma, resolve_backend, simulator, trajectory_of)

cuda = None  # numba.cuda, imported on first use by _load_cuda (a module global so the simulator can swap it)


# ----------------------------------------------------------- portable drivers
# The step/record loops are ``meanfield.core.batched``'s (one driver for every
# system); the mixture supplies the hooks they call.


@portable
def mix_gd_stage(y, nsteps, eta, max_abs, crit_kind, crit_op, crit_thr, b, s, data, scratch):
    """Hook ``gd_stage``: up to nsteps exact GD steps of stage s of trajectory b
    (``kernels.gd_advance_into``); data = (P, idx, sgn, lab, weight,
    consistent, r0, stage_mode), scratch = (u, margin, G, dw, new, logit, p, T)."""
    P, idx, sgn, lab, weight, consistent, r0, stage_mode = data
    u, margin, G, dw, new, logit, p, T = scratch
    return gd_advance_into(y, nsteps, eta, P, idx, sgn, lab, weight, consistent, r0[b], stage_mode[b, s, 0] != 0,
                           stage_mode[b, s, 1] != 0, crit_kind, crit_op, crit_thr, max_abs, u, margin, G, dw, new,
                           logit, p, T)


@portable
def mix_rhs_stage(y, out, b, s, data, scratch):
    """Hook ``rhs_stage``: out = the flow's right-hand side at y in stage s of
    trajectory b (``kernels.flow_rhs_into``); returns the loss at y."""
    P, idx, sgn, lab, weight, consistent, r0, stage_mode = data
    u, margin, G, dw, new, logit, p, T = scratch
    return flow_rhs_into(y, out, P, idx, sgn, lab, weight, r0[b], stage_mode[b, s, 0] != 0, stage_mode[b, s, 1] != 0,
                         u, margin, G, dw, logit, p, T)


@njit(cache=True)
def new_scratch(data, dims, ny):
    """Hook ``new_scratch``: one CPU trajectory's scratch (the CUDA kernels hold
    the same arrays in local memory): u, margin, G, dw, new, logit, p, T."""
    nS, P, L = dims
    return (np.empty((nS, 2)), np.empty(nS), np.empty((2, P, P)), np.empty((2, P)), np.empty(ny), np.empty(L),
            np.empty(L), np.empty((3, P, P)))


gd_stage = mix_gd_stage
rhs_stage = mix_rhs_stage
# mix_record_into, mix_gd_trajectory, mix_rk4_trajectory (@portable; also bound as record_into,
# gd_trajectory, rk4_trajectory) and the CPU loops mix_gd_batch_cpu, mix_rk4_batch_cpu (one signature)
core_batched.instantiate_all(globals(), "mix_", portable, njit)


# --------------------------------------------------------------- CUDA drivers


def _load_cuda():
    """numba.cuda (``meanfield.core.batched.load_cuda``), bound to this
    module's global ``cuda`` that the kernel below reads."""
    global cuda
    if cuda is None:
        cuda = core_batched.load_cuda()
    return cuda


@functools.lru_cache(maxsize=None)
def _cuda_portable():
    """The portable functions compiled as CUDA device functions (built once)."""
    return compile_portable(_load_cuda().jit(device=True))


@functools.lru_cache(maxsize=None)
def _cuda_kernel(method: str, P: int, L: int, nS: int):
    """The batch kernel for one (method, P, L, number of samples): one thread
    per trajectory, scratch (as :func:`new_scratch`) in local memory of
    compile-time size."""
    cu = _load_cuda()
    dev = _cuda_portable()
    from numba import float64

    ny = kernels.state_size(P)
    traj = dev.mix_gd_trajectory if method == "gd" else dev.mix_rk4_trajectory

    def kernel(Y0, eta, max_abs, n_stages, stage_len, crit_kind, crit_op, crit_thr, every, pts, n_pts,
               idx, sgn, lab, weight, consistent, r0, stage_mode,
               rec_t, rec_step, rec_stage, rec_y, n_rec, status, stop_stage, end_step, end_t, end_reason,
               final_loss, Yout):
        b = cuda.grid(1)
        if b >= Y0.shape[0]:
            return
        y = cuda.local.array(ny, float64)
        for i in range(ny):
            y[i] = Y0[b, i]
        scratch = (cuda.local.array((nS, 2), float64), cuda.local.array(nS, float64),
                   cuda.local.array((2, P, P), float64), cuda.local.array((2, P), float64),
                   cuda.local.array(ny, float64), cuda.local.array(L, float64), cuda.local.array(L, float64),
                   cuda.local.array((3, P, P), float64))
        rk = (cuda.local.array(ny, float64), cuda.local.array(ny, float64), cuda.local.array(ny, float64),
              cuda.local.array(ny, float64), cuda.local.array(ny, float64), cuda.local.array(ny, float64),
              cuda.local.array(ny, float64))
        traj(b, y, eta, max_abs, n_stages, stage_len, crit_kind, crit_op, crit_thr, every, pts, n_pts,
             (P, idx, sgn, lab, weight, consistent, r0, stage_mode), scratch, rk,
             rec_t, rec_step, rec_stage, rec_y, n_rec, status, stop_stage, end_step, end_t, end_reason, final_loss)
        for i in range(ny):
            Yout[b, i] = y[i]

    return cu.jit(kernel)


def _launch_cuda(method, P, idx, args, outs, B):
    """The mixture kernel of (method, P, L, number of samples) over B trajectories."""
    launch_cuda(_cuda_kernel(method, P, idx.shape[1], idx.shape[0]), args, outs, B)


# ------------------------------------------------------------------ host side


@dataclass
class BatchResult:
    """Records of B trajectories on their grids: row b has ``n_records[b]``
    valid records ``t[b, :n]``, ``step``, ``stage`` and states ``y[b, :n]``
    (B, T, state size); ``code[b]`` 0 complete, 2 non-finite, 3 above
    max_abs; ``stop_stage[b]`` the stage it was in when it stopped;
    ``end_step``, ``end_t``, ``end_reason`` (0 length, 1 criterion) (B, 3)
    for the stages it finished."""

    method: str
    t: np.ndarray
    step: np.ndarray
    stage: np.ndarray
    y: np.ndarray
    n_records: np.ndarray
    code: np.ndarray
    stop_stage: np.ndarray
    end_step: np.ndarray
    end_t: np.ndarray
    end_reason: np.ndarray
    n_stages: np.ndarray
    loss: np.ndarray | None = None     # (B,) the loss at the last state the kernels evaluated
    y_final: np.ndarray | None = None  # (B, state) the final (or last accepted) state


def _group_key(cfg: MixtureConfig) -> tuple:
    """Configs with equal keys share a sample set and a method: one launch."""
    return (cfg.K, cfg.L, cfg.p, cfg.label_prob, cfg.label_noise, cfg.method)


def samples_of(cfg: MixtureConfig):
    """The exact sample set of a (non-dense) config, as ``run.run`` uses."""
    from .run import samples_of as _samples_of

    return _samples_of(cfg)


def batchable(cfg: MixtureConfig) -> str | None:
    """Why ``cfg`` cannot run in a batch (one line), or None when it can."""
    from .run import save_at

    if cfg.dense:
        return ("the dense path (feature_gram, n_train or n_neurons > 1) is not batched here; dense configs run "
                "on the engine, which batches them: meanfield model sweep meanfield/models/mixture.toml --chunked "
                "(the same options and --param), or run it unbatched")
    if cfg.softmax_scale != "1":
        return "softmax_scale 1/sqrt(m) is not batched; run it unbatched"
    if cfg.method == "flow":
        return ("method flow (adaptive Dormand-Prince) is not batched; use method gd or rk4 (fixed step dt), "
                "or run it unbatched")
    if cfg.method == "rk4":
        if cfg.schedule == "simultaneous":
            crit = [c for c in (cfg.criterion,) if c is not None]
        else:
            crit = [c for c in cfg.stage_criteria if c is not None]
        if crit:
            return (f"stop criteria ({', '.join(crit)}) with method rk4 are not batched (their event location "
                    f"needs dense output); use method gd, drop the criteria, or run it unbatched")
        if save_at(cfg).points is not None:
            return ("method rk4 is batched with record_every only (record_dt / record_log interpolate); "
                    "give record_every, or run it unbatched")
    return None


def check_batchable(cfg: MixtureConfig, backend: str = "cpu") -> None:
    """Raise a one-line ConfigError when ``cfg`` cannot run in a batch."""
    why = batchable(cfg)
    if why is not None:
        raise ConfigError(f"backend {backend}: {why}")


def _pack(cfgs: list[MixtureConfig], y0s: list[np.ndarray]) -> dict:
    """Per-trajectory inputs of one batch (same K, L, p and method)."""
    from .run import save_at, stages

    B = len(cfgs)
    gd = cfgs[0].method == "gd"
    n_stages = np.zeros(B, np.int64)
    stage_len = np.zeros((B, 3), np.int64 if gd else np.float64)
    stage_mode = np.zeros((B, 3, 2), np.int8)
    crit_kind = np.zeros((B, 3), np.int64)
    crit_op = np.ones((B, 3), np.int64)
    crit_thr = np.zeros((B, 3), np.float64)
    every = np.zeros(B, np.int64)
    step_par = np.array([c.eta if gd else c.dt for c in cfgs], np.float64)
    r0 = np.array([c.relu_prime_at_zero for c in cfgs], np.float64)
    max_abs = np.array([c.max_abs for c in cfgs], np.float64)
    cap = np.zeros(B, np.int64)
    memo: dict = {}  # schedule and record grid, shared by configs that differ only in omega, width, seed, ...
    members: dict = {}  # the same key -> the trajectories that have it (their rows are filled at once below)
    for b, c in enumerate(cfgs):
        key = (c.method, c.schedule, c.steps, c.t_end, c.stage_steps, c.stage_times, c.stage_criteria, c.stage3,
               c.criterion, c.record_every, c.record_log, c.record_dt, c.eta, c.dt)
        if key in memo:
            members[key].append(b)
        else:
            members[key] = [b]
            st = stages(c)
            sv = save_at(c)
            lens = [int(x.length) if gd else float(x.length) for x in st]
            crit = [integrate.criterion_args(x.criterion, kernels.CRITERIA) for x in st]
            ev = int(sv.every) if sv.every else 0
            pts = np.asarray(sv.points, np.int64) if (gd and sv.points is not None) else np.zeros(0, np.int64)
            if gd:
                nsteps = sum(lens)
            else:
                nsteps = sum(int(math.ceil(x / c.dt * (1 + 1e-12))) + 1 for x in lens)
            memo[key] = (lens, [x.mode for x in st], crit, ev, pts,
                         2 + len(st) + (nsteps // ev if ev else 0) + len(pts))
    npmax = max(1, max(len(m[4]) for m in memo.values()))
    pts = np.zeros((B, npmax), np.int64)
    n_pts = np.zeros(B, np.int64)
    for key, bs in members.items():  # the rows of every trajectory with this key (values as row by row)
        lens, modes, crit, ev, p, cp = memo[key]
        rows = np.asarray(bs, np.intp)
        n_stages[rows] = len(lens)
        stage_len[rows, : len(lens)] = lens
        stage_mode[rows, : len(lens)] = modes
        for s_, (k, o, v) in enumerate(crit):
            crit_kind[rows, s_], crit_op[rows, s_], crit_thr[rows, s_] = k, o, v
        every[rows] = ev
        cap[rows] = cp
        pts[rows, : len(p)] = p
        n_pts[rows] = len(p)
    Y0 = np.ascontiguousarray(np.stack([np.asarray(y, np.float64) for y in y0s]))
    return dict(Y0=Y0, step_par=step_par, r0=r0, max_abs=max_abs, n_stages=n_stages, stage_len=stage_len,
                stage_mode=stage_mode, crit_kind=crit_kind, crit_op=crit_op, crit_thr=crit_thr, every=every,
                pts=pts, n_pts=n_pts, T=int(cap.max()))


def advance(cfgs: list[MixtureConfig], y0s: list[np.ndarray] | None = None, backend: str = "cpu",
            max_bytes: float = 8 * 2**30, lanes: bool = True, vector_exp: bool = True,
            every: int | None = None) -> BatchResult:
    """Run one batch of configs sharing a sample set and method on ``backend``
    (``cpu`` or ``cuda``, see :func:`resolve_backend`) and return the raw
    records. ``max_bytes`` caps the record buffer (B x T x state x 8 bytes).
    ``lanes``: on the CPU, methods gd and rk4 run trajectory-vectorised
    (``meanfield.models.mixture.vectorised``, ``vectorised_rk4``) in blocks
    whose width follows
    each thread's share of B (``vectorised.width_for``; every width gives a
    trajectory the same bits); False runs the per-trajectory loop (the
    scalar kernels of ``run.run``, the reference of the tests and
    benchmarks). ``vector_exp`` (with ``lanes``): the softmax's and the loss's exp in the
    blocks' vectorised arithmetic (``core.lane_exp.exp_lane``, within an ulp of
    the C library's: results agree with the per-trajectory loop to rounding,
    <= 1e-13 relative in the tests); False: the C library's exp, equal to the
    per-trajectory loop bit for bit (and slower). ``every`` (an int >= 0):
    records every ``every`` steps only (0: the initial state, the stage ends
    and the final state), instead of the configs' record grids (the engine's
    ``run_batch`` records so).

    Examples
    --------
    >>> from meanfield.models.mixture import batched
    >>> from meanfield.models.mixture.config import make_config
    >>> res = batched.advance([make_config(steps=5)] * 2)
    >>> int(res.step[0, res.n_records[0] - 1])
    5
    """
    if not cfgs:
        raise ValueError("advance: empty batch")
    c0 = cfgs[0]
    for c in cfgs:
        if _group_key(c) != _group_key(c0):
            raise ValueError("advance: a batch needs one sample set and method (K, L, p, label_prob, "
                             "label_noise, method); use run_batch to group")
        check_batchable(c, backend)
    if y0s is None:
        y0s = [initial_state(c) for c in cfgs]
    s = samples_of(c0)
    P = s.P
    x = _pack(cfgs, y0s)
    B, ny = x["Y0"].shape
    if every is not None:  # the engine batch's grid: every N steps, no points
        x["every"][:] = int(every)
        x["pts"], x["n_pts"] = np.zeros((B, 1), np.int64), np.zeros(B, np.int64)
        if c0.method == "gd":
            nsteps = x["stage_len"].sum(axis=1)
        else:
            nsteps = np.array([sum(int(math.ceil(float(v) / c.dt * (1 + 1e-12))) + 1 for v in row[:n])
                               for row, n, c in zip(x["stage_len"], x["n_stages"], cfgs)])
        x["T"] = int((2 + x["n_stages"] + (nsteps // int(every) if every else 0)).max())
    T = x["T"]
    need = B * T * ny * 8
    if need > max_bytes:
        raise ConfigError(f"backend {backend}: the records of {B} trajectories need {need / 2**30:.3g} GiB "
                          f"({T} records x {ny} numbers each); record less often (record_every) or run fewer "
                          f"at once")
    outs = core_batched.new_outputs(B, T, ny, 3)
    rec_t, rec_step, rec_stage, rec_y, n_rec, status, stop_stage, end_step, end_t, end_reason = outs[:10]
    data = [P, s.idx, s.sgn, s.y, s.weight, s.consistent.astype(np.bool_), x["r0"], x["stage_mode"]]
    head = [x["Y0"], x["step_par"], x["max_abs"], x["n_stages"], x["stage_len"], x["crit_kind"], x["crit_op"],
            x["crit_thr"], x["every"], x["pts"], x["n_pts"]]
    if backend == "cuda":  # P is a compile-time constant of the kernel
        _launch_cuda(c0.method, P, s.idx, head + data[1:], outs, B)
    else:
        dims = (s.idx.shape[0], P, s.idx.shape[1])
        fn = mix_gd_batch_cpu if c0.method == "gd" else mix_rk4_batch_cpu
        if lanes:
            from numba import get_num_threads

            from . import vectorised

            # every batch in lanes, in blocks as wide as each thread's share allows
            width = vectorised.width_for(B, get_num_threads())
            if c0.method == "gd":
                fn = vectorised.batch_kernel(width, s.idx, s.sgn, P, vector_exp)
            else:
                from . import vectorised_rk4

                fn = vectorised_rk4.rk4_kernel(width, s.idx, s.sgn, P, vector_exp)
        dat = tuple(data)
        core_batched.run_cpu(fn, B, head + [dat, dims] + outs)
    if np.any(status == OVERFLOW):  # pragma: no cover - the capacity bound is exact enough
        raise RuntimeError("batched: record buffer full (capacity bound too small): a bug")
    return BatchResult(c0.method, rec_t, rec_step, rec_stage, rec_y, n_rec, status, stop_stage, end_step,
                       end_t, end_reason, x["n_stages"], loss=outs[10], y_final=outs[11])


def trajectory(res: BatchResult, b: int, cfg: MixtureConfig) -> integrate.Trajectory:
    """Trajectory b of a batch as ``meanfield.models.mixture.run.run`` returns it
    (records, stage ends, status and message)."""
    return trajectory_of(int(res.n_records[b]), res.t[b], res.step[b], res.stage[b], res.y[b], int(res.code[b]),
                         int(res.stop_stage[b]), res.end_step[b], res.end_t[b], res.end_reason[b],
                         res.method == "gd", cfg.eta, cfg.max_abs)


def run_batch(cfgs: list[MixtureConfig], backend: str = "cpu", y0s: list[np.ndarray] | None = None,
              max_bytes: float = 8 * 2**30, chunk_size: int | None = None,
              on_result: Callable[[int, integrate.Trajectory], None] | None = None,
              lanes: bool = True) -> list[integrate.Trajectory]:
    """Run every config as one trajectory, batched on ``backend`` (``cpu``,
    ``cuda`` or ``auto``); returns one ``integrate.Trajectory`` per config, in
    order, equal to what ``meanfield.models.mixture.run.run(cfg)`` (from ``y0s[i]``
    if given) returns: to rounding where methods gd and rk4 run in vectorised
    lanes (the CPU's default: see :func:`advance`; a
    trajectory's bits then depend on its config alone, not on the batch, the
    chunks or the threads), bit for bit with ``lanes=False`` (one trajectory
    at a time); to rounding on a GPU.

    Configs are grouped by sample set and method (K, L, p, label_prob,
    label_noise, method), one launch per group, or per
    ``chunk_size`` configs of a group when given (bounds memory; a caller can
    react between chunks, e.g. to an interrupt). ``on_result(i, trajectory)``
    is called for each config as its chunk finishes. Raises a one-line
    ConfigError for a config that cannot be batched (see :func:`batchable`)
    or a record buffer above ``max_bytes``, before running anything of that
    chunk; the batchability of every config is checked before anything runs."""
    be = resolve_backend(backend)
    cfgs = list(cfgs)
    for c in cfgs:
        check_batchable(c, backend)
    if y0s is not None and len(y0s) != len(cfgs):
        raise ValueError(f"run_batch: {len(y0s)} initial states for {len(cfgs)} configs")
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"run_batch: chunk_size must be >= 1, got {chunk_size}")
    groups: dict = {}
    for i, c in enumerate(cfgs):
        groups.setdefault(_group_key(c), []).append(i)
    out: list = [None] * len(cfgs)
    for members in groups.values():
        step = chunk_size or len(members)
        for lo in range(0, len(members), step):
            part = members[lo:lo + step]
            res = advance([cfgs[i] for i in part], None if y0s is None else [y0s[i] for i in part], be, max_bytes,
                          lanes=lanes)
            for k, i in enumerate(part):
                out[i] = trajectory(res, k, cfgs[i])
                if on_result is not None:
                    on_result(i, out[i])
    return out


def warm_lanes() -> None:
    """Compile (or load from numba's cache) the batch kernels (gd and rk4) of every block width of
    ``vectorised.WIDTHS``.

    ``meanfield warm`` calls it with its "mixture batched" family (its
    tiny sweep compiles only the width its two points take).

    Returns
    -------
    None

    Examples
    --------
    >>> from meanfield.models.mixture import batched
    >>> batched.warm_lanes()  # doctest: +SKIP
    """
    from . import vectorised
    from .config import make_config

    cfgs = [make_config(steps=2)] * 2
    rk4 = [make_config(method="rk4", steps=2, eta=0.1, dt=0.1, record_every=1)] * 2
    old = vectorised.WIDTHS
    try:
        for _, w in old:
            vectorised.WIDTHS = ((1, w),)
            advance(cfgs)
            advance(rk4)
    finally:
        vectorised.WIDTHS = old
