"""The induction-head run configuration: one frozen dataclass, validated once.

Build it with :func:`make_config` from a dict (TOML file and CLI flags
merged); every bad value raises a one-line
:class:`meanfield.core.config.ConfigError` naming the field. Conditions that are
allowed but suspicious (a parent lag that no head's window can see) are
returned by :meth:`InductionConfig.warnings` and also issued with
``warnings.warn`` by :func:`make_config`.
"""

from __future__ import annotations

import dataclasses
import warnings as _warnings
from dataclasses import dataclass
from pathlib import Path

from ...core.config import ConfigError, as_choice, as_float, as_int, as_list, check_keys, record_options
from ...core.criteria import parse_criterion
from .criteria import CRITERIA

SCHEDULES = ("three-stage", "simultaneous")
#: old names, accepted for one release (a DeprecationWarning): schedule values and config keys
SCHEDULE_ALIASES = {"three-phase": "three-stage", "joint": "simultaneous"}
FIELD_ALIASES = {"phase_etas": "stage_etas", "phase_steps": "stage_steps", "phase_times": "stage_times",
                 "phase_criteria": "stage_criteria"}
METHODS = ("gd", "flow", "rk4")
DATA_MODES = ("fixed", "fresh", "minibatch")
PHASE_NAMES = ("c", "w", "a")
LOSSES = ("nll", "official-ce")
#: per parameter group: default GD step size and steps of a phase that trains it
#: (a phase training several groups takes the smallest step size and the most steps)
GROUP_ETA = {"c": 2.0, "w": 10.0, "a": 1.0}
GROUP_STEPS = {"c": 300, "w": 300, "a": 300}


def parse_schedule(v) -> tuple[str, ...]:
    """The stages of a schedule string: ``three-stage`` (old name ``three-phase``) = ``c,w,a``; any
    comma-separated groups of the letters c (the FFN's c_S), w (the RPE), a
    (the classifier), each letter in at most one phase, e.g. ``w,c,a``,
    ``cw,a``, ``cwa`` (one phase training everything). ``simultaneous`` (old name ``joint``) is not a
    phase string (it has its own eta / steps / criterion) and returns ("cwa",).
    Raises ConfigError naming the field."""
    s = str(v).strip().lower().replace(" ", "")
    s = SCHEDULE_ALIASES.get(s, s)
    if s == "three-stage":
        return PHASE_NAMES
    if s == "simultaneous":
        return ("cwa",)
    groups = tuple(s.split(","))
    seen: set = set()
    for g in groups:
        if not g or any(ch not in "cwa" for ch in g) or len(set(g)) != len(g) or seen & set(g):
            raise ConfigError(f"schedule: three-stage | simultaneous | comma-separated phases of the letters c, w, a "
                              f"(each letter in at most one phase, e.g. c,w,a or w,c,a or cw,a or cwa); got {v!r}")
        seen |= set(g)
    return tuple("".join(ch for ch in "cwa" if ch in g) for g in groups)


