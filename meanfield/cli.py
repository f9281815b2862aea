"""The one entry point: ``meanfield <system> <verb> [options]``.

Dispatch only: the signal set-up of the program, the top-level parser, the
papers' subcommands as registered (``meanfield.engine.registry.commands``:
``meanfield mixture ...``, ``meanfield induction ...``, a plug-in's), ``warm``
and the engine's ``model`` verbs; :func:`main` runs the chosen verb under the
one error barrier (``meanfield.core.guard.barrier``).

Exit codes: 0 success, 2 bad input (one-line message naming the field),
3 a run diverged (the file keeps every record so far), 130 interrupted.
"""

from __future__ import annotations

import os
import signal
import sys


def _interrupted_exit(signum, frame):  # pragma: no cover - exercised through subprocesses
    """SIGINT / SIGTERM while the program starts (imports, before the barrier) or
    after its work is done (interpreter shutdown): one line, exit 130. Nothing is
    being written in either window (files are written whole under the barrier)."""
    when = getattr(_interrupted_exit, "when", "while starting; nothing was written")
    try:
        os.write(2, f"meanfield: interrupted (SIGINT/SIGTERM) {when}\n".encode())
    except OSError:
        pass
    os._exit(130)


def _as_program() -> bool:
    """True when this process is the ``meanfield`` command (console script or
    ``python -m meanfield``), not a library user importing the CLI, nor a
    spawned worker re-importing its parent's main module."""
    if "multiprocessing.spawn" in sys.modules or "multiprocessing.forkserver" in sys.modules:
        return False
    a0 = sys.argv[0] if sys.argv else ""
    return os.path.basename(a0) in ("meanfield", "meanfield.exe") or a0.endswith(os.path.join("meanfield", "__main__.py"))


def program_signals(when: str | None = None) -> None:
    """Install :func:`_interrupted_exit` for SIGINT and SIGTERM (first thing at
    start-up, and again once the work is done)."""
    if when is not None:
        _interrupted_exit.when = when
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            if signal.getsignal(sig) == signal.SIG_IGN:  # inherited ignored (a shell's background job,
                continue  # nohup-like set-ups): honoured, as Python and POSIX tools do
            signal.signal(sig, _interrupted_exit)
        except (ValueError, OSError):  # pragma: no cover - not the main thread
            pass


def _ignore_at_exit() -> None:
    """The interpreter's last steps (after every other atexit callback: this one
    is registered first) reset Python's handlers to the default, under which a
    signal would kill the finished command (-2, -15): ignore them instead; the
    command's own exit code stands (its files are complete)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            signal.signal(sig, signal.SIG_IGN)
        except (ValueError, OSError):  # pragma: no cover
            pass


if _as_program():  # before the heavy imports below: a SIGINT at start-up is one line, exit 130
    import atexit

    atexit.register(_ignore_at_exit)
    program_signals()

import argparse  # noqa: E402
from pathlib import Path  # noqa: E402

from .core.cliparse import add_named  # noqa: E402


class _Parser(argparse.ArgumentParser):
    """Every parser of the command line: one-line errors (exit 2) and no
    prefix matching of long options (``--step 5`` is not ``--steps``: an
    abbreviation that works today could become ambiguous tomorrow)."""

    def __init__(self, *a, **kw):
        kw["allow_abbrev"] = False
        super().__init__(*a, **kw)

    def error(self, message):  # one line, exit 2
        self.exit(2, f"{self.prog}: error: {message}\n")


def _cmd_warm(args) -> int:
    from .warm import FAMILIES, families, warm

    names = families(args.only)
    dt = warm(main, names, args.jobs)
    print(f"meanfield warm: kernels of {', '.join(n for n in FAMILIES if names is None or n in names)} compiled "
          f"into numba's cache ({dt:.1f} s; later runs load them)")
    return 0


def _cmd_overlay(args) -> int:
    import re

    from .core.overlay import write_overlay

    # entry names hold commas inside their brackets (S[+,c1,v1]): split only on the others
    entries = [e.strip() for e in re.split(r",(?![^\[]*\])", args.entries) if e.strip()] if args.entries else None
    print(f"figure: {write_overlay(args.runs, args.out, args.label, entries)}")
    return 0


def _system_word(argv) -> str | None:
    """The system named on the command line (its first word that is not a top-level option), or None."""
    for w in argv:
        if w in ("-v", "--verbose", "-q", "--quiet"):
            continue
        return None if w.startswith("-") else w
    return None


def _takes_verb(fn) -> bool:
    """Whether a system's ``add_parser`` takes ``verb`` (a plain function's own arguments; no inspect import)."""
    code = getattr(fn, "__code__", None)
    return code is not None and "verb" in code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]


def _verb_word(argv) -> str | None:
    """The word after the system's (its verb), or None (none, an option such as --help)."""
    rest = list(argv)
    while rest and rest[0] in ("-v", "--verbose", "-q", "--quiet"):
        rest.pop(0)
    return rest[1] if len(rest) > 1 and not rest[1].startswith("-") else None


