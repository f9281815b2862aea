"""Config plumbing shared by every system: errors, TOML loading, field parsing.

:class:`ConfigError` is defined in ``meanfield.core.errors`` and
:func:`parse_criterion` in ``meanfield.core.criteria``; both are re-exported
here under their old names.

Configs are frozen dataclasses validated once, at the edge (CLI or TOML).
Every validation failure is a :class:`ConfigError` whose message is one line
naming the field and the allowed values; the CLI prints it and exits 2.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from .criteria import parse_criterion  # noqa: F401 (re-exported: its home is meanfield.core.criteria)
from .errors import ConfigError  # noqa: F401 (re-exported: the one error type of bad input)


def load_toml(path: str | Path) -> dict[str, Any]:
    """Read a TOML config file; malformed TOML is a one-line ConfigError."""
    from .guard import read_config_text  # size cap, UTF-8, nesting depth

    data = read_config_text(Path(path), "config")
    # allow an optional [run] table, or flat keys
    if set(data) == {"run"} and isinstance(data["run"], dict):
        data = data["run"]
    return {k.replace("-", "_"): v for k, v in data.items()}


_FIELD_NAMES: dict = {}  # config dataclass -> (its field names in order, the same as a set), read once


def check_keys(cls, data: dict[str, Any], where: str) -> None:
    known = _FIELD_NAMES.get(cls)
    if known is None:  # a dataclass's fields are fixed when it is made
        names = [f.name for f in dataclasses.fields(cls)]
        known = _FIELD_NAMES[cls] = (tuple(names), frozenset(names))
    for k in data:
        if k not in known[1]:
            from .guard import unknown_name

            raise unknown_name(where, "key", k, list(known[0]), "the command's --help (one flag per key)")


INT_MAX = 2**63 - 1  # every integer field is stored as an int64 (HDF5 attributes, numpy seeds)


def _short(v) -> str:
    from .guard import excerpt

    return excerpt(v)


def _ascii_number(name: str, v, what: str) -> None:
    # float() accepts fullwidth and other Unicode digits ("１２"); a config does not
    if isinstance(v, str) and not v.isascii():
        raise ConfigError(f"{name}: must be {what} in ASCII digits, got {_short(v)}")


def as_int(name: str, v, lo: int | None = None, hi: int | None = None) -> int:
    """``v`` as an integer, at least ``lo`` and at most ``hi`` when given (a
    ConfigError naming ``name`` and the range otherwise)."""
    if type(v) is int:  # the common case first (a bool is not: its type is bool)
        i, f = v, v
    elif isinstance(v, bool):
        raise ConfigError(f"{name}: must be an integer, got {_short(v)}")
    elif isinstance(v, int):
        i, f = v, v
    else:
        _ascii_number(name, v, "an integer")
        try:
            f = float(v)
            i = int(f)
        except (TypeError, ValueError, OverflowError):
            raise ConfigError(f"{name}: must be an integer, got {_short(v)}") from None
    if i != f:
        raise ConfigError(f"{name}: must be an integer, got {_short(v)}")
    if lo is not None and i < lo and hi is None:
        raise ConfigError(f"{name}: must be an integer >= {lo}, got {_short(v)}")
    if hi is not None and ((lo is not None and i < lo) or i > hi):
        rng = f"in [{lo}, {hi}]" if lo is not None else f"<= {hi}"
        raise ConfigError(f"{name}: must be an integer {rng}, got {_short(v)}")
    if abs(i) > INT_MAX:
        raise ConfigError(f"{name}: must be an integer below 2^63 (stored as int64), got {_short(v)}")
    return i


def check_workers(v, field: str = "workers"):
    """``--workers`` as an integer in [1, :func:`max_workers`] (None stays None).

    Parameters
    ----------
    v : str, int or None
        The value given.
    field : str
        The flag named in the message.

    Returns
    -------
    int or None

    Example
    -------
    >>> check_workers("2")
    2
    """
    from .limits import max_workers

    if v is None:
        return None
    return as_int(field, v, lo=1, hi=max_workers())


def as_float(name: str, v, positive: bool = False, nonneg: bool = False, hi: float | None = None) -> float:
    """``v`` as a finite float (> 0 with ``positive``, >= 0 with ``nonneg``,
    <= ``hi`` when given), or a ConfigError naming ``name``."""
    if type(v) is float:  # the common case first
        f = v
    else:
        if isinstance(v, bool):
            raise ConfigError(f"{name}: must be a number, got {_short(v)}")
        _ascii_number(name, v, "a number")
        try:
            f = float(v)
        except (TypeError, ValueError, OverflowError):
            raise ConfigError(f"{name}: must be a number, got {_short(v)}") from None
    if not math.isfinite(f):
        raise ConfigError(f"{name}: must be a finite number, got {_short(v)}")
    if positive and f <= 0:
        raise ConfigError(f"{name}: must be > 0, got {_short(v)}")
    if nonneg and f < 0:
        raise ConfigError(f"{name}: must be >= 0, got {_short(v)}")
    if hi is not None and f > hi:
        raise ConfigError(f"{name}: must be <= {hi:g}, got {_short(v)}")
    return f


def as_choice(name: str, v, choices) -> Any:
    for c in choices:
        if v == c or (isinstance(c, str) and str(v) == c):
            return c
    raise ConfigError(f"{name}: must be one of {', '.join(map(str, choices))}; got {_short(v)}")


def as_list(name: str, v, n: int | None = None) -> list:
    """A comma-separated string or a list; ``n`` fixes the length."""
    if isinstance(v, str):
        items = [s.strip() for s in v.split(",")]
        if items == [""]:
            items = []
        elif "" in items:  # "1,,3" or "1,2,": a value left out, not a shorter list
            raise ConfigError(f"{name}: an empty value between commas in {_short(v)}")
    elif isinstance(v, (list, tuple)):
        items = list(v)
    else:
        items = [v]
    if n is not None and len(items) != n:
        raise ConfigError(f"{name}: needs {n} comma-separated values, got {len(items)} ({_short(v)})")
    return items



def record_options(d: dict, out: dict) -> None:
    """The recording options of a training (the mixture config's and an
    engine description's): ``record_every`` / ``record_log`` (positive
    integers) and ``record_dt`` (positive; method flow or rk4 only) from the
    raw ``d`` into ``out`` (None when not given; ``out["method"]`` already
    set); at most one of them."""
    for name in ("record_every", "record_log"):
        out[name] = as_int(name, d[name], lo=1) if d[name] is not None else None
    out["record_dt"] = as_float("record_dt", d["record_dt"], positive=True) if d["record_dt"] is not None else None
    given = [n for n in ("record_every", "record_log", "record_dt") if out[n] is not None]
    if len(given) > 1:
        raise ConfigError(f"record: give one of record_every, record_log, record_dt; got {', '.join(given)}")
    if out["record_dt"] is not None and out["method"] == "gd":
        raise ConfigError("record_dt: only for method flow or rk4; use record_every (steps) with gd")


# -- CLI flags of a config dataclass: one rule for every system (the mixture's
# ``meanfield mixture run``, the induction's ``meanfield induction run``).


def flag_of(field: str) -> str:
    """The flag of a config field: ``--`` and the name with dashes for
    underscores, case kept (``stage_steps`` -> ``--stage-steps``, ``K`` -> ``--K``)."""
    return "--" + field.replace("_", "-")


def dataclass_flags(cls) -> dict[str, str]:
    """flag -> field for every field of the config dataclass ``cls``."""
    return {flag_of(f.name): f.name for f in dataclasses.fields(cls)}


def add_dataclass_flags(parser, cls, help: dict | None = None, aliases: dict | None = None) -> dict[str, str]:
    """Add a flag for every field of ``cls`` to the argparse ``parser``: dest
    the field, default None (a flag not given does not override the TOML
    file), a string that the system's ``make_config`` validates; ``help``:
    field -> text. ``aliases``: old field name -> new one, each a flag of its
    own (dest the old name, accepted for one release). Returns the flag ->
    field table."""
    flags = dataclass_flags(cls)
    for flag, field in flags.items():
        parser.add_argument(flag, dest=field, default=None, metavar=field.upper() if len(field) > 1 else field,
                            help=(help or {}).get(field))
    for old, new in (aliases or {}).items():
        parser.add_argument(flag_of(old), dest=old, default=None, metavar=old.upper(),
                            help=f"old name of {flag_of(new)} (accepted for one release)")
    return flags


def check_cli_values(given: dict) -> None:
    """The command line's own refusals (issue 26), on the flags given (field ->
    text, None when absent): values the Python API accepts on purpose but
    that mean nothing typed as a flag. ``--h-min 0`` (no floor on the adaptive
    step: from Python a deliberate choice, as a flag a typo that lets a flow
    run crawl through a kink) and a stage plan that trains no step at all
    (``--stage-steps 0,0,0``, ``--stage-times 0,0``: from Python the
    evaluate-at-the-start run, from the command line a run that writes a
    flat line). A config file and ``--param`` of a sweep keep the API's rules.

    Parameters
    ----------
    given : dict
        Field -> the flag's text (or None: not given).

    Returns
    -------
    None
        Raises ConfigError naming the flag and the allowed values.

    Example
    -------
    >>> check_cli_values({"h_min": "1e-6", "stage_steps": "0,100"})
    >>> check_cli_values({"h_min": None})
    """
    v = given.get("h_min")
    if v is not None and not as_float("h_min", v) > 0:
        raise ConfigError(f"--h-min (h_min): must be > 0 on the command line (the smallest adaptive step; "
                          f"omit it for the default 1e-4 * horizon), got {_short(v)}")
    for name, parse in (("stage_steps", lambda x: as_int("stage_steps", x, lo=0)),
                        ("stage_times", lambda x: as_float("stage_times", x, nonneg=True)),
                        ("phase_steps", lambda x: as_int("phase_steps", x, lo=0)),
                        ("phase_times", lambda x: as_float("phase_times", x, nonneg=True))):
        v = given.get(name)
        if v is None:
            continue
        vals = [parse(x) for x in as_list(name, v)]
        if vals and not sum(vals) > 0:
            raise ConfigError(f"{flag_of(name)} ({name}): at least one stage must train (> 0) on the command "
                              f"line, got {_short(v)}")


def _numeric_kind(type_text: str) -> str | None:
    """``"scalar"`` for a number type in words (``int``, ``float or none``,
    ``int >= 0``, ``number or list``), ``"list"`` for a list of numbers
    (``list of float``, ``tuple[int, int, int]``), else None."""
    t = str(type_text).strip().lower()
    if t.startswith(("int", "float", "number")):
        return "scalar"
    if t.startswith(("list of float", "list of int", "tuple[int", "tuple[float")):
        return "list"
    return None


def field_types(cls) -> dict[str, str]:
    """field -> its type in words, of the config dataclass ``cls`` (what
    :func:`check_toml_numbers` reads).

    Parameters
    ----------
    cls : dataclass type
        A config dataclass.

    Returns
    -------
    dict
        field name -> ``str`` of its annotation.

    Example
    -------
    >>> import dataclasses
    >>> @dataclasses.dataclass
    ... class C:
    ...     steps: int = 1
    >>> field_types(C)
    {'steps': 'int'}
    """
    return {f.name: str(f.type) for f in dataclasses.fields(cls)}


def check_toml_numbers(where: str, table, types: dict[str, str], strings: dict | None = None) -> None:
    """Refuse a string where a TOML file must hold a number (issue 26:
    ``steps = "100"`` in a description was read as 100): the file is typed,
    and a number in quotes is almost always a slip. Command-line flags are
    text and are not checked here. A ``"$name"`` reference (a declared
    parameter, resolved later) is let through, and so are the words in
    ``strings`` (key -> allowed strings, e.g. ``width = "inf"``).

    Parameters
    ----------
    where : str
        The table, named in the message (``parameters``, ``heads[0]``).
    table : dict
        The table as read from TOML (anything else: left to the table's own check).
    types : dict
        key -> type in words (``int``, ``float or none``, ``list of float``,
        a dataclass field's type): the number-typed ones are checked.
    strings : dict, optional
        key -> tuple of strings allowed for that key.

    Returns
    -------
    None
        Raises ConfigError naming the key and its type.

    Example
    -------
    >>> check_toml_numbers("parameters", {"steps": 100, "width": "inf"}, {"steps": "int", "width": "int | None"},
    ...                    {"width": ("inf",)})
    >>> try:
    ...     check_toml_numbers("parameters", {"steps": "100"}, {"steps": "int"})
    ... except ConfigError as e:
    ...     print(e)
    parameters.steps: must be a TOML number (int), got the string '100' (write it without quotes)
    """
    if not isinstance(table, dict):
        return
    for key, v in table.items():
        kind = _numeric_kind(types.get(str(key).replace("-", "_"), ""))
        if kind is None:
            continue
        vals = v if kind == "list" and isinstance(v, (list, tuple)) else [v] if kind == "scalar" else []
        for x in vals:
            if not isinstance(x, str) or x.startswith("$") or x in ((strings or {}).get(key) or ()):
                continue
            shown = str(types[str(key).replace("-", "_")]).replace(" | None", " or none")
            raise ConfigError(f"{where}.{key}: must be a TOML number ({shown}), got the string {_short(x)} "
                              f"(write it without quotes)")
