"""Suite-wide set-up.

A test suite started as a background job of a non-interactive shell
(``pytest ... &``) inherits SIGINT *ignored*, and so would every command the
tests start: meanfield honours an inherited ignore (as Python and POSIX tools
do), so tests that interrupt a command with SIGINT would wait forever. The
suite's own process gets Python's default SIGINT handler back; the commands it
starts then begin with SIGINT at its default, as from an interactive shell.
Tests of the inherited-ignore case set it in the child explicitly.
"""

import signal

try:
    signal.signal(signal.SIGINT, signal.default_int_handler)
except ValueError:  # pragma: no cover - not the main thread
    pass
