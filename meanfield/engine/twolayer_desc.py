"""Two-layer descriptions (``[model] class = "twolayer"``): parsing, validation and refusals.

The second model class of the engine (``docs/engine.md``, "Two-layer
attention: which models close", design and refusals there). A description::

    name = "copier"
    [model]
    class = "twolayer"
    loss = "nll"                  # nll (hard next token) | soft (E[pi(. | x_L) | x], exact law only)
    [data]
    family = "markov"             # the in-context Markov chain with a Dirichlet prior
    d = 2                         # vocabulary
    L = 5                         # context length
    pa = [1]                      # parent lags
    alpha = 1.0                   # Dirichlet concentration
    start = "uniform"             # x_1..x_r uniform (the only start with a closed-form law)
    exact = true                  # enumerate [d]^(L+1) with the Dirichlet-multinomial weights; or samples = n, seed
    [[layers]]
    [[layers.heads]]
    score = "rpe"                 # rpe | bilinear | rpe+bilinear
    lags = [1, 2]                 # the lag window [first, last] (bilinear: every causal lag by default)
    softmax = true                # false: linear attention
    normalise = true              # u = s / ||s||
    value = "token"               # token | stream
    w = [1.0, 0.0]                # optional initial values of a block (w: rpe weights, A: bilinear matrix)
    [selector]                    # optional: the polynomial feature map over subsets of heads, |S| <= D
    D = 1
    c = 1.0                       # optional initial value of every c_S
    [readout]
    kind = "attention"            # attention (a K(l), a mixture of the context tokens) | linear (W, softmax)
    a = 0.0                       # optional initial value (attention: a; linear: W)
    [init]
    std = 0.1                     # every block not given: N(mean, std^2) entries drawn with seed
    mean = 0.0
    seed = 0
    [training]
    method = "gd"                 # gd | flow | rk4
    eta = 0.5
    steps = 200
    [[training.stages]]           # optional: phases, each training some blocks
    name = "phase1"
    train = ["selector.c"]        # block names (meanfield model derive lists them) or "all"
    steps = 100
    until = "loss<=0.1"           # optional criterion (loss)

A bilinear head with ``width = m`` (or ``"inf"``) and ``omega`` is wide:
A = W_Q^T W_K with W_Q, W_K in R^{m x D_k}, its state the joint Gram, block
``layer{k}.head{h}.Q`` (:mod:`meanfield.engine.twolayer_wide`; docs/engine.md,
case (b) 1). ``value_matrix = true`` gives a head the output V u (block ``V``;
with ``width`` the wide V = W_O M_V, block ``QV``, case (b) 3).

Refused with one line naming the field (exit 2 on the command line, nothing
written): the keys docs/engine.md shows do not close (``reads`` a hidden-to-hidden product, case
4; ``mlp`` / ``hidden_activation``, case 5; ``embedding`` trainable, case 6),
``stream = "sum"``, a head's ``query`` / ``key`` other than the stream,
``start = "stationary"`` (no closed-form law), ``family`` other than markov,
and sizes whose exact law or forward pass would not fit.

Example
-------
>>> raw = {"model": {"class": "twolayer"}, "data": {"family": "markov", "d": 2, "L": 3},
...        "layers": [{"heads": [{"score": "rpe", "lags": [1, 2], "value": "token", "normalise": True}]}],
...        "selector": {"D": 1}, "readout": {"kind": "attention"}, "training": {"steps": 5, "eta": 0.1}}
>>> desc = twolayer_from_dict(raw)
>>> desc.net.size, desc.x.shape, [s.name for s in desc.stages]
(5, (16, 4), ['train'])
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..core.config import as_choice, as_float, as_int, record_options
from ..core.criteria import parse_criterion
from ..core.errors import ConfigError
from .parsing import as_bool
from .twolayer_net import READOUTS, SCORES, VALUES, Head, Net, memory_bytes
from .twolayer_wide import initial_gram

__all__ = ["KEYS", "NOT_CLOSED", "TwoLayerDescription", "TwoLayerTraining", "TwoLayerStage", "is_twolayer", "twolayer_from_dict",
           "OVERRIDES", "MAX_FORWARD_BYTES"]

#: every key of a two-layer description, table by table: (type, default, meaning); the loader accepts exactly
#: these (its allowed lists are read from here) and docs/description.md is generated from them
KEYS = {
    "top level": {
        "name": ("str", "the file's stem", "the model's name"),
        "model": ("table", "required", "`class = \"twolayer\"` selects this class"),
        "data": ("table", "markov", "the data law or the fixed data set"),
        "layers": ("array of tables", "required", "the attention layers, in order"),
        "selector": ("table", "none", "the polynomial feature map over subsets of heads (attention read-out)"),
        "readout": ("table", "linear", "the read-out"),
        "init": ("table", "N(0, 0.1^2)", "the initial values of the blocks not given in their tables"),
        "training": ("table", "one stage", "the solver and the stages"),
        "parameters": ("table", "empty", "none yet (a two-layer description declares no parameters)"),
    },
    "[model]": {
        "class": ("str", "required", "`twolayer`"),
        "loss": ("`nll`, `soft`, `official-ce`", "nll", "cross-entropy against the next token, or against "
                 "E[pi(. | x_L) | x] (the exact law only), both with -log y_hat clipped at -log yhat_floor; or "
                 "`official-ce`: the cross-entropy of softmax(y_hat) against the next token (y_hat taken as "
                 "logits, as the official induction code's CrossEntropyLoss; never clipped)"),
        "yhat_floor": ("float in (0, 1)", "1e-300", "the log(0) guard: -log y_hat is clipped at -log yhat_floor "
                                                    "(a clipped term has no gradient)"),
    },
    "[data] (family = markov)": {
        "family": ("`markov`, `graph`, `tokens`", "markov", "the in-context Markov chain with a Dirichlet prior, a "
                                                           "latent causal graph, or a fixed data set"),
        "d": ("int >= 2", "2", "vocabulary"), "L": ("int", "5", "context length (x_1..x_L predict x_(L+1))"),
        "pa": ("array of int", "[1]", "parent lags"), "alpha": ("float > 0", "1.0", "Dirichlet concentration"),
        "start": ("`uniform`", "uniform", "x_1..x_r uniform (the stationary start has no closed form: refused)"),
        "exact": ("bool", "true without samples", "enumerate [d]^(L+1) with the Dirichlet-multinomial weights"),
        "samples": ("int", "none", "exact = false: this many sequences drawn with seed (sampled, not exact)"),
        "seed": ("int", "0", "seed of the sampled sequences"),
    },
    "[data] (family = graph)": {
        "family": ("`graph`", "-", "a latent causal graph over the positions (one Dirichlet table per parent count, "
                                  "shared by the positions with that count; roots uniform), exact law"),
        "d": ("int >= 2", "2", "vocabulary"),
        "parents": ("array of arrays of int", "required", "each position's parent positions (1-based, earlier; [] "
                                                           "for a root); the last position is the one predicted"),
        "alpha": ("float > 0", "1.0", "Dirichlet concentration"),
    },
    "[data] (family = tokens)": {
        "family": ("`tokens`", "-", "a fixed data set, weights 1/N, next-token targets"),
        "d": ("int >= 2", "2", "vocabulary"),
        "tokens": ("array of arrays of int", "required", "the sequences x_1..x_(L+1), tokens 0..d-1"),
        "test_tokens": ("array of arrays of int", "none", "a held-out set (of any length L_test + 1 >= 2), never "
                                                          "trained on: its loss is recorded as `loss_test`"),
    },
    "[[layers]]": {
        "heads": ("array of tables", "required", "the layer's heads; their outputs are appended to the stream"),
        "stream": ("`concat`", "concat", "how outputs join the stream (`sum`: refused, not built)"),
    },
    "[[layers.heads]]": {
        "score": ("`rpe`, `bilinear`, `rpe+bilinear`", "bilinear", "weights w per lag, X_t^T A X_(t-lag), or "
                                                                  "their sum"),
        "lags": ("[first, last]", "rpe: required; bilinear: every causal lag", "the lag window (0: the position itself)"),
        "softmax": ("bool", "true", "softmax over the lags that exist; false: linear attention"),
        "normalise": ("bool", "false", "u = s / ||s|| (0 where s = 0)"),
        "value": ("`token`, `stream`", "stream", "what is averaged: the one-hot token, or the whole stream"),
        "query": ("`stream` or array of blocks", "stream", "the stream blocks the bilinear score's query reads: "
                  "`token`, `position`, `layerJ.headI` (an earlier head's output); score X_t[q]^T A[q, k] X_j[k]"),
        "key": ("`stream` or array of blocks", "stream", "the blocks its key reads (a wide head: W_K over them; "
                "`key = \"layer1.head1\"` with `width` is a wide layer-1 value read by a wide query, case (b) 2)"),
        "w": ("number or array", "[init]", "initial rpe weights (one per lag of the window)"),
        "A": ("number or matrix", "[init]", "initial bilinear matrix (D_k x D_k over the stream)"),
        "width": ("int or `inf`", "none (A narrow)", "a wide bilinear head: A = W_Q^T W_K, W_Q, W_K in R^(m x D_k), "
                                                     "its state the joint Gram `Q` (docs/engine.md, case (b) 1)"),
        "omega": ("float", "1", "a wide head's init: W_Q, W_K iid N(0, omega^2/m) (infinite width: Q = omega^2 I)"),
        "value_matrix": ("bool", "false", "the output V u, a trainable V (w x w) over the value's width w; with "
                                          "width: V = W_O M_V wide, its Gram `QV` (docs/engine.md, case (b) 3)"),
        "V": ("number or matrix", "[init]", "initial value matrix (narrow)"),
    },
    "[selector]": {
        "D": ("int >= 0", "1", "the largest subset of heads: K(l) = sum_S c_S^2 prod_(h in S) <u_h(L+1), u_h(l)> / "
                               "sum_S c_S^2"),
        "c": ("number or array", "[init]", "initial c_S (subsets by size, then lexicographically)"),
    },
    "[readout]": {
        "kind": ("`linear`, `attention`", "linear", "softmax(X_L W), or sum_l softmax_l(a K(l)) e(x_l)"),
        "a": ("number", "[init]", "attention: the initial a"), "W": ("number or matrix", "[init]", "linear: initial W"),
    },
    "[init]": {
        "std": ("float >= 0", "0.1", "entries N(mean, std^2)"), "mean": ("float", "0", "their mean"),
        "seed": ("int", "0", "their seed (`--seed`)"),
    },
    "[training]": {
        "method": ("`gd`, `flow`, `rk4`", "gd", "the exact GD map or the gradient flow"),
        "eta": ("float > 0", "0.1", "GD step size"), "steps": ("int", "100", "the one stage's length (gd)"),
        "t_end": ("float", "100", "the one stage's time (flow)"), "dt": ("float", "eta", "rk4 step"),
        "rtol": ("float", "1e-8", "flow tolerance"), "atol": ("float", "1e-10", "flow tolerance"),
        "record_every": ("int", "about 1000 records", "record every N steps"),
        "record_log": ("int", "none", "N log-spaced records"), "record_dt": ("float", "none", "flow: every DT"),
        "max_abs": ("float", "1e6", "an entry above this stops the run as diverged"),
        "stages": ("array of tables", "one stage training all", "the phases"),
    },
    "[[training.stages]]": {
        "name": ("str", "stageN", "its name"), "train": ("`all` or array of block names", "all",
                                                        "the blocks it trains (`layer1.head1.w`, `selector.c`, ...)"),
        "steps": ("int", "required (gd)", "its length"), "t_end": ("float", "required (flow)", "its time"),
        "until": ("`loss<=X`, `loss>=X`", "none", "ends it early (a plug-in may add its own criteria)"), "eta": ("float", "training.eta", "its step size"),
    },
}

#: the keys docs/engine.md's closure statement refuses, and why (one line each)
NOT_CLOSED = {
    "reads": "a wide matrix acting on the hidden space of another wide object has no finite Gram state "
             "(docs/engine.md, case (b) 4)",
    "mlp": "a nonlinearity in the hidden space has no finite state; its state is a distribution over units "
           "(docs/engine.md, case (b) 5)",
    "hidden_activation": "a nonlinearity in the hidden space has no finite state (docs/engine.md, case (b) 5)",
    "embedding": "trainable embeddings move the input basis (docs/engine.md, case (b) 6): not implemented",
}
TOP = tuple(KEYS["top level"])
HEAD_KEYS = tuple(KEYS["[[layers.heads]]"])
#: the run knobs a command-line flag or a keyword of meanfield.load may override
OVERRIDES = ("steps", "eta", "seed", "method", "record_every", "t_end", "width")
#: the largest forward pass (the gathered stream of one head: sequences x T x window x width, float64)
MAX_FORWARD_BYTES = 2 * 1024 ** 3


@dataclass(frozen=True)
class TwoLayerStage:
    """One stage: the blocks it trains, its length (steps or time), its criterion, name and step size."""

    train: tuple
    length: float
    criterion: tuple | None = None
    name: str = ""
    eta: float | None = None


@dataclass(frozen=True)
class TwoLayerTraining:
    """The solver and record options (the fields :mod:`meanfield.core.harness` reads)."""

    method: str = "gd"
    eta: float = 0.1
    dt: float | None = None
    rtol: float = 1e-8
    atol: float = 1e-10
    horizon: float = 100
    record_every: int | None = None
    record_log: int | None = None
    record_dt: float | None = None
    max_abs: float = 1e6


@dataclass(frozen=True)
class TwoLayerDescription:
    """A validated two-layer description: the network, the data (x, y, p), the initial state and the training."""

    name: str
    net: Net
    x: np.ndarray
    y: np.ndarray
    p: np.ndarray
    theta0: np.ndarray
    training: TwoLayerTraining
    stages: tuple
    loss: str
    data: dict
    source: str | None = None
    raw: dict = field(default_factory=dict)
    #: a plug-in's stochastic sampling (Python only, :func:`twolayer_from_dict`): ``batches(step)`` -> the token
    #: sequences (n, L + 1) GD step ``step`` (0-based, counted over the whole run) trains on, next-token targets,
    #: weights 1/n; None: every step on the data (x, y, p)
    batches: Callable[[int], np.ndarray] | None = None
    #: a plug-in's stop criteria (Python only): name -> ``f(theta, loss, grad)``, the quantity ``until`` compares
    criteria: dict = field(default_factory=dict)

    @property
    def test(self):
        """The held-out set (x, y, p) of a fixed data set, or None."""
        return self.data.get("test")

    @property
    def test_net(self) -> Net:
        """The network on the held-out set's contexts (the same blocks; its own L where it has another length)."""
        Lt = self.data.get("L_test")
        return self.net if Lt is None else dataclasses.replace(self.net, L=int(Lt))

    @property
    def exact(self) -> bool:
        """True for the exact population law, False for a sampled data set."""
        return bool(self.data.get("exact"))


