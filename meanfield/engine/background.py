"""A long run's specialised loop, compiled in a second process while the run goes on.

``specialise="auto"`` (the default of every single run) takes the loop compiled for
the description (:mod:`meanfield.engine.specialise`: the same kernels with the
description's arrays as constants, bit for bit the generic loop's state, about
1.5x to 2x faster) only where one is *ready*, so a description's first runs take the
generic loop and wait for no compile. Once a run has spent :data:`AFTER_S`
seconds in the generic loop, :class:`Watch` starts one child process
(``python -m meanfield.engine.background FILE``, at a lower priority) that
compiles that loop into numba's on-disk cache; the run goes on in the generic
loop, looks for the cache entry at most once a second and continues in the
specialised loop from the next chunk on. The state is the same bit for bit
whichever loop ran which steps, so the run's file does not depend on when (or
whether) the switch happened; later runs of the description find the loop ready
from their first step.

One child per description at a time, whichever process of the user asks (a marker
file in the temporary directory that the child holds locked while it lives:
:func:`start`, :func:`at_work`); a child outlives its run if the run ends first (it
finishes the cache entry, about 25 s, then exits). A child that fails or is killed
changes nothing: the run stays in the generic loop. Single runs only
(``meanfield.engine.runs.run`` and ``run_to_file``, so ``model run`` and
``meanfield.run``): the points of a per-point sweep, batches and the other users of
``system_of`` never start one. ``MEANFIELD_BACKGROUND_COMPILE=0``
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

try:
    import fcntl
except ImportError:  # (not on Windows: no background compile there)
    fcntl = None

#: seconds a run spends in the generic loop before its specialised loop is compiled in the background
AFTER_S = 10.0
#: the least seconds between two looks for the compiled loop
POLL_S = 1.0
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
    """The job and lock file of the child compiling ``tag`` (this user's: the user id is in the name)."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return os.path.join(tempfile.gettempdir(), f"meanfield-compiling-{uid}-{tag}")


def _try_lock(fd) -> bool:
    """An exclusive lock on ``fd`` without waiting: False where a live child holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False


def at_work(tag: str) -> bool:
    """Whether a live child (of any process of this user) is compiling ``tag``: its marker exists and is
    locked (the child holds the lock while it lives; the system releases it when the child dies, however).

    Parameters
    ----------
    tag : str
        The specialised loop's name (``meanfield.engine.specialise._key``).

    Returns
    -------
    bool

    Examples
    --------
    >>> at_work("no-such-loop")
    False
    """
    if fcntl is None:
        return False
    try:
        fd = os.open(_marker(tag), os.O_RDONLY)
    except OSError:
        return False
    try:
        return not _try_lock(fd)
    finally:
        os.close(fd)


def start(tag: str, pk, Gr, hf, args) -> subprocess.Popen | None:
    """Start the child compiling the specialised loop named ``tag`` for ``args``, unless a live one is at
    work on it already.

    The job (the packed description, the stage's arrays, the loop's scalar arguments) is written to the
    marker file, which is locked and handed to the child: it holds the lock while it lives, so a child that
    is killed frees the tag at once, and two processes never start two children for one tag.

    Parameters
    ----------
    tag : str
        The loop's name (``meanfield.engine.specialise._key(pk, Gr, hf)[0]``).
    pk : meanfield.engine.packed.Packed
        The packed description.
    Gr, hf : numpy.ndarray
        The stage's rated Gram metric and head float table.
    args : tuple
        The loop's arguments, as ``meanfield.engine.specialise.cached`` takes them (the first eight are sent:
        the state and the scalars; the child builds its own scratch).

    Returns
    -------
    subprocess.Popen or None
        The child, or None where a live one is at work on the tag or none could be started (no
        ``fcntl``, a temporary directory that cannot be written).

    Examples
    --------
    >>> from meanfield.engine import specialise  # doctest: +SKIP
    >>> child = start(specialise._key(pk, Gr, hf)[0], pk, Gr, hf, args)  # doctest: +SKIP
    """
    if fcntl is None:  # (no file locks here: no background compile)
        return None
    mark = _marker(tag)
    try:
        fd = os.open(mark, os.O_CREAT | os.O_RDWR, 0o600)
    except OSError:
        return None
    try:
        if not _try_lock(fd):  # a live child holds it
            return None
        job = pickle.dumps((pk, Gr, hf, tuple(args[:8]), int(args[0].shape[0])))
        os.ftruncate(fd, 0)
        os.pwrite(fd, job, 0)
        path = os.pathsep.join(p for p in sys.path if p)  # the child imports the meanfield this process runs
        env = dict(os.environ, PYTHONPATH=path)
        return subprocess.Popen([sys.executable, "-m", "meanfield.engine.background", mark, str(fd)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                pass_fds=(fd,), env=env,
                                start_new_session=True)  # not in the run's process group: a Ctrl-C stops the run only
    except Exception:  # noqa: BLE001 (a job that cannot be written or a process that cannot start: no switch)
        return None
    finally:
        os.close(fd)  # the child's copy keeps the lock; where none started, closing releases it


class Watch:
    """One stage's time in the generic loop and its background compile (what ``EngineSystem.gd_advance``
    asks once per call while ``specialise="auto"`` runs the generic loop).

    Examples
    --------
    >>> w = Watch()
    >>> w.state, w.generic_s
    ('generic', 0.0)
    """

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

        Examples
        --------
        >>> Watch().loop(None, None, None, ())  # under AFTER_S seconds in the generic loop: nothing asked
        False
        """
        if self.state == "off":
            return False
        if self.state == "generic":
            if self.generic_s < AFTER_S:
                return False
            return self._start(pk, Gr, hf, args)
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + POLL_S
        from . import specialise

        fn = specialise.cached(pk, Gr, hf, args)
        if fn is not None:
            self.state = "off"  # done: the caller keeps the loop
            return fn
        gone = self.child.poll() is not None if self.child is not None else not at_work(self.tag)
        if gone:  # the child exited: one last look (it may have finished since), else the generic loop stays
            self.state = "off"
            fn = specialise.cached(pk, Gr, hf, args)
            return fn if fn is not None else False
        return False

    def _start(self, pk, Gr, hf, args):
        from . import specialise

        self.state = "off"
        try:
            if not enabled():
                return False
            self.tag, _ = specialise._key(pk, Gr, hf)
        except ConfigError:  # a bad variable set since the run began, or a description specialise refuses
            return False
        fn = specialise.cached(pk, Gr, hf, args)  # another process's child may have finished it already
        if fn is not None:
            return fn
        self.child = start(self.tag, pk, Gr, hf, args)
        if self.child is None and not at_work(self.tag):
            return False  # it could not start, and no other process's child is at work on it
        self.state = "waiting"
        self._next = time.monotonic() + POLL_S
        return False


