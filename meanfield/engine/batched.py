"""Batched engine runs: B trajectories of one description advanced together.

Sweeps over initial states (omega, width, seed), step sizes and schedules are
many independent trajectories of one reduced system. :func:`run_batch` takes
one :class:`~meanfield.engine.description.Description` and B initial states
(given, or built from per-trajectory ``seeds`` / ``widths``), with a step size
per trajectory (eta; dt for rk4), and advances them at once under the exact
GD map or fixed-step RK4 (below):

* ``cpu``: the trajectories split over threads (``numba.set_num_threads``
  chooses how many), each running a compiled loop that releases the GIL;
* ``cuda``: one GPU thread per trajectory, its scratch in
  ``cuda.local.array`` of compile-time size (one kernel per shape of the
  description), compiled on first use with NVVM ``-fma=0`` (as every system's
  batch, ``meanfield.core.batched``); ``NUMBA_ENABLE_CUDASIM=1`` runs it in
  numba's CUDA simulator. Importing this module never imports CUDA.

Both backends run the SAME code: the per-trajectory drivers
:func:`eng_gd_trajectory` and :func:`eng_rk4_trajectory` (the one step/record
loop of ``meanfield.core.batched``, shared with every system's batch,
instantiated here over the engine's hooks :func:`eng_gd_stage` and
:func:`eng_rhs_stage`) and the engine's kernels they call
(``meanfield.engine.kernels``: ``eng_gd_advance_into`` with the stage mask
``mode``, the stop criteria and the ``max_abs`` guard; ``eng_loss_grads`` and
``eng_update`` for the flow's right-hand side) are ``@portable`` plain-Python
functions, compiled with ``numba.njit`` for the CPU and with
``numba.cuda.jit(device=True)`` for the GPU
(``meanfield.core.activations.compile_portable``).

Records follow ``meanfield.core.integrate`` (GDMap / RK4 with ``SaveAt(every=N)``)
exactly: the initial state, every N-th step (``record_every``; None: none),
every stage end and, for a trajectory that diverges, its last accepted state.
With ``record_every=None`` a batch keeps only that summary. Every trajectory
also returns its final state, the loss there, its stop step, stop stage and
status. On the CPU a batch equals ``meanfield.engine.run`` of each
trajectory bit for bit; on a GPU to rounding (libdevice ``exp``/``log``).

On the CPU the default runs the trajectories in blocks of lanes
(``meanfield.engine.lanes_batch`` for gd, ``lanes_rk4`` for rk4: lane kernels
generated from the same scalar kernels by ``meanfield.engine.lanes``, the
state ``Y[entry, lane]``):
equal to the per-trajectory drivers (``==``; bit for bit but for the sign of
a zero entry). ``run_batch(..., lanes=False)`` runs the drivers above.

Methods: ``gd`` (the exact GD map, with stop criteria) and ``rk4`` (classical
fixed-step RK4 of the flow, step ``dt`` per trajectory, without stop criteria:
their event location needs dense output), both with the operation order of
``meanfield.core.integrate``. Method ``flow`` (adaptive Dormand-Prince) and rk4
with criteria are refused with one line: run those unbatched.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

import numpy as np
from numba import njit

from ..core import batched as core_batched
from ..core import integrate
from ..core.config import ConfigError
from ..core.activations import compile_portable, portable
from ..core.batched import trajectory_of
from . import kernels
from .description import Description
from .kernels import eng_gd_advance_into, eng_loss_grads, eng_update
from .reduce import initial_state
from .packed import mode_of, pack

#: backends and per-trajectory status codes (every system's: ``meanfield.core.batched``): 0 complete,
#: 2 non-finite state or loss, 3 an entry above max_abs, 4 record buffer full (a bug)
from ..core.batched import BACKENDS, COMPLETE, MAXABS, NONFINITE, OVERFLOW, THREADS_PER_BLOCK  # noqa: F401,E402

cuda = None  # numba.cuda, set on first use by _load_cuda (the CUDA kernel reads it as a global)


# ------------------------------------------------------------ portable hooks
# The step/record loops are ``meanfield.core.batched``'s (one driver for every
# system); the engine supplies the hooks they call. data = (hi, hf, qv, Gr,
# grp, Gam, nzi, nzc, nzn, cnt, last, leff, target, weight, kind, r0,
# consistent, stage_mode); scratch = (u, margin, zb, f, df, G, gflat, T, p, v,
# om, tk, Xm, Ym, tmp, new, pa, lka).


@portable
def eng_gd_stage(y, nsteps, eta, max_abs, crit_kind, crit_op, crit_thr, b, s, data, scratch):
    """Hook ``gd_stage``: up to nsteps exact GD steps of stage s of trajectory b
    (``kernels.eng_gd_advance_into`` with the stage's mask stage_mode[b, s])."""
    hi, hf, qv, Gr, grp, Gam, nzi, nzc, nzn, cnt, last, leff, target, weight, kind, r0, consistent, stage_mode = data
    u, margin, zb, f, df, G, gflat, T, p, v, om, tk, Xm, Ym, tmp, new, pa, lka = scratch
    return eng_gd_advance_into(y, nsteps, eta, stage_mode[b, s], hi, hf, qv, Gr, grp, Gam, nzi, nzc, nzn, cnt, last,
                               leff, target, weight, kind, r0, consistent, crit_kind, crit_op, crit_thr, max_abs, u,
                               margin, zb, f, df, G, gflat, T, p, v, om, tk, Xm, Ym, tmp, new, pa, lka)


@portable
def eng_rhs_stage(y, out, b, s, data, scratch):
    """Hook ``rhs_stage``: out = the flow's right-hand side at y in stage s of
    trajectory b (as ``kernels.flow_rhs``); returns the loss at y."""
    hi, hf, qv, Gr, grp, Gam, nzi, nzc, nzn, cnt, last, leff, target, weight, kind, r0, consistent, stage_mode = data
    u, margin, zb, f, df, G, gflat, T, p, v, om, tk, Xm, Ym, tmp, new, pa, lka = scratch
    loss = eng_loss_grads(y, hi, hf, qv, nzi, nzc, nzn, cnt, last, leff, target, weight, kind, r0, True, u, margin,
                          zb, f, df, G, gflat, T, p, v, om, tk, pa, lka)
    eng_update(y, out, hi, hf, Gr, grp, Gam, G, gflat, 1.0, stage_mode[b, s], False, Xm, Ym, tmp)
    return loss


@njit(cache=True, nogil=True)
def new_scratch(data, dims, ny):
    """Hook ``new_scratch``: one CPU trajectory's scratch (the CUDA kernels hold
    the same arrays in local memory); dims = (R, C, Nmax)."""
    hi, qv, nzn = data[0], data[2], data[8]
    R, C, Nmax = dims
    n, L = nzn.shape
    P = qv.shape[1]
    H = hi.shape[0]
    return (np.empty((n, H, R)), np.empty(n), np.empty((H, P)), np.empty(C), np.empty(C),
            np.zeros((H, Nmax, Nmax)), np.zeros(ny), np.empty(P), np.empty(L), np.empty(L), np.empty(P),
            np.empty(P), np.empty((Nmax, Nmax)), np.empty((Nmax, Nmax)), np.empty((P, P)), np.empty(ny),
            np.zeros((H, L, L)), np.zeros((H, L)))


gd_stage = eng_gd_stage
rhs_stage = eng_rhs_stage
# eng_record_into, eng_gd_trajectory, eng_rk4_trajectory (@portable; also bound as record_into,
# gd_trajectory, rk4_trajectory) and the CPU loops eng_gd_batch_cpu, eng_rk4_batch_cpu (one signature)
core_batched.instantiate_all(globals(), "eng_", portable, njit)


# --------------------------------------------------------------- CUDA driver


def _load_cuda():
    global cuda
    if cuda is None:
        cuda = core_batched.load_cuda()
    return cuda


def resolve_backend(name: str) -> str:
    """``cpu`` | ``cuda`` | ``auto`` -> ``cpu`` or ``cuda`` (as every
    system's batch: ``cuda`` needs a GPU or the simulator, ``auto`` picks CUDA only on a
    real GPU); a one-line ConfigError otherwise."""
    return core_batched.resolve_backend(name)


@functools.lru_cache(maxsize=None)
def _cuda_portable():
    """Every portable function (every registered one: the engine's, this driver's, a paper's)
    compiled as CUDA device functions (compiled lazily, on first launch)."""
    return compile_portable(_load_cuda().jit(device=True))


@functools.lru_cache(maxsize=None)
def _cuda_kernel(method: str, n: int, L: int, P: int, H: int, R: int, C: int, Nmax: int, ny: int):
    """The batch kernel for one method and shape of description: one thread
    per trajectory, its scratch (as :func:`new_scratch`) in local memory of
    compile-time size."""
    cu = _load_cuda()
    from numba import float64

    dev = _cuda_portable()
    traj = dev.eng_gd_trajectory if method == "gd" else dev.eng_rk4_trajectory

    def kernel(Y0, eta, max_abs, n_stages, stage_len, crit_kind, crit_op, crit_thr, every, pts, n_pts,
               hi, hf, qv, Gr, grp, Gam, nzi, nzc, nzn, cnt, last, leff, target, weight, kind, r0, consistent,
               stage_mode, rec_t, rec_step, rec_stage, rec_y, n_rec, status, stop_stage, end_step, end_t,
               end_reason, final_loss, Yout):
        b = cuda.grid(1)
        if b >= Y0.shape[0]:
            return
        y = cuda.local.array(ny, float64)
        for i in range(ny):
            y[i] = Y0[b, i]
        pa = cuda.local.array((H, L, L), float64)
        lka = cuda.local.array((H, L), float64)
        for k in range(H):
            for j in range(L):
                lka[k, j] = 0.0
                for i in range(L):
                    pa[k, j, i] = 0.0
        scratch = (cuda.local.array((n, H, R), float64), cuda.local.array(n, float64),
                   cuda.local.array((H, P), float64), cuda.local.array(C, float64), cuda.local.array(C, float64),
                   cuda.local.array((H, Nmax, Nmax), float64), cuda.local.array(ny, float64),
                   cuda.local.array(P, float64), cuda.local.array(L, float64), cuda.local.array(L, float64),
                   cuda.local.array(P, float64), cuda.local.array(P, float64),
                   cuda.local.array((Nmax, Nmax), float64), cuda.local.array((Nmax, Nmax), float64),
                   cuda.local.array((P, P), float64), cuda.local.array(ny, float64), pa, lka)
        rk = (cuda.local.array(ny, float64), cuda.local.array(ny, float64), cuda.local.array(ny, float64),
              cuda.local.array(ny, float64), cuda.local.array(ny, float64), cuda.local.array(ny, float64),
              cuda.local.array(ny, float64))
        traj(b, y, eta, max_abs, n_stages, stage_len, crit_kind, crit_op, crit_thr, every, pts, n_pts,
             (hi, hf, qv, Gr, grp, Gam, nzi, nzc, nzn, cnt, last, leff, target, weight, kind, r0, consistent,
              stage_mode), scratch, rk,
             rec_t, rec_step, rec_stage, rec_y, n_rec, status, stop_stage, end_step, end_t, end_reason, final_loss)
        for i in range(ny):
            Yout[b, i] = y[i]

    return cu.jit(kernel)


def _launch_cuda(shape, scalars_at, args, outs, B):
    """The engine kernel of ``shape`` over B trajectories (``meanfield.core.batched.launch_cuda``)."""
    core_batched.launch_cuda(_cuda_kernel(*shape), args, outs, B, scalars_at)


# ------------------------------------------------------------------ host side


@dataclass
class BatchRun:
    """B trajectories of one description. Summary per trajectory b:
    ``y[b]`` final (or last accepted) state, ``loss[b]`` the loss there,
    ``steps[b]`` stop step, ``stop_stage[b]``, ``status[b]`` ("complete" or
    "diverged"), ``code[b]`` (0 complete, 2 non-finite, 3 above max_abs),
    ``eta[b]``. Records: row b has ``n_records[b]`` valid entries
    ``rec_t[b, :n]``, ``rec_step``, ``rec_stage``, ``rec_y`` (B, T, state);
    ``end_step`` / ``end_t`` / ``end_reason`` (B, stages) for the stages it finished.
    :meth:`trajectory` gives trajectory b as ``meanfield.core.integrate.Trajectory``,
    :meth:`run` as a :class:`meanfield.engine.runs.Run` (named arrays)."""

    desc: Description
    backend: str
    eta: np.ndarray
    y: np.ndarray
    loss: np.ndarray
    steps: np.ndarray
    stop_stage: np.ndarray
    code: np.ndarray
    status: list
    rec_t: np.ndarray
    rec_step: np.ndarray
    rec_stage: np.ndarray
    rec_y: np.ndarray
    n_records: np.ndarray
    end_step: np.ndarray
    end_t: np.ndarray
    end_reason: np.ndarray

    @property
    def B(self) -> int:
        return self.y.shape[0]

    def trajectory(self, b: int) -> integrate.Trajectory:
        tr = self.desc.training
        return trajectory_of(int(self.n_records[b]), self.rec_t[b], self.rec_step[b], self.rec_stage[b],
                             self.rec_y[b], int(self.code[b]), int(self.stop_stage[b]), self.end_step[b],
                             self.end_t[b], self.end_reason[b], tr.method == "gd", float(self.eta[b]), tr.max_abs)

    def run(self, b: int):
        """Trajectory b as an in-memory engine Run (``r.S["+", "c1", "v1"]``, ``r.loss``, ...)."""
        from .runs import in_memory
        from .system import system_of

        d = _with_step(self.desc, float(self.eta[b]))
        return in_memory(d, system_of(d), self.trajectory(b))


def _step_of(desc: Description) -> float:
    """The step size of a description: eta (method gd), dt or else eta (rk4)."""
    tr = desc.training
    return float(tr.dt) if tr.method == "rk4" and tr.dt is not None else float(tr.eta)


def _with_step(desc: Description, h: float) -> Description:
    """``desc`` with step size h (eta for gd; dt, or eta when dt is unset, for rk4)."""
    if h == _step_of(desc):
        return desc
    tr = desc.training
    if tr.method == "rk4" and tr.dt is not None:
        return dataclasses.replace(desc, training=dataclasses.replace(tr, dt=h))
    return dataclasses.replace(desc, training=dataclasses.replace(tr, eta=h))


def _per_trajectory(name, val, B, cast):
    if val is None:
        return None
    if np.ndim(val) == 0:
        return [cast(val)] * B
    vals = list(val)
    if len(vals) != B:
        raise ConfigError(f"{name}: needs one value per trajectory ({B}); got {len(vals)}")
    return [cast(x) if x is not None else None for x in vals]


def initial_states(desc: Description, seeds=None, widths=None) -> np.ndarray:
    """Initial states of B trajectories of a description.

    Parameters
    ----------
    desc : Description
        The model.
    seeds : int, list of int or None
        Per-trajectory seeds of the sampled init (default the description's).
    widths : int, list of int or None, or None
        Per-trajectory widths (an entry None: infinite width; default the
        description's). Lists must have the same length B; a scalar is repeated.

    Returns
    -------
    numpy.ndarray
        Shape (B, state size): the packed reduced states at t = 0.

    Raises
    ------
    ConfigError
        Lists of different lengths, a width below 1.

    Examples
    --------
    >>> import meanfield.engine as me
    >>> desc = me.load("docs/examples/majority.toml")
    >>> me.initial_states(desc, seeds=[0, 1, 2], widths=16).shape[0]
    3
    """
    B = max(len(x) if x is not None and np.ndim(x) > 0 else 1 for x in (seeds, widths))
    seeds = _per_trajectory("seeds", seeds, B, int) or [desc.init.seed] * B
    widths = _per_trajectory("widths", widths, B, int) if widths is not None else [desc.init.width] * B
    for w in widths:
        if w is not None and w < 1:
            raise ConfigError(f"widths: must be positive integers (or None for infinite width); got {w}")
    out = []
    for s, w in zip(seeds, widths):
        d = dataclasses.replace(desc, init=dataclasses.replace(desc.init, seed=s, width=w))
        out.append(initial_state(d))
    return np.array(out)


def record_capacity(desc: Description, step: float, every: int) -> int:
    """Records one trajectory of ``desc`` can write in a batch (the buffer
    length): the initial state, every ``every``-th (solver) step with step
    size ``step`` (0: none), one per stage end and a final one."""
    tr = desc.training
    if tr.method == "gd":
        nsteps = sum(int(s.length) for s in tr.stages)
    else:
        nsteps = sum(int(math.ceil(float(s.length) / step * (1 + 1e-12))) + 1 for s in tr.stages)
    return 2 + len(tr.stages) + (nsteps // every if every else 0)


def run_batch(desc: Description, y0s=None, eta=None, seeds=None, widths=None, backend: str = "cpu",
              record_every: int | None = None, max_bytes: float = 4 * 2**30, fast: bool = True,
              specialise: bool | str = "auto", lanes: bool = True, vector_exp: bool = False) -> BatchRun:
    """Advance B trajectories of a description together (CPU threads or one CUDA thread each).

    The exact GD map (method gd) or fixed-step RK4 of the flow (method rk4,
    without stop criteria). Stages, their masks and criteria and ``max_abs``
    come from the description. The one ensemble path: a description of a
    family whose fast path registers a batch (``meanfield.engine.registry``;
    the shipped mixture family) runs on those kernels where they apply, the
    rest on the engine's generic kernels. The generic CPU batch equals single
    runs bit for bit; a fast path equals them to rounding (its test names it;
    at an unstable symmetric saddle a huge step can amplify that rounding:
    ``fast=False`` there, as ``meanfield model sweep`` does).

    Parameters
    ----------
    desc : Description
        The model.
    y0s : array_like or None
        (B, state) initial states (default: built from ``seeds`` / ``widths``
        by :func:`initial_states`, or the description's own initial state, B = 1).
    eta : float, list of float or None
        The step size (gd: eta; rk4: dt), one or one per trajectory (default
        the description's).
    seeds, widths
        As in :func:`initial_states` (used when ``y0s`` is None).
    backend : str
        ``cpu``, ``cuda`` or ``auto`` (CUDA only when a GPU is present).
    record_every : int or None
        Also record every N steps (default: the summary only).
    max_bytes : float
        Refuse a batch whose record buffers would exceed this.
    fast : bool
        Use the family's registered batch fast path where it applies (default);
        False: the generic kernels always.
    specialise : bool or "auto"
        True: the generic CPU batch through the loop compiled for this
        description (``meanfield.engine.specialise``: bit for bit the generic
        batch, about 20 s to compile once per description); method gd, the CPU.
        A registered fast path is then not used, whatever ``fast`` says.
        ``"auto"`` (default): where no fast path is taken and ``lanes`` is
        False (or the method rk4), that batch loop if one is ready (compiled
        before), else the generic one; False: generic.
    lanes : bool
        The generic CPU batch in lanes where a thread gets 8 trajectories or more (default:
        ``meanfield.engine.lanes_batch``, blocks of trajectories stepped together by
        lane kernels generated from the scalar kernels' source; equal to the
        per-trajectory batch, ``==``, bit for bit but for the sign of zero
        entries; method rk4 too: ``meanfield.engine.lanes_rk4``); False: one
        trajectory after another (the per-trajectory drivers; ``specialise``
        applies there). CUDA: per trajectory.
    vector_exp : bool
        With the lanes: ``math.exp`` inside their loops over lanes by
        ``meanfield.core.lane_exp.exp_lane`` (straight-line arithmetic that
        vectorises, within one ulp of the C library's exp; the lane kernels of
        ``meanfield.engine.lanes.module(vector_exp=True)``): faster where the
        description has softmax heads or a logistic / cross-entropy loss, equal
        to the per-trajectory batch to rounding (<= 1e-13 relative in
        ``tests/test_engine_lanes_vexp.py``), no longer bit for bit; the lanes
        run however few trajectories a thread has (padded), so a trajectory's
        bits do not depend on the batch size or the threads. False (default):
        the C library's exp, the bits of single runs (what ``meanfield model
        sweep`` promises). Ignored where the lanes cannot run (``lanes=False``,
        ``specialise=True``, CUDA, a lane's scratch above
        ``lanes_batch.LANE_SCRATCH_BYTES`` even in the narrowest block) and by a
        family's fast path, which has its own exp.

    Returns
    -------
    BatchRun
        Final states, per-trajectory status, stage ends, losses and the
        records (``record_every``).

    Raises
    ------
    ConfigError
        One line naming the field: method flow, criteria with rk4, a backend
        that is not available, buffers beyond ``max_bytes``.

    Examples
    --------
    >>> import meanfield.engine as me
    >>> desc = me.load("docs/examples/majority.toml", steps=100)
    >>> b = me.run_batch(desc, seeds=[0, 1, 2, 3], widths=16)
    >>> len(b.status)
    4
    """
    be = resolve_backend(backend)
    tr = desc.training
    if "population" in desc.data.extra:  # meanfield.engine.population's kernels, not the batch's
        raise ConfigError("data.family: the exact Gaussian population (icl_regression) is not batched; run it "
                          "unbatched (meanfield.engine.run)")
    from .rates import has_rates

    if desc.dictionary.trainable:
        raise ConfigError("dictionary.trainable: trainable embeddings are not batched (their ambient state has no "
                          "batch kernel); run it unbatched")
    if has_rates(tr):
        raise ConfigError("training: group rates, per-stage eta and eta schedules are not batched (the batch kernel "
                          "steps every group with one eta); run it unbatched")
    if tr.method not in ("gd", "rk4"):
        raise ConfigError(f"training.method: the batch runs method gd (the exact GD map) or rk4 (fixed step); got "
                          f"{tr.method!r} (adaptive steps: run it unbatched)")
    gd = tr.method == "gd"
    if not gd and any(s.criterion is not None for s in tr.stages):
        raise ConfigError("training.stages: stop criteria with method rk4 are not batched (their event location "
                          "needs dense output); use method gd, drop the criteria, or run it unbatched")
    pk = pack(desc)
    lay = pk.lay
    ny = lay.size
    from .specialise import choice

    if choice(specialise) is True:
        from .specialise import check

        check(desc, pk)
        if be != "cpu":
            raise ConfigError(f"specialise: the CPU batch only; got backend {be!r} (drop specialise on the GPU)")
    if y0s is None:
        if seeds is None and widths is None:
            Y0 = initial_state(desc, lay)[None, :]
        else:
            Y0 = initial_states(desc, seeds, widths)
    else:
        if seeds is not None or widths is not None:
            raise ConfigError("y0s: give initial states or seeds/widths, not both")
        try:
            Y0 = np.array(y0s, dtype=np.float64)
        except (TypeError, ValueError):
            raise ConfigError(f"y0s: must be a (B, {ny}) array of numbers") from None
        if Y0.ndim == 1:
            Y0 = Y0[None, :]
        if Y0.ndim != 2 or Y0.shape[1] != ny or Y0.shape[0] < 1:
            raise ConfigError(f"y0s: must have shape (B, {ny}) with B >= 1 (the state size of {desc.name!r}); "
                              f"got {np.shape(y0s)}")
        if not np.all(np.isfinite(Y0)):
            raise ConfigError("y0s: must be finite")
    Y0 = np.ascontiguousarray(Y0)
    B = Y0.shape[0]
    if eta is None:
        etas = np.full(B, _step_of(desc))
    else:
        try:
            etas = np.array(_per_trajectory("eta", eta, B, float), dtype=np.float64)
        except (TypeError, ValueError):
            raise ConfigError(f"eta: must be a positive number or {B} of them") from None
    if not np.all(np.isfinite(etas) & (etas > 0)):
        raise ConfigError(f"eta: must be positive and finite; got {etas[~(np.isfinite(etas) & (etas > 0))][0]:g}")
    if not isinstance(lanes, (bool, np.bool_)):
        raise ConfigError(f"lanes: must be True or False; got {lanes!r}")
    if not isinstance(vector_exp, (bool, np.bool_)):
        raise ConfigError(f"vector_exp: must be True or False; got {vector_exp!r}")
    if record_every is not None and (isinstance(record_every, bool) or int(record_every) != record_every
                                     or record_every < 1):
        raise ConfigError(f"record_every: must be a positive integer or None; got {record_every!r}")
    every = 0 if record_every is None else int(record_every)
    nst = len(tr.stages)
    stage_len = np.array([int(s.length) if gd else float(s.length) for s in tr.stages],
                         np.int64 if gd else np.float64)
    stage_mode = np.array([mode_of(s.train, tr.normalise) for s in tr.stages], np.int64)
    crit_kind = np.zeros(nst, np.int64)
    crit_op = np.ones(nst, np.int64)
    crit_thr = np.zeros(nst)
    for i, s in enumerate(tr.stages):
        crit_kind[i], crit_op[i], crit_thr[i] = integrate.criterion_args(s.criterion, kernels.CRITERIA)
    T = record_capacity(desc, float(etas.min()), every)
    need = B * T * ny * 8
    if need > max_bytes:
        raise ConfigError(f"record_every: the records of {B} trajectories need {need / 2**30:.3g} GiB ({T} records "
                          f"x {ny} numbers); record less often or run fewer at once")

    if fast and specialise is not True:  # specialise: the generic batch through the compiled loop, no fast path
        from .registry import batch_fast_path

        hook = batch_fast_path(getattr(desc, "family", None))
        got = None if hook is None else hook(desc, Y0, etas, every, be, max_bytes)
        if got is not None:
            return BatchRun(desc=desc, backend=be, eta=etas, **got)

    def rows(a):  # the driver's per-trajectory layout: one row per trajectory (a writable copy: one signature
        return np.array(np.broadcast_to(a, (B,) + np.shape(a)))  # for every B, B = 1 included)

    max_abs = np.full(B, float(tr.max_abs))
    outs = core_batched.new_outputs(B, T, ny, nst)
    rec_t, rec_step, rec_stage, rec_y, n_rec, status, stop_stage, end_step, end_t, end_reason, final_loss, Yout = outs
    data = [lay.hi, lay.hf, lay.qv, lay.Gr, lay.grp, pk.Gam, pk.nzi, pk.nzc, pk.nzn, pk.cnt, pk.last, pk.leff,
            pk.target, pk.weight, int(pk.kind), float(pk.r0), pk.consistent, rows(stage_mode)]
    n_stages = np.full(B, nst, np.int64)
    every_b = np.full(B, every, np.int64)
    head = [Y0, etas, max_abs, n_stages, rows(stage_len), rows(crit_kind), rows(crit_op), rows(crit_thr), every_b,
            np.zeros((B, 1), np.int64), np.zeros(B, np.int64)]  # no record points: pts, n_pts
    if be == "cuda":
        n, L = pk.nzn.shape
        shape = (tr.method, n, L, lay.P, lay.hi.shape[0], pk.R, pk.C, lay.Nmax, ny)
        scalars = {len(head) + 14, len(head) + 15}  # kind, r0
        _launch_cuda(shape, scalars, head + data, outs, B)
    else:
        args = head + [tuple(data), (pk.R, pk.C, lay.Nmax)] + outs
        loop = None
        width = 0
        if lanes and specialise is not True:  # the generic batch in lanes (meanfield.engine.lanes_batch, lanes_rk4)
            from numba import get_num_threads

            from .lanes_batch import lane_bytes, width_for

            per_lane = lane_bytes(*pk.nzn.shape, lay.P, lay.hi.shape[0], pk.R, pk.C, lay.Nmax, ny)
            # 0: too few trajectories a thread (one after another), or a lane's scratch too large for a block
            width = width_for(B, get_num_threads(), per_lane)
            if not width and vector_exp:  # the lanes' exp however few trajectories a thread has (padded lanes):
                from .lanes_batch import LANE_SCRATCH_BYTES, WIDTHS  # a trajectory's bits then do not depend on

                width = min((w for _, w in WIDTHS if w * per_lane <= LANE_SCRATCH_BYTES), default=0)  # B, threads
        if width:
            from .lanes import LaneTransformError
            from .lanes_batch import batch_kernel
            from .lanes_rk4 import rk4_kernel

            try:
                loop = (batch_kernel if gd else rk4_kernel)(width, bool(vector_exp))
            except LaneTransformError as e:  # kernels.py edited without a rule (tests fail there): no lanes
                import logging

                logging.getLogger("meanfield").warning("lanes off: %s; the per-trajectory drivers run", e)
                width = 0
        if width:
            pass  # the lanes
        elif specialise is True:
            from .specialise import batch_loop

            loop = batch_loop(pk, globals())
        elif specialise == "auto" and gd:
            from .specialise import cached_batch

            loop = cached_batch(pk, globals(), args)
        core_batched.run_cpu(loop or (eng_gd_batch_cpu if gd else eng_rk4_batch_cpu), B, args)
    if np.any(status == OVERFLOW):  # pragma: no cover - the capacity bound is exact
        raise RuntimeError("engine batch: record buffer full (capacity bound too small): a bug")
    steps = rec_step[np.arange(B), n_rec - 1].copy()
    return BatchRun(desc=desc, backend=be, eta=etas, y=Yout, loss=final_loss, steps=steps, stop_stage=stop_stage,
                    code=status, status=["complete" if c == COMPLETE else "diverged" for c in status],
                    rec_t=rec_t, rec_step=rec_step, rec_stage=rec_stage, rec_y=rec_y, n_records=n_rec,
                    end_step=end_step, end_t=end_t, end_reason=end_reason)
