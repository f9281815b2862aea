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

One child per loop at a time (a description's, or its stage's where stages have
their own rates), whichever of the user's processes with this temporary directory
asks: the child holds a marker file there locked while it lives (:func:`start`,
:func:`at_work`; the job itself goes through its standard input); a child outlives its run if the run ends first (it
finishes the cache entry, about 25 s, then exits). A child that fails or is killed
changes nothing: the run stays in the generic loop. Single runs only
(``meanfield.engine.runs.run`` and ``run_to_file``, so ``model run`` and
``meanfield.run``): the points of a per-point sweep, a width sweep's workers, batches and the other users of
``system_of`` never start one; nor does a system without file locks (Windows).
``MEANFIELD_BACKGROUND_COMPILE=0``
turns it off (``1``, the default: on); any other value is refused in one line
(:func:`enabled`).

Example
-------
>>> enabled({"MEANFIELD_BACKGROUND_COMPILE": "0"}), enabled({})
(False, True)
"""

from __future__ import annotations

import errno
import os
import pickle
import stat
import subprocess
import sys
import tempfile
import threading
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
    uid = os.getuid()
    return os.path.join(tempfile.gettempdir(), f"meanfield-compiling-{uid}-{tag}")


def _try_lock(fd):
    """An exclusive lock on ``fd`` without waiting: True, False where a live child holds it, None where the
    lock cannot be asked for here (a file system without locks: no background compile)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as e:
        return False if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN) else None


def _open_marker(mark: str):
    """The marker opened for locking, or None: never through a link, never a file this user does not own
    or that is not a plain file (another user's file at a predictable path), never blocking (a FIFO)."""
    try:
        fd = os.open(mark, os.O_CREAT | os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0),
                     0o600)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_uid == os.getuid():
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _same_file(fd, mark: str) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(mark, follow_symlinks=False)
        return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
    except OSError:
        return False


def at_work(tag: str) -> bool:
    """Whether a live child (of any process of this user with this temporary directory) is compiling
    ``tag``: its marker exists and is locked (the child holds the lock while it lives; the system releases
    it when the child dies, however).

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
    mark = _marker(tag)
    if not os.path.exists(mark):
        return False
    fd = _open_marker(mark)
    if fd is None:
        return False
    try:
        return _try_lock(fd) is False
    finally:
        os.close(fd)  # (a lock this probe took goes with it)


def _child_path() -> str:
    """PYTHONPATH for the child: the directory this process's meanfield came from first, then its sys.path,
    every entry absolute (the child runs with ``-P``: no working directory on its path)."""
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = [here]
    for p in sys.path:
        if p:
            q = os.path.abspath(p)
            if q not in out:
                out.append(q)
    return os.pathsep.join(out)


def _feed(pipe, job: bytes) -> None:
    try:
        pipe.write(job)
        pipe.close()
    except OSError:  # the child died at once: it fails, the run stays in the generic loop
        pass


#: this process's children (reaped at the next start: none left a zombie or dropped while it runs)
_CHILDREN: list = []


def start(tag: str, pk, Gr, hf, args) -> subprocess.Popen | None:
    """Start the child compiling the specialised loop named ``tag`` for ``args``, unless a live one is at
    work on it already.

    The job (the packed description, the stage's arrays, the loop's scalar arguments) goes to the child
    through its standard input; the marker file in the temporary directory is only a lock, taken here and
    handed to the child, which holds it while it lives: a killed child frees the tag at once, and processes
    that ask together start one child. (A process forked without exec by another thread in the
    milliseconds the lock is being handed over would hold it too; nothing here forks.)

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
        ``fcntl``, a temporary directory that cannot be written, a marker path this user does not own).

    Examples
    --------
    >>> from meanfield.engine import specialise  # doctest: +SKIP
    >>> child = start(specialise._key(pk, Gr, hf)[0], pk, Gr, hf, args)  # doctest: +SKIP
    """
    _CHILDREN[:] = [c for c in _CHILDREN if c.poll() is None]
    if fcntl is None:  # (no file locks here: no background compile)
        return None
    mark = _marker(tag)
    for _ in range(2):  # once more where the marker was removed between the open and the lock
        fd = _open_marker(mark)
        if fd is None:
            return None
        try:
            if not _try_lock(fd):  # a live child holds it (False), or no locks here (None)
                return None
            if not _same_file(fd, mark):  # its child removed it meanwhile: a new marker, a new try
                continue
            try:
                job = pickle.dumps((pk, Gr, hf, tuple(args[:8]), int(args[0].shape[0])))
                env = dict(os.environ, PYTHONPATH=_child_path())
                child = subprocess.Popen([sys.executable, "-P", "-m", "meanfield.engine.background", mark, str(fd)],
                                         stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, pass_fds=(fd,), env=env,
                                         start_new_session=True)  # a Ctrl-C stops the run only
            except Exception:  # noqa: BLE001 (a job that cannot be pickled or a process that cannot start)
                return None
            # fed by a thread: a job larger than the pipe would otherwise hold the run until the child reads
            threading.Thread(target=_feed, args=(child.stdin, job), daemon=True).start()
            _CHILDREN.append(child)
            return child
        finally:
            os.close(fd)  # the child's copy keeps the lock; where none started, closing releases it
    return None


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
        for _ in range(2):  # once more where another's child held the tag and has just let it go
            self.child = start(self.tag, pk, Gr, hf, args)
            if self.child is not None or at_work(self.tag):
                break
        else:
            return False  # it could not start, and no other process's child is at work on it
        self.state = "waiting"
        self._next = time.monotonic() + POLL_S
        return False


def _main(path: str, fd: int) -> int:
    """The child: compile the specialised loop of the job on standard input, holding the marker ``path``
    locked (open as ``fd``) until it exits; nothing printed; exit 0 when compiled, 1 otherwise; the marker
    removed either way (while the lock is held: no other process writes or removes it then)."""
    try:
        try:
            os.nice(10)
        except OSError:
            pass
        pk, Gr, hf, head, ny = pickle.loads(sys.stdin.buffer.read())  # from the parent only (its pipe)
        from . import specialise

        fn = specialise._compiled(*specialise._key(pk, Gr, hf))
        y = head[0].copy()
        fn(y, 0, *head[2:], *specialise.scratch_of(pk, ny))  # nsteps 0: compiles, evaluates the loss once
        return 0
    except BaseException:  # noqa: BLE001 (a child that fails leaves the run in the generic loop)
        return 1
    finally:
        if _same_file(fd, path):
            try:
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