def is_twolayer(raw) -> bool:
    """Whether a parsed TOML table is a two-layer description (``[model] class = "twolayer"``).

    Parameters
    ----------
    raw : dict

    Returns
    -------
    bool

    Example
    -------
    >>> is_twolayer({"model": {"class": "twolayer"}}), is_twolayer({"heads": []})
    (True, False)
    """
    return isinstance(raw, dict) and isinstance(raw.get("model"), dict) and raw["model"].get("class") == "twolayer"


def _table(where, v, allowed):
    if not isinstance(v, dict):
        raise ConfigError(f"{where}: must be a table; got {v!r}")
    for k in v:
        if k in NOT_CLOSED:
            raise ConfigError(f"{where}.{k}: {NOT_CLOSED[k]}")
        if k not in allowed:
            raise ConfigError(f"{where}: unknown key '{k}'; allowed: {', '.join(allowed)}")
    return v


def _head(where, h) -> tuple:
    _table(where, h, HEAD_KEYS)
    score = as_choice(f"{where}.score", h.get("score", "bilinear"), SCORES)
    qk = {}
    for side in ("query", "key"):
        v = h.get(side, "stream")
        v = [v] if isinstance(v, str) else v
        if not isinstance(v, list) or not v or any(not isinstance(b, str) for b in v):
            raise ConfigError(f"{where}.{side}: 'stream' or a list of stream blocks ('token', 'position', "
                              f"'layerJ.headI'); got {h[side]!r}")
        qk[side] = tuple(v)
    lags = h.get("lags")
    if lags is not None:
        if not isinstance(lags, list) or len(lags) != 2:
            raise ConfigError(f"{where}.lags: [first, last], integers with 0 <= first <= last; got {lags!r}")
        lags = (as_int(f"{where}.lags", lags[0], lo=0), as_int(f"{where}.lags", lags[1], lo=0))
    softmax = as_bool(f"{where}.softmax", h.get("softmax", True))
    normalise = as_bool(f"{where}.normalise", h.get("normalise", False))
    value = as_choice(f"{where}.value", h.get("value", "stream"), VALUES)
    width = None
    if "width" in h:
        width = math.inf if h["width"] in ("inf", math.inf) else as_int(f"{where}.width", h["width"], lo=1)
        if "A" in h:
            raise ConfigError(f"{where}.A: a wide head (width) starts from its Gram (omega), not from A")
    elif "omega" in h:
        raise ConfigError(f"{where}.omega: only with width (a wide bilinear head's init scale)")
    omega = as_float(f"{where}.omega", h.get("omega", 1.0), nonneg=True) if width is not None else 1.0
    vm = as_bool(f"{where}.value_matrix", h.get("value_matrix", False))
    if width is not None and vm and "V" in h:
        raise ConfigError(f"{where}.V: a wide head (width) starts its value matrix from its Gram (omega), not from V")
    try:
        hd = Head(score, lags, softmax=softmax, normalise=normalise, value=value, width=width, omega=omega,
                  value_matrix=vm, **qk)
    except ConfigError as e:
        raise ConfigError(f"{where}.{e}") from None
    return hd, {k: h[k] for k in ("w", "A", "V") if k in h}


