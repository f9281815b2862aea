"""Learning rates per parameter group, per stage, and learning-rate schedules (``meanfield.engine.rates``).

What a description says (``docs/engine.md``, "Learning rates: groups, stages,
schedules"):

* ``[parameters] eta``: the run's step size (as before);
* ``[parameters] group_eta``: a rate per group for the whole run, a table
  ``{keys = 0.1, values = 2}`` or the string ``"keys=0.1,values=2"`` (flag
  ``--group-eta keys=0.1,values=2``);
* ``[[training.stages]] eta``: a number (the stage's step size) or a table of
  group rates (``{keys = 0.05, default = 0.2}``; ``default`` is the stage's
  step size);
* ``eta_schedule``: a multiplier s(k) of every rate at step k, on the run
  (``[parameters] eta_schedule``, flag ``--eta-schedule``; k counts from the start
  of the run, horizon the sum of the stage lengths) or on a stage
  (``eta_schedule`` in ``[[training.stages]]``: k counts from the stage's start,
  horizon its length).

Groups: ``keys`` (W_K), ``queries`` (W_Q), ``values`` (alias ``neurons``: w, M_V),
``readout`` (r), ``signs`` (a), ``positions`` (relative positional biases b, which
train in the stages that train ``attention``); ``attention`` sets keys and queries (and is the
rate of a merged W = W_K^T W_Q, which needs equal keys and queries rates).
The rate of group g in a stage: the stage's table entry for g, else the run's
``group_eta`` entry, else the stage's step size (its number or ``default``),
else the run's ``eta``. Its step size at step k is that rate times s(k).

Schedules (s(k), k = 0, 1, ... the step within the scope, H its length;
composed with ``+``: ``warmup:W+cosine`` warms up for W steps and then runs
the cosine over the remaining H - W):

* ``constant``: 1;
* ``step:EVERY:GAMMA``: GAMMA^floor(k / EVERY);
* ``cosine`` or ``cosine:MIN``: MIN + (1 - MIN) (1 + cos(pi k / H)) / 2 (MIN a fraction, default 0);
* ``warmup:W``: (k + 1) / W for k < W, then 1 (or the schedule after ``+``);
* ``inverse:T0`` (alias ``1/t:T0``): 1 / (1 + k / T0).

The GD map with a rate per group (derivation in ``docs/engine.md``): with H the
block-diagonal matrix of the rates of the wide objects (0 for the untrained),
U' = U (I - Ghat Gamma_r H), Q' = (I - H Gamma_r Ghat) Q (I - Ghat Gamma_r H);
the engine's kernel computes it unchanged with its block metric Gamma_r
replaced by Gamma_r (H / eta) (H and Gamma_r commute: both are block diagonal
on the same blocks) and its step eta; narrow objects step with their own rate.
"""

from __future__ import annotations

import math
import re

import numpy as np

from ..core.config import ConfigError, as_float

#: the groups that can have a rate of their own (and what each moves)
RATE_GROUPS = ("keys", "queries", "values", "readout", "signs", "positions", "embeddings")
RATE_ALIASES = {"neurons": ("values",), "neuron": ("values",), "value": ("values",), "attention": ("keys", "queries"),
                "kq": ("keys", "queries"), "sign": ("signs",), "key": ("keys",), "query": ("queries",)}
#: explicit weights of the explicit network (``meanfield.engine.oracle``) -> the group whose rate they step with
WEIGHT_GROUP = {"WK": "keys", "WQ": "queries", "W": "keys", "w": "values", "MV": "values", "r": "readout",
                "a": "signs", "b": "positions", "E": "embeddings"}
SCHEDULES = ("constant", "step", "cosine", "warmup", "inverse")
_NUM = r"[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?"


def _rate(where: str, v) -> float:
    if isinstance(v, bool):
        raise ConfigError(f"{where}: a learning rate must be a number >= 0; got {v!r}")
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: a learning rate must be a number >= 0; got {v!r}") from None
    if not math.isfinite(x) or x < 0:
        raise ConfigError(f"{where}: a learning rate must be a finite number >= 0; got {v!r}")
    return x


def parse_group_eta(where: str, v, allow_default: bool = False) -> tuple[tuple[str, float], ...]:
    """Group rates from a table ``{keys = 0.1, values = 2}`` or a string
    ``"keys=0.1,values=2"``: sorted (group, rate) pairs over :data:`RATE_GROUPS`
    (aliases expanded; ``default`` kept when ``allow_default``). One-line
    ConfigError naming the field for an unknown group or a bad rate."""
    if v is None:
        return ()
    if isinstance(v, str):
        items = {}
        for part in [p for p in v.replace(" ", "").split(",") if p]:
            k, sep, x = part.partition("=")
            if not sep:
                k, sep, x = part.partition(":")
            if not sep:
                raise ConfigError(f"{where}: must be GROUP=RATE,... (e.g. keys=0.1,values=2); got {v!r}")
            items[k] = x
        v = items
    if not isinstance(v, dict):
        raise ConfigError(f"{where}: must be a table of group rates (e.g. {{keys = 0.1, values = 2}}); got {v!r}")
    allowed = RATE_GROUPS + tuple(RATE_ALIASES) + (("default",) if allow_default else ())
    out: dict[str, float] = {}
    for k, x in v.items():
        k = str(k)
        if k not in allowed:
            raise ConfigError(f"{where}: unknown group '{k}'; allowed: {', '.join(allowed)}")
        r = _rate(f"{where}.{k}", x)
        for g in RATE_ALIASES.get(k, (k,)):
            if g in out and out[g] != r:
                raise ConfigError(f"{where}: two rates for {g} ({out[g]:g} and {r:g})")
            out[g] = r
    return tuple(sorted(out.items()))


