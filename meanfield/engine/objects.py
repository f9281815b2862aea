"""The objects of a model description (frozen dataclasses) and :func:`make_data`.

Kept apart from the TOML loader (``meanfield.engine.description``, which
re-exports every name here) so that the built-in families
(``meanfield.engine.families``) build descriptions without importing the
loader. See ``meanfield.engine.description`` for what each object means.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.config import ConfigError


ATTENTIONS = ("softmax", "linear")
KQ = ("separate", "merged")
QUERIES = ("mean", "last", "fixed")
VALUES = ("neuron", "linear", "matrix", "token")
LOSSES = ("logistic", "squared", "cross_entropy")
METHODS = ("gd", "flow", "rk4")
GROUPS = ("attention", "values", "readout", "signs")
GROUP_ALIASES = {"neurons": "values", "neuron": "values", "value": "values", "kq": "attention", "sign": "signs"}
#: stop criteria (the mixture system's names)
CRITERIA = {"loss": 1, "consistent_margin": 2, "inconsistent_margin": 3, "min_margin": 4, "grad_w": 5}


# ------------------------------------------------------------------ objects


@dataclass(frozen=True)
class Dictionary:
    features: tuple[str, ...]
    gram: np.ndarray | None = None
    report: np.ndarray | None = None
    report_names: tuple[str, ...] | None = None

    @property
    def P(self) -> int:
        return len(self.features)

    @property
    def Gamma(self) -> np.ndarray:
        return np.eye(self.P) if self.gram is None else np.asarray(self.gram, dtype=float)

    @property
    def C(self) -> np.ndarray:
        """The report map (P x R); the identity when none is given."""
        return np.eye(self.P) if self.report is None else np.asarray(self.report, dtype=float)

    @property
    def names(self) -> tuple[str, ...]:
        """Names of the recorded coordinates."""
        return self.report_names if self.report_names is not None else self.features


@dataclass(frozen=True)
class Data:
    tokens: np.ndarray
    target: np.ndarray
    weight: np.ndarray
    counts: np.ndarray | None = None
    names: tuple[str, ...] | None = None
    flags: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)  # family-specific (e.g. the mixture's SampleSet), not used by the engine

    @property
    def n(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def L(self) -> int:
        return int(self.tokens.shape[1])

    @property
    def count_array(self) -> np.ndarray:
        return np.ones(self.tokens.shape[:2]) if self.counts is None else np.asarray(self.counts, dtype=float)

    def flag(self, name: str) -> np.ndarray:
        v = self.flags.get(name)
        if v is None:
            return np.zeros(self.n, dtype=bool) if name == "flipped" else np.ones(self.n, dtype=bool)
        return np.asarray(v, dtype=bool)


@dataclass(frozen=True)
class Head:
    """One attention head.

    attention: ``softmax`` (p_i = c_i exp(z_i) / sum_j c_j exp(z_j)) or
    ``linear`` (p_i = c_i z_i / L_eff, L_eff = sum of the counts); logits
    z_i = scale * x_i^T S x_q with S = E^T W_K^T W_Q E (kq ``separate``: wide
    W_K, W_Q, Gram blocks A = E^T W_K^T W_K E, S, B = E^T W_Q^T W_Q E) or
    S = W~ = E^T W E (kq ``merged``: one narrow d x d matrix, W~ = 0 at init).
    query: ``mean`` (every position is a query, averaged with weights
    c_l / L_eff: the mixture's (1/L) sum_l), ``last`` (the last position with
    a non-zero count; ``query_self = false`` leaves it out of the keys) or
    ``fixed`` (the coefficient vector ``query_vector``). zbar = the
    query-averaged attended token.
    value: ``neuron`` (narrow w, u = w~ . zbar, output relu(u), averaged over
    ``n_neurons`` neurons stepping on the mean-field scale eta * n),
    ``linear`` (narrow w, output u = w~ . zbar), ``matrix`` (wide value matrix
    M_V read by wide readout vectors r_c: output r_c^T M_V zbar, i.e. the Gram
    block R = r^T M_V E), ``token`` (the attended token itself: outputs zbar,
    P of them). ``outputs`` C: one value vector per output (class).
    sign: the head's output multiplier a_j (``train_sign``: trainable).
    """

    name: str = "h"
    attention: str = "softmax"
    kq: str = "separate"
    query: str = "mean"
    query_vector: tuple[float, ...] | None = None
    query_self: bool = True
    scale: float = 1.0
    value: str = "neuron"
    n_neurons: int = 1
    outputs: int = 1
    sign: float = 1.0
    train_sign: bool = False

    @property
    def n_out(self) -> int:
        return self.outputs


@dataclass(frozen=True)
class Model:
    heads: tuple[Head, ...]
    loss: str = "logistic"
    relu_prime_at_zero: float = 1.0

    def n_outputs(self, P: int) -> int:
        c = {h.outputs if h.value != "token" else P for h in self.heads}
        return c.pop()


@dataclass(frozen=True)
class Init:
    width: int | None = None
    seed: int = 0
    omega: float = 0.1
    omega_v: float = 0.1
    sigma_r: float = 1.0
    neuron_init: str = "zero"


@dataclass(frozen=True)
class StageSpec:
    name: str
    train: tuple[str, ...]
    length: float
    criterion: tuple[str, str, float] | None = None


@dataclass(frozen=True)
class Training:
    method: str = "gd"
    eta: float = 0.5
    stages: tuple[StageSpec, ...] = ()
    schedule: str = "simultaneous"
    dt: float | None = None
    rtol: float = 1e-8
    atol: float = 1e-10
    h_min: float | None = None
    max_abs: float = 1e6
    record_every: int | None = None
    record_log: int | None = None
    record_dt: float | None = None

    @property
    def horizon(self) -> float:
        return float(sum(s.length for s in self.stages))


@dataclass(frozen=True)
class Description:
    name: str
    dictionary: Dictionary
    data: Data
    model: Model
    init: Init
    training: Training
    family: str | None = None
    parameters: Any = None  # the validated parameters (a MixtureConfig for the mixture family, else RunParams)
    source: str | None = None
    declared: tuple = ()  # the description's own declared parameters as (name, value) pairs, after overrides
    overrides: tuple = ()  # the (name, value) overrides it was loaded with (meanfield.load; set_parameters keeps them)

    @property
    def P(self) -> int:
        return self.dictionary.P


def make_data(tokens, target, weight=None, counts=None, names=None, flags=None, P: int | None = None,
              where: str = "data") -> Data:
    """Validate arrays into a :class:`Data`: the finite weighted set of sequences.

    Parameters
    ----------
    tokens : array_like
        (n, L, P): each position's coefficients over the P features.
    target : array_like
        (n,) labels +-1 (logistic), reals (squared) or class indices
        (cross_entropy), or (n, C) vector targets (squared).
    weight : array_like or None
        (n,) weights >= 0 (default 1/n each).
    counts : array_like or None
        (n, L): a position stands for ``count`` identical tokens (0 = padding;
        default 1).
    names : sequence of str or None
        The sequences' names.
    flags : dict or None
        Named boolean (n,) flags (``consistent``, ``flipped``).
    P : int or None
        The number of features, checked against the tokens' last axis.
    where : str
        The field name used in error messages.

    Returns
    -------
    Data
        Read-only arrays.

    Raises
    ------
    ConfigError
        One line naming the field (a shape, a non-finite entry, a negative
        weight or count).

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]], [[0.0, 1.0], [0.0, 1.0]]])   # n = 2, L = 2, P = 2
    >>> data = make_data(X, target=[1, -1], counts=[[2, 1], [1, 1]])
    >>> data.n, data.L, data.weight.tolist()
    (2, 2, [0.5, 0.5])
    """
    X = np.asarray(tokens, dtype=float)
    if X.ndim != 3 or X.shape[0] < 1 or X.shape[1] < 1:
        raise ConfigError(f"{where}.tokens: must be an (n, L, P) array with n, L >= 1; got shape {X.shape}")
    if P is not None and X.shape[2] != P:
        raise ConfigError(f"{where}.tokens: last axis must be P = {P} (one coefficient per feature); got {X.shape[2]}")
    if not np.all(np.isfinite(X)):
        raise ConfigError(f"{where}.tokens: entries must be finite")
    n, L = X.shape[:2]
    y = np.asarray(target, dtype=float)
    if y.shape[:1] != (n,) or y.ndim > 2 or not np.all(np.isfinite(y)):
        raise ConfigError(f"{where}.target: must be n = {n} finite values (or an (n, C) array); got shape {y.shape}")
    w = np.full(n, 1.0 / n) if weight is None else np.asarray(weight, dtype=float)
    if w.shape != (n,) or not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ConfigError(f"{where}.weight: must be n = {n} finite values >= 0; got {weight!r}")
    c = None
    if counts is not None:
        c = np.asarray(counts, dtype=float)
        if c.shape != (n, L) or not np.all(np.isfinite(c)) or np.any(c < 0):
            raise ConfigError(f"{where}.counts: must be an (n, L) = ({n}, {L}) array of counts >= 0 (0 = padding)")
        if np.any(c.sum(axis=1) <= 0):
            raise ConfigError(f"{where}.counts: every sequence needs a position with a count > 0")
    fl = {}
    for k, v in (flags or {}).items():
        a = np.asarray(v, dtype=bool)
        if a.shape != (n,):
            raise ConfigError(f"{where}.flags.{k}: must be n = {n} booleans")
        fl[k] = a
    if names is not None and len(names) != n:
        raise ConfigError(f"{where}.names: must be n = {n} strings")
    for a in (X, y, w) + ((c,) if c is not None else ()):
        a.setflags(write=False)
    return Data(tokens=X, target=y, weight=w, counts=c, names=tuple(map(str, names)) if names is not None else None,
                flags=fl)
