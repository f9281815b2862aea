"""Plain-numpy oracle of the transformer TF(M, H, d, D) of the induction-head
system (seed 002; ``docs/conventions.md``). Slow, readable, obviously
right: the engine's generic two-layer network, which every induction run trains on
(``meanfield.models.induction.generic``), is tested against it.

Architecture (:class:`Arch`)
----------------------------

Heads h = 0..H-1 (head h+1 of the spec); head h has RPE weights
``w[h, j]``, j = 0..M-1, on the lag ``first[h] + j`` (its window is
``first[h] .. first[h] + M - 1``; default ``first[h] = 1``).

At 1-based position l (1 <= l <= L+1) the lags of head h that exist are those
with ``l - lag >= 1``; they are a prefix j < m_h(l) of the window with
``m_h(l) = clip(l - first[h], 0, M)``. Then

    p_h(l)_j = softmax over j < m_h(l) of w[h, j]
    s_h(l)   = sum_{j < m_h(l)} p_h(l)_j e(x_{l - first[h] - j})
    u_h(l)   = s_h(l) / ||s_h(l)||                       (m_h(l) >= 1)
    u_h(l)   = 0                                         (m_h(l) = 0: no lag exists)

(s_h(l) has non-negative entries summing to 1, so ||s_h(l)|| >= 1/sqrt(d)
whenever a lag exists; the only degenerate case is m_h(l) = 0, where we
define u_h(l) = 0, so such a position contributes <u_h(L+1), u_h(l)> = 0 for
every subset containing h, and no gradient flows through it.)

Selector: subsets S of {0..H-1} with |S| <= D, the empty set included, in the
canonical order of :func:`subsets` -- by size, then lexicographically:
``(), (0,), (1,), ..., (0, 1), (0, 2), ...`` (what ``itertools.combinations``
gives for sizes 0, 1, ..., D). With c (one entry per subset, same order),
g_h(l) = <u_h(L+1), u_h(l)> and C = sum_S c_S^2,

    K(l) = sum_S c_S^2 prod_{h in S} g_h(l) / C        (l = 1..L; empty product = 1)

Classifier, scalar a:

    y_hat = sum_{l=1}^{L} softmax_l(a K(l)) e(x_l)
    loss  = -log y_hat[x_{L+1}]
          = logsumexp_{l <= L} a K(l) - logsumexp_{l <= L, x_l = x_{L+1}} a K(l)

**log(0) guard.** The loss of one sequence is computed in the log-sum-exp
form above and clipped at ``log_cap = -log(yhat_floor)`` (default
``yhat_floor = 1e-300``, log_cap = 690.7755...): ``loss = min(lse_all -
lse_match, log_cap)``, i.e. ``-log(max(y_hat, yhat_floor))``. The clip binds
exactly when the target x_{L+1} never occurs in x_1..x_L (then y_hat[x_{L+1}]
= 0 for every parameter value; lse_match = -inf) or when y_hat underflows
below yhat_floor. A clipped sequence has zero gradient. The batch loss is the
mean over sequences.

**The official code's loss** (``loss = "official-ce"``): the public code of
the paper trains with torch's ``CrossEntropyLoss`` applied to the model's
output y_hat, which treats the probabilities y_hat as logits:
``loss = logsumexp_e y_hat[e] - y_hat[x_{L+1}]``. It lies in
[log d - 1, log d + 1], is never clipped, and its optimum in a is not the
one of -log y_hat: d loss / d y_hat = softmax(y_hat) - e(x_{L+1}) is never
zero, so a keeps rising where -log y_hat has a finite optimum.

Parameters as one flat float64 vector (:func:`pack` / :func:`unpack`):
``theta = [c (nS), w (H*M, row-major: w[h, j] at nS + h*M + j), a]``.

Gradients are explicit backpropagation (see :func:`loss_and_grad_one`).
Nothing here is imported from the kernels.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

DEFAULT_YHAT_FLOOR = 1e-300


def subsets(H: int, D: int) -> list[tuple[int, ...]]:
    """Subsets of {0..H-1} with |S| <= D in the canonical order (size, then lexicographic)."""
    out: list[tuple[int, ...]] = []
    for k in range(0, min(D, H) + 1):
        out.extend(itertools.combinations(range(H), k))
    return out


def subset_label(S: tuple[int, ...]) -> str:
    """1-based display name of a subset of heads: () -> "{}", (0, 2) -> "{1,3}"."""
    return "{" + ",".join(str(h + 1) for h in S) + "}"


@dataclass(frozen=True)
class Arch:
    """TF(M, H, d, D) with per-head first lags (default all 1)."""

    d: int
    H: int
    M: int
    D: int
    first: tuple[int, ...] | None = None

    def __post_init__(self):
        if self.first is None:
            object.__setattr__(self, "first", (1,) * self.H)
        object.__setattr__(self, "first", tuple(int(f) for f in self.first))
        if len(self.first) != self.H:
            raise ValueError(f"first: needs H = {self.H} values, got {len(self.first)}")

    @property
    def subsets(self) -> list[tuple[int, ...]]:
        return subsets(self.H, self.D)

    @property
    def nS(self) -> int:
        return len(self.subsets)

    @property
    def n_params(self) -> int:
        return self.nS + self.H * self.M + 1

    @property
    def lags(self) -> np.ndarray:
        """(H, M) int: lags[h, j] = first[h] + j."""
        return np.asarray(self.first, dtype=np.int64)[:, None] + np.arange(self.M)[None, :]

    @property
    def members(self) -> np.ndarray:
        """(nS, max(D, 1)) int64: the heads of each subset, padded with -1."""
        S = self.subsets
        out = np.full((len(S), max(self.D, 1)), -1, dtype=np.int64)
        for i, s in enumerate(S):
            out[i, : len(s)] = s
        return out

    @property
    def sizes(self) -> np.ndarray:
        return np.array([len(s) for s in self.subsets], dtype=np.int64)

    def n_valid(self, h: int, l: int) -> int:
        """m_h(l): how many lags of head h exist at 1-based position l."""
        return int(min(max(l - self.first[h], 0), self.M))


def pack(c, w, a) -> np.ndarray:
    return np.concatenate([np.ravel(c), np.ravel(w), [float(a)]]).astype(np.float64)


def unpack(theta: np.ndarray, arch: Arch):
    """(c (nS,), w (H, M), a) views/values of a flat parameter vector (or stack (T, n))."""
    nS, H, M = arch.nS, arch.H, arch.M
    theta = np.asarray(theta)
    c = theta[..., :nS]
    w = theta[..., nS: nS + H * M].reshape(theta.shape[:-1] + (H, M))
    a = theta[..., nS + H * M]
    return c, w, a


def softmax(v: np.ndarray) -> np.ndarray:
    z = np.exp(v - np.max(v))
    return z / z.sum()


def logsumexp(v: np.ndarray) -> float:
    if v.size == 0:
        return -math.inf
    m = np.max(v)
    return float(m + np.log(np.sum(np.exp(v - m))))


def rpe_softmax(w: np.ndarray) -> np.ndarray:
    """(..., H, M) softmax over the full window (the copier's attention where every lag exists)."""
    z = np.exp(w - w.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def features(x: np.ndarray, w: np.ndarray, arch: Arch):
    """Copier of one sequence ``x`` (L+1 tokens; x_{L+1} is never read).

    Returns (u, s, p): u, s (L+1, H, d) at positions l = 1..L+1 (row l-1), and
    p a list over (l, h) of the softmax weights on the existing lags.
    """
    Lp1 = x.shape[0]
    d, H = arch.d, arch.H
    lags = arch.lags
    s = np.zeros((Lp1, H, d))
    u = np.zeros((Lp1, H, d))
    p = [[None] * H for _ in range(Lp1)]
    for l in range(1, Lp1 + 1):
        for h in range(H):
            m = arch.n_valid(h, l)
            if m == 0:
                p[l - 1][h] = np.zeros(0)
                continue
            ph = softmax(w[h, :m])
            p[l - 1][h] = ph
            for j in range(m):
                s[l - 1, h, x[l - lags[h, j] - 1]] += ph[j]
            u[l - 1, h] = s[l - 1, h] / np.linalg.norm(s[l - 1, h])
    return u, s, p


def similarity(u: np.ndarray, c: np.ndarray, arch: Arch):
    """K (L,), g (L, H) and the subset products P (L, nS) from features u (L+1, H, d)."""
    L = u.shape[0] - 1
    g = np.einsum("lhv,hv->lh", u[:L], u[L])
    S = arch.subsets
    P = np.ones((L, len(S)))
    for k, sub in enumerate(S):
        for h in sub:
            P[:, k] *= g[:, h]
    c2 = c * c
    K = P @ c2 / c2.sum()
    return K, g, P


def predict(theta: np.ndarray, x: np.ndarray, arch: Arch) -> np.ndarray:
    """y_hat (d,) for one sequence (uses x_1..x_L)."""
    c, w, a = unpack(theta, arch)
    u, _, _ = features(x, w, arch)
    K, _, _ = similarity(u, c, arch)
    L = x.shape[0] - 1
    att = softmax(a * K)
    y = np.zeros(arch.d)
    for l in range(L):
        y[x[l]] += att[l]
    return y


def loss_and_grad_one(theta: np.ndarray, x: np.ndarray, arch: Arch,
                      yhat_floor: float = DEFAULT_YHAT_FLOOR, loss: str = "nll") -> tuple[float, np.ndarray, bool]:
    """Loss, gradient (flat, like theta) and whether the log(0) guard clipped, for one sequence.

    ``loss = "nll"``: -log y_hat[x_{L+1}] (guarded); ``loss = "official-ce"``:
    the official code's CrossEntropyLoss on y_hat taken as logits,
    logsumexp_e y_hat[e] - y_hat[x_{L+1}] (never clipped)."""
    if loss not in ("nll", "official-ce"):
        raise ValueError(f"loss: nll | official-ce, got {loss!r}")
    c, w, a = unpack(theta, arch)
    a = float(a)
    L = x.shape[0] - 1
    H, M = arch.H, arch.M
    lags = arch.lags
    log_cap = -math.log(yhat_floor)
    grad = np.zeros_like(theta, dtype=np.float64)

    # forward
    u, s, p = features(x, w, arch)
    K, g, P = similarity(u, c, arch)
    z = a * K
    match = x[:L] == x[L]
    pa_all = softmax(z)
    if loss == "official-ce":
        yh = np.zeros(arch.d)
        np.add.at(yh, x[:L], pa_all)    # y_hat = sum_l p_l e(x_l)
        nll = logsumexp(yh) - yh[x[L]]
        rr = softmax(yh)                # d loss / d y_hat = softmax(y_hat) - e(x_{L+1})
        rr[x[L]] -= 1.0
        # d y_hat[e] / d z_l = p_l (1{x_l = e} - y_hat[e])
        r = pa_all * (rr[x[:L]] - rr @ yh)
    else:
        nll = logsumexp(z) - logsumexp(z[match])
        if not nll < log_cap:  # also catches +inf (the target never occurs in the context)
            return log_cap, grad, True
        # backward: loss = lse(z) - lse(z[match])
        q = np.zeros(L)
        q[match] = softmax(z[match])
        r = pa_all - q                  # d loss / d z
    dK = a * r                          # d loss / d K
    grad[-1] = float(r @ K)             # d loss / d a

    c2 = c * c
    C = c2.sum()
    # K_l = sum_S c_S^2 P_lS / C  ->  dK_l/dc_S = 2 c_S (P_lS - K_l) / C
    grad[: arch.nS] = 2.0 * c / C * ((dK @ P) - (dK @ K))

    # d loss / d g_h(l) = dK_l * sum_{S containing h} c_S^2 prod_{h' in S, h' != h} g_h'(l) / C
    dg = np.zeros((L, H))
    for k, sub in enumerate(arch.subsets):
        for h in sub:
            others = np.ones(L)
            for h2 in sub:
                if h2 != h:
                    others *= g[:, h2]
            dg[:, h] += dK * c2[k] * others / C

    # g_h(l) = <u_h(L+1), u_h(l)>
    du = np.zeros_like(u)
    du[:L] = dg[:, :, None] * u[L][None, :, :]
    du[L] = np.einsum("lh,lhv->hv", dg, u[:L])

    # u = s / ||s||, s = sum_j p_j e(x_{l - lag_j}), p = softmax(w[h, :m])
    dw = np.zeros((H, M))
    for l in range(1, L + 2):
        for h in range(H):
            m = arch.n_valid(h, l)
            if m == 0:
                continue  # u = 0 is a constant
            sv = s[l - 1, h]
            uv = u[l - 1, h]
            ds = (du[l - 1, h] - uv * (uv @ du[l - 1, h])) / np.linalg.norm(sv)
            dp = np.array([ds[x[l - lags[h, j] - 1]] for j in range(m)])
            ph = p[l - 1][h]
            dw[h, :m] += ph * (dp - ph @ dp)
    grad[arch.nS: arch.nS + H * M] = dw.ravel()
    return float(nll), grad, False


def loss_and_grad(theta: np.ndarray, tokens: np.ndarray, arch: Arch,
                  yhat_floor: float = DEFAULT_YHAT_FLOOR, loss: str = "nll") -> tuple[float, np.ndarray]:
    """Mean loss over the batch ``tokens`` (N, L+1) and its gradient w.r.t. theta."""
    theta = np.asarray(theta, dtype=np.float64)
    N = tokens.shape[0]
    total = 0.0
    grad = np.zeros_like(theta)
    for n in range(N):
        ln, gn, _ = loss_and_grad_one(theta, tokens[n], arch, yhat_floor, loss)
        total += ln
        grad += gn
    return total / N, grad / N


def loss(theta: np.ndarray, tokens: np.ndarray, arch: Arch, yhat_floor: float = DEFAULT_YHAT_FLOOR,
         loss: str = "nll") -> float:
    return loss_and_grad(theta, tokens, arch, yhat_floor, loss)[0]


def init_params(arch: Arch, w_plus: float, w_minus: float, c_init: float, a_init: float,
                start: tuple[int, ...] | None = None) -> np.ndarray:
    """theta with w[h, j] = w_plus on head h's start lag (default ``default_start(arch)``),
    w_minus elsewhere; c_S = c_init; a = a_init."""
    start = default_start(arch) if start is None else tuple(start)
    w = np.full((arch.H, arch.M), float(w_minus))
    for h in range(arch.H):
        j = start[h] - arch.first[h]
        if not 0 <= j < arch.M:
            raise ValueError(f"start lag {start[h]} of head {h + 1} is outside its window "
                             f"{arch.first[h]}..{arch.first[h] + arch.M - 1}")
        w[h, j] = float(w_plus)
    return pack(np.full(arch.nS, float(c_init)), w, a_init)


def default_start(arch: Arch) -> tuple[int, ...]:
    """Head h (1-based) starts on lag h if that lag is in its window, else on
    ``first_h + ((h - 1) mod M)``."""
    out = []
    for h in range(arch.H):
        lag = h + 1
        f = arch.first[h]
        out.append(lag if f <= lag < f + arch.M else f + (h % arch.M))
    return tuple(out)
