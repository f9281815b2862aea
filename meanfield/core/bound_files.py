"""Bounds files, their one-line results and the ``bound`` verb (``meanfield.core.bound_files``).

``[[bound]]`` tables in a TOML file (:func:`load_bounds`), a result as one line
(:func:`format_result`), and the shared driver of ``meanfield mixture bound`` and
``meanfield model bound`` (:func:`run_bounds_cli`). The grammar is
``meanfield.core.bound_parse``'s; the evaluation over a run's records is
``meanfield.core.bounds``'.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

from .bound_parse import BoundError, _one_line, parse_bound
from .bounds import _BOUND_KEYS, BoundResult, _check_during, _num, _read, evaluate
from .config import ConfigError

def load_bounds(path: str | Path, during: str = "all", tmin=None, tmax=None) -> list[tuple]:
    """Read ``[[bound]]`` tables (keys: name, expr, during, tmin, tmax) from a TOML file.

    Parameters
    ----------
    path : str or Path
        The TOML file.
    during, tmin, tmax
        Defaults of the tables that omit them.

    Returns
    -------
    list of tuple
        ``(name, text, during, tmin, tmax)`` per table. Every expression is
        parsed; any problem is a one-line :class:`BoundError`.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "b.toml"
    >>> _ = f.write_text('[[bound]]\\nname = "small"\\nexpr = "loss <= 0.6"\\n')
    >>> load_bounds(f)
    [('small', 'loss <= 0.6', 'all', None, None)]
    """
    from .guard import read_config_text  # size cap (/dev/zero), UTF-8, nesting depth

    p = Path(path)
    if not p.exists():
        raise BoundError(f"bounds file not found: {p}")
    try:
        data = read_config_text(p, "bounds file")
    except ConfigError as e:
        raise BoundError(str(e)) from None
    extra = [k for k in data if k != "bound"]
    if extra:
        raise BoundError(f"{p}: unknown top-level key '{extra[0]}'; a bounds file holds [[bound]] tables only")
    tables = data.get("bound")
    if not tables:
        raise BoundError(f"{p}: no [[bound]] tables")
    if not isinstance(tables, list) or not all(isinstance(x, dict) for x in tables):
        raise BoundError(f"{p}: 'bound' must be an array of tables ([[bound]])")
    out, seen = [], set()
    for i, tab in enumerate(tables):
        where = f"{p}: [[bound]] #{i + 1}"
        for k in tab:
            if k not in _BOUND_KEYS:
                raise BoundError(f"{where}: unknown key '{k}'; allowed: {', '.join(_BOUND_KEYS)}")
        name = tab.get("name", f"bound{i + 1}")
        if not isinstance(name, str) or not name.strip():
            raise BoundError(f"{where}: name must be a non-empty string, got {name!r}")
        where = f"{p}: bound '{_one_line(name, 40)}'"
        if name in seen:
            raise BoundError(f"{where}: duplicate name")
        seen.add(name)
        if "expr" not in tab:
            raise BoundError(f"{where}: missing key 'expr'")
        expr = tab["expr"]
        if not isinstance(expr, str):
            raise BoundError(f"{where}: expr must be a string, got {type(expr).__name__}")
        try:
            parse_bound(expr)
            d = _check_during(tab.get("during", during))
            lo, hi = _num("tmin", tab.get("tmin", tmin)), _num("tmax", tab.get("tmax", tmax))
        except BoundError as e:
            raise BoundError(f"{where}: {e}") from None
        if isinstance(lo, float) and isinstance(hi, float) and lo > hi:
            raise BoundError(f"{where}: tmin ({lo:g}) must be <= tmax ({hi:g})")
        out.append((name, expr, d, lo, hi))
    return out


def format_result(name: str, result: BoundResult) -> str:
    """One line: HOLDS / VIOLATED / UNDEFINED, the name, the worst slack and where, the first violation.

    Parameters
    ----------
    name : str
        The bound's name.
    result : BoundResult
        From :func:`evaluate`.

    Returns
    -------
    str

    Examples
    --------
    >>> import numpy as np
    >>> r = evaluate("loss <= 0.6", {"t": np.array([0.0, 1.0]), "loss": np.array([0.7, 0.3])})
    >>> format_result("small loss", r)
    'VIOLATED  small loss: first at t=0, 1 of 2 times; worst slack -0.1 at t=0 (during=all)'
    """
    sel = f"during={result.during}"
    if result.tmin is not None:
        sel += f", t>={result.tmin:g}"
    if result.tmax is not None:
        sel += f", t<={result.tmax:g}"
    label = _one_line(name, 80)
    if math.isnan(result.worst_slack):
        return (f"UNDEFINED {label}: not a number at t={result.t_worst:.6g} (the run's values are NaN or infinite "
                f"there; {result.n_violations} of {result.n_times} times fail or are undefined, {sel})")
    if result.holds:
        return (f"HOLDS     {label}: worst slack {result.worst_slack:+.4g} at t={result.t_worst:.6g} "
                f"({result.n_times} times, {sel})")
    return (f"VIOLATED  {label}: first at t={result.first_violation_t:.6g}, "
            f"{result.n_violations} of {result.n_times} times; worst slack {result.worst_slack:+.4g} "
            f"at t={result.t_worst:.6g} ({sel})")


def _is_file(item) -> bool:
    return isinstance(item, Path) or (isinstance(item, str) and item.strip().lower().endswith(".toml"))


def run_bounds_cli(run_path, exprs_or_file, during: str | None = "all", tmin=None, tmax=None, *,
                   file=None, stream=None) -> int:
    """Check bounds on a run file and print one line per bound (to ``stream``, default stdout).

    ``exprs_or_file``: an expression, a path to a bounds TOML file (a ``Path`` or a
    string ending in ``.toml``), or a list of them (``file`` adds one more file).
    ``during`` / ``tmin`` / ``tmax`` apply to command-line expressions and are
    the defaults of file entries that omit them. Returns 0 if every bound
    holds, 1 if some is violated; bad input raises :class:`ConfigError`
    (nothing is printed then: every bound is parsed and evaluated first)."""
    stream = sys.stdout if stream is None else stream
    d = _check_during(during)
    lo, hi = _num("tmin", tmin), _num("tmax", tmax)
    if isinstance(lo, float) and isinstance(hi, float) and lo > hi:
        raise BoundError(f"tmin ({lo:g}) must be <= tmax ({hi:g})")
    items: list = []
    if exprs_or_file is not None:
        items = [exprs_or_file] if isinstance(exprs_or_file, (str, Path)) else list(exprs_or_file)
    if file is not None:
        items.append(Path(file))
    specs = []
    for item in items:
        if _is_file(item):
            specs.extend(load_bounds(item, d, lo, hi))
        elif isinstance(item, str):
            specs.append((_one_line(item, 200), item, d, lo, hi))
        else:
            raise BoundError(f"bound: must be an expression or a .toml file, got {item!r}")
    if not specs:
        raise BoundError("no bounds given: pass an expression or --file BOUNDS.toml")
    parsed = [(name, parse_bound(text), dd, a, b) for name, text, dd, a, b in specs]
    run = _read(run_path)
    results = [(name, evaluate(bound, run, dd, a, b)) for name, bound, dd, a, b in parsed]
    for name, res in results:
        print(format_result(name, res), file=stream)
    n_bad = sum(not r.holds for _, r in results)
    if len(results) > 1:
        print(f"{len(results) - n_bad} of {len(results)} bounds hold", file=stream)
    for note in run_notes(run):
        print(f"note: {note}", file=stream)
    return 0 if n_bad == 0 else 1


def run_notes(run) -> list[str]:
    """What a HOLDS / VIOLATED line cannot say by itself: the run did not
    complete (diverged, interrupted), and a bound is checked at the recorded
    times only."""
    notes = []
    attrs = getattr(run, "attrs", {}) or {}
    status = attrs.get("status", "complete")
    if status != "complete":
        notes.append(f"this run's status is {status} ({_one_line(attrs.get('message', ''), 120)}): the bounds "
                     "cover its records up to where it stopped, not the run it was meant to be")
    if "t" not in run:
        return notes
    t = np.asarray(run["t"], dtype=np.float64)
    step = np.asarray(run["step"]) if "step" in run else None
    cfg = getattr(run, "config", {})
    method = (cfg if isinstance(cfg, dict) else {}).get("method", attrs.get("method", "gd"))
    if method == "gd" and step is not None and step.size > 1 and np.all(np.diff(step) <= 1):
        return notes  # every GD step is recorded: nothing between records
    notes.append(f"checked at the {t.size} recorded times only (between records a bound is not checked; "
                 "record more densely, e.g. --record-every 1, to check every GD step)")
    return notes
