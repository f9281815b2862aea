"""A model description: dictionary, data, heads, loss, init, training.

Frozen dataclasses (build them in Python) and the same as a TOML file
(:func:`load_description`). Every bad field is a one-line
:class:`meanfield.core.config.ConfigError` naming the field and what is allowed
(the CLI prints it and exits 2); a description outside the Gram-closure class
is refused with the reason closure fails (see ``docs/engine.md``).

The objects (names from the papers):

* :class:`Dictionary`: P feature names and their Gram matrix Gamma = E^T E
  (None = identity: orthonormal features). Optionally a *report map*
  ``report`` (P x R) and ``report_names`` (R): recorded Gram blocks and
  vectors are given in those coordinates (X_rep = C^T X C, w_rep = C^T w);
  the mixture family uses it for noisy training sets, whose dictionary is an
  orthonormal basis of every token and whose recorded coordinates are the
  clean features c1..cK, v1..vK.
* :class:`Data`: a finite weighted set of n sequences of length L: ``tokens``
  (n, L, P) coefficient vectors over the features, ``counts`` (n, L) (a
  position stands for ``count`` identical tokens; 0 = padding, so sequences of
  different lengths and multiset prompts are exact), ``weight`` (n,),
  ``target`` (n,) or (n, C): labels +-1 (logistic), reals or vectors
  (squared), class indices (cross_entropy); optional ``names`` and boolean
  ``flags`` (``consistent``, ``flipped``: margins of flipped samples do not
  count for stage times).
* :class:`Head`: one attention head (see its docstring for every option).
* :class:`Model`: heads, loss, ReLU'(0).
* :class:`Init`: width (None = infinite), seed, omega (keys/queries), omega_v
  (value matrix), sigma_r (readout), neuron init (``zero`` |
  ``const:V1,...`` | ``gaussian:SIGMA``).
* :class:`Training`: method (gd | flow | rk4), eta, stages (which parameter
  groups train: ``attention``, ``values`` (alias ``neurons``), ``readout``,
  ``signs``; length; stop criterion) and the record grid; the mixture
  system's vocabulary.

TOML layout of a general description (``docs/engine.md`` has a complete
example)::

    name = "toy"
    [dictionary]
    features = ["a", "b", "c"]
    gram = [[1, 0.2, 0], [0.2, 1, 0], [0, 0, 1]]      # optional
    [data]
    rows = [ { tokens = ["a", "-b"], target = 1 }, { tokens = [[0, 1, 0.5], "c"], target = -1, weight = 2 } ]
    # or: function = "mypackage.mymodule:make_data"   (imported by name, never evaluated)
    [[heads]]
    name = "h"
    attention = "softmax"       # softmax | linear
    kq = "separate"             # separate (wide W_K, W_Q) | merged (narrow W = W_K^T W_Q)
    query = "mean"              # mean | last | fixed (+ query_vector)
    value = "neuron"            # neuron | linear | matrix | token
    sign = 1.0
    [model]
    loss = "logistic"           # logistic | squared | cross_entropy
    [parameters]                # run knobs; CLI flags override them (--width 5 --seed 1 ...)
    eta = 0.5
    steps = 1000
    # any other key is a declared parameter (name = default), referenced as a whole value "$name"
    # in the tables above (e.g. weight = "$w2", steps = "$steps" in a stage); a flag --name overrides it

A registered family (``meanfield.engine.registry``) replaces
dictionary/data/heads/model by a generator: with ``family = "NAME"`` the
``[parameters]`` table holds the fields of the family's parameter dataclass
and its builder makes the rest from them (the shipped mixture family:
``family = "mixture"``, the fields of the mixture's config). ``plugins =
["pkg.module"]`` imports plug-in modules first (they register families).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.config import ConfigError, as_choice, as_float, as_int, as_list, parse_criterion, record_options
from .datatables import MAX_COUNT  # noqa: F401 (re-exported)
from .datatables import _data_from_table, data_from_function, parse_token  # noqa: F401
from .heldout import held_out
from .rates import check_training, format_group_eta, has_rates, parse_group_eta, parse_schedule
from .rates import stage_rates as _stage_rates
from .objects import (ATTENTIONS, CRITERIA, GROUP_ALIASES, GROUPS, KQ, LOSSES, METHODS, NORMALISE, QUERIES,  # noqa: F401
                      TOP_KEYS, VALUES, Data, Description, Dictionary, Head, Init, Model, RunParams, StageSpec,
                      Training, make_data)
from .parsing import OUT_OF_CLASS, as_bool, as_matrix, check_gram, check_table

# ------------------------------------------------------------------ the run knobs of a general description


_NEURON_RE = re.compile(r"^(zero|const:[^:]+|gaussian:[^:]+)$")


def _width(v):
    if v in (None, "inf", "infinite", float("inf")):
        return None
    return as_int("width", v, lo=1)


def make_params(raw: dict) -> RunParams:
    names = [f.name for f in dataclasses.fields(RunParams)]
    for k in raw:
        if k not in names:
            from ..core.guard import unknown_name

            raise unknown_name("parameters", "key", k, names, "meanfield model run --help (one flag per key)")
    d = {f.name: f.default for f in dataclasses.fields(RunParams)}
    d.update({k: v for k, v in raw.items() if v is not None})
    out = {}
    out["method"] = as_choice("method", d["method"], METHODS)
    out["eta"] = as_float("eta", d["eta"], positive=True)
    out["normalise"] = as_choice("normalise", d["normalise"], NORMALISE)
    if out["normalise"] != "none" and out["method"] != "gd":
        raise ConfigError(f"normalise: only with method gd (normalised GD is a map, not a flow); got method "
                          f"{out['method']}")
    out["ridge"] = as_float("ridge", d["ridge"], nonneg=True)
    out["steps"] = as_int("steps", d["steps"], lo=1)
    out["t_end"] = as_float("t_end", d["t_end"], positive=True) if d["t_end"] is not None else (
        out["steps"] * out["eta"] if out["method"] != "gd" else None)
    out["dt"] = as_float("dt", d["dt"], positive=True) if d["dt"] is not None else (
        out["eta"] if out["method"] == "rk4" else None)
    out["rtol"] = as_float("rtol", d["rtol"], positive=True)
    out["atol"] = as_float("atol", d["atol"], positive=True)
    out["h_min"] = as_float("h_min", d["h_min"], nonneg=True) if d["h_min"] is not None else None
    out["max_abs"] = as_float("max_abs", d["max_abs"], positive=True)
    crit = d["criterion"]
    out["criterion"] = None if parse_criterion("criterion", crit, CRITERIA) is None else str(crit).replace(" ", "")
    out["width"] = _width(d["width"])
    out["seed"] = as_int("seed", d["seed"], lo=0)
    out["omega"] = as_float("omega", d["omega"], positive=True)
    out["omega_v"] = as_float("omega_v", d["omega_v"], positive=True)
    out["omega_q"] = as_float("omega_q", d["omega_q"], nonneg=True) if d["omega_q"] is not None else None
    out["symmetry"] = as_choice("symmetry", d["symmetry"], ("refuse", "allow"))
    out["sigma_r"] = as_float("sigma_r", d["sigma_r"], nonneg=True)
    if not _NEURON_RE.match(str(d["neuron_init"]).strip()):
        raise ConfigError(f"neuron_init: must be zero, const:V1,...,VP or gaussian:SIGMA; got {d['neuron_init']!r}")
    out["neuron_init"] = str(d["neuron_init"]).strip()
    out["relu_prime_at_zero"] = as_choice("relu_prime_at_zero", as_float("relu_prime_at_zero",
                                                                          d["relu_prime_at_zero"]), (0.0, 0.5, 1.0))
    record_options(d, out)
    out["stage_steps"] = tuple(as_int("stage_steps", v, lo=0) for v in as_list("stage_steps", d["stage_steps"])) \
        if d["stage_steps"] is not None else None
    out["stage_times"] = tuple(as_float("stage_times", v, nonneg=True) for v in as_list("stage_times", d["stage_times"])) \
        if d["stage_times"] is not None else None
    out["group_eta"] = format_group_eta(parse_group_eta("group_eta", d["group_eta"]))
    out["eta_schedule"] = parse_schedule("eta_schedule", d["eta_schedule"])
    out["init_from"] = None if d["init_from"] in (None, "") else str(d["init_from"])
    from ..core.guard import check_run_numbers

    check_run_numbers(out)
    if out["stage_steps"] is not None and out["method"] != "gd":
        raise ConfigError(f"stage_steps: only for method gd; with {out['method']} give stage_times")
    if out["stage_times"] is not None and out["method"] == "gd":
        raise ConfigError("stage_times: only for method flow or rk4; with gd give stage_steps")
    return RunParams(**out)


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


def make_head(raw: dict, i: int, P: int, dictionary: Dictionary | None = None) -> Head:
    where = f"heads[{i}]"
    names = [f.name for f in dataclasses.fields(Head)]
    check_table(where, raw, names)
    d = {f.name: f.default for f in dataclasses.fields(Head)}
    d.update(raw)
    out = {"name": str(d["name"]) if "name" in raw else f"h{i + 1}"}
    if d["kq"] == "outer":
        raise ConfigError(f"{where}.kq: 'outer' is outside the Gram-closure class: {OUT_OF_CLASS['outer']}")
    out["attention"] = as_choice(f"{where}.attention", d["attention"], ATTENTIONS)
    out["kq"] = as_choice(f"{where}.kq", d["kq"], KQ)
    out["query"] = as_choice(f"{where}.query", d["query"], QUERIES)
    if out["query"] == "fixed":
        if d["query_vector"] is None:
            raise ConfigError(f"{where}.query_vector: required with query = fixed ({P} coefficients)")
        out["query_vector"] = tuple(as_float(f"{where}.query_vector", v) for v in as_list(f"{where}.query_vector",
                                                                                          d["query_vector"], P))
    elif d["query_vector"] is not None:
        raise ConfigError(f"{where}.query_vector: only with query = fixed")
    else:
        out["query_vector"] = None
    out["query_self"] = as_bool(f"{where}.query_self", d["query_self"])
    if "query_self" in raw and out["query"] != "last":
        raise ConfigError(f"{where}.query_self: only with query = last (it takes the last token out of the keys); "
                          f"with query = {out['query']} it has no effect: remove it")
    out["mask"] = as_choice(f"{where}.mask", d["mask"], ("none", "causal"))
    out["rpe"] = -1 if d["rpe"] is True else 0 if d["rpe"] is False else as_int(f"{where}.rpe", d["rpe"], lo=0)
    if out["rpe"] and out["query"] == "fixed":
        raise ConfigError(f"{where}.rpe: relative positions need a query at a position (query = mean or last)")
    if out["mask"] == "causal" and out["query"] == "fixed":
        raise ConfigError(f"{where}.mask: causal needs a query at a position (query = mean or last); a fixed "
                          "query vector has none")
    out["scale"] = as_float(f"{where}.scale", d["scale"])
    if d["value"] == "mlp":
        raise ConfigError(f"{where}.value: 'mlp' is outside the Gram-closure class: {OUT_OF_CLASS['hidden_activation']}")
    out["value"] = as_choice(f"{where}.value", d["value"], VALUES)
    out["n_neurons"] = as_int(f"{where}.n_neurons", d["n_neurons"], lo=1)
    if out["n_neurons"] > 1 and out["value"] != "neuron":
        raise ConfigError(f"{where}.n_neurons: only value = neuron has several neurons")
    out["outputs"] = as_int(f"{where}.outputs", d["outputs"], lo=1)
    if out["value"] == "token" and "outputs" in raw and out["outputs"] != P:
        raise ConfigError(f"{where}.outputs: value = token outputs the attended token (P = {P} outputs)")
    if out["value"] == "token":
        out["outputs"] = P
    out["sign"] = as_float(f"{where}.sign", d["sign"])
    out["train_sign"] = as_bool(f"{where}.train_sign", d["train_sign"])
    if dictionary is not None:  # initial values of the head's blocks (meanfield.engine.inits)
        from . import inits

        feats, groups = dictionary.features, dictionary.groups
        if d["init_W"] is not None and out["kq"] != "merged":
            raise ConfigError(f"{where}.init_W: only with kq = merged (separate keys and queries: init_gram S)")
        if d["init_w"] is not None and out["value"] not in ("linear", "neuron"):
            raise ConfigError(f"{where}.init_w: only with value = linear or neuron (a value matrix: init_gram)")
        out["init_W"] = inits.init_W(f"{where}.init_W", d["init_W"], feats, groups)
        out["init_w"] = inits.init_w(f"{where}.init_w", d["init_w"], feats, groups)
        out["init_gram"] = inits.init_gram(f"{where}.init_gram", d["init_gram"])
    return Head(**out)


def make_model(heads: list[Head], loss: str, r0: float, targets: np.ndarray, P: int) -> Model:
    if not heads:
        raise ConfigError("heads: at least one [[heads]] table is needed")
    if len({h.name for h in heads}) != len(heads):
        raise ConfigError("heads: names must be distinct")
    loss = as_choice("model.loss", loss, LOSSES)
    C = {h.outputs for h in heads}
    if len(C) != 1:
        raise ConfigError(f"heads: every head must have the same number of outputs (value = token: P); got {sorted(C)}")
    C = C.pop()
    if loss == "logistic":
        if C != 1 or targets.ndim != 1 or not np.all(np.isin(targets, (-1.0, 1.0))):
            raise ConfigError("model.loss: logistic needs one output and targets +1 / -1")
    elif loss == "squared":
        if (targets.ndim == 1 and C != 1) or (targets.ndim == 2 and targets.shape[1] != C):
            raise ConfigError(f"model.loss: squared needs targets of shape (n, {C}) (one per output); got {targets.shape}")
    else:
        if C < 2 or targets.ndim != 1 or not np.all((targets == np.round(targets)) & (targets >= 0) & (targets < C)):
            raise ConfigError(f"model.loss: cross_entropy needs outputs >= 2 and targets class indices 0..{C - 1}")
    return Model(heads=tuple(heads), loss=loss, relu_prime_at_zero=r0)


def check_targets(test: Data, data: Data, model) -> None:
    """Refuse a test set ([test], train_frac: meanfield.engine.heldout) whose targets are not of the training
    set's kind (one line)."""
    if np.asarray(test.target).shape[1:] != np.asarray(data.target).shape[1:]:
        raise ConfigError(f"test.target: must have the shape of the training targets (n, {data.target.shape[1:]}); "
                          f"got {test.target.shape}")
    try:
        make_model(list(model.heads), model.loss, model.relu_prime_at_zero, np.asarray(test.target),
                   int(test.tokens.shape[2]))
    except ConfigError as e:
        raise ConfigError(f"test.target: {str(e).removeprefix('model.loss: ')}") from None


