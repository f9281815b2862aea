"""The full two-layer transformer of the official code of the induction-head
paper (``TwoLayerTransformer``: ``RPEAttention`` + the polynomial-kernel
second layer), in numpy with a hand-written backward pass, trained by the
package's steppers: the induction system's counterpart of finite width.

What it adds to the simplified model (``meanfield.induction.model``):

* layer 1, head h: attention logits x~_i^T Q_h K_h^T x~_j + RPE_h(i - j)
  with trainable query-key matrices Q_h, K_h (d x d), the RPE weights w[h]
  on the head's window of lags, and (the official code) every position also
  attending to itself with the fixed logit ``self_logit`` = 1e-6;
  the value is x~_j O_h (a trainable output-value matrix O_h, d x d);
* a layer norm (trainable gain and bias, shared by the heads, eps 1e-5)
  instead of the division by the norm;
* layer 2 as in the official code: K(l) = sum_S c_S^2 prod_{h in S}
  relu(<u_h(L+1), u_h(l)>) / sum_S c_S^2 over the subsets of heads with
  |S| <= D (the raw-token component of the official kernel multiplies by
  <0, x_l> = 0 at the query, so it contributes 1e-24-sized terms and is left
  out), y_hat = sum_l softmax_l(a K(l)) e(x_l);
* the same n-gram data (x~ is the one-hot sequence x_1..x_L with a zero
  row appended as the query position L+1).

Parameters, one flat vector (:class:`FullArch` ``.pack`` / ``.unpack``):
``[c (nS), w (H*M), a, Q (H*d*d), K (H*d*d), O (H*d*d), gain (d), bias (d)]``.
Groups for schedules: c, w, a, qk, ov, ln. The official init (``init``):
w = w_minus with w_plus on each head's first lag, c = c_init, a = a_init,
Q = K = O = proj_init * I, gain 1, bias 0.

Loss: ``official-ce`` (the official code's CrossEntropyLoss on y_hat, the
default here) or ``nll`` (-log y_hat[x_{L+1}], clipped at -log(yhat_floor)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .model import subsets

GROUPS = ("c", "w", "a", "qk", "ov", "ln")


@dataclass(frozen=True)
class FullArch:
    d: int = 3
    H: int = 3
    M: int = 3
    D: int = 2
    first: tuple[int, ...] | None = None  # default: head h on lags h+1 .. h+M (the official windows)
    self_attend: bool = True
    self_logit: float = 1e-6
    ln_eps: float = 1e-5

    def __post_init__(self):
        if self.first is None:
            object.__setattr__(self, "first", tuple(range(1, self.H + 1)))
        if len(self.first) != self.H:
            raise ValueError(f"first: needs H = {self.H} values, got {len(self.first)}")

    @property
    def subsets(self):
        return subsets(self.H, self.D)

    @property
    def nS(self) -> int:
        return len(self.subsets)

    @property
    def sizes(self) -> dict[str, int]:
        H, M, d = self.H, self.M, self.d
        return {"c": self.nS, "w": H * M, "a": 1, "q": H * d * d, "k": H * d * d, "o": H * d * d, "g": d, "b": d}

    @property
    def n_params(self) -> int:
        return sum(self.sizes.values())

    def slices(self) -> dict[str, slice]:
        out, i = {}, 0
        for k, n in self.sizes.items():
            out[k] = slice(i, i + n)
            i += n
        return out

    def unpack(self, theta) -> dict[str, np.ndarray]:
        H, M, d = self.H, self.M, self.d
        s = self.slices()
        shapes = {"c": (self.nS,), "w": (H, M), "a": (), "q": (H, d, d), "k": (H, d, d), "o": (H, d, d),
                  "g": (d,), "b": (d,)}
        return {k: np.asarray(theta)[s[k]].reshape(shapes[k]) for k in s}

    def pack(self, p: dict) -> np.ndarray:
        return np.concatenate([np.ravel(p[k]) for k in self.sizes]).astype(np.float64)

    def group_mask(self, groups) -> np.ndarray:
        """0/1 vector over the parameters: 1 on the groups trained (c, w, a, qk, ov, ln)."""
        s = self.slices()
        m = np.zeros(self.n_params)
        for g in groups:
            for key in {"c": "c", "w": "w", "a": "a", "qk": "qk", "ov": "o", "ln": "gb"}[g]:
                m[s[key]] = 1.0
        return m

    def init(self, w_plus=3.0, w_minus=0.1, c_init=0.01, a_init=0.01, proj_init=0.01) -> np.ndarray:
        H, M, d = self.H, self.M, self.d
        w = np.full((H, M), float(w_minus))
        w[:, 0] = float(w_plus)
        eye = np.broadcast_to(np.eye(d) * proj_init, (H, d, d)).copy()
        return self.pack({"c": np.full(self.nS, float(c_init)), "w": w, "a": np.array(float(a_init)),
                          "q": eye, "k": eye.copy(), "o": eye.copy(), "g": np.ones(d), "b": np.zeros(d)})

    def masks(self, Lp1: int):
        """lagidx (H, Lp1, Lp1) int: j of the RPE weight on entry (i, i') (-1: none, -2: self)."""
        lagidx = np.full((self.H, Lp1, Lp1), -1, dtype=np.int64)
        i = np.arange(Lp1)
        for h in range(self.H):
            for j in range(self.M):
                lag = self.first[h] + j
                rows = i[i - lag >= 0]
                lagidx[h, rows, rows - lag] = j
            if self.self_attend:
                lagidx[h, i, i] = -2
        return lagidx


def _onehot(tokens, d):
    N, Lp1 = tokens.shape
    X = np.zeros((N, Lp1, d))
    X[np.arange(N)[:, None], np.arange(Lp1 - 1)[None, :], tokens[:, :-1]] = 1.0  # x_1..x_L; row L+1 stays 0
    return X


def forward(theta, tokens, arch: FullArch, loss: str = "official-ce", yhat_floor: float = 1e-300,
            want_cache: bool = False):
    """Per-sequence losses (N,) (and the cache of the backward pass)."""
    p = arch.unpack(theta)
    tokens = np.asarray(tokens)
    N, Lp1 = tokens.shape
    L = Lp1 - 1
    d, H = arch.d, arch.H
    Xt = _onehot(tokens, d)
    lagidx = arch.masks(Lp1)
    allowed = lagidx != -1
    QK = np.einsum("hij,hkj->hik", p["q"], p["k"])  # Q_h K_h^T
    R = np.where(lagidx >= 0, np.take_along_axis(p["w"][:, None, :], np.maximum(lagidx, 0).reshape(H, 1, -1),
                                                 axis=2).reshape(H, Lp1, Lp1), 0.0)
    R = np.where(lagidx == -2, arch.self_logit, R)
    # x~_i^T QK_h x~_j by lookup: the query row (token index d) is the zero vector
    te = np.concatenate([tokens[:, :L], np.full((N, 1), d)], axis=1)
    QKe = np.zeros((H, d + 1, d + 1))
    QKe[:, :d, :d] = QK
    logits = np.moveaxis(QKe[:, te[:, :, None], te[:, None, :]], 0, 1) + R[None]
    logits = np.where(allowed[None], logits, -np.inf)
    mx = np.max(logits, axis=-1, keepdims=True)
    mx = np.where(np.isfinite(mx), mx, 0.0)
    e = np.where(allowed[None], np.exp(logits - mx), 0.0)
    den = e.sum(axis=-1, keepdims=True)
    A = e / np.where(den > 0, den, 1.0)
    AX = np.matmul(A, Xt[:, None])
    v = np.einsum("nhid,hde->nhie", AX, p["o"])
    mu = v.mean(axis=-1, keepdims=True)
    vc = v - mu
    sig = np.sqrt((vc * vc).mean(axis=-1, keepdims=True) + arch.ln_eps)
    nrm = vc / sig
    u = nrm * p["g"] + p["b"]
    g = np.einsum("nhld,nhd->nhl", u[:, :, :L], u[:, :, L])  # (N, H, L)
    r = np.maximum(g, 0.0)
    c2 = p["c"] ** 2
    C = c2.sum()
    P = np.ones((N, arch.nS, L))
    for k, S in enumerate(arch.subsets):
        for h in S:
            P[:, k] *= r[:, h]
    K = np.einsum("s,nsl->nl", c2, P) / C
    a = float(p["a"])
    z = a * K
    zm = z.max(axis=1, keepdims=True)
    ez = np.exp(z - zm)
    pl = ez / ez.sum(axis=1, keepdims=True)
    x = tokens[:, :L]
    tgt = tokens[:, L]
    yhat = np.zeros((N, d))
    np.add.at(yhat, (np.arange(N)[:, None], x), pl)
    if loss == "official-ce":
        ym = yhat.max(axis=1, keepdims=True)
        lse = ym[:, 0] + np.log(np.exp(yhat - ym).sum(axis=1))
        losses = lse - yhat[np.arange(N), tgt]
        clipped = np.zeros(N, dtype=bool)
    elif loss == "nll":
        with np.errstate(divide="ignore"):
            nl = -np.log(yhat[np.arange(N), tgt])
        cap = -math.log(yhat_floor)
        clipped = ~(nl < cap)
        losses = np.where(clipped, cap, nl)
    else:
        raise ValueError(f"loss: official-ce | nll, got {loss!r}")
    if not want_cache:
        return losses
    cache = dict(p=p, Xt=Xt, te=te, lagidx=lagidx, allowed=allowed, A=A, AX=AX, sig=sig, nrm=nrm, u=u, g=g, r=r, P=P,
                 K=K, c2=c2, C=C, a=a, pl=pl, yhat=yhat, x=x, tgt=tgt, clipped=clipped, loss=loss)
    return losses, cache


def loss_and_grad(theta, tokens, arch: FullArch, loss: str = "official-ce", yhat_floor: float = 1e-300,
                  chunk: int = 256) -> tuple[float, np.ndarray]:
    """Mean loss over ``tokens`` (N, L+1) and its gradient (hand backward pass), in chunks of sequences."""
    tokens = np.asarray(tokens)
    N = tokens.shape[0]
    total = 0.0
    grad = np.zeros(arch.n_params)
    for lo in range(0, N, chunk):
        ls, gr = _loss_grad_chunk(theta, tokens[lo: lo + chunk], arch, loss, yhat_floor)
        total += ls
        grad += gr
    return total / N, grad / N


def _loss_grad_chunk(theta, tokens, arch, loss, yhat_floor):
    losses, cc = forward(theta, tokens, arch, loss, yhat_floor, want_cache=True)
    p = cc["p"]
    N, Lp1 = tokens.shape
    L = Lp1 - 1
    d, H = arch.d, arch.H
    pl, yhat, x, tgt = cc["pl"], cc["yhat"], cc["x"], cc["tgt"]
    n_idx = np.arange(N)
    # d loss / d z_l
    if loss == "official-ce":
        sm = np.exp(yhat - yhat.max(axis=1, keepdims=True))
        sm /= sm.sum(axis=1, keepdims=True)
        rr = sm.copy()
        rr[n_idx, tgt] -= 1.0                                   # d loss / d y_hat
        dz = pl * (np.take_along_axis(rr, x, axis=1) - np.sum(rr * yhat, axis=1, keepdims=True))
    else:
        match = x == tgt[:, None]
        q = np.where(match, pl, 0.0)
        qs = q.sum(axis=1, keepdims=True)
        q = q / np.where(qs > 0, qs, 1.0)
        dz = pl - q
        dz[cc["clipped"]] = 0.0
    K, a, c2, C, P, r, g = cc["K"], cc["a"], cc["c2"], cc["C"], cc["P"], cc["r"], cc["g"]
    grad = {k: np.zeros_like(v, dtype=float) for k, v in p.items()}
    grad["a"] = np.array(np.sum(dz * K))
    dK = a * dz                                                  # (N, L)
    grad["c"] = 2.0 * p["c"] / C * (np.einsum("nl,nsl->s", dK, P) - np.sum(dK * K))
    dr = np.zeros((N, H, L))
    for k, S in enumerate(arch.subsets):
        for h in S:
            others = np.ones((N, L))
            for h2 in S:
                if h2 != h:
                    others = others * r[:, h2]
            dr[:, h] += dK * c2[k] * others / C
    dg = dr * (g > 0)
    u = cc["u"]
    du = np.zeros_like(u)
    du[:, :, :L] = dg[..., None] * u[:, :, L][:, :, None, :]
    du[:, :, L] = np.einsum("nhl,nhld->nhd", dg, u[:, :, :L])
    # layer norm
    nrm, sig = cc["nrm"], cc["sig"]
    grad["g"] = np.einsum("nhid,nhid->d", du, nrm)
    grad["b"] = du.sum(axis=(0, 1, 2))
    dn = du * p["g"]
    dv = (dn - dn.mean(axis=-1, keepdims=True) - nrm * (dn * nrm).mean(axis=-1, keepdims=True)) / sig
    # v = (A X~) O
    AX, Xt, A = cc["AX"], cc["Xt"], cc["A"]
    grad["o"] = np.einsum("nhid,nhie->hde", AX, dv)
    dAX = np.einsum("nhie,hde->nhid", dv, p["o"])
    dA = np.matmul(dAX, np.swapaxes(Xt, 1, 2)[:, None])
    dlog = A * (dA - np.sum(dA * A, axis=-1, keepdims=True))     # zero off the allowed entries (A = 0 there)
    te = cc["te"]
    pair = (te[:, :, None] * (d + 1) + te[:, None, :]).ravel()
    dQK = np.stack([np.bincount(pair, weights=dlog[:, h].ravel(), minlength=(d + 1) ** 2).reshape(d + 1, d + 1)
                    [:d, :d] for h in range(H)])
    grad["q"] = np.einsum("hik,hkj->hij", dQK, p["k"])           # QK = Q K^T
    grad["k"] = np.einsum("hki,hkj->hij", dQK, p["q"])
    lagidx = cc["lagidx"]
    dls = dlog.sum(axis=0)                                       # (H, Lp1, Lp1)
    for h in range(H):
        for j in range(arch.M):
            grad["w"][h, j] = dls[h][lagidx[h] == j].sum()
    return float(losses.sum()), arch.pack(grad) * 1.0


def attention_by_lag(theta, tokens, arch: FullArch, max_lag: int | None = None) -> np.ndarray:
    """(H, max_lag + 1): layer 1's attention mass per lag (0 = the position
    itself), averaged over positions and sequences (the copier heads)."""
    _, cc = forward(theta, tokens, arch, want_cache=True)
    A = cc["A"]
    Lp1 = A.shape[-1]
    max_lag = Lp1 - 1 if max_lag is None else max_lag
    i = np.arange(Lp1)
    out = np.zeros((arch.H, max_lag + 1))
    for lag in range(max_lag + 1):
        rows = i[i - lag >= 0]
        out[:, lag] = A[:, :, rows, rows - lag].sum(axis=2).mean(axis=0) / Lp1
    return out


def c_weights(theta, arch: FullArch) -> np.ndarray:
    c = arch.unpack(theta)["c"]
    return c * c / np.sum(c * c)


# ------------------------------------------------------------------ training with the shared steppers


@dataclass
class FullSystem:
    """The full model as a system for :mod:`meanfield.integrate` (GD map only;
    ``mode`` of a stage: a 0/1 mask over the parameters)."""

    tokens: np.ndarray
    arch: FullArch
    loss: str = "official-ce"
    max_abs: float = 1e6

    def grad(self, y):
        return loss_and_grad(y, self.tokens, self.arch, self.loss)

    def gd_advance(self, y, nsteps, eta, mode, criterion):
        mask = np.asarray(mode, float)
        for k in range(int(nsteps)):
            lo, g = self.grad(y)
            if criterion is not None and _crit(criterion, lo, g):
                return k, 1
            new = y - eta * mask * g
            if not np.all(np.isfinite(new)):
                return k, 2
            if np.max(np.abs(new)) > self.max_abs:
                return k, 3
            y[:] = new
        return int(nsteps), 0

    def rhs(self, y, mode):
        return -np.asarray(mode, float) * self.grad(y)[1]

    def criterion_value(self, y, name):
        lo, g = self.grad(y)
        return lo if name == "loss" else float(np.linalg.norm(g))


def _crit(criterion, loss, g):
    name, op, thr = criterion
    v = loss if name == "loss" else float(np.linalg.norm(g))
    return v >= thr if op == ">=" else v <= thr
