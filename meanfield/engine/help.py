"""``meanfield model VERB MODEL --help``: the model's own parameters, their defaults and meaning.

A description declares its parameters in ``[parameters]`` (``K = 4   # features
v1..vK``): the help of a model verb lists each of them with the file's
default and the comment after it as its meaning (no comment: the schema's
meaning of the key that uses ``"$name"``, :func:`referenced_meaning`), then the run knobs
(:class:`~meanfield.engine.description.RunParams`: eta, steps, width, ...)
with their defaults. For a description of the mixture family the
parameters are the family's config fields (registered in
``meanfield.engine.registry``), with the description's defaults and the
meanings the family registers (``field_help``). Flags the model does not take are
not shown (they are refused when given).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path

#: the meaning of each run knob of a general description
KNOB_HELP = {
    "method": "gd (the exact GD map) | flow (adaptive Dormand-Prince) | rk4 (fixed step dt)",
    "eta": "GD step size (> 0); time = steps x eta",
    "steps": "GD steps (when the description has no [[training.stages]])",
    "t_end": "flow / rk4 end time (default steps x eta)",
    "dt": "rk4 step (default eta)",
    "rtol": "flow relative tolerance", "atol": "flow absolute tolerance",
    "h_min": "flow: smallest adaptive step (ReLU kinks: forced steps below it)",
    "max_abs": "stop as diverged when a state entry exceeds this in absolute value",
    "criterion": "stop criterion (e.g. 'loss<=1e-3')",
    "width": "inf (the exact infinite-width state) or an attention width m (sampled init)",
    "seed": "seed of the sampled init (finite width)",
    "omega": "attention init scale", "omega_v": "value init scale", "sigma_r": "scale of random objects' init",
    "neuron_init": "zero | const:V1,... | gaussian:SIGMA",
    "relu_prime_at_zero": "ReLU'(0): 0 | 0.5 | 1",
    "record_every": "record every N steps", "record_log": "record N log-spaced steps / times",
    "record_dt": "record every DT time units (flow, rk4)",
    "stage_steps": "gd: every [[training.stages]]'s length, in order (100,2000)",
    "stage_times": "flow / rk4: every stage's time, in order",
}

_LINE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_-]*)\s*=\s*[^#]*?(?:#\s*(.*?))?\s*$")


def parameter_comments(text: str) -> dict[str, str]:
    """The comment after each ``name = value`` line of the ``[parameters]``
    table of a TOML description (its meaning), ``name -> text``.

    Parameters
    ----------
    text : str
        the description's TOML text.

    Returns
    -------
    dict

    Examples
    --------
    >>> parameter_comments("[parameters]\\nK = 4   # features v1..vK\\n")
    {'K': 'features v1..vK'}
    """
    out, inside = {}, False
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("["):
            inside = s.split("#", 1)[0].strip() == "[parameters]"
            continue
        if inside:
            m = _LINE.match(line)
            if m and m.group(2):
                out[m.group(1).replace("-", "_")] = m.group(2)
    return out


def knob_meaning(name: str) -> str:
    """The meaning of run knob ``name``: :data:`KNOB_HELP`'s short line, else the description
    reference's (``meanfield.engine.schema``, which has one for every knob), backticks dropped.

    Parameters
    ----------
    name : str
        a :class:`~meanfield.engine.description.RunParams` field.

    Returns
    -------
    str

    Examples
    --------
    >>> knob_meaning("eta")
    'GD step size (> 0); time = steps x eta'
    """
    if name in KNOB_HELP:
        return KNOB_HELP[name]
    from .schema import _RUN_KNOBS

    return _RUN_KNOBS.get(name, "").replace("`", "")


def _references(node, name: str, path=()):
    """Every path in a description's raw tables where ``"$name"`` is a whole string value."""
    if isinstance(node, dict):
        for k, v in node.items():
            if path == () and k == "parameters":
                continue
            yield from _references(v, name, path + (str(k),))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _references(v, name, path + (i,))
    elif isinstance(node, str) and node.strip() == "$" + name:
        yield path


def _key_meaning(raw: dict, path: tuple) -> str:
    """The schema's meaning of the key at ``path`` (``("heads", 0, "init_w", "y")``), or ""."""
    from . import schema

    tables = {t: {k.name: k.meaning for k in keys} for t, _, keys in schema.reference()}
    head = path[0] if path else ""
    key, table = None, None
    if head == "heads" and len(path) >= 3:
        table, key = "[[heads]]", path[2]
    elif head in ("data", "test") and len(path) >= 4 and path[1] == "rows":
        table, key = "[data] rows = [ {...} ]", path[3]
    elif head in ("data", "test") and len(path) >= 2:
        fam = (raw.get(head) or {}).get("family") if isinstance(raw.get(head), dict) else None
        if fam == "icl_regression":
            from .gaussian import DATA_KEY_HELP

            return DATA_KEY_HELP.get(path[1], "")
        table, key = "[data]", path[1]
    elif head == "training" and len(path) >= 4 and path[1] == "stages":
        table, key = "[[training.stages]]", path[3]
    elif head in ("dictionary", "model") and len(path) >= 2:
        table, key = f"[{head}]", path[1]
    return tables.get(table, {}).get(key, "") if table else ""