def training_from(params: RunParams, stages_raw, heads) -> Training:
    gd = params.method == "gd"
    stages = []
    if stages_raw:
        if not isinstance(stages_raw, list):
            raise ConfigError("training.stages: must be a list of [[training.stages]] tables")
        for i, s in enumerate(stages_raw):
            where = f"training.stages[{i}]"
            check_table(where, s, ("name", "train", "steps", "time", "criterion", "eta", "eta_schedule"))
            train = []
            for g in as_list(f"{where}.train", s.get("train", list(GROUPS))):
                g = GROUP_ALIASES.get(str(g), str(g))
                train.append(as_choice(f"{where}.train", g, GROUPS))
            key = "steps" if gd else "time"
            if key not in s:
                raise ConfigError(f"{where}.{key}: required with method {params.method}")
            length = as_int(f"{where}.steps", s["steps"], lo=0) if gd else as_float(f"{where}.time", s["time"], nonneg=True)
            crit = parse_criterion(f"{where}.criterion", s.get("criterion"), CRITERIA)
            stages.append(StageSpec(str(s.get("name", f"stage{i + 1}")), tuple(train), length, crit,
                                    *_stage_rates(where, s)))
    else:
        stages.append(StageSpec("simultaneous", GROUPS, params.steps if gd else params.t_end,
                                parse_criterion("criterion", params.criterion, CRITERIA)))
    given = params.stage_steps if gd else params.stage_times
    if given is not None:
        key = "stage_steps" if gd else "stage_times"
        if not stages_raw:
            raise ConfigError(f"{key}: this description has no [[training.stages]]; give "
                              f"{'steps' if gd else 't_end'} for its one stage")
        if len(given) != len(stages):
            raise ConfigError(f"{key}: {len(stages)} lengths needed (one per [[training.stages]]: "
                              f"{', '.join(s.name for s in stages)}); got {len(given)}")
        stages = [dataclasses.replace(s, length=v) for s, v in zip(stages, given)]
    H = sum(s.length for s in stages)
    h_min = params.h_min if params.h_min is not None else (1e-4 * H if params.method == "flow" else None)
    tr = Training(method=params.method, eta=params.eta, normalise=params.normalise, ridge=params.ridge,
                  stages=tuple(stages),
                  schedule="simultaneous" if len(stages) == 1 else "staged", dt=params.dt, rtol=params.rtol,
                  atol=params.atol, h_min=h_min, max_abs=params.max_abs, record_every=params.record_every,
                  record_log=params.record_log, record_dt=params.record_dt,
                  group_eta=parse_group_eta("group_eta", params.group_eta), eta_schedule=params.eta_schedule)
    check_training(tr, heads)
    return tr