def _data(raw, loss):
    from .twolayer import markov_law, posterior_mean

    fam = raw.get("family", "markov") if isinstance(raw, dict) else None
    if fam == "tokens":
        return _tokens(raw, loss)
    if fam == "graph":
        return _graph(raw, loss)
    d = _table("data", raw, tuple(KEYS["[data] (family = markov)"]))
    if fam != "markov":
        raise ConfigError(f"data.family: one of markov (the in-context Markov chain with a Dirichlet prior), graph "
                          f"(a latent causal graph), tokens (a fixed data set); got {fam!r}")
    S = as_int("data.d", d.get("d", 2), lo=2)
    L = as_int("data.L", d.get("L", 5), lo=1)
    pa = d.get("pa", [1])
    if not isinstance(pa, list) or not pa:
        raise ConfigError(f"data.pa: a list of positive integers (parent lags); got {pa!r}")
    pa = tuple(as_int("data.pa", v, lo=1) for v in pa)
    if max(pa) > L:
        raise ConfigError(f"data.L: an integer >= max(pa) = {max(pa)}; got {L}")
    alpha = as_float("data.alpha", d.get("alpha", 1.0), positive=True)
    start = d.get("start", "uniform")
    if start != "uniform":
        raise ConfigError(f"data.start: 'uniform' (x_1..x_r uniform: the only start with a closed-form law; the "
                          f"stationary start of the official codes has none, docs/engine.md); got {start!r}")
    samples = d.get("samples")
    exact = as_bool("data.exact", d.get("exact", samples is None))
    if exact and samples is not None:
        raise ConfigError("data.samples: not with exact = true (give one of them)")
    if not exact and samples is None:
        raise ConfigError("data.samples: a positive integer (the sampled data set's size) when exact = false")
    info = {"family": "markov", "d": S, "L": L, "pa": list(pa), "alpha": alpha, "start": start, "exact": exact}
    if exact:
        n = S ** (L if loss == "soft" else L + 1)
        try:
            law = markov_law(S, L - 1 if loss == "soft" else L, pa, alpha) if n <= 2_000_000 else None
        except ConfigError as e:
            raise ConfigError(f"data.{e}") from None
        if law is None:
            raise ConfigError(f"data.L: the exact law enumerates {S}^{L + (loss != 'soft')} sequences, more than "
                              f"2000000; smaller L or d, or samples = n with exact = false")
        x, p = law.tokens, law.prob
        y = posterior_mean(x, S, pa, alpha) if loss == "soft" else np.eye(S)[x[:, L]]
        return S, L, x, y, p, info
    if loss == "soft":
        raise ConfigError("model.loss: 'soft' (the posterior mean target) is built on the exact law only; "
                          "use loss = 'nll' with samples")
    n = as_int("data.samples", samples, lo=1, hi=10_000_000)
    seed = as_int("data.seed", d.get("seed", 0), lo=0)
    info.update(samples=n, seed=seed, sampled=True)
    x = _sample_chain(S, L, pa, alpha, n, seed)
    return S, L, x, np.eye(S)[x[:, L]], np.full(n, 1.0 / n), info