def referenced_meaning(raw: dict, name: str) -> str:
    """The meaning of a declared parameter without a comment: where the description uses ``"$name"``
    and the schema's meaning of that key (``data.d: input dimension d ...``), so it cannot drift.

    Parameters
    ----------
    raw : dict
        the description's TOML tables, as read.
    name : str
        the declared parameter.

    Returns
    -------
    str
        "" when ``"$name"`` is used nowhere the schema describes.

    Examples
    --------
    >>> referenced_meaning({"data": {"family": "icl_regression", "d": "$d"}}, "d")
    'data.d: input dimension d (tokens z = (x, y) in R^(d+1))'
    """
    paths = list(_references(raw, name))
    for p in paths:
        m = _key_meaning(raw, p)
        if m:
            more = f" (and {len(paths) - 1} more place(s))" if len(paths) > 1 else ""
            return f"{_where(p)}: {m}{more}"
    return ""


def _where(path: tuple) -> str:
    return ".".join(f"[{x}]" if isinstance(x, int) else x for x in path).replace(".[", "[")


def _declared_meaning(raw: dict, name: str, comment: str | None) -> str:
    """The file's comment (and where ``"$name"`` is used), else the schema's meaning of that key."""
    if comment:
        paths = list(_references(raw, name))
        return f"{comment} (sets {', '.join(_where(p) for p in paths)})" if paths else comment
    return referenced_meaning(raw, name)


def _fmt(v) -> str:
    if v is None:
        return "none"
    if isinstance(v, (list, tuple)):
        return ",".join(str(x) for x in v)
    return str(v)


def model_parameters(path: Path, mixture_help: dict | None = None) -> tuple[str, list, list]:
    """(family or "", declared rows, knob rows) of a description file; a row
    is (name, default text, meaning).

    Parameters
    ----------
    path : Path
        the description (TOML).
    mixture_help : dict, optional
        field -> meaning of a family's fields (default: the description's comments and the run knobs' meanings).

    Returns
    -------
    tuple

    Examples
    --------
    >>> from meanfield.engine.cli import model_path
    >>> fam, declared, knobs = model_parameters(model_path("incontext"))
    >>> [r[:2] for r in declared]
    [('K', '4'), ('N', '20'), ('p1', '0.0')]
    """
    from ..core.guard import read_config_text
    from .description import RunParams, declared_parameters

    raw = read_config_text(path, "model")
    table = raw.get("parameters", {}) if isinstance(raw.get("parameters", {}), dict) else {}
    table = {str(k).replace("-", "_"): v for k, v in table.items()}
    comments = parameter_comments(Path(path).read_text(encoding="utf-8", errors="replace"))
    if raw.get("family") is not None:
        from . import registry

        fam = registry.family(str(raw["family"]))
        field_help = fam.hook("field_help") or {}
        rows = []
        for f in dataclasses.fields(fam.params_class()):
            default = table.get(f.name, f.default if f.default is not dataclasses.MISSING else None)
            meaning = (comments.get(f.name) or field_help.get(f.name) or (mixture_help or {}).get(f.name)
                       or knob_meaning(f.name))
            rows.append((f.name, _fmt(default), meaning))
        return str(raw["family"]), rows, []
    from .twolayer_desc import OVERRIDES, is_twolayer

    if is_twolayer(raw):  # a two-layer description: its run knobs only (meanfield.engine.twolayer_desc)
        return "", [], [(n, "the file's", knob_meaning(n)) for n in OVERRIDES]
    declared = [(k, _fmt(v), _declared_meaning(raw, k, comments.get(k)))
                for k, v in declared_parameters(raw).items()]
    knobs = [(f.name, _fmt(table.get(f.name, f.default)), comments.get(f.name) or knob_meaning(f.name))
             for f in dataclasses.fields(RunParams)]
    return str(raw.get("family") or ""), declared, knobs


def _text(default: str, meaning: str) -> str:
    return f"{meaning} (default: {default})" if meaning else f"(default: {default})"


def apply(parser: argparse.ArgumentParser, path: Path, mixture_help: dict | None = None) -> None:
    """Rewrite ``parser``'s help for the model at ``path``: its declared
    parameters (a group of their own) and the run knobs it takes, with
    defaults and meaning; the flags it does not take hidden."""
    try:
        family, declared, knobs = model_parameters(path, mixture_help)
    except Exception:  # a broken file: the plain help (the run itself names the problem)
        return
    rows = {n: (d, m) for n, d, m in (declared if family else knobs)}
    for a in parser._actions:
        if a.dest.startswith("param_"):
            name = a.dest[len("param_"):]
            a.help = _text(*rows[name]) if name in rows else argparse.SUPPRESS
    for g in parser._action_groups:
        if (g.title or "").startswith("model parameters"):
            g.title = (f"parameters of {path.stem} (the {family} family's fields)" if family else
                       f"run knobs of {path.stem} (defaults from its [parameters])")
    if not family and declared:
        g = parser.add_argument_group(f"parameters declared by {path.stem} (its [parameters]; --NAME V overrides)")
        for name, default, meaning in declared:
            a = parser._option_string_actions.get("--" + name)
            if a is None:
                g.add_argument("--" + name, dest="help_" + name, metavar="V", help=_text(default, meaning))
                continue
            a.help = _text(default, meaning)  # a name that is also a fixed flag (K, L, p): that flag, moved here
            for other in parser._action_groups:
                if a in other._group_actions:
                    other._group_actions.remove(a)
            g._group_actions.append(a)
        # the declared group first, the knobs after it
        parser._action_groups.insert(2, parser._action_groups.pop())