# ------------------------------------------------------------------ loading



def parameter_class(raw: dict):
    """The dataclass whose fields a description's parameters (and CLI flags) are."""
    if isinstance(raw, dict) and raw.get("family") is not None:
        from . import registry

        _load_named_plugins(raw)
        return registry.family(raw["family"]).params_class()
    return RunParams


def _load_named_plugins(raw: dict) -> None:
    """Import the plug-in modules a description names (``plugins = ["pkg.mod"]``):
    they register their families (``meanfield.engine.registry``)."""
    names = raw.get("plugins")
    if names is None:
        return
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ConfigError(f"plugins: must be a list of module names, e.g. [\"my_pkg.my_family\"]; got {names!r}")
    from . import registry

    registry.load_plugins(names)


#: a reference to a parameter: a whole TOML string value "$name" (never an expression)
_REF = re.compile(r"^\$([A-Za-z_][A-Za-z0-9_]*)$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: the tables whose values may be "$name" references
_REF_TABLES = ("dictionary", "data", "test", "positions", "heads", "model", "training")
#: options of the ``meanfield model`` verbs themselves: not available as parameter names
RESERVED = ("out", "plot", "quiet", "d", "widths", "seeds", "workers", "format", "param", "help", "model", "run",
            "expr", "file", "during", "tmin", "tmax", "verb", "func", "declared", "force")


def declared_parameters(raw: dict) -> dict:
    """A general description's own parameters: the keys of ``[parameters]``
    that are not run knobs (:class:`RunParams` fields), name -> default.
    Empty for a family (its parameters are the family's config fields)."""
    if not isinstance(raw, dict) or raw.get("family") is not None:
        return {}
    table = raw.get("parameters", {})
    if not isinstance(table, dict):
        raise ConfigError(f"parameters: must be a table; got {table!r}")
    knobs = {f.name for f in dataclasses.fields(RunParams)}
    out = {}
    for k, v in table.items():
        k = str(k).replace("-", "_")
        if k in knobs:
            continue
        if not _NAME.match(k):
            raise ConfigError(f"parameters.{k}: a parameter name must be letters, digits and _ (not starting with a digit)")
        if k in RESERVED and not (k == "d" and _data_family(raw) is not None):  # a data family's d is its own
            raise ConfigError(f"parameters.{k}: reserved (an option of the model verbs); reserved: {', '.join(RESERVED)}")
        ok = isinstance(v, (bool, int, float, str)) or (
            isinstance(v, list) and v and all(isinstance(x, (int, float, str)) and not isinstance(x, bool) for x in v))
        if not ok:
            raise ConfigError(f"parameters.{k}: a declared parameter's default must be a number, a string, true/false "
                              f"or a non-empty list of numbers or strings; got {v!r}")
        if isinstance(v, str) and v.startswith("$"):
            raise ConfigError(f"parameters.{k}: a default must be a value, not a reference ({v!r})")
        out[k] = v
    return out


def _data_family(raw: dict):
    """The ``family`` of a description's [data] table (e.g. icl_regression), or None."""
    data = raw.get("data") if isinstance(raw, dict) else None
    return data.get("family") if isinstance(data, dict) else None


def coerce_parameter(name: str, default, v):
    """A declared parameter's value, typed from its default (a CLI flag's
    string or a Python keyword): int, float, true/false, string, or a list
    (comma-separated on the command line) of the default's element type."""
    if isinstance(default, bool):
        return as_bool(name, v)
    if isinstance(default, int):
        return as_int(name, v)
    if isinstance(default, float):
        return as_float(name, v)
    if isinstance(default, list):
        items = as_list(name, v)
        if not items:
            raise ConfigError(f"{name}: must be a non-empty comma-separated list")
        if all(isinstance(x, str) for x in default):
            return [str(x) for x in items]
        if all(isinstance(x, int) for x in default):
            return [as_int(name, x) for x in items]
        return [as_float(name, x) for x in items]
    if isinstance(v, (str, int, float)) and not isinstance(v, bool):
        return str(v)
    raise ConfigError(f"{name}: must be a string; got {v!r}")


def resolve_parameters(raw: dict, overrides: dict | None = None) -> tuple[dict, dict, dict]:
    """Substitute a general description's parameters.

    ``[parameters]`` holds run knobs (:class:`RunParams`) and the model's own
    declared parameters (any other key, ``name = default``; its type is the
    default's). Anywhere in the dictionary, data, heads, model and training
    tables a whole string value ``"$name"`` is replaced by the parameter's
    value (a declared parameter or a run knob, after ``overrides``); nothing
    else is substituted or evaluated. Returns (the description with every
    reference replaced and the declared parameters removed from
    ``[parameters]``, the overrides that are run knobs, the declared
    parameters' values). One-line errors: an
    unknown override, a reference to an undeclared name, a declared parameter
    never referenced, ``steps`` overridden while the stages have their own
    lengths."""
    import copy

    if not isinstance(raw, dict) or raw.get("family") is not None:
        return raw, dict(overrides or {}), {}
    declared = declared_parameters(raw)
    knobs = [f.name for f in dataclasses.fields(RunParams)]
    table = {str(k).replace("-", "_"): v for k, v in dict(raw.get("parameters", {})).items()}
    values = dict(declared)
    run_over = {}
    for k, v in (overrides or {}).items():
        if v is None:
            continue
        k = str(k).replace("-", "_")
        if k in declared:
            values[k] = coerce_parameter(k, declared[k], v)
        elif k in knobs:
            run_over[k] = v
        else:
            mine = ", ".join(sorted(declared)) or "none"
            raise ConfigError(f"parameters: unknown key '{k}'; this model declares: {mine}; run knobs: {', '.join(knobs)}")
    used = set()

    def knob_value(name, where):
        v = run_over.get(name, table.get(name, RunParams.__dataclass_fields__[name].default))
        if v is None:
            raise ConfigError(f"{where}: refers to \"${name}\", which has no value; give it in [parameters] or as a flag")
        return v

    def sub(v, where):
        if isinstance(v, str) and v.startswith("$"):
            m = _REF.match(v)
            if not m:
                raise ConfigError(f"{where}: {v!r} is not a parameter reference: only a whole value \"$name\" "
                                  "is substituted (no expressions)")
            name = m.group(1)
            if where.endswith(".function"):
                raise ConfigError(f"{where}: the function to import is named in the file, not a parameter ({v!r})")
            if name in values:
                used.add(name)
                return copy.deepcopy(values[name])
            if name in knobs:
                used.add(name)
                return knob_value(name, where)
            raise ConfigError(f"{where}: \"${name}\" is not a declared parameter; declare it in [parameters] "
                              f"({name} = default); declared: {', '.join(sorted(declared)) or 'none'}")
        if isinstance(v, dict):
            return {k: sub(x, f"{where}.{k}") for k, x in v.items()}
        if isinstance(v, list):
            return [sub(x, f"{where}[{i}]") for i, x in enumerate(v)]
        return v

    out = {k: (sub(v, k) if k in _REF_TABLES else v) for k, v in raw.items()}
    unused = sorted(set(declared) - used)
    if unused:
        raise ConfigError(f"parameters.{unused[0]}: not a run knob and never referenced as \"${unused[0]}\"; "
                          f"run knobs: {', '.join(knobs)}")
    stages = (raw.get("training") or {}).get("stages") if isinstance(raw.get("training"), dict) else None
    if stages:
        for knob in ("steps", "t_end"):
            if knob in run_over and knob not in used:
                raise ConfigError(f"{knob}: this description's [[training.stages]] have their own lengths and none is "
                                  f"\"${knob}\"; give {'stage_steps' if knob == 'steps' else 'stage_times'} "
                                  f"(one length per stage) or write steps = \"${knob}\" in a stage")
    if "parameters" in raw:
        out["parameters"] = {k: v for k, v in table.items() if k not in declared}
        given = [k for k in _RECORD_KNOBS if k in run_over]
        if given:  # a record-grid flag replaces the description's own grid (one grid per run)
            out["parameters"] = {k: v for k, v in out["parameters"].items() if k not in _RECORD_KNOBS or k in given}
    return out, run_over, values


_RECORD_KNOBS = ("record_every", "record_log", "record_dt")


def read_raw(path) -> dict:
    """The TOML description as written (parameter references unresolved)."""
    p = Path(path)
    try:
        import tomllib

        with open(p, "rb") as fh:
            raw = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"model: file not found: {p}") from None
    except Exception as e:  # tomllib.TOMLDecodeError
        raise ConfigError(f"model: malformed TOML in {p}: {e}") from None
    check_raw_numbers(raw)  # a number in quotes in the file (a family's dict of flags is text: not here)
    return raw


