"""Compile the common numba kernels into numba's on-disk cache.

``meanfield warm`` (or ``python -m meanfield warm``) runs a two-step
``mixture run`` (GD, the default) in a temporary folder, so that numba
compiles every kernel it uses and caches it (``cache=True``). That covers
``mixture particles`` too: its network is the engine's numpy oracle, and the
only kernels it calls (the recorded observables) are ``mixture run``'s, so a
warm-up particles run would compile nothing (it was dropped). The kernels' types do not depend
on the sizes, so a later run at any size loads them from the cache instead of
compiling (see README, "First use"). ``make install``, ``make demo`` and
``make test`` run it once after installing. Nothing is written outside the
temporary folder and numba's cache.
"""

from __future__ import annotations

import contextlib
import io
import logging
import tempfile
import time
from pathlib import Path

log = logging.getLogger("meanfield")

#: (name, argv of ``meanfield``) of each warm-up command; tiny sizes, same kernel types as real runs
COMMANDS = (
    ("mixture run", ["mixture", "run", "--steps", "2", "--quiet"]),
)


def warm(main, names=None) -> float:
    """Run the warm-up commands (all, or those in ``names``) through ``main``
    (``meanfield.cli.main``, passed in so that this module does not import the
    CLI that dispatches to it); returns the seconds taken. Raises RuntimeError
    naming the command if one of them fails."""
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="meanfield-warm-") as tmp:
        for i, (name, argv) in enumerate(COMMANDS):
            if names is not None and name not in names:
                continue
            t1 = time.perf_counter()
            level = log.level
            with contextlib.redirect_stdout(io.StringIO()):  # the tiny runs' outcome lines are not news
                rc = main(["-q"] + argv + ["--out", str(Path(tmp) / f"warm{i}.h5")])
            log.setLevel(level)
            if rc not in (0, None):
                raise RuntimeError(f"warm-up of '{name}' failed (exit {rc})")
            log.info("warm: %s kernels ready in %.1f s", name, time.perf_counter() - t1)
    return time.perf_counter() - t0
