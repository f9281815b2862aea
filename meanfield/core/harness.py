"""The run harness: the one place that turns a training description and a
system into a run, a run file and an exit code.

Every system (the mixture fast path, an engine description, the induction
model) brings its own pieces:

* a *training description* (duck-typed): ``method`` (gd | flow | rk4),
  ``eta``, ``dt``, ``rtol``, ``atol`` (``h_min`` optional), ``horizon`` (total
  steps for gd, total time otherwise) and the record options
  ``record_every`` / ``record_log`` / ``record_dt`` (``meanfield.core.config
  .record_options``); a mixture config, an engine ``Training`` and an
  induction config all are one;
* its *stages*, each with what it trains (the ``mode`` the system reads: a
  mask, a bit set), its length (steps or time), its parsed stop criterion
  (``meanfield.core.criteria``), a name and optionally its own step size
  (:func:`stages_of` numbers them into :class:`~meanfield.core.integrate.Stage`);
* a *system* (:class:`meanfield.core.integrate.System`) and an initial state;
* a *save* function writing its run file.

The harness does the rest, the same way for all of them: the solver and the
record grid (:func:`solver_of`, :func:`save_at_of`: one set of defaults, see
``docs/conventions.md``), the :class:`~meanfield.core.integrate.Monitor`
(progress on stderr, SIGINT/SIGTERM end the run with a valid file), periodic
checkpoints (status ``interrupted``, message "checkpoint at step N": the step
really reached, not the last record), the final save, and the exit code of a
run's status (:data:`EXIT_CODES`).

It imports no system: systems import it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from . import integrate
from .integrate import save_at_of, solver_of  # noqa: F401 (the harness's solver and record grid)

#: exit code of the CLI for a run's final status
EXIT_CODES = {"complete": 0, "diverged": 3, "interrupted": 130}


@dataclass(frozen=True)
class StageSpec:
    """One stage of a training description, for systems without their own
    stage type (the engine's ``meanfield.engine.objects.StageSpec`` has the
    same fields but ``eta``): what it trains, for how long (steps or time),
    until which parsed criterion, its name, its own GD step size (None: the
    training's ``eta``)."""

    train: Any
    length: float
    criterion: tuple[str, str, float] | None = None
    name: str = ""
    eta: float | None = None


def unit_of(training) -> str:
    """What a run counts: ``step`` (gd) or ``t`` (flow, rk4)."""
    return "step" if training.method == "gd" else "t"


def stages_of(specs: Iterable, mode: Callable[[Any], Any] | None = None) -> list[integrate.Stage]:
    """Number stage descriptions 1, 2, ... into :class:`integrate.Stage`.
    Each spec has ``train`` (turned into the stage's ``mode`` by ``mode``, as
    is by default), ``length``, ``criterion`` (parsed, or None), ``name`` and
    optionally ``eta`` (its own GD step size)."""
    mode = mode or (lambda train: train)
    return [integrate.Stage(i + 1, mode(s.train), s.length, s.criterion, s.name, eta=getattr(s, "eta", None))
            for i, s in enumerate(specs)]


def solve(training, system, y0, stages: list[integrate.Stage], saveat: integrate.SaveAt | None = None,
          monitor: integrate.Monitor | None = None, solver=None) -> integrate.Trajectory:
    """Integrate ``system`` from ``y0`` through ``stages`` with the training's
    solver (or ``solver``) on its record grid (or ``saveat``)."""
    solver = solver if solver is not None else solver_of(training)
    return solver.solve(system, y0, stages, saveat if saveat is not None else save_at_of(training), monitor)


def checkpoint_message(unit: str, reached: float, last: float) -> str:
    """The message of a checkpoint file: where the run was (``reached``) and
    where its last record is (``last``)."""
    return (f"checkpoint at {unit} {reached:.6g} (last record at {unit} {last:.6g}): the run was still going "
            f"when this was written; if you read this, it ended early")


def run_to_file(training, solve: Callable[[integrate.Monitor], integrate.Trajectory], save: Callable[..., Path],
                progress: bool = True, checkpoint_s: float = 60.0, label: str = "",
                result: Callable[[integrate.Trajectory], Any] | None = None,
                monitor_factory: Callable[..., integrate.Monitor] | None = None):
    """Run and write a run file, the same way for every system.

    ``solve(monitor)`` integrates (passing ``monitor`` to the solver) and
    returns the trajectory; ``result(trajectory)`` (default: the trajectory
    itself) is what ``save(result, status=None, message=None)`` writes and
    what is returned. Progress goes to stderr for runs longer than 2 s
    (``progress``); every ``checkpoint_s`` seconds a checkpoint file (status
    ``interrupted``) is written so that even a killed process leaves a valid
    file; SIGINT/SIGTERM end the run with status ``interrupted``. Returns
    (result, path); the exit code is ``EXIT_CODES[trajectory.status]``.
    ``monitor_factory(total=, unit=, checkpoint=, checkpoint_s=)``: another
    monitor (the Python API's tqdm bar) instead of the stderr line."""
    unit = unit_of(training)
    wrap = result or (lambda traj: traj)

    def ckpt(traj):
        last = traj.step[-1] if unit == "step" else traj.t[-1]
        reached = max(float(getattr(mon, "done", last) or last), float(last))
        try:
            save(wrap(traj), status="interrupted", message=checkpoint_message(unit, reached, last))
        except (MemoryError, OSError) as e:  # a failed checkpoint must not lose the run: the previous one stays
            import logging

            logging.getLogger("meanfield").warning(
                "checkpoint at %s %.6g not written (%s: %s); the previous file stays valid and the run goes on",
                unit, reached, type(e).__name__, e)

    if monitor_factory is not None:  # the Python API's tqdm bar (meanfield.core.progress)
        mon = monitor_factory(total=training.horizon, unit=unit, checkpoint=ckpt, checkpoint_s=checkpoint_s)
    else:
        mon = integrate.Monitor(total=training.horizon, unit=unit, quiet_s=2.0 if progress else math.inf,
                                checkpoint=ckpt, checkpoint_s=checkpoint_s, label=label)
    with mon:
        traj = solve(mon)
    if traj.status == "interrupted" and getattr(mon, "signal", None) is not None:
        return save_within(traj, wrap, save, SIGNAL_SAVE_S)  # exit within 2 s of the signal
    try:
        res = wrap(traj)
        return res, save(res)
    except (KeyboardInterrupt, SystemError) as e:  # a signal while the finished run's result and file were
        # made (a large run takes seconds): nothing is in place yet (the write is atomic); write the file within
        # 2 s of the signal instead, thinned if it must be, and exit 130 (the signal is in errors.PENDING: the
        # command stops after this). A KeyboardInterrupt raised inside a numba kernel comes out as SystemError
        from .errors import PENDING

        if isinstance(e, SystemError) and PENDING["signal"] is None:
            raise
        signum = PENDING["signal"] or getattr(mon, "signal", None) or 2
        end = traj.step[-1] if unit == "step" else traj.t[-1]
        traj.message = (f"interrupted by signal {signum} while the run file was being made; the run itself had "
                        f"ended ({traj.status}: {traj.message}) at {unit} {end:.6g}")
        traj.status = "interrupted"
        PENDING["signal"] = None  # held back while the thinned file is written (a second signal still stops it)
        try:
            return save_within(traj, wrap, save, SIGNAL_SAVE_S)
        finally:
            PENDING["signal"] = PENDING["signal"] or signum


#: seconds the file of a run stopped by SIGINT/SIGTERM may take to write (issue 26: the command exits within
#: 2 s of the signal; the chunk under way when it came takes up to a quarter second, the exit a few tenths)
SIGNAL_SAVE_S = 1.0


def thinned(traj: integrate.Trajectory, keep: int) -> integrate.Trajectory:
    """``traj`` with ``keep`` (>= 2) of its records, evenly spaced, the first
    and the last always among them (stage ends, status, warnings kept; the
    message says how many records were kept).

    Parameters
    ----------
    traj : Trajectory
        A recorded trajectory.
    keep : int
        Records to keep (at least 2).

    Returns
    -------
    Trajectory
        ``traj`` itself when it has at most ``keep`` records.

    Example
    -------
    >>> import numpy as np
    >>> tr = integrate.Trajectory()
    >>> for k in range(10):
    ...     tr.record(float(k), k, 0, np.zeros(1))
    >>> thinned(tr, 3).step
    [0, 4, 9]
    """
    import numpy as np

    n = len(traj.t)
    if n <= keep:
        return traj
    idx = np.unique(np.round(np.linspace(0, n - 1, max(2, int(keep)))).astype(int))
    out = integrate.Trajectory(t=[traj.t[i] for i in idx], step=[traj.step[i] for i in idx],
                               stage=[traj.stage[i] for i in idx], y=[traj.y[i] for i in idx],
                               stage_ends=list(traj.stage_ends), status=traj.status, warnings=list(traj.warnings))
    out.message = (f"{traj.message}; records thinned to {len(idx)} of {n} (evenly spaced, the first and the "
                   f"last kept) so that the file was written within 2 s of the signal")
    return out


def save_within(traj: integrate.Trajectory, wrap: Callable, save: Callable[..., Path], budget_s: float):
    """Write the file of an interrupted run within about ``budget_s`` seconds:
    a valid file of the first and the last record at once (its cost, measured,
    sets the cost of a record), then, as far as the budget allows, the file
    of every record or of as many evenly spaced ones as fit (each write
    atomic: a valid file at every moment). The per-record work (observables,
    compression) of a long run can take far longer than the 2 s a signal
    allows; the state at the last record is always exact.

    Parameters
    ----------
    traj : Trajectory
        The interrupted trajectory.
    wrap : callable
        trajectory -> result (what ``save`` writes).
    save : callable
        result -> path.
    budget_s : float
        Seconds for writing.

    Returns
    -------
    tuple of (result, Path)
        The result written last and its path.

    Example
    -------
    >>> res, path = save_within(traj, wrap, save, 1.0)     # doctest: +SKIP
    """
    import time

    n = len(traj.t)
    if n <= 2:
        res = wrap(traj)
        return res, save(res)
    start = time.perf_counter()
    done = []  # (records, seconds) of each file written
    keep = 2
    while True:
        t0 = time.perf_counter()
        res = wrap(thinned(traj, keep))
        path = save(res)
        done.append((min(keep, n), time.perf_counter() - t0))
        left = budget_s - (time.perf_counter() - start)
        if keep >= n or left <= 0:
            return res, path
        k, sec = done[-1]
        per = sec / k  # the file's fixed cost counted as records' too: an overestimate of a record's cost
        nxt = min(n, int(left / per), 4 * keep)  # at most 4x the last file: costs are not quite linear
        if nxt <= keep or len(done) >= 5:
            return res, path
        keep = nxt
