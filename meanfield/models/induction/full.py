"""The full two-layer transformer of the official code of the induction-head
paper (``TwoLayerTransformer``: ``RPEAttention`` + the polynomial-kernel
second layer), in numpy with a hand-written backward pass, trained by the
package's steppers: the induction system's counterpart of finite width.

What it adds to the simplified model (``meanfield.models.induction.model``):

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
    """The full model as a system for :mod:`meanfield.core.integrate` (GD map only;
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


# ------------------------------------------------------------------ the study: full vs simplified model


def _simplified_attention_by_lag(theta, arch_s, max_lag: int) -> np.ndarray:
    """(H, max_lag + 1): the simplified model's copier softmax per lag (full window, lag 0 = 0)."""
    from .model import rpe_softmax, unpack

    _, w, _ = unpack(np.asarray(theta), arch_s)
    sm = rpe_softmax(w)
    out = np.zeros((arch_s.H, max_lag + 1))
    for h in range(arch_s.H):
        for j in range(arch_s.M):
            lag = arch_s.first[h] + j
            if lag <= max_lag:
                out[h, lag] = sm[h, j]
    return out


def match_mass(pl: np.ndarray, tokens, lags) -> tuple[float, float]:
    """Layer 2 as an induction head: the mean over sequences of the
    classifier's attention mass sum_l p_l on the key positions l whose
    history on ``lags`` matches the query's (x_{l-s} = x_{L+1-s} for every
    s in lags), and the mass a uniform attention would put there (chance).
    ``pl``: (N, L) attention of the query on positions 1..L."""
    tokens = np.asarray(tokens)
    L = tokens.shape[1] - 1
    m = np.ones((tokens.shape[0], L), dtype=bool)
    pos = np.arange(1, L + 1)
    for s in lags:
        ok = pos - s >= 1
        m[:, ~ok] = False
        m[:, ok] &= tokens[:, pos[ok] - s - 1] == tokens[:, [L - s]]
    return float(np.mean(np.sum(pl * m, axis=1))), float(np.mean(m.mean(axis=1)))


def _simplified_layer2(theta, tokens, arch_s) -> np.ndarray:
    """(N, L) the simplified model's classifier attention softmax_l(a K(l))."""
    from .claims import similarity_all

    K = similarity_all(theta, tokens, arch_s)
    z = float(np.asarray(theta)[-1]) * K
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _selection(att: np.ndarray, cw: np.ndarray, subs) -> dict:
    """The selected subset of heads (largest c_S^2 weight), each head's copied lag
    (largest attention mass at lags >= 1) and the selected lag set."""
    lags = [int(np.argmax(att[h, 1:]) + 1) for h in range(att.shape[0])]
    top = int(np.argmax(cw))
    S = subs[top]
    return {"subset": [h + 1 for h in S], "top_weight": float(cw[top]), "head_lags": lags,
            "lag_set": sorted({lags[h] for h in S}),
            "copier_mass": [float(att[h, lags[h]]) for h in range(att.shape[0])]}


def full_study(out, quick: bool = False, log=print, settings: dict | None = None, progress: bool = False) -> dict:
    """Train the full model and the simplified model on the same n-gram data
    (the official init and windows, joint GD on every parameter, the same
    loss and step size), record layer 1's attention mass per lag per head
    and the selector's c_S^2 weights over time, and check the claim that the
    full model selects the same parent set and builds the same copier heads.
    Writes ``report.json``, ``report.md`` and ``full_vs_simplified.png`` into
    ``out``; ``progress``: a progress line on stderr while the full model trains."""
    import json
    import time
    from pathlib import Path

    from ...core import integrate
    from . import run as R
    from .config import make_config
    from .data import generate

    S = dict(FULL_SETTINGS["quick" if quick else "full"], **(settings or {}))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    H, M, d = 3, 3, 3
    arch = FullArch(d=d, H=H, M=M, D=2)
    cfg = make_config(d=d, L=S["L"], pa=S["pa"], alpha=S["alpha"], H=H, M=M, D=2, first_lags=arch.first,
                      w_plus=S["w_plus"], w_minus=S["w_minus"], c_init=S["c_init"], a_init=S["a_init"],
                      loss=S["loss"], n_train=S["n_train"], n_test=0, schedule="cwa", stage_etas=(S["eta"],),
                      stage_steps=(S["steps"],), record_every=S["record_every"], seed=S["seed"])
    tok = generate(S["n_train"], d, S["L"], cfg.pa, cfg.alpha, R.train_seed(cfg)).tokens
    probe = tok[: S["probe"]]
    max_lag = max(arch.first) + M
    log(f"[full {time.perf_counter() - t0:6.1f} s] simplified model, {S['steps']} joint GD steps ...")
    ys = R.run(cfg).arrays()
    pb = R.Problem.build(cfg)
    from .model import unpack as s_unpack

    log(f"[full {time.perf_counter() - t0:6.1f} s] full model, {S['steps']} joint GD steps on {len(tok)} "
        f"sequences of length {S['L']} ...")
    sysm = FullSystem(tok, arch, S["loss"])
    y0 = arch.init(S["w_plus"], S["w_minus"], S["c_init"], S["a_init"], S["proj_init"])
    mon = integrate.Monitor(total=S["steps"], unit="step", quiet_s=2.0 if progress else math.inf,
                            label="full model: ")
    with mon:
        tf = integrate.GDMap(1.0).solve(sysm, y0, [integrate.Stage(1, arch.group_mask(GROUPS), S["steps"], None,
                                                                   "joint", eta=S["eta"])],
                                        integrate.SaveAt(every=S["record_every"]), mon)
    yf = tf.arrays()
    subs = arch.subsets
    rec = {"simplified": [], "full": []}
    for name, Y, T in (("simplified", ys["y"], ys["t"]), ("full", yf["y"], yf["t"])):
        for i in range(Y.shape[0]):
            if name == "full":
                att = attention_by_lag(Y[i], probe, arch, max_lag)
                cw = c_weights(Y[i], arch)
                lo = loss_and_grad(Y[i], tok, arch, S["loss"])[0] if i in (0, Y.shape[0] - 1) else math.nan
                pl = forward(Y[i], probe, arch, want_cache=True)[1]["pl"]
            else:
                att = _simplified_attention_by_lag(Y[i], pb.arch, max_lag)
                c = s_unpack(Y[i], pb.arch)[0]
                cw = c * c / np.sum(c * c)
                lo = math.nan
                pl = _simplified_layer2(Y[i], probe, pb.arch)
            mm, chance = match_mass(pl, probe, cfg.pa)
            rec[name].append({"t": float(T[i]), "att": att, "c_weight": cw, "loss": lo, "match_mass": mm,
                              "match_chance": chance, **_selection(att, cw, subs)})
    claim = check_full_same_heads(rec, sorted(cfg.pa), H, setting={k: (list(v) if isinstance(v, tuple) else v)
                                                                    for k, v in S.items()})
    claim.numbers.update({"full_loss_start_end": [rec["full"][0]["loss"], rec["full"][-1]["loss"]],
                          "full_status": tf.status, "steps": S["steps"]})
    ends = {k: v[-1] for k, v in rec.items()}
    nums = claim.numbers
    parents = nums["parents"]
    claim.figure = plot_full_vs_simplified(rec, subs, out)
    rep = {"claims": [_asdict(claim)], "elapsed_s": time.perf_counter() - t0, "quick": quick,
           "series": {k: [{"t": r["t"], "att": r["att"].tolist(), "c_weight": r["c_weight"].tolist(),
                        "layer2_match_mass": r["match_mass"]} for r in v]
                      for k, v in rec.items()}}
    (out / "report.json").write_text(json.dumps(rep, indent=1, default=float))
    lines = [f"# full vs simplified induction model{' (quick)' if quick else ''}", "",
             f"**{claim.status}** ({claim.source}): {claim.statement}.", "",
             "| model | selected heads | c_S^2 weight | head lags | lag set | copier mass per head |",
             "|---|---|---|---|---|---|"]
    for k in ("simplified", "full"):
        e = ends[k]
        lines.append(f"| {k} | {e['subset']} | {e['top_weight']:.3f} | {e['head_lags']} | {e['lag_set']} | "
                     f"{[round(v, 3) for v in e['copier_mass']]} |")
    lines += ["", f"Parents {parents}; {S['steps']} joint GD steps, step size {S['eta']:g}, loss {S['loss']}, "
              f"L = {S['L']}, {S['n_train']} sequences; full model loss {nums['full_loss_start_end'][0]:.4f} -> "
              f"{nums['full_loss_start_end'][1]:.4f}. Attention mass on each head's copied lag at the start: "
              f"{ {k: [round(v, 3) for v in m] for k, m in nums['copier_mass_start'].items()} }; grew (selected "
              f"heads): {nums['copier_mass_grew']}. Layer 2 (the classifier) as an induction head: attention "
              f"mass on key positions whose history matches the query's on the parents, start -> end: "
              f"{ {k: [round(v, 3) for v in m] for k, m in nums['layer2_match_mass_start_end'].items()} } "
              f"(uniform attention: {nums['layer2_match_chance']:.3f}).", "", f"![full vs simplified]({claim.figure})",
              ""]
    (out / "report.md").write_text("\n".join(lines))
    log(f"[full {time.perf_counter() - t0:6.1f} s] {claim.status}: report {out / 'report.md'}")
    return {"claim": claim, "report": out / "report.md", "records": rec}


def check_full_same_heads(rec: dict, parents, H: int, setting: dict | None = None):
    """The claim of :func:`full_study` from its records ``rec`` = {"simplified": [...],
    "full": [...]} (per record: att (H, lags), head_lags, lag_set, subset,
    copier_mass): PASS if at the end both models select the same lag set, each
    selected head copies the same lag in both, and its attention mass on that
    lag grew during training in both ("builds")."""
    from ...core.report import Claim, status

    ends = {k: v[-1] for k, v in rec.items()}
    starts = {k: v[0] for k, v in rec.items()}
    same_set = ends["full"]["lag_set"] == ends["simplified"]["lag_set"]
    sel = [h - 1 for h in ends["simplified"]["subset"]]
    same_heads = all(ends["full"]["head_lags"][h] == ends["simplified"]["head_lags"][h] for h in sel)
    built = {k: all(ends[k]["copier_mass"][h] > starts[k]["att"][h][ends[k]["head_lags"][h]] for h in sel)
             for k in rec}
    parents = sorted(int(p) for p in parents)
    nums = {"full_end": {k: v for k, v in ends["full"].items() if k not in ("att", "c_weight")},
            "simplified_end": {k: v for k, v in ends["simplified"].items() if k not in ("att", "c_weight")},
            "parents": parents, "same_parent_set": same_set, "same_copier_heads": same_heads,
            "copier_mass_grew": built,
            "copier_mass_start": {k: [float(starts[k]["att"][h][ends[k]["head_lags"][h]]) for h in range(H)]
                                  for k in rec},
            "full_selects_parents": ends["full"]["lag_set"] == parents,
            "simplified_selects_parents": ends["simplified"]["lag_set"] == parents,
            "layer2_match_mass_start_end": {k: [rec[k][0].get("match_mass"), ends[k].get("match_mass")]
                                            for k in rec},
            "layer2_match_chance": ends["full"].get("match_chance")}
    return Claim("full_model_same_heads", status(same_set and same_heads and built["full"] and built["simplified"]),
                 "the full two-layer transformer of the official code (trainable query-key and output-value "
                 "matrices, layer norm), trained on the same data, selects the same parent set and builds the same "
                 "copier heads as the simplified model (same selected lag set, same lag per selected head, whose "
                 "attention mass on it grows in both)", setting=dict(setting or {}), numbers=nums, source="expected")


def _asdict(c):
    from dataclasses import asdict

    return asdict(c)


FULL_SETTINGS = {
    "quick": {"L": 20, "n_train": 300, "steps": 300, "eta": 1.0, "record_every": 30, "probe": 100, "pa": (1, 2),
              "alpha": 0.1, "w_plus": 3.0, "w_minus": 0.1, "c_init": 0.01, "a_init": 0.01, "proj_init": 0.01,
              "loss": "official-ce", "seed": 0},
    "full": {"L": 20, "n_train": 1000, "steps": 2000, "eta": 1.0, "record_every": 100, "probe": 200, "pa": (1, 2),
             "alpha": 0.1, "w_plus": 3.0, "w_minus": 0.1, "c_init": 0.01, "a_init": 0.01, "proj_init": 0.01,
             "loss": "official-ce", "seed": 0},
}


def plot_full_vs_simplified(rec: dict, subs, out, name: str = "full_vs_simplified.png") -> str:
    """Per model (rows): layer 1's attention mass on each head's copied lag over
    time, the c_S^2 weights over time, the final attention per lag
    (heatmaps), and layer 2's attention mass on key positions whose parents
    match the query's (:func:`match_mass`) over time."""
    from pathlib import Path

    from .plot import _plt

    plt = _plt()
    fig, axes = plt.subplots(2, 4, figsize=(19, 7.5))
    labels = ["{" + ",".join(str(h + 1) for h in S) + "}" for S in subs]
    for r, model in enumerate(("simplified", "full")):
        R_ = rec[model]
        t = np.array([x["t"] for x in R_])
        att = np.array([x["att"] for x in R_])  # (T, H, lags)
        ax = axes[r, 0]
        for h in range(att.shape[1]):
            for lag in range(1, att.shape[2]):
                if att[:, h, lag].max() > 0.1:
                    ax.plot(t, att[:, h, lag], "-", color=f"C{h}", alpha=0.4 + 0.6 * (lag == R_[-1]["head_lags"][h]),
                            label=f"head {h + 1}, lag {lag}")
        ax.set_title(f"{model}: layer-1 attention mass per lag", fontsize=9)
        ax.set_xlabel("t")
        ax.legend(fontsize=6, ncol=2)
        bx = axes[r, 1]
        cw = np.array([x["c_weight"] for x in R_])
        for k in range(cw.shape[1]):
            bx.plot(t, cw[:, k], "-", label=labels[k])
        bx.set_title(f"{model}: selector weights c_S^2 / sum c^2", fontsize=9)
        bx.set_xlabel("t")
        bx.legend(fontsize=6, ncol=2)
        cx = axes[r, 2]
        im = cx.imshow(att[-1], aspect="auto", cmap="viridis", vmin=0, vmax=1)
        cx.set_xlabel("lag (0: the position itself)")
        cx.set_ylabel("head")
        cx.set_yticks(range(att.shape[1]), [str(h + 1) for h in range(att.shape[1])])
        cx.set_title(f"{model}: attention per lag at the end", fontsize=9)
        fig.colorbar(im, ax=cx, fraction=0.05)
        dx = axes[r, 3]
        dx.plot(t, [x["match_mass"] for x in R_], "-o", ms=3, label="on matching histories")
        dx.plot(t, [x["match_chance"] for x in R_], ":", color="gray", label="uniform attention")
        dx.set_ylim(0, 1)
        dx.set_xlabel("t")
        dx.set_title(f"{model}: layer-2 attention mass on positions whose parents match the query's", fontsize=8)
        dx.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(Path(out) / name, dpi=110)
    plt.close(fig)
    return name