@dataclass(frozen=True)
class InductionConfig:
    """Every knob of an induction-head run (spec: ``docs/conventions.md``).

    Data: ``d`` tokens, sequences x_1..x_{L+1} of an n-gram chain with parent
    lags ``pa`` (default (1, 2), a trigram chain), per-sequence kernels
    Dirichlet(``alpha`` 1_d) (default alpha = 1: uniform on the simplex).
    ``sampling = fixed``: empirical risk on ``n_train`` sequences (seed
    ``(seed, 0)``, or the HDF5 data file ``train_file``); ``sampling = fresh``
    (gd only): every GD step uses a fresh Monte Carlo batch of ``batch``
    sequences (seed ``(seed, 2, step)``), an unbiased estimate of the
    population gradient, and the recorded "train" loss is the loss on the
    fixed ``n_train`` set; ``sampling = minibatch`` (gd only): mini-batch SGD
    on the fixed ``n_train`` set, each epoch a seeded random permutation
    (seed ``(seed, 3, epoch)``) cut into batches of ``batch`` sequences (the
    last one shorter when ``batch`` does not divide n_train), one GD step
    per batch, like the official code's shuffled DataLoader. With ``train_file`` its d, L, pa, alpha must match
    the config and the run trains on its first ``n_train`` sequences (all of
    them when n_train is not given). Held-out loss: ``n_test`` sequences of length
    ``L_test`` (default L; seed ``(seed, 1)``).

    Model TF(M, H, d, D): ``H`` heads, each with ``M`` RPE weights on the lags
    ``first_lags[h] .. first_lags[h] + M - 1`` (default first lag 1 for all);
    subsets of heads up to size ``D``. Init: w = ``w_plus`` on the head's
    ``start_lags`` entry (default head h on lag h when that lag is in its
    window, else ``first + (h-1) mod M``), ``w_minus`` elsewhere; every
    c_S = ``c_init``; a = ``a_init``. Defaults w_plus = 2, w_minus = 0 (with
    M = 3 each head starts with softmax weight 0.79 on its lag), c_init = 1
    (uniform c_S^2 weights), a_init = 1 (a = 0 would make phase 1's gradient
    vanish: d loss/d c is proportional to a). Default schedule: stage_etas
    (2, 10, 1), stage_steps (300, 300, 300): on the default trigram data the
    c_S^2 weights concentrate on {1,2} in phase 1, heads 1 and 2 sharpen on
    lags 1 and 2 in phase 2, and a saturates in phase 3. ``yhat_floor``: the log(0) guard,
    loss = -log(max(y_hat[x_{L+1}], yhat_floor)) (see ``model``). ``loss``:
    ``nll`` (the paper's -log y_hat[x_{L+1}]) or ``official-ce`` (the official
    code's choice: torch's CrossEntropyLoss applied to y_hat as logits,
    logsumexp_e y_hat[e] - y_hat[x_{L+1}]; see ``model``).

    Training: ``method`` gd (gradient descent), flow (gradient flow,
    adaptive Dormand-Prince 5(4) with ``rtol``/``atol``) or rk4 (flow, fixed
    step ``dt``, default the smallest phase step size). ``schedule``
    three-stage: stage (phase) 1 trains c only, 2 w only, 3 a only, with
    step sizes ``stage_etas`` and lengths ``stage_steps`` (gd) or
    ``stage_times`` (flow; default stage_steps * stage_etas); each stage can
    end early by its ``stage_criteria`` (old names: ``three-phase``,
    ``phase_etas``, ``phase_steps``, ``phase_times``, ``phase_criteria``,
    accepted for one release). Any other grouping and order of the
    phases is a schedule string (:func:`parse_schedule`): ``w,c,a`` (RPE
    first), ``cw,a`` (c and w together, then a; the official scripts),
    ``cwa`` (one phase); the stage_* lists then have one entry per phase
    (defaults per phase: the smallest of c 2, w 10, a 1 as step size, 300
    steps). ``schedule`` simultaneous (old name joint): everything with
    step ``eta`` for ``steps`` (gd) or time ``t_end`` (flow; default
    steps * eta), optional ``criterion``. Time t of a GD run is the sum of
    the step sizes taken (gradient-flow time). ``max_abs``: a parameter above
    this in absolute value stops the run as diverged.

    Records: every ``record_every`` steps, or ``record_log`` log-spaced
    points, or every ``record_dt`` time units (flow); default about 200
    records over the horizon.
    """

    d: int = 3
    L: int = 100
    pa: tuple[int, ...] = (1, 2)
    alpha: float = 1.0
    n_train: int = 10000
    n_test: int = 2000
    L_test: int | None = None
    sampling: str = "fixed"
    loss: str = "nll"
    batch: int = 1000
    train_file: str | None = None
    seed: int = 0
    H: int = 3
    M: int = 3
    D: int = 2
    first_lags: tuple[int, ...] | None = None
    start_lags: tuple[int, ...] | None = None
    w_plus: float = 2.0
    w_minus: float = 0.0
    c_init: float = 1.0
    a_init: float = 1.0
    yhat_floor: float = 1e-300
    method: str = "gd"
    schedule: str = "three-stage"
    eta: float = 1.0
    steps: int = 1000
    t_end: float | None = None
    stage_etas: tuple[float, ...] = (2.0, 10.0, 1.0)
    stage_steps: tuple[int, ...] = (300, 300, 300)
    stage_times: tuple[float, ...] | None = None
    stage_criteria: tuple[str | None, ...] = (None, None, None)
    criterion: str | None = None
    dt: float | None = None
    rtol: float = 1e-6
    atol: float = 1e-9
    max_abs: float = 1e6
    record_every: int | None = None
    record_log: int | None = None
    record_dt: float | None = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    # the old attribute names, kept for one release (readers of phase_*)
    phase_etas = property(lambda self: self.stage_etas)
    phase_steps = property(lambda self: self.stage_steps)
    phase_times = property(lambda self: self.stage_times)
    phase_criteria = property(lambda self: self.stage_criteria)

    @property
    def phases(self) -> tuple[str, ...]:
        """What each stage trains, e.g. ("c", "w", "a") or ("cw", "a"); ("cwa",) for simultaneous."""
        return parse_schedule(self.schedule)

    @property
    def horizon(self) -> float:
        """Total steps (gd) or time (flow, rk4) if every phase runs to its cap."""
        if self.method == "gd":
            return self.steps if self.schedule == "simultaneous" else sum(self.stage_steps)
        return self.t_end if self.schedule == "simultaneous" else sum(self.stage_times)

    def arch(self):
        from .model import Arch

        return Arch(self.d, self.H, self.M, self.D, self.first_lags)

    def warnings(self) -> list[str]:
        """Allowed but suspicious settings, one line each."""
        out = []
        windows = [(f, f + self.M - 1) for f in self.first_lags]
        for lag in self.pa:
            if not any(lo <= lag <= hi for lo, hi in windows):
                out.append(f"pa: parent lag {lag} lies in no head's window "
                           f"({', '.join(f'{lo}..{hi}' for lo, hi in windows)}); the model cannot copy it")
        return out


