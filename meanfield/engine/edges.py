"""Guards of the ``meanfield model ...`` verbs (issue 14 applied to the engine).

The same mechanisms as ``meanfield mixture ...`` (``meanfield.core.guard``):

* inapplicable options: :data:`ENGINE_ONLY` is the general descriptions'
  table for :func:`meanfield.core.guard.check_applicable` (same rule, same
  wording as a paper's own commands); a registered family is checked by its
  ``check_options`` hook (``meanfield.engine.registry``). A flag is checked against the run it configures; a
  key of the description's ``[parameters]`` against the description as
  written (its own method), so a flag such as ``--method flow`` never turns
  the file's defaults into errors.
* sizes: :func:`engine_estimate` (memory and time of a general description's
  run from its sizes: sequences n x L tokens x P features x records; the
  explicit network's m x d weights) through :func:`meanfield.core.guard.check_size`;
  a registered family through its ``size_first`` hook
  (:func:`family_size_first`) before it builds its data; a general description through
  :func:`description_size_first` before its features and data are built
  (from its declared parameters), and again once they are.

Every refusal is a one-line :class:`meanfield.core.config.ConfigError` (exit 2).
"""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

from ..core.guard import check_applicable, check_size
from ..core.limits import _T_CALL, _T_SAMPLE

_STAGED = "staged runs: each stage's own length and criterion"

#: key -> (predicate on (method, schedule, referenced), what it needs): meanfield.core.guard's rule, general descriptions
ENGINE_ONLY = {
    "t_end": (lambda c: c.method != "gd" and (c.schedule == "simultaneous" or "t_end" in c.referenced),
              "method flow or rk4 without [[training.stages]] (gd runs use steps; staged: each stage's length)"),
    "steps": (lambda c: c.schedule == "simultaneous" or "steps" in c.referenced,
              f"a description without [[training.stages]] ({_STAGED}, or stage_steps)"),
    "criterion": (lambda c: c.schedule == "simultaneous" or "criterion" in c.referenced,
                  f"a description without [[training.stages]] ({_STAGED})"),
    "dt": (lambda c: c.method == "rk4", "method rk4"),
    "rtol": (lambda c: c.method == "flow", "method flow"),
    "atol": (lambda c: c.method == "flow", "method flow"),
    "h_min": (lambda c: c.method == "flow", "method flow"),
}

_REF = re.compile(r"^\$([A-Za-z_][A-Za-z0-9_]*)$")


def referenced(raw) -> set[str]:
    """Names referenced as a whole value ``"$name"`` anywhere in a description."""
    out: set[str] = set()

    def walk(v):
        if isinstance(v, str):
            m = _REF.match(v)
            if m:
                out.add(m.group(1))
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk({k: v for k, v in raw.items() if k != "parameters"})
    return out


def _table(raw) -> dict:
    return {str(k).replace("-", "_"): v for k, v in dict(raw.get("parameters") or {}).items()}


def flag_pairs(given: dict, flags: dict) -> dict:
    """A horizon given by flag replaces the file's step count (for flow / rk4
    steps x eta is only the default t_end): the file's value is not 'given'."""
    g = dict(given)
    for steps_key, time_key in (("steps", "t_end"), ("stage_steps", "stage_times")):
        if time_key in flags and steps_key not in flags:
            g.pop(steps_key, None)
    return g


def check_options(raw: dict, flags: dict, desc=None) -> None:
    """Refuse an option the run ignores (one rule, ``meanfield.core.guard``'s).
    ``raw``: the description as read; ``flags``: the overrides given on the
    command line (run knobs and declared parameters); ``desc``: the built
    description (general descriptions: its parameters' method)."""
    table = _table(raw)
    if raw.get("family") is not None:  # a registered family checks its own options (meanfield.engine.registry)
        from . import registry

        hook = registry.family(raw["family"]).hook("check_options")
        if hook is not None:
            hook(table, flags)
        return
    from .description import declared_parameters

    declared = set(declared_parameters(raw))
    stages = (raw.get("training") or {}).get("stages") if isinstance(raw.get("training"), dict) else None
    refs = referenced(raw)
    sched = "staged" if stages else "simultaneous"
    file_knobs = {k: v for k, v in table.items() if k not in declared and v is not None}
    file_cfg = SimpleNamespace(method=str(file_knobs.get("method", "gd")), schedule=sched, referenced=refs)
    check_applicable(file_knobs, file_cfg, rules=ENGINE_ONLY)
    method = desc.parameters.method if desc is not None else str(flags.get("method") or file_cfg.method)
    cfg = SimpleNamespace(method=method, schedule=sched, referenced=refs)
    given = {k: v for k, v in flags.items() if k not in declared and v is not None}
    check_applicable(flag_pairs(given, given), cfg, rules=ENGINE_ONLY)


