"""Guards at the edge of the program: every bad input becomes one line.

What lives here, used by the CLI before any work starts:

* :func:`check_output_file`, :func:`check_output_dir`: an output path must be
  writable *before* a run spends minutes on it (an existing directory where a
  file goes, a path under an existing file, a missing or read-only parent, a
  read-only file system are refused up front); stale ``PATH.tmp-PID`` files
  left by killed runs are removed (:func:`clean_stale_tmp`).
* :func:`read_config_text`: a config file is read with a size cap, must be
  UTF-8 text and is parsed by ``tomllib`` with deep nesting refused.
* :func:`check_size` (from ``meanfield.core.limits``): a refusal quoting a
  run's estimated memory and time when it is beyond this machine (``--force``
  goes past it on purpose); each paper's estimate from its config lives in
  its package (``meanfield.models.<paper>.sizes``).
* :func:`excerpt`: error messages quote at most a short excerpt of a value.
* :func:`terminate_as_interrupt`: SIGTERM raises ``KeyboardInterrupt`` like
  SIGINT, so both end in the same clean exit 130.

Every refusal is a :class:`meanfield.core.config.ConfigError` (the CLI prints it
on one line and exits 2).
"""

from __future__ import annotations

import os
import sys
import signal
import tempfile
from pathlib import Path

from .errors import ConfigError
from .limits import (  # noqa: F401 (re-exported: the ceilings live in meanfield.core.limits)
    EXCERPT_CHARS, MAX_HEADS, MAX_HORIZON, MAX_LIST, MAX_OMEGAS, MAX_SECONDS, MAX_SEEDS, _fmt_bytes, _fmt_seconds,
    check_list, check_run_numbers, check_size, excerpt,
    max_workers, memory_limit, unknown_name)

CONFIG_MAX_BYTES = 1 << 20  # a config is a few hundred bytes; 1 MiB is far beyond any real one
CONFIG_MAX_DEPTH = 16  # tables/arrays nested deeper than this are not a config



def one_line(msg: str, n: int = 400) -> str:
    """A message on one line of at most about ``n`` characters."""
    s = " ".join(str(msg).split())
    if len(s) > n:
        s = s[: n - 60] + f" ... ({len(s) - n + 40} characters omitted) ... " + s[-20:]
    return s


# ------------------------------------------------------------------ output paths


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale_tmp(path: str | Path) -> list[Path]:
    """Remove ``PATH.tmp-PID`` files whose process is gone (left by a run that
    was killed while writing). Returns the removed paths."""
    p = Path(path)
    removed = []
    try:
        cands = list(p.parent.glob(f"{p.name}.tmp-*"))
    except OSError:
        return removed
    for f in cands:
        pid = f.name.rsplit(".tmp-", 1)[-1]
        if not pid.isdigit() or _pid_alive(int(pid)):
            continue
        try:
            f.unlink()
            removed.append(f)
        except OSError:
            pass
    return removed


def _nearest_existing(p: Path) -> Path:
    q = p
    while not os.path.lexists(q):
        if q.parent == q:
            break
        q = q.parent
    return q


def _probe_writable(folder: Path, field: str, target: Path) -> None:
    """Create and remove a file in ``folder``: the only check that also holds
    for root, read-only mounts and pseudo file systems."""
    try:
        fd, name = tempfile.mkstemp(prefix=".meanfield-probe-", dir=folder)
    except OSError as e:
        raise ConfigError(f"{field}: cannot write {target}: cannot create a file in {folder} "
                          f"({e.strerror or e})") from None
    os.close(fd)
    try:
        os.unlink(name)
    except OSError:
        pass


def _check_parent(p: Path, field: str) -> None:
    parent = p.parent if str(p.parent) else Path(".")
    q = _nearest_existing(parent)
    if not q.is_dir():
        raise ConfigError(f"{field}: cannot write {p}: {q} is a file, not a folder")
    _probe_writable(q, field, p)


