"""The mixture run configuration: one frozen dataclass, validated once.

Build it with :func:`make_config` from a dict (TOML file and CLI flags merged);
every bad value raises a one-line :class:`meanfield.core.config.ConfigError`.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

import numpy as np

from ...core.config import (
    ConfigError,
    as_choice,
    as_float,
    as_int,
    as_list,
    check_keys,
    parse_criterion,
    record_options,
)

SCHEDULES = ("simultaneous", "three-stage")
METHODS = ("gd", "flow", "rk4")
RELU0 = (0.0, 0.5, 1.0)


@dataclass(frozen=True)
class MixtureConfig:
    """Every knob of a mixture run (defaults: the paper's K=2, L=3 experiment).

    method: ``gd`` (the exact GD map, the paper's experiments), ``flow``
    (gradient flow, adaptive Dormand-Prince 5(4)), ``rk4`` (flow, fixed step dt).
    Stage lengths: ``steps`` / ``t_end`` for the simultaneous schedule,
    ``stage_steps`` (gd) / ``stage_times`` (flow, rk4) for three-stage, each a
    cap; ``stage_criteria`` ends a stage earlier when its criterion holds.
    width: None = infinite width (S = 0, A = B = omega^2 I); an integer m samples
    W_K, W_Q with iid N(0, omega^2/m) entries from ``seed``.
    max_abs: a run whose state (any score, self-score or neuron variable) would
    exceed this in absolute value stops with status ``diverged``; besides NaN
    and overflow this catches GD blow-ups that float64 would otherwise carry
    along (at |S| ~ 1e3 the attention softmax is one-hot to machine precision
    and its gradients are exactly zero, so nothing later means anything).
    h_min (flow): smallest adaptive step; where error control wants less (a
    pre-activation sliding along its ReLU kink) steps of h_min are forced and
    the run says so. Default 1e-4 times the horizon.

    The reviewers' extensions (defaults: the paper's setting):
    label_prob: P(y = +1) (default 0.5); label_noise: label flip probability
    (default 0; population: every sample also appears flipped with weight
    times rho); feature_gram: the features' Gram matrix E^T E (None =
    orthonormal; a spec ``cc:RHO,vv:RHO,cv:RHO,cvx:RHO`` or a full P x P
    matrix, see :func:`gram_matrix`); noise_sigma, n_train, ambient_d,
    data_seed: a finite training set of n_train sequences with N(0,
    noise_sigma^2 I) noise on every token in R^ambient_d (empirical risk);
    n_neurons: neurons per head sharing its attention (mean field over
    neurons, f = sum_j a_j (1/n) sum_r relu(u_{j,r}), neuron step eta * n; with
    the zero or a const init all neurons of a head stay equal, i.e. one neuron).
    feature_gram, n_train or n_neurons > 1 (``cfg.dense``) run on the engine
    (the mixture family's description, ``meanfield.models.mixture.run.description``);
    there the infinite-width init A = B = omega^2 I holds in an orthonormal
    basis of the features, so in feature coordinates A = B = omega^2 Gamma.
    softmax_scale: ``1`` (the paper's revised model, default) or ``1/sqrt(m)``
    (the original version: logits divided by sqrt(m), finite width only; the
    run records S, A, B divided by sqrt(m), see
    ``meanfield.models.mixture.softmax_scale``).
    """

    K: int = 2
    L: int = 3
    p: tuple[float, ...] | None = None
    omega: float = 0.1
    eta: float = 0.5
    method: str = "gd"
    steps: int = 4000
    t_end: float | None = None
    dt: float | None = None
    rtol: float = 1e-8
    atol: float = 1e-10
    h_min: float | None = None
    max_abs: float = 1e6
    schedule: str = "simultaneous"
    stage_steps: tuple[int, int, int] = (1000, 4000, 2000)
    stage_times: tuple[float, float, float] | None = None
    stage_criteria: tuple[str | None, str | None, str | None] = (None, None, None)
    stage3: str = "neurons"
    criterion: str | None = None
    width: int | None = None
    seed: int = 0
    neuron_init: str = "zero"
    relu_prime_at_zero: float = 1.0
    record_every: int | None = None
    record_log: int | None = None
    record_dt: float | None = None
    label_prob: float = 0.5
    label_noise: float = 0.0
    feature_gram: str | tuple[tuple[float, ...], ...] | None = None
    noise_sigma: float = 0.0
    n_train: int | None = None
    ambient_d: int | None = None
    data_seed: int = 0
    n_neurons: int = 1
    softmax_scale: str = "1"

    @property
    def dense(self) -> bool:
        """True when the run needs the dense path (general token vectors or
        several neurons per head) instead of the signed-feature kernels."""
        return self.feature_gram is not None or self.n_train is not None or self.n_neurons > 1

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def P(self) -> int:
        return 2 * self.K

    @property
    def horizon(self) -> float:
        """Total time (flow) or steps (gd) if every stage runs to its cap."""
        if self.method == "gd":
            return sum(self.stage_steps) if self.schedule == "three-stage" else self.steps
        if self.schedule == "three-stage":
            return sum(self.stage_times)
        return self.t_end


#: field -> default of MixtureConfig (every default a plain immutable value: no default_factory)
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(MixtureConfig)}

_NEURON_RE = re.compile(r"^(zero|const:[^:]+|gaussian:[^:]+)$")


def parse_neuron_init(text: str, K: int):
    """``zero`` | ``const:V1,...,VP`` (both heads) or 2P values (head + then -) |
    ``gaussian:SIGMA``. Returns ("zero"|"const"|"gaussian", payload)."""
    s = str(text).strip()
    P = 2 * K
    allowed = "neuron_init: must be zero, const:V1,...,VP (P=2K values, or 2P: head + then head -) or gaussian:SIGMA"
    if not _NEURON_RE.match(s):
        raise ConfigError(f"{allowed}; got {text!r}")
    if s == "zero":
        return "zero", None
    kind, _, rest = s.partition(":")
    if kind == "gaussian":
        return "gaussian", as_float("neuron_init (gaussian SIGMA)", rest, nonneg=True)
    vals = [as_float("neuron_init (const value)", v) for v in rest.split(",")]
    if len(vals) == P:
        return "const", (tuple(vals), tuple(vals))
    if len(vals) == 2 * P:
        return "const", (tuple(vals[:P]), tuple(vals[P:]))
    raise ConfigError(f"{allowed}; got {len(vals)} values for K={K} (P={P})")


GRAM_KEYS = {
    "cc": "<c_j, c_k>, j != k",
    "vv": "<v_j, v_k>, j != k",
    "cv": "<c_k, v_k> (same group)",
    "cvx": "<c_j, v_k>, j != k",
}
_GRAM_ITEM = re.compile(r"^(cc|vv|cv|cvx):([-+0-9.eE]+)$")


def gram_matrix(value, K: int) -> np.ndarray | None:
    """The features' Gram matrix Gamma = E^T E (P x P, basis order c1..cK, v1..vK)
    from a ``feature_gram`` value: None / ``none`` / ``identity`` (orthonormal
    features: returns None), a spec ``KEY:RHO,...`` with KEY in cc, vv, cv, cvx
    (unit norms; unnamed pairs 0), or a full P x P matrix (list of rows).
    Must be symmetric positive definite; errors are one-line ConfigErrors."""
    P = 2 * K
    allowed = (f"feature_gram: must be none, a spec KEY:RHO,... with KEY in {', '.join(GRAM_KEYS)}, or a symmetric "
               f"positive definite {P}x{P} matrix (the keys: meanfield mixture run --help)")
    if value is None:
        return None
    if isinstance(value, str):
        text = value.replace(" ", "")
        if text.lower() in ("", "none", "identity"):
            return None
        vals = {}
        for item in text.split(","):
            m = _GRAM_ITEM.match(item)
            if not m:
                raise ConfigError(f"{allowed}; got {value!r}")
            if m.group(1) in vals:
                raise ConfigError(f"feature_gram: {m.group(1)} given twice in {value!r}")
            vals[m.group(1)] = as_float(f"feature_gram ({m.group(1)})", m.group(2))
        G = np.eye(P)
        for j in range(K):
            for k in range(K):
                if j != k:
                    G[j, k] = vals.get("cc", 0.0)
                    G[K + j, K + k] = vals.get("vv", 0.0)
                    G[j, K + k] = G[K + k, j] = vals.get("cvx", 0.0)
            G[j, K + j] = G[K + j, j] = vals.get("cv", 0.0)
    else:
        try:
            G = np.array(value, dtype=float)
        except (TypeError, ValueError):
            raise ConfigError(f"{allowed}; got {value!r}") from None
        if G.shape != (P, P):
            raise ConfigError(f"{allowed}; got shape {G.shape}")
        if not np.all(np.isfinite(G)):
            raise ConfigError(f"feature_gram: entries must be finite numbers; got {value!r}")
        if np.max(np.abs(G - G.T)) > 1e-12 * max(1.0, np.max(np.abs(G))):
            raise ConfigError(f"feature_gram: must be symmetric; got {value!r}")
    ev = float(np.linalg.eigvalsh(G).min())
    if not ev > 1e-10 * max(1.0, float(np.abs(G).max())):
        raise ConfigError(f"feature_gram: must be symmetric positive definite; smallest eigenvalue {ev:.3g} "
                          f"for {value!r}")
    return G


def make_config(data: dict | None = None, **overrides) -> MixtureConfig:
    """Validate and freeze. ``data`` (from TOML) is overridden by ``overrides``
    (CLI flags; None values are ignored)."""
    from .kernels import CRITERIA  # here, not at import: the CLI reads the dataclass without numba

    raw = dict(data or {})
    raw.update({k: v for k, v in overrides.items() if v is not None})
    check_keys(MixtureConfig, raw, "config")
    d = dict(_DEFAULTS)
    d.update(raw)
    out = {}
    out["K"] = as_int("K", d["K"], lo=2)
    out["L"] = as_int("L", d["L"], lo=2)
    if d["p"] is not None:
        p = [as_float("p", v, positive=True) for v in as_list("p", d["p"], out["K"])]
        if not (np.isfinite(sum(p)) and min(p) / sum(p) > 0.0):  # 1e308,1e308 would normalise to 0, 0
            raise ConfigError(f"p: group weights must be positive with a finite sum and no weight below "
                              f"1e-308 of it; give relative weights such as 0.7,0.3 (got {len(p)} values, "
                              f"sum {sum(p):.3g})")
        out["p"] = tuple(p)
    else:
        out["p"] = None
    out["omega"] = as_float("omega", d["omega"], positive=True)
    out["eta"] = as_float("eta", d["eta"], positive=True)
    out["method"] = as_choice("method", d["method"], METHODS)
    out["steps"] = as_int("steps", d["steps"], lo=1)
    out["rtol"] = as_float("rtol", d["rtol"], positive=True)
    out["max_abs"] = as_float("max_abs", d["max_abs"], positive=True)
    out["atol"] = as_float("atol", d["atol"], positive=True)
    out["schedule"] = as_choice("schedule", d["schedule"], SCHEDULES)
    out["stage_steps"] = tuple(as_int("stage_steps", v, lo=0) for v in as_list("stage_steps", d["stage_steps"], 3))
    out["stage3"] = as_choice("stage3", d["stage3"], ("neurons", "both"))
    crits = as_list("stage_criteria", d["stage_criteria"] if d["stage_criteria"] is not None else "none,none,none", 3)
    out["stage_criteria"] = tuple(
        None if parse_criterion("stage_criteria", c, CRITERIA) is None else str(c).replace(" ", "") for c in crits
    )
    crit = d["criterion"]
    out["criterion"] = None if parse_criterion("criterion", crit, CRITERIA) is None else str(crit).replace(" ", "")
    if d["width"] in (None, "inf", "infinite", float("inf")):
        out["width"] = None
    else:
        out["width"] = as_int("width", d["width"], lo=1)
    out["seed"] = as_int("seed", d["seed"], lo=0)
    parse_neuron_init(d["neuron_init"], out["K"])
    out["neuron_init"] = str(d["neuron_init"]).strip()
    out["relu_prime_at_zero"] = as_choice("relu_prime_at_zero", as_float("relu_prime_at_zero", d["relu_prime_at_zero"]), RELU0)
    # time horizons (flow): default to the GD horizon in time units
    if d["t_end"] is not None:
        out["t_end"] = as_float("t_end", d["t_end"], positive=True)
    else:
        out["t_end"] = out["steps"] * out["eta"] if out["method"] != "gd" else None
    if d["stage_times"] is not None:
        out["stage_times"] = tuple(as_float("stage_times", v, nonneg=True) for v in as_list("stage_times", d["stage_times"], 3))
    else:
        out["stage_times"] = tuple(n * out["eta"] for n in out["stage_steps"]) if out["method"] != "gd" else None
    out["dt"] = as_float("dt", d["dt"], positive=True) if d["dt"] is not None else (out["eta"] if out["method"] == "rk4" else None)
    record_options(d, out)
    if out["method"] != "gd" and out["schedule"] == "simultaneous" and out["t_end"] <= 0:
        raise ConfigError(f"t_end: must be > 0, got {out['t_end']}")
    if d["h_min"] is not None:
        out["h_min"] = as_float("h_min", d["h_min"], nonneg=True)
    elif out["method"] == "flow":
        H = sum(out["stage_times"]) if out["schedule"] == "three-stage" else out["t_end"]
        out["h_min"] = 1e-4 * H
    else:
        out["h_min"] = None
    from ...core.guard import check_run_numbers

    check_run_numbers(out)
    # ------------------------------------------------------- the reviewers' extensions
    out["label_prob"] = as_float("label_prob", d["label_prob"])
    if not 0.0 < out["label_prob"] < 1.0:
        raise ConfigError(f"label_prob: must be in (0, 1) (P(y = +1)); got {d['label_prob']!r}")
    out["label_noise"] = as_float("label_noise", d["label_noise"], nonneg=True)
    if not out["label_noise"] < 0.5:
        raise ConfigError(f"label_noise: must be in [0, 0.5) (a flip probability); got {d['label_noise']!r}")
    fg = d["feature_gram"]
    G = gram_matrix(fg, out["K"])
    if G is None:
        out["feature_gram"] = None
    elif isinstance(fg, str):
        out["feature_gram"] = fg.replace(" ", "")
    else:
        out["feature_gram"] = tuple(tuple(float(x) for x in row) for row in G)
    out["noise_sigma"] = as_float("noise_sigma", d["noise_sigma"], nonneg=True)
    out["n_train"] = as_int("n_train", d["n_train"], lo=1) if d["n_train"] is not None else None
    if out["noise_sigma"] > 0 and out["n_train"] is None:
        raise ConfigError("n_train: required when noise_sigma > 0 (noisy tokens need a finite training set "
                          "of n_train sequences)")
    if d["ambient_d"] is not None:
        if out["n_train"] is None:
            raise ConfigError("ambient_d: only used with a finite training set; give n_train too")
        out["ambient_d"] = as_int("ambient_d", d["ambient_d"], lo=2 * out["K"])
    else:
        out["ambient_d"] = None
    out["data_seed"] = as_int("data_seed", d["data_seed"], lo=0)
    out["n_neurons"] = as_int("n_neurons", d["n_neurons"], lo=1)
    out["softmax_scale"] = as_choice("softmax_scale", str(d["softmax_scale"]).replace(" ", ""), ("1", "1/sqrt(m)"))
    if out["softmax_scale"] != "1":
        if out["width"] is None:
            raise ConfigError("softmax_scale: 1/sqrt(m) needs a finite width m (give width; at infinite width the "
                              "logits would vanish); allowed: 1, 1/sqrt(m)")
        if out["feature_gram"] is not None or out["n_train"] is not None or out["n_neurons"] > 1:
            raise ConfigError("softmax_scale: 1/sqrt(m) runs on the paper's data with one neuron per head only "
                              "(not with feature_gram, n_train or n_neurons > 1); allowed there: 1")
    return MixtureConfig(**out)