def _staged(c) -> bool:
    return c.schedule != "simultaneous"


#: config keys that only some schedules / methods read: key -> (predicate on the
#: resolved config, what it applies to and what to give instead); the run command
#: refuses a key its config ignores (``meanfield.core.guard.check_applicable``,
#: the rule of ``meanfield mixture run``)
APPLICABLE = {
    "steps": (lambda c: not _staged(c),
              "the simultaneous schedule (staged schedules such as three-stage: give --stage-steps)"),
    "eta": (lambda c: not _staged(c),
            "the simultaneous schedule (staged schedules such as three-stage: give --stage-etas)"),
    "criterion": (lambda c: not _staged(c),
                  "the simultaneous schedule (staged schedules such as three-stage: give --stage-criteria)"),
    "t_end": (lambda c: c.method != "gd" and not _staged(c),
              "a flow or rk4 run with the simultaneous schedule (gd: give --steps; staged schedules: "
              "--stage-times)"),
    "stage_etas": (_staged, "a staged schedule such as three-stage (simultaneous: give --eta)"),
    "stage_steps": (_staged, "a staged schedule such as three-stage (simultaneous: give --steps)"),
    "stage_criteria": (_staged, "a staged schedule such as three-stage (simultaneous: give --criterion)"),
    "stage_times": (lambda c: c.method != "gd" and _staged(c),
                    "a flow or rk4 run with a staged schedule (gd: give --stage-steps; simultaneous: --t-end)"),
    "dt": (lambda c: c.method == "rk4", "method rk4"),
    "rtol": (lambda c: c.method == "flow", "method flow"),
    "atol": (lambda c: c.method == "flow", "method flow"),
}