#: the most tokens a fixed data set given in the description may hold
MAX_TOKENS = 2_000_000


def _tokens(raw, loss):
    """A fixed data set: ``tokens`` (rows x_1..x_{L+1} over 0..d-1), weights 1/N, the next-token targets."""
    d = _table("data", raw, tuple(KEYS["[data] (family = tokens)"]))
    S = as_int("data.d", d.get("d", 2), lo=2)
    if loss == "soft":
        raise ConfigError("model.loss: 'soft' needs the exact law (data.family = 'markov'); a fixed data set has "
                          "next tokens: loss = 'nll'")
    x = _token_rows("data.tokens", d.get("tokens"), S)
    L = x.shape[1] - 1
    info = {"family": "tokens", "d": S, "L": L, "exact": False, "samples": int(x.shape[0]), "fixed": True}
    if d.get("test_tokens") is not None:
        xt = _token_rows("data.test_tokens", d["test_tokens"], S)
        Lt = xt.shape[1] - 1
        info["test"] = (xt, np.eye(S)[xt[:, Lt]], np.full(xt.shape[0], 1.0 / xt.shape[0]))
        if Lt != L:
            info["L_test"] = int(Lt)
        info["n_test"] = int(xt.shape[0])
    return S, L, x, np.eye(S)[x[:, L]], np.full(x.shape[0], 1.0 / x.shape[0]), info


