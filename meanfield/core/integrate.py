"""Steppers shared by every system: the exact GD map, fixed-step RK4 and
adaptive Dormand-Prince 5(4) with error control, dense output and events.

The pieces are small and separate, in the spirit of diffrax:

* a *system* (duck-typed, see :class:`System`) knows its mathematics: an
  in-place multi-step GD map, a flow right-hand side and the quantities that
  stop criteria compare;
* a *solver* (:class:`GDMap`, :class:`RK4`, :class:`Dopri5`) advances a state;
* :class:`Stage` says what is trained (an opaque ``mode`` the system reads),
  for how long (steps for GD, time for flow) and until which criterion;
* :class:`SaveAt` says where to record (every N steps, or given steps/times);
* :class:`Monitor` prints progress, watches for SIGINT/SIGTERM and calls a
  checkpoint hook.

:func:`solve` runs the stages in order and returns a :class:`Trajectory`
whose ``status`` is ``complete``, ``diverged`` (non-finite state: every record
so far is kept and ``message`` says where) or ``interrupted``.
"""

from __future__ import annotations

import math
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import numpy as np

from .criteria import criterion_args  # noqa: F401 (re-exported: its home is meanfield.core.criteria)
from .criteria import holds as _holds


class System(Protocol):
    def gd_advance(self, y: np.ndarray, nsteps: int, eta: float, mode: Any, criterion) -> tuple[int, int]:
        """Up to ``nsteps`` GD steps in place; returns (done, code): 0 all done,
        1 criterion holds, 2 non-finite (``y`` keeps the last finite state)."""

    def rhs(self, y: np.ndarray, mode: Any) -> np.ndarray:
        """dy/dt (a new array)."""

    def criterion_value(self, y: np.ndarray, name: str) -> float:
        """The quantity a criterion ``(name, op, value)`` compares."""

    #: a state entry above this in absolute value stops the run as diverged
    max_abs: float

    # optional: ``hold_manifold(y) -> bool`` puts a state back on an invariant manifold of the dynamics in place
    # (the flow solvers call it after every accepted step and on every interpolated record)


@dataclass(frozen=True)
class Stage:
    index: int
    mode: Any
    length: float  # GD: steps; flow: time
    criterion: tuple[str, str, float] | None = None
    name: str = ""
    eta: float | None = None  # GD step size of this stage (None: the solver's); a step adds eta to t
    #: a learning-rate schedule: eta_at(k, start) is the step size of global step k of this stage
    #: (start: the stage's first step); the GD map then steps one at a time and t sums the step sizes
    eta_at: Callable[[int, int], float] | None = None


@dataclass(frozen=True)
class SaveAt:
    """Record every ``every`` solver steps, and/or at the sorted global
    ``points`` (GD: step numbers; flow: times). The initial state, stage ends
    and the final state are always recorded."""

    every: int | None = None
    points: np.ndarray | None = None

    @staticmethod
    def log(n: int, horizon: float, integer: bool, t_min: float | None = None) -> "SaveAt":
        """``n`` log-spaced points in (0, horizon]."""
        if integer:
            pts = np.unique(np.round(np.geomspace(1, max(1, horizon), n)).astype(np.int64))
        else:
            lo = t_min if t_min is not None else horizon * 1e-4
            pts = np.geomspace(lo, horizon, n)
        return SaveAt(points=pts)

    @staticmethod
    def uniform(dt: float, horizon: float) -> "SaveAt":
        k = int(math.floor(horizon / dt + 1e-9))
        return SaveAt(points=dt * np.arange(1, k + 1))


@dataclass
class Trajectory:
    t: list = field(default_factory=list)
    step: list = field(default_factory=list)
    stage: list = field(default_factory=list)
    y: list = field(default_factory=list)
    stage_ends: list = field(default_factory=list)  # dicts: stage, step, t, reason
    status: str = "running"
    message: str = ""
    warnings: list = field(default_factory=list)  # strings, also appended to message

    def record(self, t: float, step: int, stage: int, y: np.ndarray) -> None:
        if self.step and self.step[-1] == step and self.t[-1] == t:
            self.stage[-1] = stage
            self.y[-1] = y.copy()
            return
        self.t.append(float(t))
        self.step.append(int(step))
        self.stage.append(int(stage))
        self.y.append(y.copy())

    def arrays(self) -> dict[str, np.ndarray]:
        return {
            "t": np.asarray(self.t, dtype=np.float64),
            "step": np.asarray(self.step, dtype=np.int64),
            "stage": np.asarray(self.stage, dtype=np.int64),
            "y": np.asarray(self.y, dtype=np.float64),
        }


