"""A long run's specialised loop, compiled in a second process while the run goes on.

``specialise="auto"`` (the default of every single run) takes the loop compiled for
the description (:mod:`meanfield.engine.specialise`: the same kernels with the
description's arrays as constants, bit for bit the generic loop's state, about
1.5x faster) only where one is *ready*, so a description's first runs take the
generic loop and wait for no compile. Once a run has spent :data:`AFTER_S`
seconds in the generic loop, :class:`Watch` starts one child process
(``python -m meanfield.engine.background FILE``, at a lower priority) that
compiles that loop into numba's on-disk cache; the run goes on in the generic
loop, looks for the cache entry at most once a second and continues in the
specialised loop from the next chunk on. The state is the same bit for bit
whichever loop ran which steps, so the run's file does not depend on when (or
whether) the switch happened; later runs of the description find the loop ready
from their first step.

One child per description at a time (a marker file in the temporary directory,
:func:`start`), whichever process asks; a child outlives its run if the run ends
first (it finishes the cache entry, about 25 s, then exits). A child that fails
changes nothing: the run stays in the generic loop. ``MEANFIELD_BACKGROUND_COMPILE=0``
turns it off (``1``, the default: on); any other value is refused in one line
(:func:`enabled`).

Example
-------
>>> enabled({"MEANFIELD_BACKGROUND_COMPILE": "0"}), enabled({})
(False, True)
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
import time

from ..core.config import ConfigError

#: seconds a run spends in the generic loop before its specialised loop is compiled in the background
AFTER_S = 10.0
#: the least seconds between two looks for the compiled loop
POLL_S = 1.0
#: a marker file older than this (seconds) belongs to a child that died: another may start
STALE_S = 300.0
ENV = "MEANFIELD_BACKGROUND_COMPILE"


def enabled(environ=None) -> bool:
    """Whether long runs compile their specialised loop in the background (:data:`ENV`: ``1`` or unset on,
    ``0`` off).

    Parameters
    ----------
    environ : mapping, optional
        The environment to read (default ``os.environ``).

    Returns
    -------
    bool

    Raises
    ------
    ConfigError
        Any other value, in one line naming the variable and the allowed values.

    Examples
    --------
    >>> enabled({"MEANFIELD_BACKGROUND_COMPILE": "1"})
    True
    >>> enabled({"MEANFIELD_BACKGROUND_COMPILE": "yes"})
    Traceback (most recent call last):
    ...
    meanfield.core.errors.ConfigError: MEANFIELD_BACKGROUND_COMPILE: 0 (off) or 1 (on, the default); got 'yes'
    """
    v = (os.environ if environ is None else environ).get(ENV, "1").strip()
    if v not in ("0", "1"):
        raise ConfigError(f"{ENV}: 0 (off) or 1 (on, the default); got {v!r}")
    return v == "1"


def _marker(tag: str) -> str:
    return os.path.join(tempfile.gettempdir(), f"meanfield-compiling-{tag}")


def start(tag: str, pk, Gr, hf, args) -> subprocess.Popen | None:
    """Start the child compiling the specialised loop named ``tag`` for ``args`` (the loop's arguments, as
    ``meanfield.engine.specialise.cached`` takes them), unless one is at work already.

    Returns
    -------
    subprocess.Popen or None
        The child, or None where another is at work on the tag or it could not be started.
    """
    mark = _marker(tag)
    try:
        if os.path.exists(mark) and time.time() - os.path.getmtime(mark) > STALE_S:
            os.unlink(mark)
        fd = os.open(mark, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except OSError:  # another process's child is at work (or the directory is not writable)
        return None
    try:
        with os.fdopen(fd, "wb") as fh:  # the marker holds the job: the child reads it, then removes it when done
            pickle.dump((pk, Gr, hf, tuple(args[:8]), int(args[0].shape[0])), fh)
        return subprocess.Popen([sys.executable, "-m", "meanfield.engine.background", mark],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)  # not in the run's process group: a Ctrl-C stops the run only
    except Exception:  # noqa: BLE001 (a job that cannot be written or a process that cannot start: no switch)
        try:
            os.unlink(mark)
        except OSError:
            pass
        return None


class Watch:
    """One stage's generic-loop time and its background compile (:mod:`meanfield.engine.background`)."""

    def __init__(self):
        self.generic_s = 0.0
        self.state = "generic"  # "generic" (not asked yet), "waiting" (a child at work), "off" (none will help)
        self.child = None  # this process's child, or None where another process's is at work
        self.tag = None
        self._next = 0.0

    def loop(self, pk, Gr, hf, args):
        """The specialised loop once the background compile has put it in the cache, else False.

        Parameters
        ----------
        pk : meanfield.engine.packed.Packed
        Gr, hf : numpy.ndarray
            The stage's rated Gram metric and head float table.
        args : tuple
            The loop's arguments (``meanfield.engine.specialise.cached``).

        Returns
        -------
        numba dispatcher or False
        """
        from . import specialise

        if self.state == "off":
            return False
        if self.state == "generic":
            if self.generic_s < AFTER_S:
                return False
            self.state = "off"
            if not enabled():
                return False
            try:
                self.tag, _ = specialise._key(pk, Gr, hf)
            except ConfigError:  # a description specialise refuses (too large): the generic loop, as before
                return False
            self.child = start(self.tag, pk, Gr, hf, args)
            if self.child is None and not os.path.exists(_marker(self.tag)):
                return False  # it could not start, and no other process is at work on it
            self.state = "waiting"
            self._next = time.monotonic() + POLL_S
            return False
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + POLL_S
        fn = specialise.cached(pk, Gr, hf, args)
        if fn is not None:
            self.state = "off"  # done: the caller keeps the loop
            return fn
        gone = self.child.poll() is not None if self.child is not None else not os.path.exists(_marker(self.tag))
        if gone:  # the child exited: one last look (it may have finished since), else the generic loop stays
            self.state = "off"
            fn = specialise.cached(pk, Gr, hf, args)
            return fn if fn is not None else False
        return False


def _main(path: str) -> int:
    """The child: compile the specialised loop of the job in ``path`` (nothing printed; exit 0 when compiled)."""
    try:
        try:
            os.nice(10)
        except OSError:
            pass
        with open(path, "rb") as fh:
            pk, Gr, hf, head, ny = pickle.load(fh)
        from . import specialise

        fn = specialise._compiled(*specialise._key(pk, Gr, hf))
        y = head[0].copy()
        fn(y, 0, *head[2:], *specialise.scratch_of(pk, ny))  # nsteps 0: compiles, evaluates the loss once
        return 0
    except BaseException:  # noqa: BLE001 (a child that fails leaves the run in the generic loop)
        return 1
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1]) if len(sys.argv) == 2 else 2)