# ------------------------------------------------------------------ sizes


def _records(tr) -> float:
    H = float(tr.horizon)
    if tr.record_log is not None:
        return tr.record_log + 4.0 + len(tr.stages)
    if tr.record_dt is not None:
        return H / tr.record_dt + 4.0 + len(tr.stages)
    if tr.record_every is not None:
        return H / tr.record_every + 4.0 if tr.method == "gd" else 1e3  # flow: solver steps, unknown in advance
    return 1004.0 + len(tr.stages)


def engine_estimate(desc, particles_d: int | None = None, copies: float = 1.0) -> dict:
    """Estimated peak memory (bytes) and compute time (s) of a general
    description's run from its sizes, floats so that absurd sizes do not
    overflow. Records: the state (per head 4 P^2 Gram blocks + C n_neurons P
    value entries) and the observables (margins, n x heads x outputs of u),
    three copies (trajectory, observables, file buffers). A step evaluates
    every sequence's attention: n L^2 P per head (the mixture's cost model,
    ``meanfield.core.limits._T_SAMPLE``). The explicit network (``particles``)
    adds its m x d weights (W_K and W_Q of a separate head, M_V of a matrix
    value; a merged head's d x d W has no width) and the n L d embedded tokens."""
    d = desc.data
    n, L, P = float(d.n), float(d.L), float(desc.dictionary.P)
    heads = desc.model.heads
    H = float(len(heads))
    rows = sum(float(h.outputs * h.n_neurons) for h in heads)
    state = H * 4.0 * P * P + rows * P
    per_record = state + n * (1.0 + rows)
    T = _records(desc.training)
    mem = 8.0 * (3.0 * T * per_record + 4.0 * n * L * P + 20.0 * state)
    per_eval = _T_SAMPLE * n * L * L * P * H * max(1.0, rows / H) + _T_CALL
    tr = desc.training
    if tr.method == "gd":
        steps = float(tr.horizon)
    elif tr.method == "rk4":
        steps = 4.0 * float(tr.horizon) / float(tr.dt if tr.dt is not None else tr.eta)
    else:
        steps = 0.0  # adaptive: not known in advance
    if particles_d is not None:
        m = float(desc.init.width or 0)
        # the m x d weights (W_K, W_Q of a separate head, M_V of a matrix value) per head; a merged head's
        # W is d x d and a token / neuron value has no width: such a head's pass costs n L d^2, whatever m
        wide = sum(m * ((h.kq == "separate") + (h.value == "matrix")) for h in heads)
        dd = float(particles_d)
        mem += 8.0 * (3.0 * (wide + H * dd) * dd + 4.0 * n * L * dd)
        # seconds per unit: 5e-9 for the m x d products, 2e-9 for the d x d ones (measured on 2 cores:
        # incontext m 4 and 256, 3000 steps, 3.5 ms a step against the reduced 1.4 ms)
        per_eval += n * L * dd * (5e-9 * wide + 2e-9 * H * dd)
    return {"n_samples": n, "records": T, "bytes": mem, "steps": steps, "seconds": steps * per_eval * copies}


def check_engine_size(desc, force: bool = False, particles_d: int | None = None, copies: float = 1.0,
                      est: dict | None = None) -> dict:
    est = engine_estimate(desc, particles_d, copies) if est is None else est
    name = str(desc.name) if len(str(desc.name)) <= 24 else str(desc.name)[:22] + ".."
    size = f"{est['n_samples']:.3g} seqs x L {float(desc.data.L):.3g}, P {float(desc.dictionary.P):.3g}"
    what = (f" ({name}: {size}, {est['records']:.3g} records, {est['steps']:.3g} steps"
            + (f", m {float(desc.init.width or 0):.3g}, d {float(particles_d):.3g}" if particles_d is not None else "")
            + (f", {copies:.3g} runs" if copies not in (0, 1) else "") + ")")
    if copies == 0:  # derive: the description's data only, no steps
        what = f" ({name}: {size})"
    check_size(est, "size", force, what)
    return est


def family_size_first(raw: dict, flags: dict, force: bool, **size) -> None:
    """A registered family: refuse an absurd size from its parameters alone
    (file and flags), before it builds anything (its ``size_first`` hook;
    none registered: nothing to check here)."""
    from . import registry

    hook = registry.family(raw["family"]).hook("size_first")
    if hook is None:
        return
    vals = {**{k: v for k, v in _table(raw).items() if v is not None},
            **{k: v for k, v in flags.items() if v is not None}}
    hook(vals, force, **size)


# ------------------------------------------------------------------ sizes before the data are built