def check_raw_numbers(raw: dict) -> None:
    """A description file's quoted numbers refused (``meanfield.engine.schema.check_description_numbers``
    with the parameter class of ``raw``'s family, resolved only when it has ``[parameters]``); the one
    call of the file readers (:func:`read_raw`, the command line's).

    Parameters
    ----------
    raw : dict
        The description as read from TOML.

    Returns
    -------
    None
        Raises ConfigError naming the key.

    Example
    -------
    >>> check_raw_numbers({"parameters": {"steps": 10}})
    """
    from .schema import check_description_numbers

    check_description_numbers(raw, parameter_class(raw) if isinstance(raw.get("parameters"), dict) else None)


def _read(path) -> dict:
    """The TOML description with its declared parameters at their defaults
    (every ``"$name"`` replaced; the form the shipped checks edit)."""
    return resolve_parameters(read_raw(path))[0]


def load_description(path, overrides: dict | None = None) -> Description:
    """Read and validate a TOML description (what ``meanfield.engine.load`` calls).

    Parameters
    ----------
    path : str or Path
        The TOML file (every key: ``docs/description.md``).
    overrides : dict or None
        Values replacing its ``[parameters]`` (as the CLI flags; None values ignored).

    Returns
    -------
    Description
        Validated; a bad key or value raises ConfigError (one line naming it).

    Examples
    --------
    >>> load_description("docs/examples/majority.toml", {"width": 16}).init.width
    16
    """
    raw = read_raw(path)
    return description_from_dict(raw, overrides, source=str(path))


