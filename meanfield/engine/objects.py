"""The objects of a model description (frozen dataclasses) and :func:`make_data`.

Kept apart from the TOML loader (``meanfield.engine.description``, which
re-exports every name here) so that the built-in families
(``meanfield.models.mixture.family``) build descriptions without reaching the
loader. See ``meanfield.engine.description`` for what each object means.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.config import ConfigError


ATTENTIONS = ("softmax", "linear")
KQ = ("separate", "merged")
QUERIES = ("mean", "last", "fixed")
MASKS = ("none", "causal")
VALUES = ("neuron", "linear", "matrix", "token")
LOSSES = ("logistic", "squared", "cross_entropy")
METHODS = ("gd", "flow", "rk4")
#: gradient normalisation of method gd: none (plain GD) | parameter (normalised GD: each trained parameter
#: matrix's step is eta * grad / (||grad||_F + eps), K and Q separately, as Tarzanagh et al.'s experiments)
NORMALISE = ("none", "parameter")
GROUPS = ("attention", "values", "readout", "signs")
GROUP_ALIASES = {"neurons": "values", "neuron": "values", "value": "values", "kq": "attention", "sign": "signs"}
#: stop criteria (the mixture system's names)
CRITERIA = {"loss": 1, "consistent_margin": 2, "inconsistent_margin": 3, "min_margin": 4, "grad_w": 5}


# ------------------------------------------------------------------ objects


#: a stage's mode: trained-group bits (1, 2, 4, 8), 16 for normalised GD, and the stage's index above them
#: (mode = bits | (index << STAGE_SHIFT); ``meanfield.engine.system.stages``)
STAGE_SHIFT = 5

@dataclass(frozen=True)
class Dictionary:
    """The finite token dictionary: feature names and their Gram matrix (``[dictionary]``).

    Parameters
    ----------
    features : tuple of str
        The P feature names (a token is a signed feature or P coefficients).
    gram : numpy.ndarray or None
        Gamma = E^T E (P x P, symmetric positive semi-definite); None: the
        identity (orthonormal features).
    report : numpy.ndarray or None
        A report map C (P x R): recorded blocks are X_rep = C^T X C (the
        mixture's noisy training sets); None: the identity.
    report_names : tuple of str or None
        Names of the R reported coordinates.

    Examples
    --------
    >>> import numpy as np
    >>> d = Dictionary(("plus", "minus"), gram=np.array([[1.0, 0.3], [0.3, 1.0]]))
    >>> d.P, float(d.Gamma[0, 1]), d.names
    (2, 0.3, ('plus', 'minus'))
    """

    features: tuple[str, ...]
    gram: np.ndarray | None = None
    report: np.ndarray | None = None
    report_names: tuple[str, ...] | None = None
    groups: tuple = ()  # named groups of features, ((name, (feature, ...)), ...): e.g. the icl_regression x and y
    trainable: bool = False  # trainable token embeddings (meanfield.engine.embeddings)
    ambient: int | None = None  # their ambient dimension d >= P (None: P)

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
    """The finite weighted set of sequences (``[data]``); build it with :func:`make_data`.

    Parameters
    ----------
    tokens : numpy.ndarray
        (n, L, P): each position's coefficients over the features.
    target : numpy.ndarray
        (n,) or (n, C): labels (+-1 for the logistic loss) or targets.
    weight : numpy.ndarray
        (n,) sample weights, summing to 1.
    counts : numpy.ndarray or None
        (n, L): how many identical tokens each position stands for (0 =
        padding); None: all 1.
    names : tuple of str or None
        A name per row (run files, bounds).
    flags : dict
        Boolean row flags by name (``consistent``, ``flipped``, ...).
    extra : dict
        Family-specific data the engine does not read.

    Examples
    --------
    >>> d = make_data([[[1.0, 0.0], [0.0, 1.0]]], target=[1.0])
    >>> d.n, d.L, d.count_array.tolist()
    (1, 2, [[1.0, 1.0]])
    """

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

    Parameters
    ----------
    name : str
        The head's name (runs and bounds name its variables by it).
    attention : str
        ``softmax`` or ``linear``.
    kq : str
        ``separate`` (wide W_K, W_Q) or ``merged`` (one narrow W).
    query : str
        ``mean``, ``last`` or ``fixed``.
    query_vector : tuple of float or None
        With ``query = "fixed"``: the query's P coefficients.
    query_self : bool
        With ``query = "last"``: False leaves the query position out of the keys.
    scale : float
        Multiplies the logits.
    value : str
        ``neuron``, ``linear``, ``matrix`` or ``token``.
    n_neurons : int
        With ``value = "neuron"``: neurons sharing the head's attention.
    outputs : int
        Outputs C (``value = "token"`` has P).
    sign : float
        The output multiplier a_j.
    train_sign : bool
        Whether a_j is trained.

    Examples
    --------
    >>> h = Head(name="h", value="linear")
    >>> h.attention, h.kq, h.n_out
    ('softmax', 'separate', 1)
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
    mask: str = "none"              # "causal": query l attends to keys i <= l (meanfield.engine.positions)
    rpe: int = 0                    # R > 0: trainable relative positional biases b[l - i], |l - i| < R (engine.positions)
    init_W: tuple | None = None     # merged: W~ at t = 0 (P x P nested tuple; None = 0)  (meanfield.engine.inits)
    init_w: tuple | None = None     # value vectors at t = 0 (P floats; None = neuron_init)
    init_gram: tuple | None = None  # ((block name, value), ...): Gram blocks at t = 0 (infinite width)

    @property
    def n_out(self) -> int:
        return self.outputs


@dataclass(frozen=True)
class Model:
    """The heads and the loss (``[[heads]]``, ``[model]``); the output is the sum of the heads'.

    Parameters
    ----------
    heads : tuple of Head
        One or more heads, all with the same number of outputs.
    loss : str
        ``logistic``, ``squared``, ``cross_entropy``, ... (the allowed
        values: ``docs/description.md``).
    relu_prime_at_zero : float
        ReLU'(0) in {0, 0.5, 1}.

    Examples
    --------
    >>> m = Model(heads=(Head(value="linear"),), loss="logistic")
    >>> m.n_outputs(3)
    1
    """

    heads: tuple[Head, ...]
    loss: str = "logistic"
    relu_prime_at_zero: float = 1.0

    def n_outputs(self, P: int) -> int:
        c = {h.outputs if h.value != "token" else P for h in self.heads}
        return c.pop()


@dataclass(frozen=True)
class Init:
    """The initialisation (run knobs ``width``, ``seed``, ``omega``, ...).

    Parameters
    ----------
    width : int or None
        The width m; None: infinite width (S = 0, A = B = omega^2 Gamma).
    seed : int
        Seed of the sampled initial weights (finite m) and gaussian neurons.
    omega : float
        Init scale of W_K, W_Q: entries N(0, omega^2 / m).
    omega_v : float
        Init scale of a wide value matrix.
    sigma_r : float
        Init scale of the readout vectors.
    neuron_init : str
        ``zero``, ``const:V1,...,VP`` or ``gaussian:SIGMA``.

    Examples
    --------
    >>> Init(width=16, seed=2).omega
    0.1
    """

    width: int | None = None
    seed: int = 0
    omega: float = 0.1
    omega_v: float = 0.1
    sigma_r: float = 1.0
    neuron_init: str = "zero"
    init_from: str | None = None  # a run file: its last state is the initial state (meanfield.engine.initfrom)
    omega_q: float | None = None  # the queries' scale when it differs from the keys' (None: omega; 0: Q = 0)


@dataclass(frozen=True)
class StageSpec:
    """One training stage (``[[training.stages]]``).

    Parameters
    ----------
    name : str
        The stage's name.
    train : tuple of str
        What it trains (``attention``, ``neurons``, ``values``, ...).
    length : float
        Its length: steps (GD) or time (flow, RK4); a cap when a criterion is given.
    criterion : tuple of (str, str, float) or None
        (name, ``>=`` or ``<=``, threshold): the stage ends when it holds.

    Examples
    --------
    >>> s = StageSpec("s1", ("attention",), 100, ("loss", "<=", 0.01))
    >>> s.length, s.criterion[0]
    (100, 'loss')
    """

    name: str
    train: tuple[str, ...]
    length: float
    criterion: tuple[str, str, float] | None = None
    eta: float | None = None          # the stage's step size (None: the run's eta)
    group_eta: tuple = ()             # (group, rate) pairs of this stage (meanfield.engine.rates)
    eta_schedule: str | None = None   # the stage's own schedule (counted from its first step)


@dataclass(frozen=True)
class Training:
    """How a description is trained: method, step, stages, tolerances, records.

    Parameters
    ----------
    method : str
        ``gd`` (the exact GD map), ``flow`` (adaptive Dormand-Prince 5(4)) or
        ``rk4`` (fixed step ``dt``).
    eta : float
        The GD step size (time t = steps x eta).
    stages : tuple of StageSpec
        The stages, in order (a simultaneous run has one).
    schedule : str
        The schedule's name.
    dt : float or None
        RK4 step (default eta).
    rtol, atol : float
        Flow tolerances.
    h_min : float or None
        The flow's smallest step.
    max_abs : float
        A state entry above this stops the run as diverged.
    record_every, record_log : int or None
        Record every N steps, or at N log-spaced steps.
    record_dt : float or None
        Record every DT time units (flow, RK4).

    Examples
    --------
    >>> t = Training(eta=0.2, stages=(StageSpec("all", ("attention", "neurons"), 4000),))
    >>> t.horizon
    4000.0
    """

    method: str = "gd"
    eta: float = 0.5
    normalise: str = "none"  # method gd only: none | parameter (normalised GD, see NORMALISE)
    ridge: float = 0.0  # the attention's ridge penalty (meanfield.engine.ridge)
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
    group_eta: tuple = ()             # (group, rate) pairs for the whole run (meanfield.engine.rates)
    eta_schedule: str | None = None   # the run's schedule (counted from step 0 over the horizon)

    @property
    def horizon(self) -> float:
        return float(sum(s.length for s in self.stages))


@dataclass(frozen=True)
class Description:
    """A loaded model description: what :func:`meanfield.load` returns.

    Parameters
    ----------
    name : str
        The model's name.
    dictionary : Dictionary
    data : Data
    model : Model
    init : Init
    training : Training
    family : str or None
        A registered family (``mixture``) whose generator built it.
    parameters : object
        The validated parameters (a MixtureConfig for the mixture family,
        else :class:`~meanfield.engine.description.RunParams`).
    source : str or None
        The file it was read from.
    declared : tuple
        The description's own declared parameters as (name, value) pairs,
        after overrides.
    test : Data or None
        A held-out test set, never trained on (``meanfield.engine.heldout``).
    overrides : tuple
        The (name, value) overrides it was loaded with.

    Examples
    --------
    >>> import meanfield as mf
    >>> desc = mf.load("docs/examples/majority.toml")
    >>> desc.name, desc.P, desc.dictionary.features
    ('majority', 3, ('plus', 'minus', 'blank'))
    """

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
    test: Data | None = None  # a held-out test set, never trained on (meanfield.engine.heldout)
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


# ------------------------------------------------------------------ the run knobs and top-level keys
# (here, a leaf module, so that the schema reads them without importing the loader)

@dataclass(frozen=True)
class RunParams:
    """The run knobs of a general description (``[parameters]``; CLI flags
    override them, e.g. ``--width 5 --seed 1 --steps 300 --record-every 1``).
    Stage lengths: ``steps`` (gd) / ``t_end`` (flow, rk4) when the description
    has no ``[[training.stages]]``; otherwise each stage's own length."""

    method: str = "gd"
    eta: float = 0.5
    normalise: str = "none"  # gd only: none | parameter (normalised GD)
    ridge: float = 0.0  # lambda of the attention's ridge penalty lambda (||W_K||^2 + ||W_Q||^2), or lambda ||W||^2
    steps: int = 1000
    t_end: float | None = None
    dt: float | None = None
    rtol: float = 1e-8
    atol: float = 1e-10
    h_min: float | None = None
    max_abs: float = 1e6
    criterion: str | None = None
    width: int | None = None
    seed: int = 0
    omega: float = 0.1
    omega_v: float = 0.1
    omega_q: float | None = None  # separate K/Q: the queries' init scale (None: omega; 0: Q(0) = 0)
    symmetry: str = "refuse"  # an infinite-width start that GD cannot leave by symmetry: refuse | allow (engine.symmetry)
    sigma_r: float = 1.0
    neuron_init: str = "zero"
    relu_prime_at_zero: float = 1.0
    record_every: int | None = None
    record_log: int | None = None
    record_dt: float | None = None
    stage_steps: tuple | None = None  # gd: every [[training.stages]]'s length, in order (--stage-steps 100,2000)
    stage_times: tuple | None = None  # flow / rk4: every stage's time, in order
    group_eta: str | None = None  # rates per group for the run: "keys=0.1,values=2" (meanfield.engine.rates)
    eta_schedule: str | None = None  # the run's learning-rate schedule: cosine, step:E:G, warmup:W+cosine, inverse:T0
    init_from: str | None = None  # a run file whose last state is the initial state (meanfield.engine.initfrom)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


TOP_KEYS = ("name", "family", "plugins", "parameters", "dictionary", "data", "test", "positions", "heads",
            "model", "training")
