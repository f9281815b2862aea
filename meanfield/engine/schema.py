"""Every key of a model description: its table, type, default and meaning.

The documentation's description reference (``docs/description.md``) is
generated from :func:`reference` at ``make docs``: the keys, types and
defaults of ``[parameters]`` and ``[[heads]]`` come from the dataclasses the
loader builds (:class:`~meanfield.engine.description.RunParams`,
:class:`~meanfield.engine.objects.Head`), the allowed values from the
loader's own choice tables, so neither can drift from the code; the meanings
are written here once. ``tests/test_docs.py`` asks the loader itself, table
by table, which keys it accepts and checks that every one appears here and
nothing else does.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .objects import ATTENTIONS, CRITERIA, GROUP_ALIASES, GROUPS, KQ, LOSSES, METHODS, QUERIES, VALUES, Head


@dataclass(frozen=True)
class Key:
    """One key of a description table.

    Parameters
    ----------
    name : str
        The key as written in the TOML file.
    type : str
        Its type in words (``int``, ``float``, ``str``, one of a list of
        choices, ...).
    default : str
        The default in words (``required`` when the key must be given).
    meaning : str
        What it does.

    Examples
    --------
    >>> Key("loss", "str", "logistic", "the loss").name
    'loss'
    """

    name: str
    type: str
    default: str
    meaning: str


def _choices(values) -> str:
    return ", ".join(f"`{v}`" for v in values)


#: meanings of the run knobs (:class:`RunParams` fields); every field needs one
_RUN_KNOBS = {
    "normalise": "gd only: `none` (plain GD) or `parameter` (normalised GD: each trained parameter matrix steps "
                 "by eta grad / ||grad||_F, the norm taken exactly from the Gram state)",
    "ridge": "lambda >= 0 of the attention's ridge penalty: loss + lambda (||W_K||^2 + ||W_Q||^2) (separate) or "
             "lambda ||W||^2 (merged), in GD, flow and normalised GD; orthonormal dictionaries only; the recorded "
             "loss is without it (`meanfield.engine.ridge`)",
    "omega_q": "separate keys and queries: the queries' init scale (default: omega; 0: Q(0) = 0)",
    "symmetry": "`refuse` or `allow`: an infinite-width start that GD cannot leave by symmetry is refused "
                "unless allowed (`meanfield.engine.symmetry`)",
    "init_from": "a run file whose last state is the initial state (`meanfield.engine.initfrom`; its model "
                 "structure must match)",
    "group_eta": "a rate per parameter group for the whole run, `\"keys=0.1,values=2\"` or a table "
                 "(`meanfield.engine.rates`; groups: keys, queries, values, readout, signs, positions, embeddings, attention)",
    "eta_schedule": "a multiplier of every rate at step k: `cosine`, `step:E:G`, `warmup:W+cosine`, `inverse:T0` "
                    "(`meanfield.engine.rates`)",
    "method": f"{_choices(METHODS)}: the exact GD map, gradient flow (adaptive Dormand-Prince 5(4)) or fixed-step RK4",
    "eta": "GD step size (time per step: t = step x eta); flow: the default horizon is steps x eta",
    "steps": "length of the one stage of a description without `[[training.stages]]` (gd)",
    "t_end": "flow / rk4: the horizon of a description without stages (default steps x eta)",
    "dt": "rk4: the fixed step (default eta)",
    "rtol": "flow: relative tolerance of the adaptive step",
    "atol": "flow: absolute tolerance of the adaptive step",
    "h_min": "flow: the smallest adaptive step (default 1e-4 x horizon); below it steps of h_min are forced "
             "(kinks, see the mixture page)",
    "max_abs": "a state entry above this in absolute value stops the run as `diverged` (exit 3)",
    "criterion": "stop criterion of the one stage, `NAME>=X` or `NAME<=X` with NAME in "
                 + ", ".join(f"`{c}`" for c in CRITERIA),
    "width": "`inf` (infinite width, the default) or an integer m: a sampled finite-width init",
    "seed": "seed of the sampled init (finite width) and of a gaussian neuron init",
    "omega": "init scale of the wide key/query weights: entries N(0, omega^2/m); infinite width A = B = omega^2 Gamma",
    "omega_v": "init scale of a wide value matrix (value = matrix)",
    "sigma_r": "init scale of the readout vectors (value = matrix)",
    "neuron_init": "`zero`, `const:V1,...,VP` or `gaussian:SIGMA`: the narrow neuron / value vectors at t = 0",
    "relu_prime_at_zero": "ReLU'(0), one of 0, 0.5, 1",
    "record_every": "record every N steps (solver steps for flow)",
    "record_log": "record at N log-spaced steps / times",
    "record_dt": "flow / rk4: record every DT time units",
    "stage_steps": "gd: every `[[training.stages]]`'s length, in order (`--stage-steps 100,2000`)",
    "stage_times": "flow / rk4: every stage's time, in order",
}

#: meanings of the head options (:class:`Head` fields); every field needs one
_HEAD = {
    "mask": "`none` or `causal`: query l attends only to keys i <= l (`meanfield.engine.positions`)",
    "rpe": "R > 0: trainable relative positional biases b[l - i] for |l - i| < R added to the logits "
           "(`meanfield.engine.positions`)",
    "init_W": "kq = merged: W~ at t = 0 (P x P; default 0; `meanfield.engine.inits`)",
    "init_w": "the value vectors at t = 0 (P numbers; default: `neuron_init`)",
    "init_gram": "Gram blocks at t = 0 at infinite width, a table block name -> matrix",
    "name": "the head's name (default h1, h2, ...): how runs and bounds name its variables",
    "attention": f"{_choices(ATTENTIONS)}: p_i = c_i exp(z_i) / sum_j c_j exp(z_j), or p_i = c_i z_i / L_eff",
    "kq": f"{_choices(KQ)}: wide W_K, W_Q (Gram blocks S, A, B) or one narrow merged W = W_K^T W_Q (0 at init)",
    "query": f"{_choices(QUERIES)}: every position a query (averaged), the last position, or `query_vector`",
    "query_vector": "with query = fixed: the query's coefficients over the features (P numbers)",
    "query_self": "with query = last: false leaves the query position out of the keys",
    "scale": "multiplies the logits z_i = scale x_i^T S x_q",
    "value": f"{_choices(VALUES)}: ReLU neuron, linear value, wide value matrix read by readouts, or the attended "
             "token itself (P outputs)",
    "n_neurons": "value = neuron: neurons sharing the head's attention (mean field over neurons, step eta x n)",
    "outputs": "outputs C (classes); value = token has P",
    "sign": "the head's output multiplier a_j",
    "train_sign": "whether the sign trains (stage group `signs`)",
}


def _type_of(f: dataclasses.Field) -> str:
    t = str(f.type).replace("tuple[float, ...]", "list of float").replace("tuple", "list")
    return t.replace(" | None", " or none")


def _default_of(f: dataclasses.Field) -> str:
    if f.name == "width":
        return "`inf`"
    d = f.default
    if d is dataclasses.MISSING:
        return "required"
    if d is None:
        return "none"
    if isinstance(d, bool):
        return "true" if d else "false"
    return f"`{d}`" if isinstance(d, str) else str(d)


def _from_dataclass(cls, meanings: dict, table: str, skip=()) -> list[Key]:
    out = []
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        if f.name not in meanings:
            raise KeyError(f"{table}.{f.name}: no meaning in meanfield/engine/schema.py (add one)")
        out.append(Key(f.name, _type_of(f), _default_of(f), meanings[f.name]))
    return out


def reference() -> list[tuple[str, str, list[Key]]]:
    """Every table of a general description with its keys.

    Returns
    -------
    list of (str, str, list of Key)
        (table as written in TOML, what the table is, its keys) in file order.

    Raises
    ------
    KeyError
        When a dataclass field the loader accepts has no written meaning here
        (so a new option cannot reach the docs undocumented).

    Examples
    --------
    >>> tables = dict((t, keys) for t, _, keys in reference())
    >>> [k.name for k in tables["[model]"]]
    ['loss']
    """
    from .objects import RunParams, TOP_KEYS

    top_meaning = {
        "name": ("str", "the file's stem", "the model's name (run files, `check` finds a shipped model's claims by it)"),
        "family": ("str", "none", "a registered family (`mixture`, or one a plug-in registers): `[parameters]` "
                   "then holds the family's config fields and the family builds dictionary, data, heads, model "
                   "and training"),
        "plugins": ("array of str", "none", "modules to import before the description is read (each registers "
                    "families, claims or commands with `meanfield.engine.registry`), e.g. `[\"my_pkg.my_family\"]`"),
        "parameters": ("table", "empty", "run knobs (below) and the model's own declared parameters"),
        "dictionary": ("table", "required", "the feature names and their Gram matrix"),
        "data": ("table", "required", "the finite weighted set of sequences"),
        "test": ("table", "none", "a held-out set, never trained on: the same keys as `[data]` (or a `train_frac` "
                 "split of `[data]`); runs record its loss and margins (`meanfield.engine.heldout`)"),
        "positions": ("table", "none", "absolute positional features: the dictionary is enlarged by one feature "
                      "per position (`meanfield.engine.positions`)"),
        "heads": ("array of tables", "required", "one `[[heads]]` table per attention head"),
        "model": ("table", "empty", "the loss"),
        "training": ("table", "empty", "the stages (`[[training.stages]]`)"),
    }
    groups = ", ".join(f"`{g}`" for g in GROUPS) + " (aliases: " + ", ".join(
        f"`{a}` = `{g}`" for a, g in GROUP_ALIASES.items()) + ")"
    return [
        ("top level", "the file's top-level keys", [Key(k, *top_meaning[k]) for k in TOP_KEYS]),
        ("[parameters]", "run knobs: every one is also a CLI flag (`--record-every`) and a keyword of "
         "`meanfield.engine.load`. Any other key is a declared parameter `name = default` (its type is the "
         "default's), referenced elsewhere as a whole string value `\"$name\"`",
         _from_dataclass(RunParams, _RUN_KNOBS, "parameters")),
        ("[dictionary]", "the features", [
            Key("features", "list of str, or `{prefix, count}` or `{function, args}`", "required",
                "feature names; `{prefix = \"v\", count = \"$K\"}` makes v1..vK; `{function = \"pkg.mod:fn\", args "
                "= {...}}` imports a function by name (never evaluated) that returns them"),
            Key("gram", "P x P matrix", "identity", "the Gram matrix Gamma = E^T E (symmetric positive definite)"),
            Key("trainable", "bool", "false", "trainable token embeddings E: the state holds the ambient Gram of the "
                "wide weights and E (docs/engine.md, Trainable embeddings); the rate group `embeddings`"),
            Key("ambient", "int >= P", "P", "the embeddings' ambient dimension d (only with `trainable`)"),
        ]),
        ("[data]", "the data set: exactly one of `rows` and `function`", [
            Key("rows", "array of tables", "-", "the sequences, one table each (keys below)"),
            Key("function", "`\"package.module:function\"`", "-", "imported by name and called with `features` and "
                "`args`; returns a dict with tokens, target (optionally weight, counts, names, flags) or a Data"),
            Key("args", "table", "empty", "keyword arguments of `function`"),
            Key("train_frac", "float in (0, 1)", "none", "train on this fraction of the rows and hold out the rest "
                "as the test set (instead of a `[test]` table)"),
            Key("split_seed", "int >= 0", "0", "with `train_frac`: the seed of the split"),
        ]),
        ("[data] rows = [ {...} ]", "one sequence", [
            Key("tokens", "list of tokens", "required", "a token is a signed 1-based feature index (`2`, `-3`), a "
                "feature name with an optional sign (`\"c1\"`, `\"-v2\"`) or P coefficients"),
            Key("target", "number or list", "required", "label +-1 (logistic), a real or a vector (squared), a "
                "class index (cross_entropy)"),
            Key("weight", "float >= 0", "1", "the sequence's weight (normalised over the data set)"),
            Key("counts", "list of float >= 0", "all 1", "a position stands for `count` identical tokens (0 = "
                "padding)"),
            Key("name", "str", "x0, x1, ...", "the sequence's name in run files"),
            Key("flags", "table of bool", "none", "named flags, e.g. `consistent`, `flipped` (margins of flipped "
                "sequences do not count for stage times)"),
        ]),
        ("[[heads]]", "one attention head (`meanfield.engine.objects.Head`)", _from_dataclass(Head, _HEAD, "heads")),
        ("[model]", "the loss", [
            Key("loss", _choices(LOSSES), "`logistic`", "logistic (one output, targets +-1), squared, or softmax "
                "cross-entropy (outputs >= 2, class-index targets)"),
        ]),
        ("[training]", "the stages", [
            Key("stages", "array of tables", "one stage training everything",
                "`[[training.stages]]`: stages in order (keys below)"),
        ]),
        ("[[training.stages]]", "one stage", [
            Key("name", "str", "stage1, stage2, ...", "the stage's name (stage_ends, outcome lines)"),
            Key("train", "list of groups", "every group", "what trains in the stage: " + groups),
            Key("steps", "int >= 0", "required with gd", "the stage's length (a cap when `criterion` is given)"),
            Key("time", "float >= 0", "required with flow / rk4", "the stage's length in time"),
            Key("criterion", "`NAME>=X` or `NAME<=X`", "none", "ends the stage early; NAME in "
                + ", ".join(f"`{c}`" for c in CRITERIA)),
            Key("eta", "number or table of group rates", "the run's eta", "the stage's step size, or rates per "
                "group (`{keys = 0.05, default = 0.2}`; `meanfield.engine.rates`)"),
            Key("eta_schedule", "str", "none", "the stage's learning-rate schedule (k from the stage's start): "
                "`cosine`, `step:E:G`, `warmup:W+cosine`, `inverse:T0`"),
        ]),
    ]


def markdown() -> str:
    """The description reference as Markdown tables (one per table).

    Returns
    -------
    str
        Markdown: for each table a heading, a sentence and a table of key,
        type, default and meaning.

    Examples
    --------
    >>> "| `loss` |" in markdown()
    True
    """
    from .parsing import OUT_OF_CLASS as _OUT_OF_CLASS

    out = []
    for table, what, keys in reference():
        out += [f"## `{table}`" if table != "top level" else "## Top level", "", what[0].upper() + what[1:] + ".", "",
                "| key | type | default | meaning |", "|---|---|---|---|"]
        out += [f"| `{k.name}` | {k.type} | {k.default} | {k.meaning} |" for k in keys]
        out.append("")
    out += ["## Keys refused with a reason", "",
            "These keys (in `[model]` or a head) describe a model outside the Gram-closure class; the loader "
            "refuses them with the reason closure fails, exit 2 (see [the engine](engine.md)).", "",
            "| key | why it is outside the class |", "|---|---|"]
    out += [f"| `{k}` | {why} |" for k, why in _OUT_OF_CLASS.items()]
    from .twolayer_desc import KEYS as _TL, NOT_CLOSED as _TL_NO  # the second model class (engine/twolayer_desc)

    out += ["## Two-layer descriptions (`[model] class = \"twolayer\"`)", "",
            "The second model class (small-parameter two-layer attention, [the engine](engine.md), \"Two-layer "
            "attention\"): its own tables and keys.", ""]
    for table, keys in _TL.items():
        out += [f"### `{table}`" if table != "top level" else "### Top level", "",
                "| key | type | default | meaning |", "|---|---|---|---|"]
        out += ["| " + " | ".join(c.replace("|", "\\|") for c in (f"`{k}`", t, d, m)) + " |"
                for k, (t, d, m) in keys.items()]
        out.append("")
    out += ["### Two-layer keys refused with a reason", "", "| key | why |", "|---|---|"]
    out += [f"| `{k}` | {why} |" for k, why in _TL_NO.items()]
    return "\n".join(out) + "\n"


def check_description_numbers(raw: dict, params_class=None) -> None:
    """Every number-typed key of a description, walked from its schema
    (``meanfield.engine.schema.reference``: the keys' types; ``[parameters]``
    from its parameter class, a family's own included): a TOML string there
    (``steps = "100"``) is one line naming the key and its type
    (:func:`meanfield.core.config.check_toml_numbers`). ``"$name"`` references
    and ``width = "inf"`` stay allowed.

    Parameters
    ----------
    raw : dict
        The description as read from TOML, before its parameters are resolved.
    params_class : type, optional
        The dataclass of its ``[parameters]`` (``meanfield.engine.description.parameter_class(raw)``;
        a family's own); default :class:`~meanfield.engine.objects.RunParams`.

    Returns
    -------
    None
        Raises ConfigError.

    Example
    -------
    >>> check_description_numbers({"parameters": {"steps": 10}, "heads": [{"scale": 2.0}]})
    """
    import dataclasses

    from ..core.config import check_toml_numbers, field_types
    from .objects import RunParams

    tables = {t: {k.name: k.type for k in keys} for t, _, keys in reference()}
    inf = {"width": ("inf",)}
    if not isinstance(raw, dict):
        return
    params = raw.get("parameters")
    if isinstance(params, dict):
        cls = params_class if params_class is not None else RunParams
        types = field_types(cls) if dataclasses.is_dataclass(cls) else tables["[parameters]"]
        check_toml_numbers("parameters", params, types, inf)
    if isinstance(raw.get("dictionary"), dict):
        check_toml_numbers("dictionary", raw["dictionary"], tables["[dictionary]"])
    for name in ("data", "test"):
        tab = raw.get(name)
        if not isinstance(tab, dict):
            continue
        check_toml_numbers(name, tab, tables["[data]"])
        rows = tab.get("rows")
        for i, row in enumerate(rows if isinstance(rows, list) else []):
            check_toml_numbers(f"{name}.rows[{i}]", row, tables["[data] rows = [ {...} ]"])
    heads = raw.get("heads")
    for i, h in enumerate(heads if isinstance(heads, list) else []):
        check_toml_numbers(f"heads[{i}]", h, tables["[[heads]]"])
    training = raw.get("training")
    stages = training.get("stages") if isinstance(training, dict) else None
    for i, st in enumerate(stages if isinstance(stages, list) else []):
        check_toml_numbers(f"training.stages[{i}]", st, tables["[[training.stages]]"])