def description_from_dict(raw: dict, overrides: dict | None = None, source: str | None = None) -> Description:
    """Validate a description given as a dict (the TOML file's tables, parsed).

    Parameters
    ----------
    raw : dict
        The tables as ``tomllib`` reads them.
    overrides : dict or None
        As in :func:`load_description`.
    source : str or None
        Where it came from (the name defaults to its stem).

    Returns
    -------
    Description

    Examples
    --------
    >>> raw = {"dictionary": {"features": ["a", "b"]}, "heads": [{"value": "linear"}],
    ...        "data": {"rows": [{"tokens": ["a", "b"], "target": 1}, {"tokens": ["b", "b"], "target": -1}]}}
    >>> description_from_dict(raw).data.n
    2
    """
    if not isinstance(raw, dict):
        raise ConfigError("model: a description is a TOML table")
    from .twolayer_desc import is_twolayer, twolayer_from_dict

    if is_twolayer(raw):  # the second model class (meanfield.engine.twolayer_desc)
        return twolayer_from_dict(raw, overrides, source)
    for k in raw:
        if k == "layers":
            raise ConfigError("layers: a two-layer description needs [model] class = \"twolayer\" (this one-layer "
                              "class reads one layer of [[heads]]; which two-layer models close: docs/engine.md, "
                              "'Two-layer attention')")
        if k not in TOP_KEYS:
            raise ConfigError(f"model: unknown key '{k}'; allowed: {', '.join(TOP_KEYS)}")
    raw, overrides, declared = resolve_parameters(raw, overrides)
    params_raw = {k.replace("-", "_"): v for k, v in dict(raw.get("parameters", {})).items()}
    params_raw.update({k: v for k, v in (overrides or {}).items() if v is not None})
    name = str(raw.get("name", Path(source).stem if source else "model"))
    _load_named_plugins(raw)
    family = raw.get("family")
    if family is not None:  # a registered family builds the rest from [parameters] (meanfield.engine.registry)
        from . import registry

        if not isinstance(family, str):
            raise ConfigError(f"family: must be a family's name (a string); got {family!r}")
        fam = registry.family(family)
        for k in ("dictionary", "data", "test", "positions", "heads", "model", "training"):
            if k in raw:
                raise ConfigError(f"{k}: not with family = {family} (the family builds it from [parameters])")
        return fam.build_description(params_raw, name, source)
    params = make_params(params_raw)
    dic = raw.get("dictionary")
    data_family = raw.get("data", {}).get("family") if isinstance(raw.get("data"), dict) else None
    if data_family is not None:  # a data family builds the dictionary and the data (meanfield.engine.gaussian)
        from .gaussian import family_data

        dictionary, data = family_data(raw["data"], dic)
        P = dictionary.P
    elif dic is None:
        raise ConfigError("dictionary: required ([dictionary] with features = [...])")
    else:
        dictionary, data = _dictionary_and_data(raw, dic)
        P = dictionary.P
    test = None
    if data_family is not None and "test" in raw:
        raise ConfigError("test: not with a data family (data.family builds its own data; give its N_test)")
    if data_family is None:
        data, test = held_out(raw, data, dictionary.features, _data_from_table)  # [test] / train_frac split
        if "positions" in raw:  # absolute positional features: an enlarged dictionary (engine.positions)
            from .positions import apply

            if dictionary.trainable:
                raise ConfigError("positions: not with dictionary.trainable (positional features with trainable "
                                  "embeddings are not derived here)")

            dictionary, data, test = apply(raw["positions"], dictionary, data, test)
            P = dictionary.P
    elif "positions" in raw:
        raise ConfigError("positions: not with a data family (data.family builds its own dictionary)")
    heads_raw = raw.get("heads")
    if not isinstance(heads_raw, list):
        raise ConfigError("heads: required, a list of [[heads]] tables")
    heads = [make_head(h, i, P, dictionary) for i, h in enumerate(heads_raw)]
    Lmax = max(data.L, test.L if test is not None else 0)
    for i, h in enumerate(heads):  # rpe = true: offsets up to the longest sequence (engine.positions)
        if h.rpe and 0 < h.rpe < Lmax:
            raise ConfigError(f"heads[{i}].rpe: {h.rpe} offsets do not reach the longest sequence ({Lmax}); give "
                              f">= {Lmax} or true")
        heads[i] = dataclasses.replace(h, rpe=Lmax) if h.rpe == -1 else h
    mraw = raw.get("model", {})
    check_table("model", mraw, ("loss",) + tuple(OUT_OF_CLASS))
    model = make_model(heads, mraw.get("loss", "logistic"), params.relu_prime_at_zero, data.target, P)
    if test is not None:
        check_targets(test, data, model)
    traw = raw.get("training", {})
    check_table("training", traw, ("stages",))
    training = training_from(params, traw.get("stages"), heads)
    if data_family is None:  # rows given: criteria over no row, knobs no head uses (meanfield.engine.applicable)
        from .applicable import check_criteria_rows, check_knobs_apply

        check_criteria_rows(training, data)
        check_knobs_apply(heads, {k for k, v in (overrides or {}).items() if v is not None})
    init = Init(width=params.width, seed=params.seed, omega=params.omega, omega_v=params.omega_v,
                sigma_r=params.sigma_r, neuron_init=params.neuron_init, init_from=params.init_from,
                omega_q=params.omega_q)
    desc = Description(name=name, dictionary=dictionary, data=data, model=model, init=init, training=training,
                       family=None, test=test, parameters=params, source=source,
                       declared=tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in declared.items()))
    if training.ridge:
        from .ridge import check_ridge

        check_ridge(desc)
    if data_family is not None:
        from .gaussian import check_description

        check_description(desc)
        if any(h.mask != "none" or h.rpe for h in heads):
            raise ConfigError("heads.mask: a causal mask is not with a data family (its population loss is "
                              "for unmasked attention)")
        if has_rates(training):
            raise ConfigError("group_eta: group rates, stage eta and schedules are not with a data family yet "
                              "(its exact population map steps every group with one eta)")
    if params.init_from is not None:
        from .initfrom import check
        from .reduce import layout

        check(desc, params.init_from, layout(desc))
    if dictionary.trainable:  # trainable embeddings: what they do not support (meanfield.engine.embeddings)
        from .embeddings import check as check_embeddings

        check_embeddings(desc)
    else:  # a rate for fixed token vectors would be accepted without effect
        where = ["group_eta"] * ("embeddings" in dict(training.group_eta)) + [
            f"training.stages[{i}].eta" for i, st in enumerate(training.stages) if "embeddings" in dict(st.group_eta)]
        if where:
            raise ConfigError(f"{where[0]}: a rate for embeddings needs [dictionary] trainable = true (the token "
                              "vectors are fixed otherwise)")
    if any(h.init_gram for h in heads) and desc.init.width is not None:
        raise ConfigError("heads.init_gram: only at infinite width (width = inf); at finite width m the Gram is "
                          "U^T U of the sampled weights")
    return desc


