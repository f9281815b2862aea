"""The ``[data]`` / ``[test]`` tables of a description: tokens, rows, data functions.

Split from ``meanfield.engine.description`` (which re-exports :func:`parse_token`,
:func:`data_from_function`); see that module's docstring for the forms.
"""

from __future__ import annotations

import importlib
import inspect
import re

import numpy as np

from ..core.config import ConfigError, as_float
from .heldout import SPLIT_KEYS, TEST_KEYS
from .objects import Data, make_data
from .parsing import as_bool, check_table


#: a position stands for at most this many identical tokens (its log enters the attention logits; far
#: beyond any sequence a described model's data stand for, and still exact in float64 sums)
MAX_COUNT = 1e6


def parse_token(name: str, v, features: tuple[str, ...]) -> np.ndarray:
    """A token: a signed 1-based feature index (``2``, ``-3``), a feature name
    with an optional sign (``"c1"``, ``"-v2"``) or a coefficient vector."""
    P = len(features)
    x = np.zeros(P)
    if isinstance(v, bool):
        raise ConfigError(f"{name}: a token must be a signed feature index, a feature name or {P} coefficients; got {v!r}")
    if isinstance(v, int):
        if v == 0 or abs(v) > P:
            raise ConfigError(f"{name}: feature index must be +-1..{P}; got {v}")
        x[abs(v) - 1] = 1.0 if v > 0 else -1.0
        return x
    if isinstance(v, str):
        s = v.strip()
        sign = -1.0 if s.startswith("-") else 1.0
        s = s.lstrip("+-")
        if s not in features:
            raise ConfigError(f"{name}: unknown feature {v!r}; features: {', '.join(features)}")
        x[features.index(s)] = sign
        return x
    if isinstance(v, (list, tuple)):
        if len(v) != P:
            raise ConfigError(f"{name}: a coefficient vector needs {P} numbers (one per feature); got {len(v)}")
        return np.array([as_float(name, c) for c in v])
    raise ConfigError(f"{name}: a token must be a signed feature index, a feature name or {P} coefficients; got {v!r}")


def _data_from_table(raw: dict, features: tuple[str, ...], where: str = "data") -> Data:
    """A ``[data]`` (or ``[test]``: ``where``) table: rows or a data function."""
    check_table(where, raw, TEST_KEYS + (SPLIT_KEYS if where == "data" else ()))
    data_where = where
    if ("rows" in raw) == ("function" in raw):
        raise ConfigError(f"{data_where}: give exactly one of rows (a table of sequences) or function (\"package.module:function\")")
    if "function" in raw:
        return data_from_function(raw["function"], raw.get("args", {}), features, where)
    rows = raw["rows"]
    if not isinstance(rows, list) or not rows:
        raise ConfigError(f"{data_where}.rows: must be a non-empty list of {{tokens = [...], target = ...}} tables")
    L = max(len(r.get("tokens", [])) if isinstance(r, dict) else 0 for r in rows)
    P = len(features)
    n = len(rows)
    X = np.zeros((n, L, P))
    counts = np.zeros((n, L))
    targets, weights, names, flags = [], [], [], {}
    for s, r in enumerate(rows):
        where = f"{data_where}.rows[{s}]"
        check_table(where, r, ("tokens", "target", "weight", "counts", "name", "flags"))
        toks = r.get("tokens")
        if not isinstance(toks, list) or not toks:
            raise ConfigError(f"{where}.tokens: must be a non-empty list of tokens")
        for i, t in enumerate(toks):
            X[s, i] = parse_token(f"{where}.tokens[{i}]", t, features)
        cnt = r.get("counts", [1] * len(toks))
        if not isinstance(cnt, list) or len(cnt) != len(toks):
            raise ConfigError(f"{where}.counts: must be {len(toks)} counts (one per token)")
        counts[s, :len(toks)] = [as_float(f"{where}.counts", c, nonneg=True, hi=MAX_COUNT) for c in cnt]
        if "target" not in r:
            raise ConfigError(f"{where}.target: required (a label, a number or a list of numbers)")
        targets.append(r["target"])
        weights.append(as_float(f"{where}.weight", r.get("weight", 1.0), nonneg=True))
        names.append(str(r.get("name", f"x{s}")))
        for k, v in (r.get("flags") or {}).items():
            flags.setdefault(k, [False] * n)[s] = as_bool(f"{where}.flags.{k}", v)
    try:
        y = np.array(targets, dtype=float)
    except (TypeError, ValueError):
        raise ConfigError(f"{data_where}.rows: targets must all be numbers or all lists of the same length") from None
    w = np.array(weights)
    if w.sum() <= 0:
        raise ConfigError(f"{data_where}.rows: the weights must not all be 0")
    return make_data(X, y, w / w.sum(), counts if np.any(counts != 1) else None, names, flags, P, where=data_where)


def data_from_function(ref, args, features: tuple[str, ...], where: str = "data") -> Data:
    """Import ``package.module:function`` by name (never evaluated) and call it
    with ``features`` and the ``args`` table as keywords; it returns a dict with
    tokens, target and optionally weight, counts, names, flags (or a Data)."""
    s = str(ref)
    if not re.match(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$", s):
        raise ConfigError(f"{where}.function: must be \"package.module:function\"; got {ref!r}")
    mod, _, fn = s.partition(":")
    try:
        f = getattr(importlib.import_module(mod), fn)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"{where}.function: cannot import {s} ({e})") from None
    if not inspect.isfunction(f):
        raise ConfigError(f"{where}.function: {s} must be a Python function (def) returning the data; got {type(f).__name__}")
    if not isinstance(args, dict):
        raise ConfigError(f"{where}.args: must be a table of keyword arguments")
    try:
        out = f(features=features, **args)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}.function: {s}(features=..., **args) failed: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    if isinstance(out, Data):
        return out
    if not isinstance(out, dict) or "tokens" not in out or "target" not in out:
        raise ConfigError(f"{where}.function: {s} must return a dict with tokens and target (or a Data)")
    return make_data(out["tokens"], out["target"], out.get("weight"), out.get("counts"), out.get("names"),
                     out.get("flags"), len(features), where=where)


