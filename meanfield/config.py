"""Config plumbing shared by every system: errors, TOML loading, field parsing.

Configs are frozen dataclasses validated once, at the edge (CLI or TOML).
Every validation failure is a :class:`ConfigError` whose message is one line
naming the field and the allowed values; the CLI prints it and exits 2.
"""

from __future__ import annotations

import dataclasses
import math
import re
import tomllib
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """Bad user input: a one-line message naming the field and what is allowed."""


def load_toml(path: str | Path) -> dict[str, Any]:
    """Read a TOML config file; malformed TOML is a one-line ConfigError."""
    p = Path(path)
    try:
        with open(p, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config: file not found: {p}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config: malformed TOML in {p}: {e}") from None
    # allow an optional [run] table, or flat keys
    if set(data) == {"run"} and isinstance(data["run"], dict):
        data = data["run"]
    return {k.replace("-", "_"): v for k, v in data.items()}


def check_keys(cls, data: dict[str, Any], where: str) -> None:
    names = [f.name for f in dataclasses.fields(cls)]
    for k in data:
        if k not in names:
            raise ConfigError(f"{where}: unknown key '{k}'; allowed: {', '.join(names)}")


def as_int(name: str, v, lo: int | None = None) -> int:
    if isinstance(v, bool):
        raise ConfigError(f"{name}: must be an integer, got {v!r}")
    try:
        f = float(v)
        i = int(f)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"{name}: must be an integer, got {v!r}") from None
    if i != f:
        raise ConfigError(f"{name}: must be an integer, got {v!r}")
    if lo is not None and i < lo:
        raise ConfigError(f"{name}: must be an integer >= {lo}, got {v!r}")
    return i


def as_float(name: str, v, positive: bool = False, nonneg: bool = False) -> float:
    if isinstance(v, bool):
        raise ConfigError(f"{name}: must be a number, got {v!r}")
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}: must be a number, got {v!r}") from None
    if not math.isfinite(f):
        raise ConfigError(f"{name}: must be a finite number, got {v!r}")
    if positive and f <= 0:
        raise ConfigError(f"{name}: must be > 0, got {v!r}")
    if nonneg and f < 0:
        raise ConfigError(f"{name}: must be >= 0, got {v!r}")
    return f


def as_choice(name: str, v, choices) -> Any:
    for c in choices:
        if v == c or (isinstance(c, str) and str(v) == c):
            return c
    raise ConfigError(f"{name}: must be one of {', '.join(map(str, choices))}; got {v!r}")


def as_list(name: str, v, n: int | None = None) -> list:
    """A comma-separated string or a list; ``n`` fixes the length."""
    if isinstance(v, str):
        items = [s.strip() for s in v.split(",") if s.strip() != ""]
    elif isinstance(v, (list, tuple)):
        items = list(v)
    else:
        items = [v]
    if n is not None and len(items) != n:
        raise ConfigError(f"{name}: needs {n} comma-separated values, got {len(items)} ({v!r})")
    return items


_CRIT_RE = re.compile(r"^\s*([a-z_]+)\s*(>=|<=)\s*([-+0-9.eE]+)\s*$")


def parse_criterion(name: str, text, allowed) -> tuple[str, str, float] | None:
    """``"loss<=1e-3"`` -> ("loss", "<=", 0.001); ``none`` / empty -> None.

    Parsed with a regular expression over a whitelist of names: never evaluated.
    """
    if text is None:
        return None
    s = str(text).strip()
    if s.lower() in ("", "none", "-"):
        return None
    m = _CRIT_RE.match(s)
    if not m or m.group(1) not in allowed:
        raise ConfigError(
            f"{name}: criterion must be NAME>=VALUE or NAME<=VALUE with NAME in "
            f"{', '.join(allowed)} (or 'none'); got {text!r}"
        )
    return m.group(1), m.group(2), as_float(name, m.group(3))