def _dictionary_and_data(raw: dict, dic) -> tuple[Dictionary, Data]:
    """The [dictionary] and [data] tables of a general description."""
    if dic is None:
        raise ConfigError("dictionary: required ([dictionary] with features = [...])")
    check_table("dictionary", dic, ("features", "gram", "trainable", "ambient"))
    feats = _feature_names(dic.get("features"))
    if not isinstance(feats, list) or not feats or not all(isinstance(f, str) and f for f in feats):
        raise ConfigError("dictionary.features: must be a non-empty list of feature names")
    if len(set(feats)) != len(feats):
        raise ConfigError("dictionary.features: names must be distinct")
    feats = tuple(feats)
    P = len(feats)
    gram = None
    if dic.get("gram") is not None:
        gram = check_gram("dictionary.gram", as_matrix("dictionary.gram", dic["gram"], (P, P)))
    trainable = as_bool("dictionary.trainable", dic.get("trainable", False))  # meanfield.engine.embeddings
    ambient = None
    if dic.get("ambient") is not None:
        if not trainable:
            raise ConfigError("dictionary.ambient: only with trainable = true (a fixed dictionary reads only its Gram)")
        ambient = as_int("dictionary.ambient", dic["ambient"], lo=P)
    dictionary = Dictionary(features=feats, gram=gram, trainable=trainable, ambient=ambient)
    if "data" not in raw:
        raise ConfigError("data: required ([data] with rows = [...] or function = \"package.module:function\")")
    return dictionary, _data_from_table(raw["data"], feats)