def _graph(raw, loss):
    """The exact law of a latent causal graph over positions 1..L+1 (the last one predicted)."""
    from .twolayer import graph_law, graph_posterior_mean

    d = _table("data", raw, tuple(KEYS["[data] (family = graph)"]))
    S = as_int("data.d", d.get("d", 2), lo=2)
    par = d.get("parents")
    if not isinstance(par, list) or len(par) < 2 or not all(isinstance(ps, list) for ps in par):
        raise ConfigError("data.parents: one list per position 1..L+1 of earlier positions (1-based, [] for a root); "
                          "the last position is the one predicted")
    alpha = as_float("data.alpha", d.get("alpha", 1.0), positive=True)
    L = len(par) - 1
    try:
        if loss == "soft":  # the law of x_1..x_L and the posterior mean of the last position's row
            law = graph_law(S, par[:-1], alpha)
            y = graph_posterior_mean(law.tokens, S, par[:-1], par[-1], alpha)
        else:
            law = graph_law(S, par, alpha)
            y = np.eye(S)[law.tokens[:, L]]
    except ConfigError as e:
        raise ConfigError(f"data.{e}") from None
    info = {"family": "graph", "d": S, "L": L, "parents": par, "alpha": alpha, "exact": True}
    return S, L, law.tokens, y, law.prob, info