def check_output_file(path, field: str = "out", suffixes: tuple[str, ...] | None = None) -> Path:
    """An output FILE path that can be written: refuse, before any work, an
    existing directory, a non-regular file, a parent that is a file, a folder
    we cannot write in. Missing parent folders are fine (created at write
    time). Stale ``PATH.tmp-PID`` files are cleaned up. Returns the path."""
    if path is None or str(path).strip() == "":
        raise ConfigError(f"{field}: give a file path")
    p = Path(path)
    if suffixes and p.suffix not in suffixes:
        raise ConfigError(f"{field}: must be a path ending in {' or '.join(suffixes)}, got {excerpt(str(path))}")
    if p.is_dir():
        raise ConfigError(f"{field}: {excerpt(str(p))} is an existing directory; give a file path")
    if os.path.lexists(p) and not p.is_file():
        raise ConfigError(f"{field}: {excerpt(str(p))} exists and is not a regular file")
    _check_parent(p, field)
    clean_stale_tmp(p)
    return p


def check_output_dir(path, field: str = "out") -> Path:
    """An output FOLDER that can be written (existing or to be created)."""
    if path is None or str(path).strip() == "":
        raise ConfigError(f"{field}: give a folder path")
    p = Path(path)
    if os.path.lexists(p):
        if not p.is_dir():
            raise ConfigError(f"{field}: {excerpt(str(p))} exists and is not a folder")
        _probe_writable(p, field, p)
        return p
    _check_parent(p, field)
    return p


def check_disk(path, need_bytes: float, field: str = "out", force: bool = False) -> None:
    """Refuse, before the work, an output whose estimated size is more than the
    free space where it goes (a full disk during the final write loses the run;
    HDF5 has even crashed on it)."""
    import shutil

    if force:
        return
    q = _nearest_existing(Path(path).parent if str(Path(path).parent) else Path("."))
    try:
        free = shutil.disk_usage(q if q.is_dir() else q.parent).free
    except OSError:
        return
    if need_bytes > free:
        raise ConfigError(f"{field}: the run file needs about {_fmt_bytes(need_bytes)}, only {_fmt_bytes(free)} free "
                          f"in {excerpt(str(q))}; free space or record less (--record-every, --record-log); "
                          "--force runs it anyway")


# ------------------------------------------------------------------ config files


def _depth(v, d: int = 0) -> int:
    if d > CONFIG_MAX_DEPTH:
        return d
    if isinstance(v, dict):
        return max([_depth(x, d + 1) for x in v.values()] or [d + 1])
    if isinstance(v, list):
        return max([_depth(x, d + 1) for x in v] or [d + 1])
    return d


def read_config_text(path, field: str = "config", max_bytes: int = CONFIG_MAX_BYTES) -> dict:
    """Parse a TOML config file safely: at most ``max_bytes`` are read (so
    ``/dev/zero`` or a huge file is refused, not swallowed), the bytes must
    be UTF-8, nesting deeper than ``CONFIG_MAX_DEPTH`` is refused. Returns
    the parsed dict; every failure is a one-line ConfigError."""
    import tomllib

    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{field}: {excerpt(str(p))} is a directory; give a TOML file")
    try:
        with open(p, "rb") as fh:
            raw = fh.read(max_bytes + 1)
    except FileNotFoundError:
        raise ConfigError(f"{field}: file not found: {excerpt(str(p))}") from None
    except OSError as e:
        raise ConfigError(f"{field}: cannot read {excerpt(str(p))}: {e.strerror or e}") from None
    if len(raw) > max_bytes:
        raise ConfigError(f"{field}: {excerpt(str(p))} is larger than {max_bytes // 1024} KiB; "
                          "a config file is a short TOML text")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{field}: {excerpt(str(p))} is not a UTF-8 text file (byte 0x{raw[e.start]:02x} "
                          f"at offset {e.start}); give a TOML file") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{field}: malformed TOML in {excerpt(str(p))}: {one_line(str(e), 160)}") from None
    except RecursionError:
        raise ConfigError(f"{field}: {excerpt(str(p))} nests tables or arrays too deeply "
                          f"(at most {CONFIG_MAX_DEPTH} levels)") from None
    if _depth(data) > CONFIG_MAX_DEPTH:
        raise ConfigError(f"{field}: {excerpt(str(p))} nests tables or arrays too deeply "
                          f"(at most {CONFIG_MAX_DEPTH} levels)")
    return data


