"""One batched trajectory driver for every system (templates, instantiated per system).

A batch advances B independent trajectories of one reduced system, one thread
each (CPU threads, or one GPU thread per trajectory). The step/record loop of
a trajectory is the same for every system: stages of a given length, the
exact GD map advanced up to the next record point (``record_every`` and/or
sorted integer points) with the stage's stop criterion, or fixed-step RK4 of
the flow (the last step of a stage shortened to land on its end), records as
``meanfield.core.integrate`` writes them (a record at the same (step, t) as
the previous one replacing it), per-trajectory status, stop stage and stage
ends. This module holds that loop ONCE, as plain-Python templates:

* :func:`record_into`, :func:`gd_trajectory`, :func:`rk4_trajectory`: the
  portable per-trajectory drivers (scalar loops over preallocated arrays, no
  allocation: the same source runs under ``numba.njit`` and as a CUDA device
  function);
* :func:`batch_cpu`: the CPU loop over a slice of trajectories (allocates
  each one's scratch), run on threads by :func:`run_cpu`.

Both drivers take the same arguments (each ignores a few), so a system has one
CPU loop template and one CUDA kernel for both methods.

A system supplies three hooks as module globals of its batch module: ::

    gd_stage(y, nsteps, eta, max_abs, crit_kind, crit_op, crit_thr, b, s, data, scratch)
        -> (steps done, code, loss)   # up to nsteps exact GD steps of stage s in place
    rhs_stage(y, out, b, s, data, scratch) -> loss   # out = the flow's rhs at y in stage s
    new_scratch(data, dims, ny) -> scratch           # CPU only: one trajectory's scratch tuple

``data`` is the system's tuple of shared inputs (sample set, packed tables,
per-trajectory stage modes ...), ``scratch`` the tuple of its kernels' scratch
arrays; the driver only passes them on. :func:`instantiate` rebuilds a
template from its code object over the system module's globals (so the hook
names, ``record_into`` and the templates' calls to each other resolve to that
system's functions) under a name of the system's and decorates it (``@portable``
for the drivers: the CUDA compilation, ``compile_portable``, retargets every
global it calls; ``numba.njit(cache=True, nogil=True)`` for the CPU loop).
(Numba's first-class function types would avoid the rebuild but do not compile
for CUDA; a closure over the hooks would keep the CPU dispatchers in CUDA code.)

Per-trajectory inputs (row b): ``eta`` (step size; dt for rk4), ``max_abs``,
``n_stages``, ``stage_len[b, s]``, ``crit_kind/op/thr[b, s]`` (gd),
``every[b]`` (0: none), ``pts[b, :n_pts[b]]`` (gd). Outputs: records
``rec_t``, ``rec_step``, ``rec_stage``, ``rec_y`` (B, T[, state]) with
``n_rec[b]`` valid, ``status[b]`` (0 complete, 2 non-finite, 3 above max_abs,
4 record buffer full: a bug), ``stop_stage``, stage ends ``end_step``,
``end_t``, ``end_reason`` (0 length, 1 criterion), ``final_loss[b]`` (the loss
at the last state the kernels evaluated), ``Yout[b]`` (the final state).

Numba's disk cache keys an instantiated function on this file (an edit here
recompiles every system's driver) and on its qualified name, which carries a
checksum of the system's batch module (an edit of a hook there compiles anew
too). As for any cached numba function, an edit of the kernels the hooks call
(another file) is not seen: clear ``__pycache__`` / ``NUMBA_CACHE_DIR`` then.
This module imports no numba and no system at import.

It also holds the pieces of a batch that are no system's: the backend choice
(:func:`resolve_backend`, :func:`cuda_available`), the CUDA launcher
(:func:`launch_cuda`, compiling without FMA contraction: :func:`nvvm_no_fma`)
and :func:`trajectory_of` (one trajectory's records as the
``integrate.Trajectory`` an unbatched run returns).
"""

from __future__ import annotations

import contextlib
import math
import threading
import types
import warnings
import zlib