def check_applicable(given: dict, cfg: InductionConfig) -> None:
    """A key the user set (``given``: TOML keys and flags, old names allowed)
    that ``cfg``'s schedule or method ignores is a one-line ConfigError naming
    it and what to give instead."""
    from ...core.guard import check_applicable as _check

    _check({FIELD_ALIASES.get(k, k): v for k, v in given.items()}, cfg, rules=APPLICABLE)


def family_check_options(file_values: dict, flags: dict) -> None:
    """The ``check_options`` hook of the induction family (``meanfield model
    run induction``): the same refusal as ``meanfield induction run`` of a key
    the schedule or method ignores, for the file as written and then for the
    flags given on top of it (``--steps 3`` on the three-stage default was
    silently dropped: 900 steps ran).

    Parameters
    ----------
    file_values : dict
        The description's ``[parameters]``.
    flags : dict
        The flags given (None: not given).

    Returns
    -------
    None
        Raises ConfigError naming the key.

    Example
    -------
    >>> family_check_options({}, {"stage_steps": "3,3,3"})
    """
    from ...engine.edges import flag_pairs

    file_keys = {k: v for k, v in file_values.items() if v is not None}
    check_applicable(file_keys, make_config(file_keys))
    given = {k: v for k, v in flags.items() if v is not None}
    check_applicable(flag_pairs(given, flags), make_config({**file_keys, **given}))


def _int_tuple(name, v, n=None, lo=None):
    return tuple(as_int(name, x, lo=lo) for x in as_list(name, v, n))


def _resolve_aliases(raw: dict) -> dict:
    """The old names (``phase_*`` keys, schedules ``joint`` / ``three-phase``)
    mapped to the new ones, each with a DeprecationWarning; an old key given
    together with its new name is a one-line ConfigError."""
    out = dict(raw)
    for old, new in FIELD_ALIASES.items():
        if old in out:
            if new in out:
                raise ConfigError(f"{old}: an old name of {new}; give only {new}")
            _warnings.warn(f"{old} is an old name of {new} (accepted for one release)", DeprecationWarning,
                           stacklevel=3)
            out[new] = out.pop(old)
    if "schedule" in out:
        s = str(out["schedule"]).strip().lower().replace(" ", "")
        if s in SCHEDULE_ALIASES:
            _warnings.warn(f"schedule {s} is an old name of {SCHEDULE_ALIASES[s]} (accepted for one release)",
                           DeprecationWarning, stacklevel=3)
            out["schedule"] = SCHEDULE_ALIASES[s]
    return out