# ------------------------------------------------------------------ sizes

# The size estimates of each paper's runs live in its package (meanfield.models.<paper>.sizes), built on
# check_size (meanfield.core.limits): core/ knows no paper.


# ------------------------------------------------------------------ one rule for inapplicable options

_ONLY = {  # key -> (predicate on the resolved config, what it needs)
    "t_end": (lambda c: c.method != "gd" and c.schedule == "simultaneous",
              "a flow or rk4 run with the simultaneous schedule (gd runs use steps; three-stage runs stage_times)"),
    "stage_times": (lambda c: c.method != "gd" and c.schedule == "three-stage",
                    "a flow or rk4 run with the three-stage schedule (gd runs use stage_steps)"),
    "dt": (lambda c: c.method == "rk4", "method rk4"),
    "rtol": (lambda c: c.method == "flow", "method flow"),
    "atol": (lambda c: c.method == "flow", "method flow"),
    "h_min": (lambda c: c.method == "flow", "method flow"),
    "steps": (lambda c: c.schedule == "simultaneous", "the simultaneous schedule (three-stage runs use stage_steps)"),
    "criterion": (lambda c: c.schedule == "simultaneous",
                  "the simultaneous schedule (three-stage runs use stage_criteria)"),
    "stage_steps": (lambda c: c.schedule == "three-stage", "the three-stage schedule (simultaneous runs use steps)"),
    "stage_criteria": (lambda c: c.schedule == "three-stage",
                       "the three-stage schedule (simultaneous runs use criterion)"),
    "stage3": (lambda c: c.schedule == "three-stage", "the three-stage schedule"),
    "data_seed": (lambda c: c.n_train is not None, "a finite training set (n_train)"),
}


def check_applicable(given: dict, cfg, rules: dict | None = None) -> None:
    """A config key or flag the chosen method / schedule ignores is an error
    naming it (instead of being silently dropped). ``given``: the keys the user
    set (TOML file and flags), ``cfg``: the resolved MixtureConfig (or any
    object with ``method`` and ``schedule`` that ``rules`` reads: the engine's
    general descriptions pass ``meanfield.engine.edges.ENGINE_ONLY``)."""
    rules = _ONLY if rules is None else rules
    for k, v in given.items():
        if v is None or k not in rules:
            continue
        ok, needs = rules[k]
        if not ok(cfg):
            raise ConfigError(f"{k}: not used here (method {cfg.method}, schedule {cfg.schedule}); "
                              f"it applies to {needs}")
    if cfg.method != "gd":  # flow / rk4: step counts only set the default horizons
        for steps_key, time_key in (("steps", "t_end"), ("stage_steps", "stage_times")):
            if given.get(steps_key) is not None and given.get(time_key) is not None:
                raise ConfigError(f"{steps_key}: not used when {time_key} is given (for flow and rk4 runs "
                                  f"{steps_key} x eta is only the default {time_key})")


# ------------------------------------------------------------------ signals


def _raise_interrupt(signum, frame):
    from .errors import PENDING

    PENDING["signal"] = signum  # remembered: the exception below may be swallowed by third-party code
    raise KeyboardInterrupt(f"signal {signum}")