import numpy as np

from .config import ConfigError


def instantiate(template, namespace: dict, name: str, decorate, tag: str = ""):
    """``template`` rebuilt over the globals ``namespace`` (a system module's
    ``globals()``) as the function ``name``, decorated with ``decorate``. Its
    qualified name, on which numba's disk cache keys it, is ``name`` + ``tag``."""
    fn = types.FunctionType(template.__code__, namespace, name, template.__defaults__, None)
    fn.__qualname__ = name + tag
    fn.__doc__ = template.__doc__
    return decorate(fn)


# ----------------------------------------------------------- portable drivers


def next_target(b, step, end, ev, j, pts, n_pts):
    """(target, j): the next stop of trajectory b at ``step`` (the top of :func:`gd_trajectory`'s loop: the
    stage end, the next multiple of ``ev``, the next record point of ``pts[b]`` past ``j``), for the lane
    drivers, which keep it per lane (``meanfield.models.mixture.vectorised``, ``meanfield.engine.lanes_batch``:
    each compiles it, :func:`instantiate`)."""
    target = end
    if ev > 0:
        nxt = (step // ev + 1) * ev
        if nxt < target:
            target = nxt
    while j < n_pts[b] and pts[b, j] <= step:
        j += 1
    if j < n_pts[b] and pts[b, j] < target:
        target = pts[b, j]
    return target, j


def record_into(b, t, step, stage, y, rec_t, rec_step, rec_stage, rec_y, n_rec, status):
    """Append (t, step, stage, y) to trajectory b's records; a record at the
    same (step, t) as the previous one replaces it (as Trajectory.record).
    Returns False, with status[b] = 4, when the buffer is full."""
    n = n_rec[b]
    if n > 0 and rec_step[b, n - 1] == step and rec_t[b, n - 1] == t:
        n -= 1
    elif n >= rec_t.shape[1]:
        status[b] = 4
        return False
    rec_t[b, n] = t
    rec_step[b, n] = step
    rec_stage[b, n] = stage
    for i in range(y.shape[0]):
        rec_y[b, n, i] = y[i]
    n_rec[b] = n + 1
    return True


def gd_trajectory(b, y, eta, max_abs, n_stages, stage_len, crit_kind, crit_op, crit_thr, every, pts, n_pts,
                  data, scratch, rk, rec_t, rec_step, rec_stage, rec_y, n_rec, status, stop_stage, end_step, end_t,
                  end_reason, final_loss):
    """Trajectory b under the exact GD map, as ``integrate.GDMap.solve``:
    stages s < n_stages[b] of stage_len[b, s] steps (the system's hook
    ``gd_stage`` advances them), ending early when criterion (crit_kind,
    crit_op, crit_thr)[b, s] holds; records every every[b] steps (0: none) and
    at pts[b, :n_pts[b]] (sorted); y is the working state (initial state in,
    final or last accepted state out). ``rk`` is unused (the signature is
    :func:`rk4_trajectory`'s: one CPU loop and one kernel per system)."""
    et = eta[b]
    ev = every[b]
    npt = n_pts[b]
    mab = max_abs[b]
    n_rec[b] = 0
    status[b] = 0
    stop_stage[b] = 0
    step = 0
    if not record_into(b, 0.0, 0, 1, y, rec_t, rec_step, rec_stage, rec_y, n_rec, status):
        return
    j = 0
    for s in range(n_stages[b]):
        sidx = s + 1
        end = step + stage_len[b, s]
        while True:
            target = end
            if ev > 0:
                nxt = (step // ev + 1) * ev
                if nxt < target:
                    target = nxt
            while j < npt and pts[b, j] <= step:
                j += 1
            if j < npt and pts[b, j] < target:
                target = pts[b, j]
            res = gd_stage(y, target - step, et, mab, crit_kind[b, s], crit_op[b, s], crit_thr[b, s], b, s,
                           data, scratch)
            step += res[0]
            code = res[1]
            final_loss[b] = res[2]
            t = step * et
            if code == 2 or code == 3:
                if not record_into(b, t, step, sidx, y, rec_t, rec_step, rec_stage, rec_y, n_rec, status):
                    return
                status[b] = code
                stop_stage[b] = sidx
                return
            if code == 1 or step >= end:
                if not record_into(b, t, step, sidx, y, rec_t, rec_step, rec_stage, rec_y, n_rec, status):
                    return
                end_step[b, s] = step
                end_t[b, s] = t
                end_reason[b, s] = code
                break
            if (ev > 0 and step % ev == 0) or (j < npt and step == pts[b, j]):
                if not record_into(b, t, step, sidx, y, rec_t, rec_step, rec_stage, rec_y, n_rec, status):
                    return
        stop_stage[b] = sidx


def rk4_trajectory(b, y, dt, max_abs, n_stages, stage_len, crit_kind, crit_op, crit_thr, every, pts, n_pts,
                   data, scratch, rk, rec_t, rec_step, rec_stage, rec_y, n_rec, status, stop_stage, end_step, end_t,
                   end_reason, final_loss):
    """Trajectory b under classical RK4 of the flow (the system's hook
    ``rhs_stage``) with step dt[b], as ``integrate.RK4.solve`` with
    ``SaveAt(every=every[b])`` and its operation order: stages of time
    stage_len[b, s], the last step of a stage shortened to land on its end;
    no stop criteria (crit_kind, crit_op, crit_thr, pts, n_pts are unused:
    the signature is :func:`gd_trajectory`'s). ``rk``: the scratch vectors
    (f0, f1, k2, k3, k4, ys, y1) of the state's size."""
    f0, f1, k2, k3, k4, ys, y1 = rk
    h_max = dt[b]
    ev = every[b]
    mab = max_abs[b]
    ny = y.shape[0]
    n_rec[b] = 0
    status[b] = 0
    stop_stage[b] = 0
    t = 0.0
    nstep = 0
    if not record_into(b, 0.0, 0, 1, y, rec_t, rec_step, rec_stage, rec_y, n_rec, status):
        return
    for s in range(n_stages[b]):
        sidx = s + 1
        t_end = t + stage_len[b, s]
        final_loss[b] = rhs_stage(y, f0, b, s, data, scratch)
        while t < t_end * (1.0 - 1e-15) and t_end - t > 1e-14 * max(1.0, abs(t_end)):
            h = min(h_max, t_end - t)
            hh = 0.5 * h
            for i in range(ny):
                ys[i] = y[i] + hh * f0[i]
            rhs_stage(ys, k2, b, s, data, scratch)
            for i in range(ny):
                ys[i] = y[i] + hh * k2[i]
            rhs_stage(ys, k3, b, s, data, scratch)
            for i in range(ny):
                ys[i] = y[i] + h * k3[i]
            rhs_stage(ys, k4, b, s, data, scratch)
            h6 = h / 6.0
            code = 0
            for i in range(ny):
                y1[i] = y[i] + h6 * (f0[i] + 2.0 * k2[i] + 2.0 * k3[i] + k4[i])
                if not math.isfinite(y1[i]):
                    code = 2
            loss1 = 0.0
            if code == 0:
                loss1 = rhs_stage(y1, f1, b, s, data, scratch)
                for i in range(ny):
                    if not math.isfinite(f1[i]):
                        code = 2
            if code == 0:
                for i in range(ny):
                    if abs(y1[i]) > mab:
                        code = 3
            if code != 0:
                if not record_into(b, t, nstep, sidx, y, rec_t, rec_step, rec_stage, rec_y, n_rec, status):
                    return
                status[b] = code
                stop_stage[b] = sidx
                return
            t = t + h
            nstep += 1
            for i in range(ny):
                y[i] = y1[i]
                f0[i] = f1[i]
            final_loss[b] = loss1
            if ev > 0 and nstep % ev == 0:
                if not record_into(b, t, nstep, sidx, y, rec_t, rec_step, rec_stage, rec_y, n_rec, status):
                    return
        if not record_into(b, t, nstep, sidx, y, rec_t, rec_step, rec_stage, rec_y, n_rec, status):
            return
        end_step[b, s] = nstep
        end_t[b, s] = t
        end_reason[b, s] = 0
        stop_stage[b] = sidx


# ---------------------------------------------------------------- CPU loop
# (a template too: rebuilt per system and method, ``trajectory`` and
# ``new_scratch`` below being that system's instantiated driver and hook)


def batch_cpu(b0, b1, Y0, eta, max_abs, n_stages, stage_len, crit_kind, crit_op, crit_thr, every, pts, n_pts,
              data, dims, rec_t, rec_step, rec_stage, rec_y, n_rec, status, stop_stage, end_step, end_t, end_reason,
              final_loss, Yout):
    """Trajectories b0 <= b < b1 (one thread's slice), each with its own scratch."""
    ny = Y0.shape[1]
    for b in range(b0, b1):
        y = Y0[b].copy()
        scratch = new_scratch(data, dims, ny)
        rk = (np.empty(ny), np.empty(ny), np.empty(ny), np.empty(ny), np.empty(ny), np.empty(ny), np.empty(ny))
        trajectory(b, y, eta, max_abs, n_stages, stage_len, crit_kind, crit_op, crit_thr, every, pts, n_pts, data,
                   scratch, rk, rec_t, rec_step, rec_stage, rec_y, n_rec, status, stop_stage, end_step, end_t,
                   end_reason, final_loss)
        for i in range(ny):
            Yout[b, i] = y[i]


def instantiate_all(namespace: dict, prefix: str, portable, njit) -> None:
    """The drivers and CPU loops of one system, bound in its module globals
    ``namespace`` as ``<prefix>record_into``, ``<prefix>gd_trajectory``,
    ``<prefix>rk4_trajectory`` (``@portable``: registered names are unique
    across systems; also bound under the plain names the templates call,
    ``record_into`` ...) and ``<prefix>gd_batch_cpu``,
    ``<prefix>rk4_batch_cpu`` (:func:`batch_cpu` over the method's driver,
    ``njit(cache=True, nogil=True)``). The module provides the hooks
    ``gd_stage``, ``rhs_stage`` and ``new_scratch`` (defined before this is
    called)."""
    with open(namespace["__file__"], "rb") as f:  # the hooks' source: in the cache key (see the module doc)
        tag = f"_{zlib.crc32(f.read()):08x}"
    for tpl in (record_into, gd_trajectory, rk4_trajectory):
        fn = instantiate(tpl, namespace, prefix + tpl.__name__, portable, tag)
        namespace[prefix + tpl.__name__] = namespace[tpl.__name__] = fn
    cpu = njit(cache=True, nogil=True)
    for method in ("gd", "rk4"):
        g = dict(namespace, trajectory=namespace[method + "_trajectory"])  # the module's globals as they are now
        name = f"{prefix}{method}_batch_cpu"
        namespace[name] = instantiate(batch_cpu, g, name, cpu, tag)


def new_outputs(B: int, T: int, ny: int, n_stages: int) -> list:
    """The zeroed output arrays of B trajectories (T records of a state of
    size ny, n_stages stage ends each), in the drivers' order: rec_t,
    rec_step, rec_stage, rec_y, n_rec, status, stop_stage, end_step, end_t,
    end_reason, final_loss, Yout."""
    ns = max(1, n_stages)
    return [np.zeros((B, T)), np.zeros((B, T), np.int64), np.zeros((B, T), np.int64), np.zeros((B, T, ny)),
            np.zeros(B, np.int64), np.zeros(B, np.int64), np.zeros(B, np.int64), np.zeros((B, ns), np.int64),
            np.zeros((B, ns)), np.zeros((B, ns), np.int64), np.zeros(B), np.zeros((B, ny))]


def run_cpu(fn, B: int, args, threads: int | None = None) -> None:
    """Trajectories [0, B) split into contiguous slices, one per thread
    (``numba.get_num_threads()`` of them unless ``threads``): the CPU loops
    release the GIL (``nogil``), each writes its own rows. (Threads rather
    than ``numba.prange``: the same speed, and a parallel=True function costs
    about 15 s more to compile on 2 cores.)"""
    if threads is None:
        from numba import get_num_threads

        threads = get_num_threads()
    nt = max(1, min(B, threads))
    if nt == 1:
        fn(0, B, *args)
        return
    from concurrent.futures import ThreadPoolExecutor

    cuts = [B * k // nt for k in range(nt + 1)]
    with ThreadPoolExecutor(nt) as ex:
        for f in [ex.submit(fn, cuts[k], cuts[k + 1], *args) for k in range(nt)]:
            f.result()


# --------------------------------------------------------------- the CUDA launcher (every system's)

BACKENDS = ("cpu", "cuda", "auto")
#: per-trajectory status codes: 0 complete, 2 non-finite state or loss,
#: 3 an entry above max_abs, 4 record buffer full (a bug: cannot happen)
COMPLETE, NONFINITE, MAXABS, OVERFLOW = 0, 2, 3, 4
THREADS_PER_BLOCK = 64

cuda = None  # numba.cuda, imported on first use by load_cuda


def load_cuda():
    """numba.cuda (NVIDIA's numba-cuda when installed, else numba's built-in
    target), imported on first use."""
    global cuda
    if cuda is None:
        from numba import cuda as _cuda

        cuda = _cuda
    return cuda


def simulator() -> bool:
    from numba.core import config

    return bool(config.ENABLE_CUDASIM)


def _cuda_problem() -> str | None:
    """Why the real CUDA backend cannot run here (one line), or None."""
    try:
        cu = load_cuda()
    except Exception as e:  # pragma: no cover - numba always ships a numba.cuda
        return f"numba.cuda cannot be imported ({e})"
    try:
        if not cu.is_available():
            return "no usable CUDA GPU (no NVIDIA driver or device found)"
    except Exception as e:  # pragma: no cover - driver errors
        return f"the CUDA driver failed ({e})"
    try:
        from numba.cuda.cudadrv import nvvm

        if not nvvm.is_available():
            return "a CUDA GPU is present but the NVVM compiler library is missing"
    except Exception as e:  # pragma: no cover
        return f"the NVVM compiler library failed to load ({e})"
    return None


def cuda_available() -> bool:
    """True when a real CUDA GPU can be used (never under the simulator)."""
    try:
        return not simulator() and _cuda_problem() is None
    except Exception:  # pragma: no cover - anything broken means no GPU
        return False


def resolve_backend(name: str) -> str:
    """``cpu`` | ``cuda`` | ``auto`` -> ``cpu`` or ``cuda``. ``auto`` picks CUDA
    only when a real GPU is present; ``cuda`` needs one, or the CUDA simulator
    (``NUMBA_ENABLE_CUDASIM=1``, for tests)."""
    if name not in BACKENDS:
        raise ConfigError(f"backend: must be one of {', '.join(BACKENDS)}; got {name!r}")
    if name == "cpu":
        return "cpu"
    if name == "auto":
        return "cuda" if cuda_available() else "cpu"
    if simulator():
        try:
            load_cuda()
        except Exception as e:  # pragma: no cover - simulator import failure
            raise ConfigError(f"backend cuda: the CUDA simulator cannot be imported ({e})") from None
        return "cuda"
    why = _cuda_problem()
    if why is not None:
        raise ConfigError(f"backend cuda: {why}; install the GPU extra (pip install 'meanfield[cuda]') on a machine "
                          f"with an NVIDIA driver, or use --backend cpu or auto")
    return "cuda"


_NVVM_LOCK = threading.Lock()


@contextlib.contextmanager
def nvvm_no_fma():
    """While active, NVVM compiles without FMA contraction (-fma=0) unless
    fastmath asks for it. numba-cuda (and numba's built-in target) call
    ``numba.cuda.cudadrv.nvvm.compile_ir(ir, **options)`` and pass every
    option to NVVM; there is no public switch yet (NVIDIA/numba-cuda#118)."""
    if simulator():
        yield
        return
    try:
        from numba.cuda.cudadrv import nvvm

        orig = getattr(nvvm, "compile_ir", None)
    except Exception:  # pragma: no cover
        orig = None
    if orig is None:  # pragma: no cover - a future numba-cuda layout: keep its defaults, say so
        warnings.warn("meanfield: cannot switch off FMA contraction in this numba.cuda; GPU results may leave "
                      "the CPU's at ReLU kinks", RuntimeWarning, stacklevel=3)
        yield
        return

    def compile_ir(llvmir, **options):
        if not options.get("fastmath"):
            options.setdefault("fma", False)
        return orig(llvmir, **options)

    with _NVVM_LOCK:
        nvvm.compile_ir = compile_ir
        try:
            yield
        finally:
            nvvm.compile_ir = orig


def launch_cuda(kern, args, outs, B, scalars_at=()):
    """Copy the inputs (but the scalars at the positions ``scalars_at``) to
    the device, run the batch kernel ``kern`` over B trajectories (one thread
    each), copy the outputs (in place) back. Shared by every system's batch."""
    cu = load_cuda()
    d_args = [a if i in scalars_at else cu.to_device(np.ascontiguousarray(a)) for i, a in enumerate(args)]
    d_outs = [cu.to_device(o) for o in outs]
    tpb = max(1, min(THREADS_PER_BLOCK, B))
    blocks = (B + tpb - 1) // tpb
    with nvvm_no_fma():  # a launch that compiles does so without FMA contraction
        kern[blocks, tpb](*d_args, *d_outs)
    cu.synchronize()
    for d, o in zip(d_outs, outs):
        d.copy_to_host(o)



# --------------------------------------------------------------- records -> trajectory


def trajectory_of(n, t, step, stage, y, code, stop, end_step, end_t, end_reason, gd, eta, max_abs):
    """One trajectory's batch records (row arrays: its first ``n`` records,
    status ``code``, stop stage ``stop``, stage ends) as the
    ``integrate.Trajectory`` the unbatched run returns (records, stage ends,
    status and message); ``gd``: the exact GD map with step size ``eta``
    (else fixed-step RK4). Shared by every system's batch."""
    from . import integrate

    tr = integrate.Trajectory()
    tr.t = [float(v) for v in t[:n]]
    tr.step = [int(v) for v in step[:n]]
    tr.stage = [int(v) for v in stage[:n]]
    tr.y = [y[i].copy() for i in range(n)]
    n_done = stop if code == COMPLETE else stop - 1
    for s in range(n_done):
        tr.stage_ends.append({"stage": s + 1, "step": int(end_step[s]), "t": float(end_t[s]),
                              "reason": "criterion" if end_reason[s] == 1 else "length"})
    step = tr.step[-1]
    t = tr.t[-1]
    if code == COMPLETE:
        tr.status = "complete"
        tr.message = f"{step} steps (t = {step * eta:.6g})" if gd else f"t = {t:.6g} ({step} solver steps)"
        return tr
    tr.status = "diverged"
    if gd:
        what = ("a non-finite state or loss" if code == NONFINITE else
                f"a state entry above max_abs = {max_abs:g} in absolute value")
        tr.message = (f"step {step + 1} (t = {(step + 1) * eta:.6g}) in stage {stop} gave {what}; every "
                      f"record up to the last accepted state (step {step}) is kept; try a smaller eta")
    else:
        what = ("a non-finite state (or the step size underflowed)" if code == NONFINITE else
                f"a state entry above max_abs = {max_abs:g} in absolute value")
        tr.message = (f"the solver step from t = {t:.6g} (solver step {step + 1}) in stage {stop} gave {what}; "
                      f"every record up to t = {t:.6g} is kept")
    return tr
