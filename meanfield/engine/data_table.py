"""The data and feature parts of a description: tokens, ``[data]`` tables, ``[data] function``.

Split out of :mod:`meanfield.engine.description` (which re-exports every
name), so that each module stays under 800 lines; same code.
"""

from __future__ import annotations

import importlib
import inspect
import re

import numpy as np

from ..core.config import ConfigError, as_float, as_int
from .objects import Data, make_data


#: head options that would put the model outside the Gram-closure class, and why
_OUT_OF_CLASS = {
    "hidden_activation": "a nonlinearity applied entrywise in the hidden space (relu(M x) over the m units) makes a "
                         "mean-field network over hidden units whose state is a distribution, not a finite Gram",
    "key_activation": "a nonlinearity between W_K and the token inside the bilinear form x^T W_K^T W_Q x' means the "
                      "loss no longer depends on W_K only through Gram blocks",
    "query_activation": "a nonlinearity between W_Q and the token inside the bilinear form x^T W_K^T W_Q x' means "
                        "the loss no longer depends on W_Q only through Gram blocks",
    "outer": "a wide matrix read as M_a M_b^T (a hidden-space outer product) is not a function of the Gram "
             "blocks E^T M_a^T M_b E",
    "l1_penalty": "an entrywise penalty on a wide matrix is not a function of its Gram blocks",
}


def _check_table(where: str, raw: dict, allowed) -> None:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: must be a table; got {raw!r}")
    for k in raw:
        if k in _OUT_OF_CLASS:
            raise ConfigError(f"{where}.{k}: outside the Gram-closure class: {_OUT_OF_CLASS[k]}")
        if k not in allowed:
            raise ConfigError(f"{where}: unknown key '{k}'; allowed: {', '.join(allowed)}")


def _as_bool(name: str, v) -> bool:
    if isinstance(v, bool):
        return v
    if str(v).lower() in ("true", "1", "yes"):
        return True
    if str(v).lower() in ("false", "0", "no"):
        return False
    raise ConfigError(f"{name}: must be true or false; got {v!r}")


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


def _data_from_table(raw: dict, features: tuple[str, ...]) -> Data:
    _check_table("data", raw, ("rows", "function", "args"))
    if ("rows" in raw) == ("function" in raw):
        raise ConfigError("data: give exactly one of rows (a table of sequences) or function (\"package.module:function\")")
    if "function" in raw:
        return data_from_function(raw["function"], raw.get("args", {}), features)
    rows = raw["rows"]
    if not isinstance(rows, list) or not rows:
        raise ConfigError("data.rows: must be a non-empty list of {tokens = [...], target = ...} tables")
    L = max(len(r.get("tokens", [])) if isinstance(r, dict) else 0 for r in rows)
    P = len(features)
    n = len(rows)
    X = np.zeros((n, L, P))
    counts = np.zeros((n, L))
    targets, weights, names, flags = [], [], [], {}
    for s, r in enumerate(rows):
        where = f"data.rows[{s}]"
        _check_table(where, r, ("tokens", "target", "weight", "counts", "name", "flags"))
        toks = r.get("tokens")
        if not isinstance(toks, list) or not toks:
            raise ConfigError(f"{where}.tokens: must be a non-empty list of tokens")
        for i, t in enumerate(toks):
            X[s, i] = parse_token(f"{where}.tokens[{i}]", t, features)
        cnt = r.get("counts", [1] * len(toks))
        if not isinstance(cnt, list) or len(cnt) != len(toks):
            raise ConfigError(f"{where}.counts: must be {len(toks)} counts (one per token)")
        counts[s, :len(toks)] = [as_float(f"{where}.counts", c, nonneg=True) for c in cnt]
        if "target" not in r:
            raise ConfigError(f"{where}.target: required (a label, a number or a list of numbers)")
        targets.append(r["target"])
        weights.append(as_float(f"{where}.weight", r.get("weight", 1.0), nonneg=True))
        names.append(str(r.get("name", f"x{s}")))
        for k, v in (r.get("flags") or {}).items():
            flags.setdefault(k, [False] * n)[s] = _as_bool(f"{where}.flags.{k}", v)
    try:
        y = np.array(targets, dtype=float)
    except (TypeError, ValueError):
        raise ConfigError("data.rows: targets must all be numbers or all lists of the same length") from None
    w = np.array(weights)
    if w.sum() <= 0:
        raise ConfigError("data.rows: the weights must not all be 0")
    return make_data(X, y, w / w.sum(), counts if np.any(counts != 1) else None, names, flags, P)


def _import_function(field: str, ref):
    s = str(ref)
    if not re.match(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$", s):
        raise ConfigError(f"{field}: must be \"package.module:function\"; got {ref!r}")
    mod, _, fn = s.partition(":")
    try:
        f = getattr(importlib.import_module(mod), fn)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"{field}: cannot import {s} ({e})") from None
    if not inspect.isfunction(f):
        raise ConfigError(f"{field}: {s} must be a Python function (def); got {type(f).__name__}")
    return f


def _feature_names(v):
    """``features``: a list of names, or a table that makes them from
    parameters: ``{prefix = "v", count = "$K"}`` (v1..vK) or ``{function =
    "pkg.mod:fn", args = {...}}`` (imported by name, returns the list)."""
    if not isinstance(v, dict):
        return v
    if set(v) == {"prefix", "count"}:
        return [f"{v['prefix']}{i + 1}" for i in range(as_int("dictionary.features.count", v["count"], lo=1))]
    if set(v) in ({"function"}, {"function", "args"}):
        f = _import_function("dictionary.features.function", v["function"])
        args = v.get("args", {})
        if not isinstance(args, dict):
            raise ConfigError("dictionary.features.args: must be a table of keyword arguments")
        try:
            names = f(**args)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"dictionary.features.function: {v['function']}(**args) failed: {e}") from None
        return list(names) if isinstance(names, (list, tuple)) else names
    raise ConfigError("dictionary.features: a list of names, {prefix = \"v\", count = N} or "
                      "{function = \"package.module:function\", args = {...}}")


def data_from_function(ref, args, features: tuple[str, ...]) -> Data:
    """Import ``package.module:function`` by name (never evaluated) and call it
    with ``features`` and the ``args`` table as keywords; it returns a dict with
    tokens, target and optionally weight, counts, names, flags (or a Data)."""
    s = str(ref)
    if not re.match(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$", s):
        raise ConfigError(f"data.function: must be \"package.module:function\"; got {ref!r}")
    mod, _, fn = s.partition(":")
    try:
        f = getattr(importlib.import_module(mod), fn)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"data.function: cannot import {s} ({e})") from None
    if not inspect.isfunction(f):
        raise ConfigError(f"data.function: {s} must be a Python function (def) returning the data; got {type(f).__name__}")
    if not isinstance(args, dict):
        raise ConfigError("data.args: must be a table of keyword arguments")
    try:
        out = f(features=features, **args)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"data.function: {s}(features=..., **args) failed: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    if isinstance(out, Data):
        return out
    if not isinstance(out, dict) or "tokens" not in out or "target" not in out:
        raise ConfigError(f"data.function: {s} must return a dict with tokens and target (or a Data)")
    return make_data(out["tokens"], out["target"], out.get("weight"), out.get("counts"), out.get("names"),
                     out.get("flags"), len(features))