class deferred_signals:
    """Hold SIGINT / SIGTERM back while a file is being written (seconds at
    most), then hand a signal that arrived meanwhile to the handler that was
    in place (a run's monitor sets its stop flag; otherwise KeyboardInterrupt).
    So a signal during the final write leaves the complete file, not a
    half-written temporary. A no-op outside the main thread."""

    def __enter__(self):
        import threading

        self.got = None
        self.old = {}
        if threading.current_thread() is not threading.main_thread():
            return self
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                if signal.getsignal(sig) is None:  # a handler not installed from Python (embedding code):
                    continue  # it could not be put back; leave it alone
                self.old[sig] = signal.signal(sig, self._hold)
            except (ValueError, OSError):  # pragma: no cover
                pass
        return self

    def _hold(self, signum, frame):
        self.got = (signum, frame)

    def __exit__(self, *exc):
        for sig, old in self.old.items():
            signal.signal(sig, old)
        if self.got is not None:
            signum, frame = self.got
            old = self.old.get(signum)
            if callable(old):
                old(signum, frame)
            elif old == signal.SIG_DFL and signum == signal.SIGTERM:
                raise KeyboardInterrupt(f"signal {signum}")
            elif old != signal.SIG_IGN:
                raise KeyboardInterrupt(f"signal {signum}")
        return False


def terminate_as_interrupt() -> None:
    """SIGTERM raises KeyboardInterrupt (as SIGINT does), so a terminated
    command unwinds through the same clean-up and exits 130."""
    try:
        signal.signal(signal.SIGTERM, _raise_interrupt)
    except ValueError:  # not the main thread
        pass


# ------------------------------------------------------------------ messages


LOG = "meanfield"


def setup_logging(verbosity: int = 0) -> None:
    """Messages of the command line through ``logging`` (logger ``meanfield``):
    ``-q`` (verbosity -1) warnings only, default info, ``-v`` (1) debug.
    Library use configures logging itself; nothing is set up on import."""
    import logging

    import sys

    class _Stderr(logging.StreamHandler):
        """A StreamHandler on whatever ``sys.stderr`` is at emit time (redirected
        in tests and by callers of ``main``), not the one at set-up."""

        @property
        def stream(self):
            return sys.stderr

        @stream.setter
        def stream(self, value):
            pass

    log = logging.getLogger(LOG)
    log.setLevel(logging.WARNING if verbosity < 0 else logging.DEBUG if verbosity > 0 else logging.INFO)
    if not any(getattr(h, "_meanfield", False) for h in log.handlers):
        h = _Stderr()
        h.setFormatter(logging.Formatter("meanfield: %(message)s"))
        h._meanfield = True
        log.addHandler(h)
        log.propagate = False


def cli_log():
    """The ``meanfield`` logger of the command line (set up with the default
    level if the CLI's ``main`` has not done so: a CLI function called on its
    own, as the tests do). Messages print as ``meanfield: MESSAGE`` on stderr."""
    import logging

    log = logging.getLogger(LOG)
    if not any(getattr(h, "_meanfield", False) for h in log.handlers):
        setup_logging(0)
    return log


#: seconds of the first compilation of each kernel family, measured cold (NUMBA_CACHE_DIR empty) on a
#: loaded 2-core machine (benchmarks/bench_first_use.py prints today's numbers)
COMPILE_S = {"engine": 30}  # a paper passes its own (``seconds=``: meanfield.models.<paper>.sizes.COMPILE_S)