def _token_rows(where, rows, S) -> np.ndarray:
    if isinstance(rows, np.ndarray) and rows.ndim == 2 and rows.dtype.kind in "iu":  # from Python (a family)
        arr = rows.astype(np.int64)
    else:
        if not isinstance(rows, list) or not rows or not all(isinstance(r, list) for r in rows):
            raise ConfigError(f"{where}: a non-empty list of sequences, each a list of L + 1 tokens 0..d-1")
        n_tok = sum(len(r) for r in rows)
        if n_tok > MAX_TOKENS:
            raise ConfigError(f"{where}: {n_tok} tokens, more than {MAX_TOKENS}")
        if len({len(r) for r in rows}) != 1:
            raise ConfigError(f"{where}: every sequence needs the same length L + 1 >= 2")
        if not all(isinstance(v, int) and not isinstance(v, bool) for r in rows for v in r):
            raise ConfigError(f"{where}: integers 0..{S - 1} (d = {S})")
        arr = np.asarray(rows, dtype=np.int64)
    if arr.size > MAX_TOKENS or arr.shape[0] < 1 or arr.shape[1] < 2:
        raise ConfigError(f"{where}: 1 to {MAX_TOKENS} tokens in sequences of length L + 1 >= 2; got shape "
                          f"{list(arr.shape)}")
    if arr.min() < 0 or arr.max() >= S:
        raise ConfigError(f"{where}: integers 0..{S - 1} (d = {S})")
    return arr


def _sample_chain(d, L, pa, alpha, n, seed):
    """n sequences x_1..x_{L+1}: a fresh Dirichlet(alpha) row per parent context and sequence, uniform start."""
    rng = np.random.default_rng(seed)
    r = max(pa)
    x = np.zeros((n, L + 1), dtype=np.int64)
    x[:, :r] = rng.integers(0, d, size=(n, r))
    rows = rng.dirichlet(np.full(d, alpha), size=(n, d ** len(pa)))
    cum = rows.cumsum(axis=2)
    for l in range(r, L + 1):
        z = sum(x[:, l - p_] * d ** i for i, p_ in enumerate(pa))
        u = rng.random(n)
        x[:, l] = np.minimum((u[:, None] > cum[np.arange(n), z]).sum(axis=1), d - 1)
    return x