def make_config(data: dict | None = None, /, **overrides) -> InductionConfig:
    """Validate and freeze. ``data`` (from TOML) is overridden by ``overrides``
    (CLI flags; None values are ignored). Warnings (see
    :meth:`InductionConfig.warnings`) are issued with ``warnings.warn``.
    The old names ``phase_etas``, ``phase_steps``, ``phase_times``,
    ``phase_criteria`` and schedules ``three-phase`` / ``joint`` are accepted
    (DeprecationWarning) for ``stage_*``, ``three-stage`` / ``simultaneous``;
    an old key in ``overrides`` replaces the new key of ``data``."""
    data = _resolve_aliases(dict(data or {}))
    over = _resolve_aliases({k: v for k, v in overrides.items() if v is not None})
    raw = dict(data)
    raw.update(over)
    check_keys(InductionConfig, raw, "config")
    d = {f.name: f.default for f in dataclasses.fields(InductionConfig)}
    d.update(raw)
    out: dict = {}
    out["d"] = as_int("d", d["d"], lo=2)
    out["alpha"] = as_float("alpha", d["alpha"], positive=True)
    pa = _int_tuple("pa", d["pa"], lo=1)
    if not pa:
        raise ConfigError("pa: needs at least one parent lag (positive integers)")
    if len(set(pa)) != len(pa):
        raise ConfigError(f"pa: parent lags must be distinct, got {d['pa']!r}")
    out["pa"] = tuple(sorted(pa))
    from ...core.guard import MAX_HEADS

    out["H"] = as_int("H", d["H"], lo=1, hi=MAX_HEADS)
    out["M"] = as_int("M", d["M"], lo=1)
    out["D"] = as_int("D", d["D"], lo=1)  # D = 0: only the empty subset, a model of no head
    if out["D"] > out["H"]:
        raise ConfigError(f"D: must be <= H = {out['H']}, got {out['D']}")
    H, M = out["H"], out["M"]
    if d["first_lags"] is None:
        out["first_lags"] = (1,) * H
    else:
        out["first_lags"] = _int_tuple("first_lags", d["first_lags"], H, lo=1)
    windows = [(f, f + M - 1) for f in out["first_lags"]]
    if d["start_lags"] is None:
        out["start_lags"] = tuple((h + 1) if lo <= h + 1 <= hi else lo + (h % M) for h, (lo, hi) in enumerate(windows))
    else:
        out["start_lags"] = _int_tuple("start_lags", d["start_lags"], H, lo=1)
        for h, (lag, (lo, hi)) in enumerate(zip(out["start_lags"], windows)):
            if not lo <= lag <= hi:
                raise ConfigError(f"start_lags: lag {lag} of head {h + 1} is outside its window {lo}..{hi}")
    max_lag = max(max(out["pa"]), max(hi for _, hi in windows))
    out["L"] = as_int("L", d["L"], lo=1)
    if out["L"] <= max_lag:
        raise ConfigError(f"L: must be > the largest lag {max_lag} (parent lags and head windows), got {out['L']}")
    if d["L_test"] is None:
        out["L_test"] = out["L"]
    else:
        out["L_test"] = as_int("L_test", d["L_test"], lo=1)
        if out["L_test"] <= max_lag:
            raise ConfigError(f"L_test: must be > the largest lag {max_lag}, got {out['L_test']}")
    out["n_train"] = as_int("n_train", d["n_train"], lo=1)
    out["n_test"] = as_int("n_test", d["n_test"], lo=0)
    out["sampling"] = as_choice("sampling", d["sampling"], DATA_MODES)
    out["loss"] = as_choice("loss", d["loss"], LOSSES)
    out["batch"] = as_int("batch", d["batch"], lo=1)
    out["seed"] = as_int("seed", d["seed"], lo=0)
    out["train_file"] = None if d["train_file"] in (None, "", "none") else str(d["train_file"])
    for name in ("w_plus", "w_minus", "c_init", "a_init"):
        out[name] = as_float(name, d[name])
    if out["c_init"] == 0.0:
        raise ConfigError("c_init: must be nonzero (K divides by sum_S c_S^2)")
    out["yhat_floor"] = as_float("yhat_floor", d["yhat_floor"], positive=True)
    if not 1e-300 <= out["yhat_floor"] < 1.0:
        raise ConfigError(f"yhat_floor: must be in [1e-300, 1), got {d['yhat_floor']!r}")
    out["method"] = as_choice("method", d["method"], METHODS)
    phases = parse_schedule(d["schedule"])
    sched = str(d["schedule"]).strip().lower().replace(" ", "")
    out["schedule"] = sched if sched in SCHEDULES else ",".join(phases)
    if out["sampling"] != "fixed" and out["method"] != "gd":
        raise ConfigError(f"sampling: {out['sampling']} batches need method gd, got method {out['method']}")
    if out["sampling"] == "fresh" and out["train_file"] is not None:
        raise ConfigError("train_file: only with sampling fixed or minibatch (fresh batches are generated)")
    out["eta"] = as_float("eta", d["eta"], positive=True)
    out["steps"] = as_int("steps", d["steps"], lo=1)
    n_ph = 3 if out["schedule"] == "simultaneous" else len(phases)
    if out["schedule"] != "simultaneous":  # defaults follow what each stage trains
        if "stage_etas" not in raw:
            d["stage_etas"] = tuple(min(GROUP_ETA[ch] for ch in g) for g in phases)
        if "stage_steps" not in raw:
            d["stage_steps"] = tuple(max(GROUP_STEPS[ch] for ch in g) for g in phases)
    out["stage_etas"] = tuple(as_float("stage_etas", v, positive=True)
                              for v in as_list("stage_etas", d["stage_etas"], n_ph))
    out["stage_steps"] = _int_tuple("stage_steps", d["stage_steps"], n_ph, lo=0)
    crits = as_list("stage_criteria", d["stage_criteria"] if d["stage_criteria"] is not None
                    and "stage_criteria" in raw else ",".join(["none"] * n_ph), n_ph)
    out["stage_criteria"] = tuple(
        None if parse_criterion("stage_criteria", c, CRITERIA) is None else str(c).replace(" ", "") for c in crits)
    crit = d["criterion"]
    out["criterion"] = None if parse_criterion("criterion", crit, CRITERIA) is None else str(crit).replace(" ", "")
    flow = out["method"] != "gd"
    if d["t_end"] is not None:
        out["t_end"] = as_float("t_end", d["t_end"], positive=True)
    else:
        out["t_end"] = out["steps"] * out["eta"] if flow else None
    if d["stage_times"] is not None:
        out["stage_times"] = tuple(as_float("stage_times", v, nonneg=True)
                                   for v in as_list("stage_times", d["stage_times"], n_ph))
    else:
        out["stage_times"] = tuple(n * e for n, e in zip(out["stage_steps"], out["stage_etas"])) if flow else None
    if d["dt"] is not None:
        out["dt"] = as_float("dt", d["dt"], positive=True)
    else:
        out["dt"] = (out["eta"] if out["schedule"] == "simultaneous" else min(out["stage_etas"])) \
            if out["method"] == "rk4" else None
    out["rtol"] = as_float("rtol", d["rtol"], positive=True)
    out["atol"] = as_float("atol", d["atol"], positive=True)
    out["max_abs"] = as_float("max_abs", d["max_abs"], positive=True)
    record_options(d, out)  # the shared recording options (and their errors)
    if flow and out["schedule"] == "simultaneous" and out["t_end"] <= 0:
        raise ConfigError(f"t_end: must be > 0, got {out['t_end']}")
    from ...core.guard import check_run_numbers

    check_run_numbers(out)
    if out["train_file"] is not None:
        _check_train_file(out, explicit_n="n_train" in raw)
    cfg = InductionConfig(**out)
    for w in cfg.warnings():
        _warnings.warn(w, stacklevel=2)
    return cfg