def build_parser(only: str | None = None, verb: str | None = None) -> argparse.ArgumentParser:
    """The whole command line's parser; ``only``: build the verbs of that system
    alone (the others are named, without their verbs: a command builds only
    the parser it uses, which a new process's start-up does not wait for).

    Parameters
    ----------
    only : str, optional
        A system's name (``mixture``, ``model``, ...); None builds all.
    verb : str, optional
        With ``only``: the verb named after it, passed to the system's
        ``add_parser`` when it takes ``verb`` (``meanfield.core.cliparse``).

    Returns
    -------
    argparse.ArgumentParser

    Example
    -------
    >>> build_parser(only="mixture").parse_args(["mixture", "run", "--steps", "5"]).steps
    '5'
    """
    top = _Parser(prog="meanfield", description="Exact reduced training dynamics of small transformers: "
                  "meanfield <system> <verb> [options]. Exit codes: 0 success, 1 a check or bound failed, "
                  "2 bad input, 3 a run diverged, 70 internal error (a bug), 130 interrupted.")
    from . import __version__

    top.add_argument("--version", action="version", version=f"meanfield {__version__}")
    top.add_argument("-v", "--verbose", action="store_true",
                     help="more messages; on an internal error (exit 70) print the traceback")
    top.add_argument("-q", "--quiet", dest="log_quiet", action="store_true",
                     help="warnings and errors only (progress lines: each verb's own --quiet)")
    systems = top.add_subparsers(dest="system", required=True, parser_class=_Parser)
    from .engine import registry

    cmds = registry.commands()  # every paper's subcommand (meanfield.engine.registry.register_command), in order
    names = {c.name for c in cmds} | {"warm", "plot", "model"}
    if only not in names:
        only = None

    def add(cmd):
        if only is None or cmd.name == only:
            fn = registry.resolve(cmd.add_parser)
            if only is not None and verb is not None and _takes_verb(fn):
                fn(systems, verb=verb)
            else:
                fn(systems)
        else:  # named (argparse's choices), its verbs not built
            add_named(systems, cmd.name)

    def own(name, fill, **kw):  # warm, plot: built now when named (or all are), else on first use
        if only in (None, name):
            fill(systems.add_parser(name, **kw))
        else:
            add_named(systems, name, fill=fill, **kw)

    for cmd in (c for c in cmds if c.order < 50):
        add(cmd)
    own("warm", _fill_warm, help="compile every kernel family (mixture, engine, induction, batched) into "
        "numba's cache, so that the first real run does not wait for them")
    own("plot", _fill_plot, help="overlay run files of any system in one figure, one legend line per run: "
        "meanfield plot R1.h5 R2.h5 --label width")
    for cmd in (c for c in cmds if c.order >= 50):
        add(cmd)
    if only in (None, "model"):
        from .engine.cli import add_parser as add_model

        add_model(systems)
    else:
        add_named(systems, "model")
    return top


def _fill_warm(wa) -> None:
    from .warm import FAMILIES

    wa.add_argument("--only", default=None, metavar="NAME,...",
                    help="comma-separated families to warm (default all): " + ", ".join(FAMILIES))
    wa.add_argument("--jobs", type=int, choices=(1, 2), default=1,
                    help="2: the engine's families in a second process at the same time (two cores; default 1)")
    wa.set_defaults(func=_cmd_warm)


def _fill_plot(ov) -> None:
    ov.add_argument("runs", nargs="+", help="run files (.h5)")
    ov.add_argument("--label", default=None,
                    help="what tells the runs apart in the legend: an attribute or parameter (width, eta, seed, K, ...); "
                         "default the file names")
    ov.add_argument("--entries", default=None,
                    help="comma-separated state entries to draw too, e.g. 'S[+,c1,v1]' (meanfield.open_run(F).entries)")
    ov.add_argument("--out", default=None, help="the figure (.png | .pdf | .svg; default: FIRST_overlay.png beside it)")
    ov.set_defaults(func=_cmd_overlay)


def main(argv=None) -> int:
    from .core.guard import barrier  # one line for every failure, exit 2 / 130 / 70, never a traceback

    def command():
        parser = build_parser(only=_system_word(words), verb=_verb_word(words))
        args = parser.parse_args(argv)
        if getattr(args, "verb", None) == "plot" and args.out is None:
            args.out = str(Path(args.run).with_suffix("")) + "_figures"
        return args.func(args)

    words = sys.argv[1:] if argv is None else list(argv)
    verbose = bool(words) and words[0] in ("-v", "--verbose")
    from .core.guard import setup_logging

    setup_logging(1 if verbose else -1 if words and words[0] in ("-q", "--quiet") else 0)
    program = argv is None and _as_program()
    try:
        rc = barrier(command, verbose=verbose, after_work=_after_work if program else None)
    except KeyboardInterrupt:  # a signal in the barrier's own set-up or tear-down (outside its try)
        import logging

        logging.getLogger("meanfield").error("interrupted (SIGINT/SIGTERM); files are written whole or not at all")
        rc = 130
    if program:  # the work is done: a signal during the interpreter's shutdown is one line, exit 130
        _after_work()
        _exit_now(rc)
    return rc


def _exit_now(rc: int) -> None:  # pragma: no cover - exercised through subprocesses
    """End the ``meanfield`` command with exactly ``rc``: every file is written
    and closed, so flush the streams and the logging handlers and leave without
    the interpreter's finalisation. CPython ends a process whose main code saw
    a KeyboardInterrupt by killing itself with SIGINT (exit -2), and resets the
    signal handlers while it finalises; either turned a handled interrupt
    (exit 130, its one line printed) into a death by signal now and then."""
    import logging

    try:
        logging.shutdown()
    except Exception:  # pragma: no cover
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(0 if rc is None else int(rc) if isinstance(rc, int) else 1)  # as sys.exit(rc) would


def _after_work() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    program_signals("after the command finished; its files are complete")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