def _main(path: str, fd: int) -> int:
    """The child: compile the specialised loop of the job in ``path`` (its locked file open as ``fd``);
    nothing printed; exit 0 when compiled, 1 otherwise; the marker removed either way."""
    try:
        try:
            os.nice(10)
        except OSError:
            pass
        with os.fdopen(os.dup(fd), "rb") as fh:
            fh.seek(0)
            pk, Gr, hf, head, ny = pickle.load(fh)
        from . import specialise

        fn = specialise._compiled(*specialise._key(pk, Gr, hf))
        y = head[0].copy()
        fn(y, 0, *head[2:], *specialise.scratch_of(pk, ny))  # nsteps 0: compiles, evaluates the loss once
        return 0
    except BaseException:  # noqa: BLE001 (a child that fails leaves the run in the generic loop)
        return 1
    finally:
        try:  # the marker is this child's while it holds the lock (no one else writes or removes it)
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                os.unlink(path)
        except OSError:
            pass


def _cli(argv) -> int:
    if len(argv) != 2:
        return 2
    try:
        fd = int(argv[1])
        os.fstat(fd)
    except (ValueError, OSError):
        return 2
    return _main(argv[0], fd)


if __name__ == "__main__":
    raise SystemExit(_cli(sys.argv[1:]))