def describe(desc: Description) -> dict:
    """A JSON-able summary of a description (names, sizes, choices)."""
    return {
        "name": desc.name, "family": desc.family, "features": list(desc.dictionary.features),
        "declared": {k: list(v) if isinstance(v, tuple) else v for k, v in desc.declared},
        "gram": None if desc.dictionary.gram is None else np.asarray(desc.dictionary.gram).tolist(),
        **({"embeddings": {"trainable": True, "ambient": desc.dictionary.ambient or desc.P}}
           if desc.dictionary.trainable else {}),
        "n_sequences": desc.data.n, "L": desc.data.L,
        "heads": [dataclasses.asdict(h) for h in desc.model.heads], "loss": desc.model.loss,
        "init": dataclasses.asdict(desc.init),
        "training": {"method": desc.training.method, "eta": desc.training.eta, "normalise": desc.training.normalise,
                     **({"ridge": desc.training.ridge} if getattr(desc.training, "ridge", 0.0) else {}),
                     "group_eta": dict(desc.training.group_eta), "eta_schedule": desc.training.eta_schedule,
                     "stages": [{"name": s.name, "train": list(s.train), "length": s.length, "eta": s.eta,
                                 "group_eta": dict(s.group_eta), "eta_schedule": s.eta_schedule,
                                 "criterion": None if s.criterion is None else "".join(map(str, s.criterion))}
                                for s in desc.training.stages]},
    }