def first_use_notice(*dispatchers, family: str | None = None, echo: bool = False, seconds: float | None = None) -> bool:
    """Say "compiling kernels, about N s, once" when a numba kernel about to be
    used has neither been compiled in this process nor been cached on disk
    (numba ``cache=True``): the first run after an install spends most of its
    time there, and a step rate measured then would be meaningless (the
    progress line shows none until one is measured).

    Parameters
    ----------
    *dispatchers : numba dispatchers
        the kernels the run is about to call.
    family : str, optional
        ``engine``: N from :data:`COMPILE_S` (30 s for a name it does not hold).
    echo : bool
        also print the line on stderr when the ``meanfield`` logger has no
        handler (the Python API in a notebook).
    seconds : float, optional
        N itself (a paper's own kernels: its ``sizes.COMPILE_S``); overrides ``family``.

    Returns
    -------
    bool
        whether the kernels compile now.

    Examples
    --------
    >>> from meanfield.engine import kernels                                  # doctest: +SKIP
    >>> first_use_notice(kernels.gd_advance, family="engine", echo=True)      # doctest: +SKIP
    """
    import logging

    first = False
    for d in dispatchers:
        try:
            if d.signatures:
                continue
            cache = getattr(d, "_cache", None)
            index = getattr(getattr(cache, "_cache_file", None), "_index_path", None)
            if index is None or not os.path.exists(index):
                first = True
                break
        except AttributeError:  # not a numba dispatcher
            continue
    if first:
        n = seconds if seconds is not None else COMPILE_S.get(family or "", 30)
        msg = f"compiling kernels, about {n} s, once (later runs load them from numba's cache; `meanfield warm`)"
        log = logging.getLogger(LOG)
        if echo and not log.handlers:
            print(f"meanfield: {msg}", file=sys.stderr, flush=True)
        else:
            log.info(msg)
    return first


# ------------------------------------------------------------------ the last-resort barrier

EXIT_INTERNAL = 70  # sysexits.h EX_SOFTWARE: a bug in meanfield, not in the input


def barrier(call, verbose: bool = False, after_work=None) -> int:
    """Run ``call()`` (a CLI command returning its exit code) so that nothing
    ends in a Python traceback: bad input (ConfigError) -> one line, exit 2;
    SIGINT / SIGTERM outside a run's own handler -> one line, exit 130; an
    operating-system error (a path, a full disk) -> one line naming the path,
    exit 2; out of memory -> one line, exit 2; anything else is a bug: one line
    ``internal error``, exit 70, and the traceback with ``-v`` or
    ``MEANFIELD_DEBUG=1``.

    ``after_work``: given when this process is the ``meanfield`` command,
    whose start-up handler (``meanfield.cli``: a signal before the barrier
    exits 130 at once) is replaced here by SIGINT -> KeyboardInterrupt;
    ``after_work()`` is called as soon as ``call`` returns (it puts the exit-130
    handler back for the interpreter's shutdown)."""
    debug = verbose or os.environ.get("MEANFIELD_DEBUG", "") not in ("", "0")
    try:
        old_term = signal.getsignal(signal.SIGTERM)
        old_int = signal.getsignal(signal.SIGINT)
    except ValueError:  # pragma: no cover
        old_term = old_int = None
    if old_term != signal.SIG_IGN:
        terminate_as_interrupt()
    # SIGINT -> KeyboardInterrupt for the command's duration (the start-up handler exits at once), unless
    # the process was started with SIGINT ignored (a background job of a non-interactive shell, `trap ''
    # INT`): that choice is honoured, as Python itself and POSIX tools do; SIGTERM still stops the run
    if old_int != signal.SIG_IGN:
        try:
            signal.signal(signal.SIGINT, _raise_interrupt)
        except ValueError:  # pragma: no cover - not the main thread
            pass
    from .errors import PENDING

    PENDING["signal"] = None
    old_hook = sys.unraisablehook
    sys.unraisablehook = _quiet_interrupts(old_hook)
    try:
        return _barrier_body(call, debug, after_work)
    finally:
        # after a signal the interpreter's shutdown can collect an llvmlite object whose construction the
        # signal cut short (its __del__ then fails: "Exception ignored in ... ObjectRef.__del__" with a
        # traceback); those are dropped, everything else goes to the previous hook
        sys.unraisablehook = old_hook if PENDING["signal"] is None else _quiet_after_signal(old_hook)
        PENDING["signal"] = None
        for sig, old in ((signal.SIGTERM, old_term), (signal.SIGINT, old_int)):
            if old is not None:
                try:
                    signal.signal(sig, old)
                except (ValueError, TypeError):  # pragma: no cover
                    pass


