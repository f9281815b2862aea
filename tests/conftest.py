"""Suite-wide set-up.

A test suite started as a background job of a non-interactive shell
(``pytest ... &``) inherits SIGINT *ignored*, and so would every command the
tests start: meanfield honours an inherited ignore (as Python and POSIX tools
do), so tests that interrupt a command with SIGINT would wait forever. The
suite's own process gets Python's default SIGINT handler back; the commands it
starts then begin with SIGINT at its default, as from an interactive shell.
Tests of the inherited-ignore case set it in the child explicitly.

A long single run compiles its specialised loop in a child process
(``meanfield.engine.background``); the suite turns that off
(``MEANFIELD_BACKGROUND_COMPILE=0``, inherited by the commands it starts), so no
test leaves a compiling process behind; tests/test_engine_background.py turns it
back on where it tests it.
"""

import os
import signal

os.environ["MEANFIELD_BACKGROUND_COMPILE"] = "0"

try:
    signal.signal(signal.SIGINT, signal.default_int_handler)
except ValueError:  # pragma: no cover - not the main thread
    pass