def format_group_eta(pairs) -> str | None:
    """The normalised string of group rates (None when empty)."""
    return ",".join(f"{g}={r!r}" for g, r in pairs) if pairs else None


def parse_schedule(where: str, v) -> str | None:
    """A schedule string (module docstring), validated and normalised
    (``1/t`` -> ``inverse``); None for none or ``constant``."""
    if v is None:
        return None
    s = str(v).replace(" ", "").lower()
    parts = s.split("+")
    out = []
    for i, p in enumerate(parts):
        name, _, rest = p.partition(":")
        if name == "1/t":
            name = "inverse"
        args = rest.split(":") if rest else []
        bad = f"{where}: {p!r} is not a schedule; allowed: constant, step:EVERY:GAMMA, cosine[:MIN], warmup:W, " \
              f"inverse:T0 (1/t:T0), composed with + after a warmup"
        if name not in SCHEDULES or not all(re.fullmatch(_NUM, a) for a in args):
            raise ConfigError(bad)
        nums = [float(a) for a in args]
        if name == "constant" and nums:
            raise ConfigError(bad)
        if name == "step" and (len(nums) != 2 or nums[0] < 1 or nums[0] != int(nums[0]) or nums[1] <= 0):
            raise ConfigError(f"{where}: step needs step:EVERY:GAMMA with EVERY a positive integer, GAMMA > 0; got {p!r}")
        if name == "cosine" and (len(nums) > 1 or (nums and not 0 <= nums[0] <= 1)):
            raise ConfigError(f"{where}: cosine takes one optional MIN in [0, 1] (a fraction of the rate); got {p!r}")
        if name == "warmup" and (len(nums) != 1 or nums[0] < 1 or nums[0] != int(nums[0])):
            raise ConfigError(f"{where}: warmup needs warmup:W with W a positive integer (steps); got {p!r}")
        if name == "inverse" and (len(nums) != 1 or nums[0] <= 0):
            raise ConfigError(f"{where}: inverse (1/t) needs inverse:T0 with T0 > 0 (steps); got {p!r}")
        if name == "warmup" and i == len(parts) - 1 and len(parts) > 1:
            raise ConfigError(f"{where}: a warmup composes with the schedule after it (warmup:W+cosine); got {s!r}")
        if name != "warmup" and i < len(parts) - 1:
            raise ConfigError(f"{where}: only a warmup may come before + (warmup:W+cosine); got {s!r}")
        out.append(":".join([name] + [a for a in args]))
    norm = "+".join(out)
    return None if norm == "constant" else norm