def _quiet_after_signal(previous):
    """The ``sys.unraisablehook`` of a command a signal stopped: a KeyboardInterrupt, or an exception in the
    finaliser of an llvmlite object (numba's compiler, cut short by the signal), is dropped; anything else
    goes to ``previous``.

    Example
    -------
    >>> import types
    >>> seen = []
    >>> hook = _quiet_after_signal(seen.append)
    >>> def __del__(self): pass
    >>> __del__.__module__ = "llvmlite.binding.ffi"
    >>> hook(types.SimpleNamespace(exc_value=AttributeError("_as_parameter_"), object=__del__))
    >>> hook(types.SimpleNamespace(exc_value=ValueError("x"), object=print)); len(seen)
    1
    """
    quiet = _quiet_interrupts(previous)

    def hook(unraisable):
        if str(getattr(getattr(unraisable, "object", None), "__module__", "") or "").startswith("llvmlite"):
            return
        quiet(unraisable)

    return hook


def _quiet_interrupts(previous):
    """An ``sys.unraisablehook`` that drops a KeyboardInterrupt raised where Python cannot propagate it (the
    signal's handler ran inside a weakref or finaliser callback, during garbage collection): Python would
    print "Exception ignored in ..." with a traceback; the signal is in ``errors.PENDING`` and stops the
    command all the same (its one line, exit 130). Anything else goes to ``previous``."""

    def hook(unraisable):
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            return
        previous(unraisable)

    return hook


def _barrier_body(call, debug: bool, after_work=None) -> int:
    import sys
    import traceback

    def say(msg):
        try:
            print(f"meanfield: {one_line(msg)}", file=sys.stderr)
        except (OSError, ValueError):  # pragma: no cover - stderr gone
            pass

    try:
        rc = call()
        if after_work is not None:
            after_work()
        return rc
    except ConfigError as e:
        from .errors import PENDING

        if PENDING["signal"] is not None:  # a failed import (the signal's KeyboardInterrupt inside it) named as
            say("interrupted (SIGINT/SIGTERM); files are written whole or not at all, so any file at the "
                "output path is a complete or checkpoint file")  # bad input: the signal is the cause
            return 130
        say(f"error: {e}")
        return 2
    except KeyboardInterrupt:
        say("interrupted (SIGINT/SIGTERM); files are written whole or not at all, so any file at the output "
            "path is a complete or checkpoint file")
        return 130
    except BrokenPipeError:  # output piped into head & co.
        try:
            sys.stderr.close()
        except OSError:  # pragma: no cover
            pass
        return 0
    except MemoryError:
        if debug:
            traceback.print_exc()
        say("error: size: out of memory; make the run smaller (K, L, width, n_train, records)")
        return 2
    except OSError as e:
        if debug:
            traceback.print_exc()
        where = e.filename if e.filename is not None else ""
        say(f"error: {excerpt(str(where), 240) + ': ' if where else ''}{e.strerror or e}")
        return 2
    except RecursionError:
        if debug:
            traceback.print_exc()
        say("error: input nested too deeply")
        return 2
    except Exception as e:  # a bug: visible, but one line unless asked
        if debug:
            traceback.print_exc()
        from .errors import PENDING

        if PENDING["signal"] is not None:  # the signal's KeyboardInterrupt was turned into another error on the
            say("interrupted (SIGINT/SIGTERM); files are written whole or not at all, so any file at the "
                "output path is a complete or checkpoint file")  # way (raised inside a class's creation, ...)
            return 130
        say(f"internal error: {type(e).__name__}: {e} (a bug in meanfield; rerun with -v or MEANFIELD_DEBUG=1 "
            "for the traceback)")
        return EXIT_INTERNAL
