"""Where the engine's generated lane module lives, its writing, and the pruning of old versions.

Each version of the lane transform (kernels.py, the transform, its rules; with or without the
vectorised exp) writes its own module ``engine_lanes_<tag>.py`` into :func:`cache_dir`, and numba
caches its compiled code beside it (``__pycache__/engine_lanes_<tag>.*``, or under ``$NUMBA_CACHE_DIR``), and the
per-width drivers built on it carry the tag in their names (about 1 MB each).
Every use touches a marker ``engine_lanes_<tag>.used`` (never the module itself: numba's cache is
keyed on the module file's time stamp). When a new version is written, :func:`prune` removes the
files of the versions beyond the :data:`KEEP` most recently used (module, marker, every numba cache file
whose name carries the tag) that nobody used for
:data:`MAX_IDLE_S` seconds, so that an upgraded install does not leave versions behind without end.
A removed version another install still uses is written (and compiled) again on its next use.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

KEEP = 8  # versions always kept (the most recently used)
MAX_IDLE_S = 86400.0  # a version beyond KEEP unused this long is removed


def cache_dir() -> Path:
    """Where the generated lane module lives: ``$MEANFIELD_LANES_DIR``, else ``$NUMBA_CACHE_DIR/meanfield_lanes``,
    else ``$XDG_CACHE_HOME`` (default ``~/.cache``) ``/meanfield/lanes``.

    Returns
    -------
    pathlib.Path

    Examples
    --------
    >>> cache_dir().name in ("lanes", "meanfield_lanes") or "MEANFIELD_LANES_DIR" in __import__("os").environ
    True
    """
    if os.environ.get("MEANFIELD_LANES_DIR"):
        return Path(os.environ["MEANFIELD_LANES_DIR"])
    if os.environ.get("NUMBA_CACHE_DIR"):
        return Path(os.environ["NUMBA_CACHE_DIR"]) / "meanfield_lanes"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "meanfield" / "lanes"


def _written(d: Path, tag: str, src: str) -> Path:
    """The generated module's file in folder ``d``, written there unless it holds ``src`` already; its use
    marked (``.used``); a new version prunes old ones (:func:`prune`)."""
    path = d / f"engine_lanes_{tag}.py"
    new = not path.exists()
    if new or path.read_text() != src:
        d.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(src)
        os.replace(tmp, path)  # atomic: another process (or thread) reads the whole file or none
    try:
        path.with_suffix(".used").touch()
    except OSError:  # a folder shared read-only: the module is there, its use just not marked
        pass
    if new:
        try:
            prune(d, keep=(tag,))
        except OSError:  # pruning is housekeeping: a folder shared read-only in parts never fails a batch
            pass
    return path


def prune(d: Path, keep=(), now: float | None = None) -> list:
    """Remove the lane module versions in ``d`` beyond the :data:`KEEP` most recently used that were
    unused for :data:`MAX_IDLE_S` seconds (their module, marker and numba cache files).

    Parameters
    ----------
    d : pathlib.Path
        The folder (:func:`cache_dir`).
    keep : iterable of str
        Tags never removed (the version this process uses).
    now : float, optional
        The time to measure idleness from (default: now).

    Returns
    -------
    list of str
        The tags removed.

    Examples
    --------
    >>> import tempfile
    >>> prune(Path(tempfile.mkdtemp()))
    []
    """
    now = time.time() if now is None else now
    last = {}
    for f in d.glob("engine_lanes_*.py"):
        tag = f.stem[len("engine_lanes_"):]
        marker = f.with_suffix(".used")
        last[tag] = (marker if marker.exists() else f).stat().st_mtime
    order = sorted(last, key=last.get, reverse=True)
    gone = [t for t in order[KEEP:] if t not in keep and now - last[t] > MAX_IDLE_S]
    caches = _cache_dirs(d) if gone else []
    for t in gone:
        for f in [d / f"engine_lanes_{t}.py", d / f"engine_lanes_{t}.used",
                  *(f for c in caches for f in c.glob(f"*{t}*"))]:
            f.unlink(missing_ok=True)
    return gone


def _cache_dirs(d: Path) -> list:
    """Where numba keeps the compiled code named by a version's tag: the lane module's own (``__pycache__``
    beside it, or ``$NUMBA_CACHE_DIR/<folder>_<hash>``) and the per-width drivers' and record writers' of
    ``meanfield.engine`` and ``meanfield.core`` (their names carry the tag)."""
    from numba.core import config

    from ..core import batched as core_batched

    dirs = [d / "__pycache__"] + [Path(m).parent / "__pycache__" for m in (__file__, core_batched.__file__)]
    if config.CACHE_DIR:
        root = Path(config.CACHE_DIR)
        dirs += [p for p in root.glob(f"{d.name}_*") if p.is_dir()]
        dirs += [p for name in ("engine", "core") for p in root.glob(f"{name}_*") if p.is_dir()]
    return [p for p in dirs if p.is_dir()]