def arg_number(args: dict, name: str, default=None) -> float:
    """A data builder's numeric argument ``name`` (for a size estimate; ValueError if absent or not a number)."""
    v = args.get(name, default)
    if isinstance(v, bool) or v is None:
        raise ValueError(name)
    return float(v)


def log_comb(a: float, b: float) -> float:
    """log C(a, b) for floats (lgamma), without forming the number."""
    return math.lgamma(a + 1.0) - math.lgamma(b + 1.0) - math.lgamma(a - b + 1.0)


def _builder(ref):
    """The imported builder ``package.module:function`` (None if it does not import)."""
    import importlib

    mod, _, fn = str(ref).partition(":")
    try:
        return getattr(importlib.import_module(mod), fn)
    except (ImportError, AttributeError, ValueError):
        return None


def _feature_count(v) -> float | None:
    from ..core.config import as_int

    if isinstance(v, list):
        return float(len(v))
    if isinstance(v, dict) and set(v) == {"prefix", "count"}:
        return float(as_int("dictionary.features.count", v["count"], lo=1))
    if isinstance(v, dict) and "function" in v:
        args = v.get("args") or {}
        from . import registry

        f = registry.feature_count(str(v["function"]))
        if f is not None:
            return f(args)
        est = getattr(_builder(v["function"]), "size_estimate", None)
        return float(est(**args)) if callable(est) else None
    return None


def _data_size(data, P: float):
    """(log n, L) of a description's [data] table before it is built, or None."""
    if not isinstance(data, dict):
        return None
    rows = data.get("rows")
    if isinstance(rows, list) and rows:  # already in memory (the file is capped at CONFIG_MAX_BYTES)
        L = max((len(r.get("tokens", [])) if isinstance(r, dict) else 0) for r in rows)
        return math.log(len(rows)), float(max(L, 1))
    if "function" in data:
        args = data.get("args") or {}
        from . import registry

        f = registry.data_size(str(data["function"]))
        if f is not None:
            return f(P, args)
        est = getattr(_builder(data["function"]), "size_estimate", None)
        if callable(est):
            n, L = est(P, **args)
            return math.log(max(float(n), 1.0)), float(L)
    return None


def description_size_first(raw: dict, flags: dict, force: bool, particles_d=None, copies: float = 1.0,
                           width=None) -> dict | None:
    """A general description: refuse an absurd size from its declared
    parameters, BEFORE its features and data are built (``--N 1e8``,
    ``--n 1e8``, ``--K 1e8`` would otherwise allocate or loop first). The
    sequence count, their length and the feature count come from the
    registered builders' formulas (``meanfield.engine.registry.register_data_size``)
    or a builder's own ``size_estimate``; the heads and training from the
    description itself (cheap: no data). Memory: :func:`engine_estimate` plus
    the data being built (tokens, counts, names). A description whose size
    cannot be known in advance (a builder without an estimate) or that is
    malformed is left to the build (which names the field) and to
    :func:`check_engine_size` after it. Returns the estimate or None."""
    from ..core.config import ConfigError
    from .description import make_head, make_params, resolve_parameters, training_from

    try:
        res, run_over, _ = resolve_parameters(raw, flags)
        params_raw = {str(k).replace("-", "_"): v for k, v in dict(res.get("parameters") or {}).items()}
        params_raw.update({k: v for k, v in run_over.items() if v is not None})
        params = make_params(params_raw)
        P = _feature_count((res.get("dictionary") or {}).get("features"))
        if P is None or not P >= 1:
            return None
        size = _data_size(res.get("data"), P)
        if size is None:
            return None
        log_n, L = size
        heads_raw = res.get("heads")
        if not isinstance(heads_raw, list) or not heads_raw:
            return None
        heads = [make_head(h, i, int(min(P, 1e12))) for i, h in enumerate(heads_raw)]
        traw = res.get("training") or {}
        training = training_from(params, traw.get("stages") if isinstance(traw, dict) else None, heads)
    except (ConfigError, ValueError, TypeError, KeyError, OverflowError, AttributeError):
        return None
    n = math.exp(min(log_n, 700.0))
    lite = SimpleNamespace(name=str(raw.get("name", "model")), data=SimpleNamespace(n=n, L=L),
                           dictionary=SimpleNamespace(P=P), model=SimpleNamespace(heads=heads), training=training,
                           init=SimpleNamespace(width=width if width is not None else params.width))
    d = (int(P) + 2 if P < 1e15 else P + 2) if particles_d is True else particles_d
    est = engine_estimate(lite, d, copies)
    est["bytes"] += n * L * (8.0 * P + 120.0) + 100.0 * n  # the data while they are built: tokens, counts, names
    return check_engine_size(lite, force, d, copies, est=est)
