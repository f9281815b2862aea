"""The generic small-parameter multi-layer attention network of the two-layer model class.

Case (a) of ``docs/engine.md`` ("Two-layer attention: which models close"):
every trainable parameter is a small array over the finite dictionary
(tokens, positions, lags, subsets of heads), so the parameter vector is the
closed state, and full-batch GD on an exact finite law (or a fixed data set)
is exact once the loss and its gradient are. This module is the engine's
loss and gradient (numpy, explicit backpropagation) over a list of blocks;
the explicit network it is tested against is
:mod:`meanfield.engine.twolayer_oracle` (torch, autograd, no shared code).

Positions and features (context x_1..x_L over [S]):

* T = L positions for the linear read-out (it reads position L, the last
  context token); T = L + 1 for the attention read-out (position L + 1 is the
  query, whose token x_{L+1} is the target: its token features are zero);
* X_0[t] = [e(x_t), e_t] in R^{S + T} (one-hot token, one-hot position).

Blocks, layer by layer (each layer's head outputs are concatenated to the
stream: X_{k+1} = [X_k, out_1, ..., out_H]):

* a head attends from position t to the positions t - lag, lag in its window
  ``lags = (first, last)`` (0 <= first <= last), the lags with t - lag >= 1
  ("the lags that exist"). Its score is ``rpe`` (one weight w_lag per lag of
  the window), ``bilinear`` (X_k[t]^T A X_k[t - lag], a D_k x D_k matrix A;
  the default window is every causal lag 0..T-1, the diagonal included) or
  ``rpe+bilinear`` (their sum). ``softmax = true``: alpha = softmax over the
  lags that exist; ``false``: linear attention, alpha = the score itself;
* its value is ``stream`` (the identity on X_k) or ``token`` (the one-hot
  token block e(x)): s_t = sum_lag alpha_{t,lag} value(X_k[t - lag]);
* ``normalise = true``: u_t = s_t / ||s_t|| (u_t = 0 where s_t = 0, e.g. where
  no lag exists: no gradient flows through such a position), else u_t = s_t.

Read-outs and loss:

* ``linear``: f = softmax(X_final[L] W), W in R^{D_final x S};
* ``attention`` (needs a selector): the selector over subsets S of all heads
  (in order: layer 1's, then layer 2's), |S| <= D, coefficients c_S, gives
  K(l) = sum_S c_S^2 prod_{h in S} <u_h(L+1), u_h(l)> / sum_S c_S^2 for the
  keys l = 1..L, and y_hat = sum_l softmax_l(a K(l)) e(x_l) (a scalar a);
* loss sum_n p_n sum_e y_ne min(-log y_hat_ne, log_cap) with weights p (1/N
  for a data set, the probabilities of an exact law) and targets y (one-hot
  next tokens: ``nll``; the posterior mean of the next row: ``soft``);
  ``log_cap = -log(1e-300)`` is the log(0) guard (a clipped term has zero
  gradient: it binds when the target token never occurs in the context).

Parameters, one flat float64 vector in the order of :attr:`Net.blocks`:
for each layer k and head h ``layer{k}.head{h}.w`` (rpe) then
``layer{k}.head{h}.A`` (bilinear, row-major), then ``selector.c``, then
``readout.W`` or ``readout.a``; each block is a learning-rate group and a
stage can train any set of them.

Example
-------
>>> net = Net(S=2, L=3, layers=((Head("rpe", (1, 2), normalise=True, value="token"),),),
...           selector=1, readout="attention")
>>> [b[0] for b in net.blocks]
['layer1.head1.w', 'selector.c', 'readout.a']
>>> theta = np.zeros(net.size); theta[net.offset("selector.c"):net.offset("readout.a")] = 1.0
>>> x = np.array([[0, 1, 0]]); y = np.array([[0.0, 1.0]])
>>> round(loss_grad(theta, net, x, y, np.ones(1))[0], 12) == round(float(np.log(3)), 12)
True
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

import numpy as np

from ..core.errors import ConfigError
from . import twolayer_pattern as tp
from .twolayer_kernels import head_backward, head_forward, readout_attention

__all__ = ["Head", "Net", "subsets", "loss_grad", "loss_only", "memory_bytes", "forward", "gd", "prepare", "LOG_CAP"]

#: the log(0) guard: -log y_hat is clipped at -log(1e-300)
LOG_CAP = -math.log(1e-300)
#: the cross-entropies of :class:`Net` (``ce``) and their read-out kernel codes
CE_KINDS = {"log": 0, "softmax": 1}
SCORES = ("rpe", "bilinear", "rpe+bilinear")
VALUES = ("stream", "token")
READOUTS = ("linear", "attention")
_NONE1, _NONE2 = np.zeros(1), np.zeros((1, 1))  # the w / A of a head without that score (never read)


def subsets(H: int, D: int) -> list:
    """Subsets of {0..H-1} with |S| <= D: by size, then lexicographically (the empty set first).

    Parameters
    ----------
    H : int
        Number of heads.
    D : int
        Largest subset size.

    Returns
    -------
    list of tuple

    Example
    -------
    >>> subsets(3, 2)
    [(), (0,), (1,), (2,), (0, 1), (0, 2), (1, 2)]
    """
    out = []
    for k in range(0, min(D, H) + 1):
        out.extend(itertools.combinations(range(H), k))
    return out


@dataclass(frozen=True)
class Head:
    """One attention head: ``score`` (rpe | bilinear | rpe+bilinear), lag window, softmax, normalise, value;
    ``width``: the bilinear matrix is wide, A = W_Q^T W_K with W_Q, W_K in R^{m x D} (m = ``width``, an
    integer or ``math.inf``; :mod:`meanfield.engine.twolayer_wide`), its state the joint Gram; None: A itself."""

    score: str = "bilinear"
    lags: tuple | None = None
    softmax: bool = True
    normalise: bool = False
    value: str = "stream"
    width: float | None = None
    omega: float = 1.0  # a wide head's init scale: W_Q, W_K (and W_O, M_V) iid N(0, omega^2 / m)
    value_matrix: bool = False  # the output V u, V (w x w) over the value's width w (wide: V = W_O M_V)
    #: the stream blocks the bilinear score's query / key read ("token", "position", "layer{j}.head{i}": an
    #: earlier head's output); () the whole stream. Restricted: score = X_t[q]^T A[q, k] X_j[k] (the entries of
    #: A outside the q x k block are not read and never move; wide: W_Q's columns q and W_K's columns k)
    query: tuple = ()
    key: tuple = ()

    def __post_init__(self):
        for side in ("query", "key"):
            v = getattr(self, side)
            v = (v,) if isinstance(v, str) else tuple(v)
            if v == ("stream",):
                v = ()
            if v and "bilinear" not in self.score:
                raise ConfigError(f"{side}: only a bilinear score has a query and a key to restrict; this head's "
                                  f"score is {self.score!r}")
            if any(not isinstance(b, str) for b in v) or len(set(v)) != len(v):
                raise ConfigError(f"{side}: 'stream' or distinct stream blocks ('token', 'position', "
                                  f"'layerJ.headI'); got {getattr(self, side)!r}")
            object.__setattr__(self, side, v)
        if self.width is not None:
            w = self.width
            if "bilinear" not in self.score and not self.value_matrix:
                raise ConfigError(f"width: only a bilinear score (W_Q, W_K) or a value matrix (W_O, M_V) has wide "
                                  f"weights; this head's score is {self.score!r} and it has no value matrix")
            if isinstance(w, bool) or not (w == math.inf or (isinstance(w, (int, np.integer)) and w >= 1)):
                raise ConfigError(f"width: an integer m >= 1 or inf; got {w!r}")
        if self.score not in SCORES:
            raise ConfigError(f"score: one of {', '.join(SCORES)}; got {self.score!r}")
        if self.value not in VALUES:
            raise ConfigError(f"value: one of {', '.join(VALUES)}; got {self.value!r}")
        if self.lags is None and "rpe" in self.score:
            raise ConfigError("lags: an rpe score needs its lag window lags = [first, last]")
        if self.lags is not None:
            lg = tuple(self.lags)
            if (len(lg) != 2 or any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) for v in lg)
                    or lg[0] < 0 or lg[1] < lg[0]):
                raise ConfigError(f"lags: [first, last], integers with 0 <= first <= last; got {self.lags!r}")
            object.__setattr__(self, "lags", (int(lg[0]), int(lg[1])))


@dataclass(frozen=True)
class Net:
    """Sizes and blocks of the network: vocabulary ``S``, context length ``L``, heads per layer, selector, read-out;
    ``ce`` the cross-entropy it is trained on (``log``: sum_e y_e min(-log y_hat_e, ``log_cap``); ``softmax``: of
    softmax(y_hat) against y, the official induction code's CrossEntropyLoss on probabilities, never capped)."""

    S: int
    L: int
    layers: tuple
    selector: int | None = None
    readout: str = "linear"
    ce: str = "log"
    log_cap: float = LOG_CAP

    def __post_init__(self):
        if self.ce not in CE_KINDS:
            raise ConfigError(f"ce: one of {', '.join(CE_KINDS)}; got {self.ce!r}")
        if not (isinstance(self.log_cap, (int, float)) and self.log_cap > 0):
            raise ConfigError(f"log_cap: a positive number (-log of the y_hat floor); got {self.log_cap!r}")
        for name in ("S", "L"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ConfigError(f"{name}: a positive integer; got {v!r}")
        if not self.layers or any(not tuple(hs) for hs in self.layers):
            raise ConfigError("layers: at least one layer, each with at least one head")
        object.__setattr__(self, "layers", tuple(tuple(hs) for hs in self.layers))
        if self.readout not in READOUTS:
            raise ConfigError(f"readout: one of {', '.join(READOUTS)}; got {self.readout!r}")
        if self.readout == "attention" and self.selector is None:
            raise ConfigError("selector: the attention read-out needs a [selector] (its similarity K(l))")
        if self.readout == "linear" and self.selector is not None:
            raise ConfigError("selector: only with the attention read-out (readout = 'attention')")
        if self.selector is not None and (isinstance(self.selector, bool) or self.selector < 0):
            raise ConfigError(f"selector.D: an integer >= 0 (the largest subset of heads); got {self.selector!r}")
        for k, hs in enumerate(self.layers):
            for h, hd in enumerate(hs):
                if hd.lags is not None and hd.lags[0] > self.T - 1:
                    raise ConfigError(f"layers[{k}].heads[{h}].lags: first lag {hd.lags[0]} reaches no position "
                                      f"(T = {self.T} positions)")
                lay = self.stream_layout(k)
                for side in ("query", "key"):
                    bad = [b for b in getattr(hd, side) if b not in lay]
                    if bad:
                        raise ConfigError(f"layers[{k}].heads[{h}].{side}: {bad[0]!r} is not a block of the stream "
                                          f"this head reads; one of {', '.join(lay)}")

    @property
    def T(self) -> int:
        """The number of positions: L (linear read-out) or L + 1 (attention read-out: the query)."""
        return self.L + 1 if self.readout == "attention" else self.L

    @property
    def heads(self) -> list:
        """(layer, head index, Head) of every head, in order."""
        return [(k, h, hd) for k, hs in enumerate(self.layers) for h, hd in enumerate(hs)]

    def window(self, hd: Head) -> tuple:
        """The lags (first..last) of a head's window (bilinear default: 0..T-1)."""
        first, last = hd.lags if hd.lags is not None else (0, self.T - 1)
        return first, min(last, self.T - 1)

    def out_dim(self, k: int, hd: Head) -> int:
        """The width of a head's output in layer k."""
        return self.S if hd.value == "token" else self.widths[k]

    def stream_layout(self, k: int) -> dict:
        """The blocks of the stream before layer ``k`` (0-based): name -> (first column, end): ``token`` (S),
        ``position`` (T), then ``layer{j}.head{i}`` (each earlier head's output, in order)."""
        out = {"token": (0, self.S), "position": (self.S, self.S + self.T)}
        col = self.S + self.T
        for j, hs in enumerate(self.layers[:k]):
            for i, hd in enumerate(hs):
                w = self.out_dim(j, hd)
                out[f"layer{j + 1}.head{i + 1}"] = (col, col + w)
                col += w
        return out

    def score_mask(self, k: int, hd: Head):
        """The 0/1 (D_k, D_k) matrix of the entries of A a restricted bilinear score reads (rows: the query's
        blocks, columns: the key's), or None where it reads the whole stream on both sides."""
        if not hd.query and not hd.key:
            return None
        D, lay = self.widths[k], self.stream_layout(k)

        def sel(names):
            v = np.zeros(D)
            if not names:
                v[:] = 1.0
            for b in names:
                v[lay[b][0]:lay[b][1]] = 1.0
            return v

        return np.outer(sel(hd.query), sel(hd.key))

    @property
    def widths(self) -> tuple:
        """D_0, D_1, ...: the stream width before each layer and after the last."""
        out = [self.S + self.T]
        for hs in self.layers:
            out.append(out[-1] + sum(self.S if hd.value == "token" else out[-1] for hd in hs))
        return tuple(out)

    @property
    def reads_positions(self) -> bool:
        """Whether any block reads the stream beyond its token block (a bilinear score, a stream value, W)."""
        return self.readout == "linear" or any("bilinear" in hd.score or hd.value == "stream" for _, _, hd in self.heads)

    @property
    def subsets(self) -> list:
        """The selector's subsets of heads (global head indices), or []."""
        return [] if self.selector is None else subsets(len(self.heads), self.selector)

    @property
    def blocks(self) -> list:
        """(name, shape) of every parameter block in packing order."""
        out = []
        for k, h, hd in self.heads:
            first, last = hd.lags if hd.lags is not None else (0, 0)
            if "rpe" in hd.score:
                out.append((f"layer{k + 1}.head{h + 1}.w", (last - first + 1,)))
            if "bilinear" in hd.score:
                D = self.widths[k]
                if hd.width is None:
                    out.append((f"layer{k + 1}.head{h + 1}.A", (D, D)))
                else:  # the joint Gram of U = [W_Q, W_K] (twolayer_wide)
                    out.append((f"layer{k + 1}.head{h + 1}.Q", (2 * D, 2 * D)))
            if hd.value_matrix:
                w = self.out_dim(k, hd)
                if hd.width is None:
                    out.append((f"layer{k + 1}.head{h + 1}.V", (w, w)))
                else:  # the joint Gram of [W_O^T, M_V] (twolayer_wide)
                    out.append((f"layer{k + 1}.head{h + 1}.QV", (2 * w, 2 * w)))
        if self.selector is not None:
            out.append(("selector.c", (len(self.subsets),)))
        out.append(("readout.W", (self.widths[-1], self.S)) if self.readout == "linear" else ("readout.a", ()))
        return out

    @property
    def wide(self) -> bool:
        """Whether any head has wide weights (``width``)."""
        return any(hd.width is not None for _, _, hd in self.heads)

    @property
    def merged(self) -> "Net":
        """The same network with every wide head's A = W_Q^T W_K as its own block (the forward pass reads A)."""
        return replace(self, layers=tuple(tuple(replace(hd, width=None) for hd in hs) for hs in self.layers))

    @property
    def size(self) -> int:
        """The number of parameters."""
        return int(sum(int(np.prod(s)) for _, s in self.blocks))

    def offset(self, name: str) -> int:
        """Where block ``name`` starts in the flat vector."""
        i = 0
        for n, s in self.blocks:
            if n == name:
                return i
            i += int(np.prod(s))
        raise KeyError(name)

    def unpack(self, theta: np.ndarray) -> dict:
        """Block name -> array view of ``theta`` (a scalar block: shape ())."""
        out, i = {}, 0
        for n, s in self.blocks:
            m = int(np.prod(s))
            out[n] = theta[i:i + m].reshape(s)
            i += m
        return out


def _embed(x: np.ndarray, net: Net, positions: bool = True) -> np.ndarray:
    n = x.shape[0]
    S, T, L = net.S, net.T, net.L
    X = np.zeros((n, T, S + T if positions else S))
    X[np.arange(n)[:, None], np.arange(L)[None, :], x[:, :L]] = 1.0
    if positions:
        X[:, np.arange(T), S + np.arange(T)] = 1.0
    return X


def prepare(net: Net, x: np.ndarray, path: str = "auto"):
    """The per-data-set step of the pattern path: positions grouped by window code, once (keep it with the data).

    Parameters
    ----------
    net : Net
    x : ndarray of int, shape (n, L) or (n, L + 1)
    path : str
        ``auto`` | ``direct`` | ``pattern`` (:mod:`meanfield.engine.twolayer_pattern`).

    Returns
    -------
    meanfield.engine.twolayer_pattern.Prepared

    Example
    -------
    >>> net = Net(2, 3, ((Head("rpe", (1, 2), value="token"),),))
    >>> prepare(net, np.array([[0, 1, 1]])).heads
    (0,)
    """
    _check_tokens(net, x)
    return tp.prepare(net.merged if net.wide else net, x, path)


def _check_tokens(net: Net, x) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim != 2 or x.shape[1] not in (net.L, net.L + 1) or (x.size and (x.min() < 0 or x.max() >= net.S)):
        raise ConfigError(f"tokens: an (n, L = {net.L}) array of tokens 0..{net.S - 1}; got shape {x.shape}")
    return x


def _prep_of(net, x, path, prep):
    if prep is not None:
        if prep.n != x.shape[0]:
            raise ConfigError(f"prep: prepared for {prep.n} sequences; got {x.shape[0]}")
        return prep
    if path not in tp.PATHS:
        raise ConfigError(f"path: one of {', '.join(tp.PATHS)}; got {path!r}")
    return tp.prepare(net, x, path)


def forward(theta: np.ndarray, net: Net, x: np.ndarray, y=None, p=None, want_grad: bool = False,
            path: str = "auto", prep=None):
    """The prediction y_hat (n, S) and the cache for :func:`loss_grad`.

    Parameters
    ----------
    theta : ndarray, shape (net.size,)
    net : Net
    x : ndarray of int, shape (n, L) or (n, L + 1)
        Contexts x_1..x_L (a further column, the target, is never read).
    y, p : ndarray or None
        Targets and weights (the attention read-out's fused kernel also forms the loss gradient with them).
    want_grad : bool
        Also the read-out's gradients (in the cache, for :func:`loss_grad`).
    path : str
        ``auto`` (the pattern path for the heads it applies to), ``direct`` or ``pattern``.
    prep : Prepared or None
        :func:`prepare` of ``x`` (else computed here, once per call; it wins over ``path``).

    Returns
    -------
    yhat : ndarray, shape (n, S)
    cache : dict

    Example
    -------
    >>> net = Net(2, 2, ((Head(),),)); f, _ = forward(np.zeros(net.size), net, np.array([[0, 1]]))
    >>> f.tolist()
    [[0.5, 0.5]]
    """
    if net.wide:  # the forward pass reads A = W_Q^T W_K, the Gram's cross block (meanfield.engine.twolayer_wide)
        from .twolayer_wide import to_merged

        return forward(to_merged(theta, net), net.merged, x, y, p, want_grad, path, prep)
    x = _check_tokens(net, x)
    prep = _prep_of(net, x, path, prep)
    P = net.unpack(theta)
    S = net.S
    # every head a pattern head and the attention read-out: the outputs are never formed per position
    fused = (net.readout == "attention" and len(prep.heads) == len(net.heads)
             and not any(hd.value_matrix for _, _, hd in net.heads))
    X = None if fused else _embed(x, net, positions=net.reads_positions)  # nothing reads positions: tokens only
    cache = {"x": x, "P": P, "layers": [], "prep": prep, "fused": fused}
    outs_all, tables = [], []
    gi = 0
    for k, hs in enumerate(net.layers):
        lc, outs = [], []
        for h, hd in enumerate(hs):
            first, last = net.window(hd)
            lags = np.arange(first, last + 1)
            name = f"layer{k + 1}.head{h + 1}"
            w = P[name + ".w"][:len(lags)] if "rpe" in hd.score else _NONE1
            A = P[name + ".A"] if "bilinear" in hd.score else _NONE2
            mk = net.score_mask(k, hd) if "bilinear" in hd.score else None
            if mk is not None:  # a restricted query / key: only the block A[q, k] is read
                A = A * mk
            if gi in prep.heads:
                tb = tp.table(prep, gi, w, hd.softmax, hd.normalise, S)
                tables.append(tb)
                u = None if fused else tb["U"][prep.codes[tb["r"]]]
                lc.append(dict(lags=lags, table=tb, u=u, width=S))
            else:
                V = S if hd.value == "token" else X.shape[2]
                al, u, nrm = head_forward(X, lags, w, A, hd.softmax, hd.normalise, "rpe" in hd.score,
                                          "bilinear" in hd.score, V)
                lc.append(dict(lags=lags, al=al, u=u, nrm=nrm, A=A, width=V))
            if hd.value_matrix:  # the output V u (the cache keeps u: the normalisation's backward reads it)
                u = u @ P[name + ".V"].T
            outs.append(u)
            outs_all.append(u)
            gi += 1
        cache["layers"].append((X, lc))
        X = None if fused else np.concatenate([X] + outs, axis=2)
    cache["Xf"] = X
    if net.readout == "linear":
        logits = X[:, net.L - 1, :] @ P["readout.W"]
        m = logits.max(axis=1, keepdims=True)
        lse = m + np.log(np.exp(logits - m).sum(axis=1, keepdims=True))
        logy = logits - lse
        cache["logy"] = logy
        return np.exp(logy), cache
    # attention read-out: the selector's similarity K(l) between the query L+1 and the keys l = 1..L (fused kernel)
    c = P["selector.c"]
    if float(c @ c) <= 0:
        raise ConfigError("selector.c: every coefficient is zero (K(l) = sum c_S^2 ... / sum c_S^2 is undefined)")
    subs = net.subsets
    members = np.full((len(subs), max(1, max(len(sb) for sb in subs))), 0, dtype=np.int64)
    for i, sb in enumerate(subs):
        members[i, :len(sb)] = sb
    sizes = np.array([len(sb) for sb in subs], dtype=np.int64)
    if y is None:
        y, p = np.zeros((x.shape[0], S)), np.zeros(x.shape[0])
    if fused:
        out = tp.readout(prep, tables, x, y, p, c, float(P["readout.a"]), members, sizes, net.log_cap, want_grad,
                         CE_KINDS[net.ce])
        cache["readout"] = out
        cache["logy"] = out[1]
        return np.exp(out[1]), cache
    Vm = max(u.shape[2] for u in outs_all)
    U = np.zeros((x.shape[0], net.T, len(outs_all), Vm))
    for h, u in enumerate(outs_all):
        U[:, :, h, :u.shape[2]] = u
    cache.update(U=U, members=members, sizes=sizes, outs=outs_all)
    out = readout_attention(U, x, y, p, c, float(P["readout.a"]), members, sizes, net.log_cap, want_grad,
                            CE_KINDS[net.ce])
    cache["readout"] = out
    cache["logy"] = out[1]
    return np.exp(out[1]), cache


def loss_grad(theta: np.ndarray, net: Net, x: np.ndarray, y: np.ndarray, p: np.ndarray, path: str = "auto",
              prep=None):
    """The loss sum_n p_n sum_e y_ne min(-log y_hat_ne, LOG_CAP) and its gradient.

    Parameters
    ----------
    theta : ndarray, shape (net.size,)
    net : Net
    x : ndarray of int, shape (n, L) or (n, L + 1)
    y : ndarray, shape (n, S)
        Targets (rows: distributions; one-hot for the next-token loss).
    p : ndarray, shape (n,)
        Weights.
    path : str
        ``auto`` (the pattern path of :mod:`meanfield.engine.twolayer_pattern` for the rpe token heads it
        applies to, the direct path for the others), ``direct`` or ``pattern``; the same numbers to rounding.
    prep : Prepared or None
        :func:`prepare` of ``x``, computed once per data set (else here, per call).

    Returns
    -------
    loss : float
    grad : ndarray, shape (net.size,)

    Example
    -------
    >>> net = Net(2, 2, ((Head(),), (Head(),)))
    >>> l, g = loss_grad(np.zeros(net.size), net, np.array([[0, 1]]), np.array([[1.0, 0.0]]), np.ones(1))
    >>> round(l, 12) == round(float(np.log(2)), 12), g.shape == (net.size,)
    (True, True)
    """
    theta = np.asarray(theta, dtype=np.float64)
    if net.wide:  # dL/dA of the merged network, as the Gram's G^ = [[0, G_A], [G_A^T, 0]] (twolayer_wide)
        from .twolayer_wide import expand_grad, to_merged

        loss, gm = loss_grad(to_merged(theta, net), net.merged, x, y, p, path, prep)
        return loss, expand_grad(gm, net)
    y = np.asarray(y, dtype=np.float64)
    p = np.asarray(p, dtype=np.float64)
    yhat, ca = forward(theta, net, x, y, p, want_grad=True, path=path, prep=prep)
    P = ca["P"]
    prep = ca["prep"]
    loss, wy = _loss_of(ca["logy"], y, p, net)  # wy: d loss / d(-log y_hat_e)
    G = {n: np.zeros(np.shape(v)) for n, v in P.items()}
    Xf = ca["Xf"]
    dX = None  # the gradient of the stream (None: zero; the embeddings X_0 are fixed, so it is never formed there)
    douts = None
    barUs = None  # the fused pattern read-out: d loss / d U per pattern of every head
    if net.readout == "linear":
        f = np.exp(ca["logy"])
        dlog = f * wy.sum(axis=1, keepdims=True) - wy
        G["readout.W"] = Xf[:, net.L - 1, :].T @ dlog
        dX = np.zeros_like(Xf)
        dX[:, net.L - 1, :] = dlog @ P["readout.W"].T
    elif ca["fused"]:
        _, _, barUs, gc, ga = ca["readout"]
        G["readout.a"] = np.asarray(ga)
        G["selector.c"] = gc
    else:
        _, _, dU, gc, ga = ca["readout"]
        G["readout.a"] = np.asarray(ga)
        G["selector.c"] = gc
        douts = [dU[:, :, h, :u.shape[2]] for h, u in enumerate(ca["outs"])]
    gi = len(net.heads)
    for k in range(len(net.layers) - 1, -1, -1):
        X, lc = ca["layers"][k]
        need = k > 0  # below layer 1 the stream is the fixed embedding: no gradient to form
        D = None if X is None else X.shape[2]
        dXk_stream = (dX[:, :, :D].copy() if dX is not None else np.zeros(X.shape)) if need and X is not None else None
        col = D or 0
        cols = []
        for h in range(len(net.layers[k])):
            w = lc[h]["width"]
            cols.append((col, col + w))
            col += w
        for h in range(len(net.layers[k]) - 1, -1, -1):
            gi -= 1
            hd, c_ = net.layers[k][h], lc[h]
            name = f"layer{k + 1}.head{h + 1}"
            if "table" in c_:  # a pattern head: d loss / d U per pattern, then through the table once
                if barUs is not None:
                    barU = barUs[prep.row(gi)]
                else:
                    du = dX[:, :, cols[h][0]:cols[h][1]] if dX is not None else None
                    if douts is not None:
                        du = douts[gi] if du is None else du + douts[gi]
                    if du is None:
                        continue  # nothing reads this head's output
                    if hd.value_matrix:
                        du = _value_matrix_back(G, P, name, du, c_["u"])
                    barU = tp.gather_back(prep, gi, du)
                G[name + ".w"][:len(c_["lags"])] += tp.table_backward(prep, c_["table"], barU)
                continue  # its alpha reads no stream and its value the fixed token block: no stream gradient
            du = dX[:, :, cols[h][0]:cols[h][1]] if dX is not None else 0.0
            if douts is not None:
                du = du + douts[gi]
            if np.isscalar(du):
                continue  # nothing reads this head's output
            if hd.value_matrix:
                du = _value_matrix_back(G, P, name, du, c_["u"])
            gw, gA, dXh = head_backward(X, c_["lags"], c_["A"], c_["al"], c_["u"], c_["nrm"],
                                        np.broadcast_to(du, c_["u"].shape), hd.softmax, hd.normalise,
                                        "bilinear" in hd.score, need)
            if "rpe" in hd.score:
                G[name + ".w"][:len(c_["lags"])] += gw
            if "bilinear" in hd.score:
                mk = net.score_mask(k, hd)
                G[name + ".A"] = gA if mk is None else gA * mk
            if need:
                dXk_stream += dXh
        dX = dXk_stream
    grad = np.concatenate([np.ravel(G[nm]) for nm, _ in net.blocks])
    return loss, grad


def _value_matrix_back(G: dict, P: dict, name: str, du, u):
    """o = V u: dL/dV = sum over sequences and positions of do u^T (into ``G``); returns dL/du = do V."""
    G[name + ".V"] = np.einsum("nti,ntj->ij", du, u)
    return du @ P[name + ".V"]


def loss_only(theta: np.ndarray, net: Net, x: np.ndarray, y: np.ndarray, p: np.ndarray, path: str = "auto",
              prep=None) -> float:
    """The loss of :func:`loss_grad` without its gradient (the forward pass only).

    Parameters
    ----------
    theta, net, x, y, p, path, prep : see :func:`loss_grad`

    Returns
    -------
    float

    Example
    -------
    >>> net = Net(2, 2, ((Head(),),))
    >>> args = (np.array([[0, 1]]), np.array([[1.0, 0.0]]), np.ones(1))
    >>> loss_only(np.zeros(net.size), net, *args) == loss_grad(np.zeros(net.size), net, *args)[0]
    True
    """
    y = np.asarray(y, dtype=np.float64)
    p = np.asarray(p, dtype=np.float64)
    _, ca = forward(np.asarray(theta, dtype=np.float64), net, x, y, p, want_grad=False, path=path, prep=prep)
    return _loss_of(ca["logy"], y, p, net)[0]


def _loss_of(logy, y, p, net: Net):
    """The loss and its cotangent d loss / d(-log y_hat) of the net's cross-entropy (``Net.ce``), as the read-out
    kernels' ``loss_row`` forms it per sequence."""
    if net.ce == "softmax":  # y_hat as logits: l = sum_e y_e (lse(y_hat) - y_hat_e)
        yh = np.exp(logy)
        m = yh.max(axis=1, keepdims=True)
        lse = m + np.log(np.exp(yh - m).sum(axis=1, keepdims=True))
        loss = float(p @ (y * (lse - yh)).sum(axis=1))
        wy = -p[:, None] * yh * (y.sum(axis=1, keepdims=True) * np.exp(yh - lse) - y)
        return loss, wy
    nl = -logy
    live = (y > 0) & (nl < net.log_cap)
    terms = np.where(y > 0, y * np.minimum(nl, net.log_cap), 0.0)
    return float(p @ terms.sum(axis=1)), np.where(live, y, 0.0) * p[:, None]


def memory_bytes(net: Net, n: int) -> int:
    """An estimate of the bytes one loss and gradient on ``n`` sequences allocates (for the size guard).

    Parameters
    ----------
    net : Net
    n : int

    Returns
    -------
    int

    Example
    -------
    >>> memory_bytes(Net(2, 3, ((Head(),),)), 10) > 0
    True
    """
    stream = net.widths[-1] - (0 if net.reads_positions else net.T)  # no position block when nothing reads it
    per = 3 * stream  # the streams of every layer and their gradients
    for k, _, hd in net.heads:
        first, last = net.window(hd)
        per += 2 * (last - first + 1) + 3 * net.out_dim(k, hd)  # alpha, u, their gradients
    return int(8 * n * net.T * per)


def gd(theta: np.ndarray, net: Net, x, y, p, eta, steps: int, train=None, path: str = "auto"):
    """``steps`` full-batch GD steps theta' = theta - eta grad L (``train``: a 0/1 mask of the trained entries).

    Parameters
    ----------
    theta : ndarray
    net : Net
    x, y, p : see :func:`loss_grad`
    eta : float or ndarray
        Learning rate (an array: one per entry, e.g. per block).
    steps : int
    train : ndarray or None
        1 where an entry is trained (None: all).
    path : str
        ``auto`` | ``direct`` | ``pattern`` (:func:`loss_grad`); the codes are prepared once.

    Returns
    -------
    theta : ndarray
    losses : ndarray, shape (steps + 1,)

    Example
    -------
    >>> net = Net(2, 2, ((Head(),),))
    >>> th, ls = gd(np.zeros(net.size), net, np.array([[0, 1]]), np.array([[1.0, 0.0]]), np.ones(1), 0.5, 3)
    >>> bool(ls[-1] < ls[0])
    True
    """
    from .twolayer_wide import gd_step

    theta = np.array(theta, dtype=np.float64)
    mask = np.ones(net.size) if train is None else np.asarray(train, dtype=np.float64)
    prep = prepare(net, x, path)  # once for the data set
    losses = []
    for _ in range(int(steps)):
        l, g = loss_grad(theta, net, x, y, p, prep=prep)
        losses.append(l)
        theta = gd_step(theta, g, net, eta, mask)  # theta - eta grad; a wide head's Gram: (I - eta G^) Q (I - eta G^)
    losses.append(loss_only(theta, net, x, y, p, prep=prep))
    return theta, np.array(losses)