def schedule_factor(spec: str | None, k: int, horizon: float) -> float:
    """s(k) of a normalised schedule (:func:`parse_schedule`) at step ``k`` of a
    scope of ``horizon`` steps."""
    if spec is None:
        return 1.0
    f = 1.0
    for p in spec.split("+"):
        name, _, rest = p.partition(":")
        nums = [float(a) for a in rest.split(":")] if rest else []
        if name == "warmup":
            W = int(nums[0])
            if k < W:
                return f * (k + 1) / W
            k -= W
            horizon -= W
            continue
        if name == "step":
            return f * nums[1] ** (k // int(nums[0]))
        if name == "cosine":
            lo = nums[0] if nums else 0.0
            return f * (lo + (1.0 - lo) * 0.5 * (1.0 + math.cos(math.pi * min(k, horizon) / max(horizon, 1.0))))
        if name == "inverse":
            return f / (1.0 + k / nums[0])
    return f


def stage_group_rates(training, stage) -> dict[str, float]:
    """The rate of every group of :data:`RATE_GROUPS` in ``stage`` of ``training``
    (an engine ``Training`` and one of its ``StageSpec``; precedence in the module
    docstring), before the schedule."""
    base = stage_base_eta(training, stage)
    rates = {g: base for g in RATE_GROUPS}
    rates.update(dict(getattr(training, "group_eta", ()) or ()))
    rates.update(dict(getattr(stage, "group_eta", ()) or ()))
    return rates


def stage_base_eta(training, stage) -> float:
    """A stage's step size (the time a GD step adds): its own ``eta``, else the run's."""
    e = getattr(stage, "eta", None)
    return float(training.eta if e is None else e)


def has_rates(training) -> bool:
    """Whether ``training`` uses group rates, per-stage step sizes or a schedule."""
    return bool(getattr(training, "group_eta", ()) or getattr(training, "eta_schedule", None) or any(
        getattr(s, "eta", None) is not None or getattr(s, "group_eta", ()) or getattr(s, "eta_schedule", None)
        for s in training.stages))


def stage_schedule(training, i: int):
    """(schedule, first step of its scope, its horizon) for stage ``i``: the stage's own
    (counted from the stage's start, which the caller knows only at run time: None
    here) or the run's (from step 0, horizon the sum of the stage lengths)."""
    st = training.stages[i]
    if getattr(st, "eta_schedule", None):
        return st.eta_schedule, None, float(st.length)
    if getattr(training, "eta_schedule", None):
        return training.eta_schedule, 0, float(training.horizon)
    return None, 0, 0.0


def check_training(training, heads) -> None:
    """One-line refusals: a schedule or per-stage step size with the flow (time is
    time: a schedule only reparametrises the flow's time), a merged head with
    different keys and queries rates (W = W_K^T W_Q is one narrow matrix)."""
    flow = training.method != "gd"
    if getattr(training, "normalise", "none") != "none" and has_rates(training):
        raise ConfigError("normalise: not with group rates, per-stage eta or an eta schedule (normalised GD steps "
                          "every parameter by eta along its unit gradient); use one or the other")
    if flow and getattr(training, "eta_schedule", None):
        raise ConfigError(f"eta_schedule: only for method gd, not {training.method} (a schedule only reparametrises "
                          "the flow's time; the trajectory is the constant-rate one)")
    for i, st in enumerate(training.stages):
        if flow and getattr(st, "eta_schedule", None):
            raise ConfigError(f"training.stages[{i}].eta_schedule: only for method gd (a schedule of the flow only "
                              "reparametrises its time)")
        if flow and getattr(st, "eta", None) is not None:
            raise ConfigError(f"training.stages[{i}].eta: a stage step size is for method gd; the flow's time is "
                              "time (give group rates relative to the run's eta instead)")
        if any(h.kq == "merged" for h in heads):
            r = stage_group_rates(training, st)
            if r["keys"] != r["queries"]:
                field = f"training.stages[{i}].eta" if st.group_eta else "group_eta"
                raise ConfigError(f"{field}: keys rate {r['keys']:g} != queries rate {r['queries']:g}, "
                                  "but a merged head's W = W_K^T W_Q is one narrow matrix with one rate; give attention = RATE")


def rate_arrays(lay, training, stage) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's (Gr, hf) for ``stage``: the block metric Gamma_r with each wide
    object's columns scaled by rho = rate / base (Gamma_r H / eta), and the float
    head table with the narrow rates' rho (merged W: F_RW, neurons/values: F_RV,
    signs: F_RA). rho = 1 everywhere leaves the arrays as the layout's."""
    from .reduce import F_RA, F_RB, F_RV, F_RW

    base = stage_base_eta(training, stage)
    r = stage_group_rates(training, stage)
    rho = {g: (r[g] / base if base > 0 else 0.0) for g in RATE_GROUPS}
    Gr = lay.Gr.copy()
    hf = lay.hf.copy()
    obj_group = {"K": "keys", "Q": "queries", "V": "values"}
    for k, objs in enumerate(lay.objects):
        for name, s, w, _ in objs:
            g = obj_group.get(name, "readout")
            if rho[g] != 1.0:
                Gr[k, :, s:s + w] *= rho[g]
        hf[k, F_RW] = rho["keys"]
        hf[k, F_RV] = rho["values"]
        hf[k, F_RA] = rho["signs"]
        hf[k, F_RB] = rho["positions"]
    return np.ascontiguousarray(Gr), np.ascontiguousarray(hf)


def weight_rates(training, stage, factor: float = 1.0) -> dict[str, float]:
    """The explicit network's step size of each weight (``meanfield.engine.oracle``
    keys WK, WQ, W, w, MV, r, a) in ``stage``, times ``factor`` (the schedule)."""
    r = stage_group_rates(training, stage)
    return {k: factor * r[g] for k, g in WEIGHT_GROUP.items()}


def stage_rates(where: str, s: dict) -> tuple:
    """(eta, group_eta, eta_schedule) of a ``[[training.stages]]`` table: ``eta`` a
    number or a table of group rates (``default``: the stage's step size)."""
    eta, groups = None, ()
    v = s.get("eta")
    if isinstance(v, (dict, str)) and not _is_number(v):
        pairs = dict(parse_group_eta(f"{where}.eta", v, allow_default=True))
        if "default" in pairs:
            eta = pairs.pop("default")
            if not eta > 0:
                raise ConfigError(f"{where}.eta.default: the stage's step size must be > 0; got {eta:g}")
        groups = tuple(sorted(pairs.items()))
    elif v is not None:
        eta = as_float(f"{where}.eta", v, positive=True)
    return eta, groups, parse_schedule(f"{where}.eta_schedule", s.get("eta_schedule"))


def _is_number(v) -> bool:
    try:
        float(v)
        return not isinstance(v, bool)
    except (TypeError, ValueError):
        return False
