"""``python -m meanfield``: same as the ``meanfield`` command (``meanfield.cli``
installs its start-up signal handler first thing on import: a SIGINT or
SIGTERM while the program starts is one line, exit 130)."""

import sys

from .cli import main

try:
    _rc = main()
except KeyboardInterrupt:  # pragma: no cover - main() catches its own; a last guard for the exit code
    _rc = 130
sys.exit(_rc)