def _check_train_file(out: dict, explicit_n: bool) -> None:
    """The file must match d, L, pa, alpha. n_train: the first n_train
    sequences of the file when given (at most what it holds), else all."""
    import h5py

    from .data import DATA_FORMAT

    p = Path(out["train_file"])
    if not p.exists():
        raise ConfigError(f"train_file: file not found: {p}")
    try:
        with h5py.File(p, "r") as f:
            if f.attrs.get("format") != DATA_FORMAT:
                raise ConfigError(f"train_file: {p} is not a meanfield induction data file")
            got = {"d": int(f.attrs["d"]), "L": int(f.attrs["L"]),
                   "pa": tuple(int(v) for v in f.attrs["pa"]), "alpha": float(f.attrs["alpha"])}
            n = int(f["tokens"].shape[0])
    except OSError as e:
        from ...core.limits import excerpt

        why = e.strerror or str(e).split("(")[0].strip() or type(e).__name__
        raise ConfigError(f"train_file: cannot read {excerpt(str(p), 60)}: {excerpt(why, 60)}") from None
    want = {k: out[k] for k in got}
    if got != want:
        diff = ", ".join(f"{k}={got[k]!r} (config {want[k]!r})" for k in got if got[k] != want[k])
        raise ConfigError(f"train_file: {p} was generated with {diff}")
    if explicit_n and out["n_train"] > n:
        raise ConfigError(f"n_train: {p} holds {n} sequences, asked for {out['n_train']}")
    if not explicit_n:
        out["n_train"] = n
