"""Progress bars for the Python API: a :class:`~meanfield.core.integrate.Monitor` drawn by ``tqdm.auto``.

``tqdm.auto`` draws a widget in a notebook and a text bar in a terminal. The
monitor keeps every duty of the plain one (SIGINT / SIGTERM stop the run
with a valid, ``interrupted`` result; checkpoints), and shows no rate until
one has been measured after the first chunk (the first chunk of a first use
is kernel compilation, not stepping). Without tqdm installed it falls back
to the plain stderr line.
"""

from __future__ import annotations

import math

from . import integrate


class TqdmMonitor(integrate.Monitor):
    """A :class:`~meanfield.core.integrate.Monitor` that draws a ``tqdm.auto`` bar.

    Parameters
    ----------
    total : float
        the run's horizon (steps for gd, time otherwise).
    unit : str
        ``step`` or ``t``.
    desc : str
        the bar's label.
    **kw
        passed to :class:`~meanfield.core.integrate.Monitor`.

    Examples
    --------
    >>> with TqdmMonitor(total=100, unit="step") as mon:     # doctest: +SKIP
    ...     traj = solver.solve(system, y0, stages, saveat, mon)
    """

    def __init__(self, total: float, unit: str = "step", desc: str = "", **kw):
        kw.setdefault("quiet_s", math.inf)  # the bar replaces the stderr line
        super().__init__(total=total, unit=unit, **kw)
        self._bar = None
        self._desc = desc
        self._shown = 0.0

    def __enter__(self):
        super().__enter__()
        try:
            from tqdm.auto import tqdm
        except ImportError:  # the plain stderr line instead
            self.quiet_s = 2.0
            return self
        total = (int(self.total) if self.unit == "step" else float(self.total)) if self.total else None
        self._bar = tqdm(total=total, unit=self.unit, desc=self._desc or "run", leave=True, dynamic_ncols=True,
                         bar_format=None if self.unit == "step" else
                         "{l_bar}{bar}| t {n:.4g}/{total:.4g} [{elapsed}<{remaining}]")
        return self

    def update(self, done, stage, info, traj=None):
        super().update(done, stage, info, traj)
        if self._bar is not None:
            step = float(done) - self._shown
            if step > 0:
                self._bar.update(int(step) if self.unit == "step" else step)
                self._shown += int(step) if self.unit == "step" else step
            self._bar.set_postfix_str(f"stage {stage}", refresh=False)

    def __exit__(self, *exc):
        if self._bar is not None:
            done = float(getattr(self, "done", 0.0) or 0.0)
            if done > self._shown:  # the last chunk
                self._bar.update(int(done - self._shown) if self.unit == "step" else done - self._shown)
            self._bar.close()
        return super().__exit__(*exc)


def monitor(progress, total: float, unit: str, desc: str = "", **kw) -> integrate.Monitor:
    """The monitor of a Python-API run: a tqdm bar (``progress=True``) or a
    silent one (``progress=False``); both stop the run on SIGINT / SIGTERM.

    Parameters
    ----------
    progress : bool
    total : float
    unit : str
    desc : str

    Returns
    -------
    meanfield.core.integrate.Monitor

    Examples
    --------
    >>> mon = monitor(False, total=100, unit="step")
    >>> mon.quiet_s
    inf
    """
    if progress:
        return TqdmMonitor(total=total, unit=unit, desc=desc, **kw)
    return integrate.Monitor(total=total, unit=unit, quiet_s=math.inf, **kw)