def _numba_compiling() -> bool:
    """True while numba's compiler lock is held (a kernel is being compiled)."""
    mod = sys.modules.get("numba.core.compiler_lock")
    try:
        return bool(mod is not None and mod.global_compiler_lock.is_locked())
    except Exception:  # pragma: no cover - another numba
        return False


class Monitor:
    """Progress line on stderr for runs longer than ``quiet_s`` seconds, a stop
    flag set by SIGINT/SIGTERM while active (use as a context manager), and an
    optional ``checkpoint(trajectory)`` hook called every ``checkpoint_s``."""

    def __init__(self, total: float, unit: str = "step", quiet_s: float = 2.0, every_s: float = 1.0,
                 checkpoint: Callable | None = None, checkpoint_s: float = 60.0, stream=None, label: str = ""):
        self.total = total
        self.unit = unit
        self.quiet_s = quiet_s
        self.every_s = every_s
        self.checkpoint = checkpoint
        self.checkpoint_s = checkpoint_s
        self.stream = stream if stream is not None else sys.stderr
        self.label = label
        self.signal: int | None = None
        self._old = {}
        self.t0 = time.perf_counter()
        self._last = self.t0
        self._last_ckpt = self.t0
        self._printed = False
        try:
            self._tty = bool(self.stream.isatty())
        except (AttributeError, ValueError):
            self._tty = False
        if not self._tty:  # a log file: one line every 10 s is plenty
            self.every_s = max(self.every_s, 10.0)

    def __enter__(self):
        self.t0 = self._last = self._last_ckpt = time.perf_counter()
        self._first = None
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                if signal.getsignal(sig) in (signal.SIG_IGN, None):  # ignored on purpose (honoured), or a
                    continue  # handler not installed from Python (it could not be put back)
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not in the main thread
                pass
        from .errors import PENDING

        if PENDING["signal"] is not None:  # the command was interrupted before this run started, and the
            self.signal = PENDING["signal"]  # KeyboardInterrupt was swallowed on the way: stop at once
        return self

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)
        if self._printed:
            self.stream.write("\n")
            self.stream.flush()
        return False

    def _handle(self, signum, frame):
        self.signal = signum
        if getattr(self, "_first", None) is None:  # no chunk done yet: the first one is compiling or loading
            # its numba kernels from the cache (seconds; a minute on a loaded machine; _numba_compiling() tells
            # the two apart), which never looks at the flag: stop now (exit 130 within 2 s), as a signal during
            # set-up does; nothing is computed yet, nothing is written
            raise KeyboardInterrupt(f"signal {signum}")

    @property
    def stop_requested(self) -> bool:
        return self.signal is not None

    def update(self, done: float, stage: int, info: str, traj: Trajectory | None = None) -> None:
        self.done = done  # where the run really is (a checkpoint's last record may be far behind)
        now = time.perf_counter()
        if getattr(self, "_first", None) is None:  # the rate is measured from the first chunk on: the time
            self._first = (now, done)  # before it is kernel compilation (first use) and set-up, not stepping
        if self.checkpoint is not None and traj is not None and now - self._last_ckpt >= self.checkpoint_s:
            self.checkpoint(traj)
            self._last_ckpt = now
        if now - self.t0 < self.quiet_s or now - self._last < self.every_s:
            return
        self._last = now
        el = now - self.t0
        frac = done / self.total if self.total else 0.0
        t1, d1 = self._first
        # no rate before one is measured after the first chunk: the first chunk's time is kernel compilation
        # (first use: "compiling kernels, about N s, once") and set-up, and done / elapsed would be far too low
        rate = (f"{(done - d1) / (now - t1):.3g} {self.unit}/s" if now > t1 and done > d1
                else "rate after the first chunk")
        line = (f"{self.label}{self.unit} {done:.6g}/{self.total:.6g} ({100 * frac:5.1f}%) stage {stage} "
                f"{info} [{el:6.1f} s, {rate}]")
        if self._tty:
            self.stream.write("\r" + line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
        self._printed = self._tty


# --------------------------------------------------------------------- solvers


@dataclass(frozen=True)
class GDMap:
    """The exact gradient-descent map with step ``eta`` (or each stage's own
    ``Stage.eta``); time t = step * eta, or the sum of the step sizes taken."""

    eta: float
    max_chunk_s: float = 0.25

    def solve(self, system: System, y0, stages, save: SaveAt, monitor: Monitor | None = None) -> Trajectory:
        mon = monitor or Monitor(total=sum(s.length for s in stages), quiet_s=math.inf)
        y = np.array(y0, dtype=np.float64, copy=True)
        traj = Trajectory()
        step = 0
        traj.record(0.0, 0, stages[0].index if stages else 0, y)
        pts = save.points if save.points is not None else np.empty(0, np.int64)
        per_step = None  # seconds per step, measured
        uniform = all(s.eta is None and s.eta_at is None for s in stages)
        t_start = 0.0
        for stage in stages:
            start = step
            end = start + int(stage.length)
            eta = self.eta if stage.eta is None else stage.eta
            sched = {"k": start, "t": t_start}  # a schedule's running time: t after global step k

            def tt(k, start=start, t_start=t_start, eta=eta, stage=stage, sched=sched):
                """Time after global step k of this stage: k eta, or with per-stage
                step sizes the time at the stage start plus (k - start) eta, or with a
                schedule the sum of the step sizes taken."""
                if stage.eta_at is not None:
                    t = sched["t"]
                    for j in range(sched["k"], k):
                        t += stage.eta_at(j, start)
                    return t
                return k * self.eta if uniform else t_start + (k - start) * eta

            while True:
                target = end
                if save.every:
                    target = min(target, (step // save.every + 1) * save.every)
                j = np.searchsorted(pts, step, side="right")
                if j < len(pts):
                    target = min(target, int(pts[j]))
                chunk = target - step
                if per_step is not None and per_step > 0 and chunk > 0:
                    chunk = max(1, min(chunk, int(self.max_chunk_s / per_step)))
                elif chunk > 64:
                    chunk = 64
                t0 = time.perf_counter()
                if stage.eta_at is not None:  # one step at a time, each with its own step size
                    done, code = system.gd_advance(y, min(chunk, 1), stage.eta_at(step, start), stage.mode,
                                                   stage.criterion)
                    if done:
                        sched["t"] += stage.eta_at(step, start)
                        sched["k"] = step + 1
                else:
                    done, code = system.gd_advance(y, chunk, eta, stage.mode, stage.criterion)
                if done > 0:
                    per_step = (time.perf_counter() - t0) / done
                step += done
                if code in (2, 3):
                    traj.record(tt(step), step, stage.index, y)
                    traj.status = "diverged"
                    what = ("a non-finite state or loss" if code == 2 else
                            f"a state entry above max_abs = {getattr(system, 'max_abs', math.inf):g} in absolute value")
                    traj.message = (f"step {step + 1} (t = {tt(step + 1):.6g}) in stage "
                                    f"{stage.index} gave {what}; every record up to the last accepted state "
                                    f"(step {step}) is kept; try a smaller eta")
                    return traj
                if code == 1 or step >= end:
                    traj.record(tt(step), step, stage.index, y)
                    traj.stage_ends.append({"stage": stage.index, "step": step, "t": tt(step),
                                            "reason": "criterion" if code == 1 else "length"})
                    break
                if (save.every and step % save.every == 0) or (j < len(pts) and step == int(pts[j])):
                    traj.record(tt(step), step, stage.index, y)
                mon.update(step, stage.index, "", traj)
                if mon.stop_requested:
                    traj.record(tt(step), step, stage.index, y)
                    traj.status = "interrupted"
                    traj.message = (f"interrupted by signal {mon.signal} at step {step} (t = {tt(step):.6g}), "
                                    f"stage {stage.index}")
                    return traj
            t_start = tt(step)
        traj.status = "complete"
        traj.message = f"{step} steps (t = {traj.t[-1] if traj.t else 0.0:.6g})"
        return traj


# Dormand-Prince 5(4) tableau (Dormand & Prince 1980), with the 4th-order
# continuous extension used by scipy's RK45 (Shampine 1986).
_DP_C = np.array([0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0])
_DP_A = [
    [],
    [1 / 5],
    [3 / 40, 9 / 40],
    [44 / 45, -56 / 15, 32 / 9],
    [19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729],
    [9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656],
]
_DP_B = np.array([35 / 384, 0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84])
_DP_E = np.array([71 / 57600, 0, -71 / 16695, 71 / 1920, -17253 / 339200, 22 / 525, -1 / 40])
_DP_P = np.array([
    [1, -8048581381 / 2820520608, 8663915743 / 2820520608, -12715105075 / 11282082432],
    [0, 0, 0, 0],
    [0, 131558114200 / 32700410799, -68118460800 / 10900136933, 87487479700 / 32700410799],
    [0, -1754552775 / 470086768, 14199869525 / 1410260304, -10690763975 / 1880347072],
    [0, 127303824393 / 49829197408, -318862633887 / 49829197408, 701980252875 / 199316789632],
    [0, -282668133 / 205662961, 2019193451 / 616988883, -1453857185 / 822651844],
    [0, 40617522 / 29380423, -110615467 / 29380423, 69997945 / 29380423],
])


def _rms(x):
    return float(np.sqrt(np.mean(x * x))) if x.size else 0.0


class _FlowDriver:
    """Shared loop of the flow solvers: stages, saving, criteria, monitor."""

    def _run(self, system, y0, stages, save, monitor, step_fn) -> Trajectory:
        mon = monitor or Monitor(total=sum(s.length for s in stages), unit="t", quiet_s=math.inf)
        y = np.array(y0, dtype=np.float64, copy=True)
        traj = Trajectory()
        t = 0.0
        nstep = 0
        traj.record(0.0, 0, stages[0].index if stages else 0, y)
        pts = save.points if save.points is not None else np.empty(0)
        # optional hook: hold_manifold(y) puts a state back on the system's invariant manifold in place (a finite-width
        # Gram state on rank <= m) and says whether it did anything; applied after every accepted step
        project = getattr(system, "hold_manifold", None)
        for stage in stages:
            t_end = t + float(stage.length)
            crit = stage.criterion
            if crit is not None and _holds(system.criterion_value(y, crit[0]), crit[1], crit[2]):
                traj.record(t, nstep, stage.index, y)
                traj.stage_ends.append({"stage": stage.index, "step": nstep, "t": t, "reason": "criterion"})
                continue
            f0 = system.rhs(y, stage.mode)
            max_abs = getattr(system, "max_abs", math.inf)
            while t < t_end * (1 - 1e-15) and t_end - t > 1e-14 * max(1.0, abs(t_end)):
                out = step_fn(system, stage, t, y, f0, t_end)
                if out is None or np.max(np.abs(out[1])) > max_abs:
                    what = ("a non-finite state (or the step size underflowed)" if out is None else
                            f"a state entry above max_abs = {max_abs:g} in absolute value")
                    traj.status = "diverged"
                    traj.message = (f"the solver step from t = {t:.6g} (solver step {nstep + 1}) in "
                                    f"stage {stage.index} gave {what}; every record up to t = {t:.6g} is kept")
                    traj.record(t, nstep, stage.index, y)
                    return traj
                t1, y1, f1, dense = out
                nstep += 1
                if project is not None and project(y1):  # back onto the system's manifold (a new state: new rhs)
                    f1 = system.rhs(y1, stage.mode)
                # criterion event inside (t, t1]
                t_stop = None
                if crit is not None:
                    c1 = system.criterion_value(y1, crit[0])
                    if _holds(c1, crit[1], crit[2]):
                        t_stop = t1
                        if dense is not None:
                            def g(s):
                                return system.criterion_value(dense(s), crit[0]) - crit[2]
                            from scipy.optimize import brentq  # lazy: scipy only when an event is located

                            try:
                                t_stop = brentq(g, t, t1, xtol=1e-14 * max(1.0, t1), rtol=4 * np.finfo(float).eps)
                            except ValueError:
                                t_stop = t1
                # saves strictly inside (t, min(t1, t_stop)]
                t_hi = t1 if t_stop is None else t_stop
                j0 = np.searchsorted(pts, t, side="right")
                j1 = np.searchsorted(pts, t_hi, side="right")
                for tp in pts[j0:j1]:
                    if tp < t_hi:
                        yp = dense(tp) if dense is not None else y + (tp - t) / (t1 - t) * (y1 - y)
                        if project is not None:
                            project(yp)
                        traj.record(float(tp), nstep, stage.index, yp)
                if t_stop is not None:
                    y = dense(t_stop) if (dense is not None and t_stop < t1) else y1
                    if project is not None and y is not y1:
                        project(y)
                    t = t_stop
                    traj.record(t, nstep, stage.index, y)
                    traj.stage_ends.append({"stage": stage.index, "step": nstep, "t": t, "reason": "criterion"})
                    break
                t, y, f0 = t1, y1, f1
                if (save.every and nstep % save.every == 0) or (j1 > j0 and pts[j1 - 1] == t):
                    traj.record(t, nstep, stage.index, y)
                mon.update(t, stage.index, "", traj)
                if mon.stop_requested:
                    traj.record(t, nstep, stage.index, y)
                    traj.status = "interrupted"
                    traj.message = f"interrupted by signal {mon.signal} at t = {t:.6g} (solver step {nstep}), stage {stage.index}"
                    return traj
            else:
                traj.record(t, nstep, stage.index, y)
                traj.stage_ends.append({"stage": stage.index, "step": nstep, "t": t, "reason": "length"})
        traj.status = "complete"
        traj.message = f"t = {t:.6g} ({nstep} solver steps)"
        return traj


@dataclass(frozen=True)
class RK4(_FlowDriver):
    """Classical fixed-step Runge-Kutta 4 with step ``dt`` (the last step of a
    stage is shortened to land on the stage end)."""

    dt: float

    def solve(self, system, y0, stages, save: SaveAt, monitor: Monitor | None = None) -> Trajectory:
        def step(system, stage, t, y, f0, t_end):
            h = min(self.dt, t_end - t)
            k1 = f0
            k2 = system.rhs(y + 0.5 * h * k1, stage.mode)
            k3 = system.rhs(y + 0.5 * h * k2, stage.mode)
            k4 = system.rhs(y + h * k3, stage.mode)
            y1 = y + (h / 6.0) * (k1 + 2 * k2 + 2 * k3 + k4)
            if not np.all(np.isfinite(y1)):
                return None
            f1 = system.rhs(y1, stage.mode)
            if not np.all(np.isfinite(f1)):
                return None
            # cubic Hermite interpolant for saves and events
            def dense(s, t=t, y=y, y1=y1, f0=f0, f1=f1, h=h):
                th = (s - t) / h
                h00 = 2 * th**3 - 3 * th**2 + 1
                h10 = th**3 - 2 * th**2 + th
                h01 = -2 * th**3 + 3 * th**2
                h11 = th**3 - th**2
                return h00 * y + h10 * h * f0 + h01 * y1 + h11 * h * f1
            return t + h, y1, f1, dense

        return self._run(system, y0, stages, save, monitor, step)


@dataclass(frozen=True)
class Dopri5(_FlowDriver):
    """Adaptive Dormand-Prince 5(4): local error control with ``rtol``/``atol``
    (RMS norm), 4th-order dense output, event location by Brent's method on the
    dense output. ``max_steps`` guards against stiffness blow-ups.

    ``h_min``: where error control would shrink the step below ``h_min`` the
    step is taken at ``h_min`` without error control ("forced"). Gradient flow
    through a ReLU is non-smooth: when a pre-activation slides along its kink
    u = 0 (a Filippov sliding mode) the error estimate never falls below
    tolerance and an adaptive method would crawl. Forced steps follow the
    sliding motion to O(h_min), like GD with step h_min; the trajectory's
    ``warnings`` say how many there were and over which times."""

    rtol: float = 1e-8
    atol: float = 1e-10
    h_min: float = 0.0
    safety: float = 0.9
    min_factor: float = 0.2
    max_factor: float = 10.0
    max_steps: int = 10_000_000

    def _initial_h(self, system, stage, t, y, f0, t_end):
        scale = self.atol + np.abs(y) * self.rtol
        d0, d1 = _rms(y / scale), _rms(f0 / scale)
        h0 = 1e-6 if d0 < 1e-5 or d1 < 1e-5 else 0.01 * d0 / d1
        h0 = min(h0, t_end - t)
        f1 = system.rhs(y + h0 * f0, stage.mode)
        d2 = _rms((f1 - f0) / scale) / h0
        h1 = max(1e-6, h0 * 1e-3) if d1 <= 1e-15 and d2 <= 1e-15 else (0.01 / max(d1, d2)) ** (1 / 5)
        return min(100 * h0, h1, t_end - t)

    def solve(self, system, y0, stages, save: SaveAt, monitor: Monitor | None = None) -> Trajectory:
        counter = {"n": 0, "forced": 0, "spans": []}
        state = {"h": None}

        def step(system, stage, t, y, f0, t_end):
            h = state["h"] if state["h"] is not None else self._initial_h(system, stage, t, y, f0, t_end)
            while True:
                counter["n"] += 1
                if counter["n"] > self.max_steps:
                    return None
                h = min(h, t_end - t)
                if h <= 10 * np.spacing(max(abs(t), 1.0)):
                    return None
                K = np.empty((7, y.size))
                K[0] = f0
                for s in range(1, 6):
                    dy = np.dot(np.asarray(_DP_A[s]), K[:s])
                    K[s] = system.rhs(y + h * dy, stage.mode)
                y1 = y + h * np.dot(_DP_B, K[:6])
                K[6] = system.rhs(y1, stage.mode)
                if not (np.all(np.isfinite(y1)) and np.all(np.isfinite(K[6]))):
                    h *= 0.25
                    state["h"] = h
                    continue
                scale = self.atol + np.maximum(np.abs(y), np.abs(y1)) * self.rtol
                err = _rms(h * np.dot(_DP_E, K) / scale)
                forced = err > 1.0 and self.h_min > 0 and h <= self.h_min * (1 + 1e-12)
                if forced:
                    counter["forced"] += 1
                    sp = counter["spans"]
                    if sp and t - sp[-1][1] <= 2 * self.h_min:
                        sp[-1][1] = t + h
                    else:
                        sp.append([t, t + h])
                if err <= 1.0 or forced:
                    fac = self.max_factor if err == 0 else min(self.max_factor, self.safety * err ** -0.2)
                    h_next = h * fac
                    if self.h_min > 0 and h >= self.h_min * (1 - 1e-12):
                        h_next = max(h_next, self.h_min)  # at the floor, stay there (sliding along a kink)
                    state["h"] = h_next
                    Q = K.T @ _DP_P

                    def dense(s, t=t, y=y, h=h, Q=Q):
                        x = (s - t) / h
                        return y + h * (Q @ np.array([x, x * x, x**3, x**4]))

                    return t + h, y1, K[6], dense
                h *= max(self.min_factor, self.safety * err ** -0.2)
                if self.h_min > 0 and h < self.h_min:
                    h = min(self.h_min, h / max(self.min_factor, self.safety * err ** -0.2))

        traj = self._run(system, y0, stages, save, monitor, step)
        if traj.status == "diverged" and counter["n"] > self.max_steps:
            traj.message = (f"stopped after max_steps = {self.max_steps} solver step attempts at t = {traj.t[-1]:.6g} "
                            f"(stiff or non-smooth right-hand side; raise h_min or max_steps); every record so far "
                            f"is kept")
        if counter["forced"]:
            spans = counter["spans"]
            shown = ", ".join(f"[{a:.6g}, {b:.6g}]" for a, b in spans[:5]) + (" ..." if len(spans) > 5 else "")
            n = counter['forced']
            w = (f"error control suspended on {n} step{'s' if n > 1 else ''} of at most h_min = {self.h_min:g} over t in {shown}: "
                 f"the flow is non-smooth there (a pre-activation at the ReLU kink), accurate to O(h_min) only")
            traj.warnings.append(w)
            traj.message += "; warning: " + w
        return traj


# -- solver and record grid of a training description (a mixture config, an
# engine description's ``training``, an induction config: method, eta, dt,
# rtol, atol, h_min (optional), horizon, record_every, record_log, record_dt);
# the run harness (``meanfield.core.harness``) uses them.

def solver_of(tr):
    """The solver of a training description: :class:`GDMap` (gd; stages with
    their own ``eta`` use it instead), :class:`RK4` (rk4, step ``dt``, or
    ``eta`` when no dt is given) or :class:`Dopri5` (flow; ``h_min`` if the
    description has one)."""
    if tr.method == "gd":
        return GDMap(tr.eta)
    if tr.method == "rk4":
        return RK4(tr.dt if tr.dt is not None else tr.eta)
    return Dopri5(rtol=tr.rtol, atol=tr.atol, h_min=getattr(tr, "h_min", 0.0) or 0.0)


def save_at_of(tr, records: int = 1000, eta: float | None = None) -> SaveAt:
    """The record grid of a training description: every N steps, N log-spaced
    points (flow: from 1/100 of the smallest of the step size and the horizon;
    the step size is ``eta``, default ``tr.eta``), every DT, or by default
    about ``records`` records over the horizon."""
    gd = tr.method == "gd"
    H = tr.horizon
    if tr.record_every is not None:
        return SaveAt(every=tr.record_every)
    if tr.record_log is not None:
        eta = tr.eta if eta is None else eta
        return SaveAt.log(tr.record_log, H, integer=gd, t_min=None if gd else min(eta, H) * 1e-2)
    if tr.record_dt is not None:
        return SaveAt.uniform(tr.record_dt, H)
    if gd:
        return SaveAt(every=max(1, int(H) // records))
    return SaveAt.uniform(H / records, H) if H > 0 else SaveAt()