def _init(net: Net, raw_init, given: dict) -> np.ndarray:
    ini = _table("init", raw_init, tuple(KEYS["[init]"]))
    std = as_float("init.std", ini.get("std", 0.1), nonneg=True)
    mean = as_float("init.mean", ini.get("mean", 0.0))
    seed = as_int("init.seed", ini.get("seed", 0), lo=0)
    rng = np.random.default_rng(seed)
    widths = {f"layer{k + 1}.head{h + 1}.{b}": (hd, k, h, j) for k, h, hd in net.heads if hd.width is not None
              for b, j in (("Q", 0), ("QV", 1))}
    parts = []
    for name, shape in net.blocks:
        m = int(np.prod(shape))
        draw = mean + std * rng.standard_normal(m)  # drawn for every block, so a given one does not shift the others
        if name in widths:  # a wide head: the Gram of its W_Q, W_K (twolayer_wide.initial_gram; its own seed stream)
            hd, k, h, j = widths[name]
            sd = (seed, k, h) if j == 0 else (seed, k, h, 1)  # W_Q, W_K; W_O, M_V: their own streams
            parts.append(initial_gram(shape[0] // 2, hd.omega, hd.width, seed=sd).ravel())
            continue
        if name in given:
            where, v = given[name]
            arr = np.asarray(v, dtype=object)
            if arr.shape == ():
                parts.append(np.full(m, as_float(where, v)))
                continue
            if arr.size != m:
                raise ConfigError(f"{where}: {m} numbers (block {name}, shape {list(shape)}) or one number; got "
                                  f"{arr.size}")
            parts.append(np.array([as_float(where, e) for e in arr.ravel()], dtype=np.float64))
        else:
            parts.append(draw)
    return np.concatenate(parts) if parts else np.zeros(0)


def _training(raw_t, net: Net, overrides: dict, criteria=()):
    t = _table("training", raw_t, tuple(KEYS["[training]"]))
    t = {**t, **{k: v for k, v in overrides.items() if k != "seed"}}
    method = as_choice("training.method", t.get("method", "gd"), ("gd", "flow", "rk4"))
    eta = as_float("training.eta", t.get("eta", 0.1), positive=True)
    names = [n for n, _ in net.blocks]
    stages = []
    raw_st = t.get("stages")
    if raw_st is None:
        raw_st = [{"name": "train", "train": "all",
                   ("steps" if method == "gd" else "t_end"): t.get("steps" if method == "gd" else "t_end", 100)}]
    elif not isinstance(raw_st, list) or not raw_st:
        raise ConfigError("training.stages: a non-empty list of [[training.stages]] tables")
    for i, s in enumerate(raw_st):
        w = f"training.stages[{i}]"
        _table(w, s, tuple(KEYS["[[training.stages]]"]))
        tr = s.get("train", "all")
        tr = names if tr == "all" else tr
        if isinstance(tr, str):
            tr = [tr]
        if not isinstance(tr, list) or not tr or any(b not in names for b in tr):
            raise ConfigError(f"{w}.train: 'all' or a list of block names from {', '.join(names)}; got {s.get('train')!r}")
        key = "steps" if method == "gd" else "t_end"
        if key not in s:
            raise ConfigError(f"{w}.{key}: required (the stage's length in {'steps' if method == 'gd' else 'time'})")
        length = as_int(f"{w}.steps", s[key], lo=0) if method == "gd" else as_float(f"{w}.t_end", s[key], nonneg=True)
        crit = parse_criterion(f"{w}.until", s.get("until"), ("loss",) + tuple(criteria))
        st_eta = as_float(f"{w}.eta", s["eta"], positive=True) if "eta" in s else None
        if st_eta is not None and method != "gd":
            raise ConfigError(f"{w}.eta: a stage's own step size is for method gd only")
        stages.append(TwoLayerStage(tuple(tr), length, crit, str(s.get("name", f"stage{i + 1}")), st_eta))
    for knob in ("steps", "t_end"):  # a flag the run would ignore is refused
        if knob in overrides:
            if len(stages) > 1:
                raise ConfigError(f"--{knob.replace('_', '-')}: this description has {len(stages)} stages; give each "
                                  f"stage's length in its [[training.stages]] table")
            if (knob == "steps") != (method == "gd"):
                raise ConfigError(f"--{knob.replace('_', '-')}: for method {'gd' if knob == 'steps' else 'flow or rk4'}"
                                  f" only; this run's method is {method}")
            length = (as_int("steps", overrides["steps"], lo=0) if knob == "steps"
                      else as_float("t_end", overrides["t_end"], nonneg=True))
            stages[0] = dataclasses.replace(stages[0], length=length)
    if "eta" in overrides and all(s.eta is not None for s in stages):
        raise ConfigError("--eta: every stage of this description has its own eta (training.stages[].eta)")
    horizon = sum(s.length for s in stages)
    rec = {"method": method}
    record_options({k: t.get(k) for k in ("record_every", "record_log", "record_dt")}, rec)
    tr = TwoLayerTraining(method=method, eta=eta, dt=as_float("training.dt", t["dt"], positive=True) if "dt" in t else None,
                          rtol=as_float("training.rtol", t.get("rtol", 1e-8), positive=True),
                          atol=as_float("training.atol", t.get("atol", 1e-10), positive=True), horizon=horizon,
                          record_every=rec["record_every"], record_log=rec["record_log"], record_dt=rec["record_dt"],
                          max_abs=as_float("training.max_abs", t.get("max_abs", 1e6), positive=True))
    return tr, tuple(stages)


def twolayer_from_dict(raw: dict, overrides: dict | None = None, source: str | None = None, *,
                       criteria: dict | None = None, batches: Callable[[int], np.ndarray] | None = None
                       ) -> TwoLayerDescription:
    """Validate a two-layer description given as a dict (the TOML file's tables).

    Parameters
    ----------
    raw : dict
        The tables, as ``tomllib`` reads them.
    overrides : dict or None
        Run knobs (:data:`OVERRIDES`: steps, eta, seed (of the initialisation), method, record_every, t_end,
        width (of every wide head)).
    source : str or None
        Where it came from (the name defaults to its stem).
    criteria : dict or None
        A plug-in's own stop criteria, name -> ``f(theta, loss, grad)`` -> float: a stage's ``until`` may name
        them (``loss`` is always there).
    batches : callable or None
        A plug-in's stochastic sampling: ``batches(step)`` -> int array (n, L + 1) of the sequences GD step
        ``step`` (0-based over the run) trains on (next-token targets, weights 1/n; the criteria are evaluated on
        that batch). The data (x, y, p) stay what the recorded loss is measured on. GD only.

    Returns
    -------
    TwoLayerDescription

    Raises
    ------
    ConfigError
        One line naming the field: a bad value, an unknown key, or a construct that does not close.

    Example
    -------
    >>> raw = {"model": {"class": "twolayer"}, "data": {"d": 2, "L": 3}, "layers": [{"heads": [{}]}],
    ...        "readout": {"kind": "linear"}}
    >>> twolayer_from_dict(raw, {"steps": 3}).stages[0].length
    3
    """
    from pathlib import Path

    if not isinstance(raw, dict):
        raise ConfigError("model: a description is a TOML table")
    for k in raw:
        if k in NOT_CLOSED:
            raise ConfigError(f"{k}: {NOT_CLOSED[k]}")
        if k not in TOP:
            raise ConfigError(f"model: unknown key '{k}' of a two-layer description; allowed: {', '.join(TOP)}")
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    for k in overrides:
        if k not in OVERRIDES:
            raise ConfigError(f"--{k.replace('_', '-')}: not a parameter of a two-layer description; its parameters: "
                              f"{', '.join('--' + o.replace('_', '-') for o in OVERRIDES)}")
    if raw.get("parameters"):
        raise ConfigError("parameters: a two-layer description declares no parameters yet (its knobs: "
                          f"{', '.join(OVERRIDES)})")
    m = _table("model", raw.get("model", {}), tuple(KEYS["[model]"]))
    loss = as_choice("model.loss", m.get("loss", "nll"), ("nll", "soft", "official-ce"))
    floor = as_float("model.yhat_floor", m.get("yhat_floor", 1e-300), positive=True)
    if not floor < 1.0:
        raise ConfigError(f"model.yhat_floor: a float in (0, 1) (the log(0) guard); got {floor!r}")
    S, L, x, y, p, info = _data(raw.get("data", {}), "soft" if loss == "soft" else "nll")
    layers_raw = raw.get("layers")
    if not isinstance(layers_raw, list) or not layers_raw:
        raise ConfigError("layers: required, a list of [[layers]] tables, each with [[layers.heads]]")
    layers, given = [], {}
    for k, lr in enumerate(layers_raw):
        _table(f"layers[{k}]", lr, tuple(KEYS["[[layers]]"]))
        if lr.get("stream", "concat") != "concat":
            raise ConfigError(f"layers[{k}].stream: only 'concat' (each layer's outputs appended to the stream) is "
                              f"built; got {lr['stream']!r}")
        hs = lr.get("heads")
        if not isinstance(hs, list) or not hs:
            raise ConfigError(f"layers[{k}].heads: required, a list of [[layers.heads]] tables (1 or more)")
        heads = []
        for h, hr in enumerate(hs):
            hd, vals = _head(f"layers[{k}].heads[{h}]", hr)
            heads.append(hd)
            for b, v in vals.items():
                given[f"layer{k + 1}.head{h + 1}.{b}"] = (f"layers[{k}].heads[{h}].{b}", v)
        layers.append(tuple(heads))
    if "width" in overrides:  # --width M: every wide head at width M (its Gram drawn at M)
        wv = overrides["width"]
        wv = math.inf if wv in ("inf", math.inf) or (isinstance(wv, float) and math.isinf(wv)) else \
            as_int("width", wv, lo=1)
        if not any(hd.width is not None for hs in layers for hd in hs):
            raise ConfigError("width: no head of this two-layer description is wide (give a bilinear head or a value "
                              "matrix width = m in the file)")
        layers = [tuple(dataclasses.replace(hd, width=wv) if hd.width is not None else hd for hd in hs)
                  for hs in layers]
    sel = raw.get("selector")
    D = None
    if sel is not None:
        _table("selector", sel, tuple(KEYS["[selector]"]))
        D = as_int("selector.D", sel.get("D", 1), lo=0)
        if "c" in sel:
            given["selector.c"] = ("selector.c", sel["c"])
    ro = _table("readout", raw.get("readout", {}), tuple(KEYS["[readout]"]))
    kind = as_choice("readout.kind", ro.get("kind", "linear"), READOUTS)
    for b in ("a", "W"):
        if b in ro:
            if (b == "a") != (kind == "attention"):
                raise ConfigError(f"readout.{b}: the {'attention' if b == 'a' else 'linear'} read-out's parameter; "
                                  f"this read-out is {kind}")
            given[f"readout.{b}"] = (f"readout.{b}", ro[b])
    net = Net(S, L, tuple(layers), selector=D, readout=kind, ce="softmax" if loss == "official-ce" else "log",
              log_cap=-math.log(floor))
    if "L_test" in info:  # a held-out set of another length: the same blocks on contexts of length L_test
        try:
            test_net = dataclasses.replace(net, L=info["L_test"])
        except ConfigError as e:
            raise ConfigError(f"data.test_tokens: {e}") from None
        if test_net.blocks != net.blocks:
            raise ConfigError(f"data.test_tokens: sequences of the training length L + 1 = {L + 1} (this network's "
                              f"blocks depend on L); got {info['L_test'] + 1}")
    for name, (where, _) in given.items():
        if name not in dict(net.blocks):
            raise ConfigError(f"{where}: this head has no such block (rpe: w, bilinear: A, wide bilinear: Q, value "
                              "matrix: V)")
    n = x.shape[0]
    need = memory_bytes(net, n)
    if need > MAX_FORWARD_BYTES:
        raise ConfigError(f"data: one loss and gradient needs about {need / 1024 ** 3:.1f} GiB ({n} sequences x "
                          f"{net.T} positions x the stream and head widths); smaller L, d, samples or fewer heads")
    ini = dict(raw.get("init", {}))
    if "seed" in overrides:
        ini["seed"] = overrides["seed"]
    theta0 = _init(net, ini, given)
    criteria = dict(criteria or {})
    for k, f in criteria.items():
        if k == "loss" or not callable(f) or not str(k).replace("_", "").isalnum():
            raise ConfigError(f"criteria: name -> f(theta, loss, grad), names other than loss; got {k!r}")
    training, stages = _training(raw.get("training", {}), net, overrides, criteria)
    if batches is not None:
        if not callable(batches):
            raise ConfigError(f"batches: a function step -> token sequences (n, L + 1); got {type(batches).__name__}")
        if training.method != "gd":
            raise ConfigError(f"batches: sampled batches need method gd; got {training.method}")
    name = str(raw.get("name", Path(source).stem if source else "twolayer"))
    return TwoLayerDescription(name, net, x, y, p, theta0, training, stages, loss, info, source, raw, batches,
                               criteria)

