"""The dense path of the mixture system: general token vectors, several neurons per head.

The fast path (``meanfield.mixture.kernels``) needs every token to be a signed
orthonormal feature. The reviewers' extensions break that: non-orthogonal
features (a Gram matrix Gamma = E^T E), noisy tokens (a finite training set of
n sequences, each token ``sgn e_idx + sigma xi``) and several neurons per head.
Here every token is a general vector, given by its coordinates x in an
orthonormal basis Q (d x r) of a subspace that contains every token:

* non-orthogonal features: Q spans the features; E = Q C with C = chol(Gamma)^T
  (upper triangular, C^T C = Gamma), a token ``sgn e_a`` has x = sgn C[:, a];
  r = P;
* a finite training set with tokens X (n, d, L): Q spans the features AND the
  n L tokens (its first P columns span the features, the rest the part of the
  tokens outside them), x = Q^T X_i, r <= min(d, n L + P). Including the
  features makes the feature coordinates below exact; it changes nothing in
  the dynamics (gradients vanish on directions no token has).

Exact reduction (any width m). Per head, with M_K = W_K Q, M_Q = W_Q Q (m x r):

    S = Q^T W_K^T W_Q Q = M_K^T M_Q,  A = M_K^T M_K,  B = M_Q^T M_Q  (r x r),
    w~_q = Q^T w_q (one per neuron q = 1..n_neurons).

The loss depends on W_K, W_Q only through the logits x_i^T S x_l, and full-batch
GD moves W_K, W_Q only inside the rows spanned by Q^T (dLoss/dW_K =
M_Q G^T Q^T, dLoss/dW_Q = M_K G Q^T with G = dLoss/dS), so with Q^T Q = I the GD
map and the flow have exactly the fast path's closed form (metric = identity
in this basis):

    S' = S - eta (A G + G B) + eta^2 G S^T G,
    A' = A - eta (G S^T + S G^T) + eta^2 G B G^T,
    B' = B - eta (G^T S + S^T G) + eta^2 G^T A G,
    w~_q' = w~_q - eta n dLoss/dw~_q.

In FEATURE coordinates (S_feat[a, b] = e_a^T W_K^T W_Q e_b = (C^T S C)[a, b])
this is the GD map with the metric Gamma (derived and checked with sympy in
``meanfield.mixture.symbolic_gram``):

    S' = S - eta (A G Gamma + Gamma G B) + eta^2 Gamma G S^T G Gamma,
    A' = A - eta (Gamma G S^T + S G^T Gamma) + eta^2 Gamma G B G^T Gamma,
    B' = B - eta (Gamma G^T S + S^T G Gamma) + eta^2 Gamma G^T A G Gamma,
    w~' = w~ - eta Gamma dLoss/dw~.

Several neurons per head (a mean field over neurons with n particles; the
paper's case is n = 1). The n neurons of head j share its attention:

    zbar_j(X) = (1/L) sum_l sum_i p^{(j)}_{l,i} x_i,   u_{j,q} = w~_{j,q}^T zbar_j,
    f(X) = sum_j a_j (1/n) sum_q relu(u_{j,q}).

Neurons move on the mean-field time scale: the GD step of neuron q is
``eta n dLoss/dw~_q`` (the gradient of the loss in the particle's own
direction, independent of n), i.e. plain GD on the explicit network with step
eta for W_K, W_Q and eta n for the neurons. For n = 1 it is plain GD. The
``grad_w`` criterion (and the gradient norm in the stage time T1) is the
L2(mu) norm of that velocity field in the basis, i.e. of the AMBIENT gradient,
sqrt((1/n) sum_q |n dLoss/dw_q|^2): the fast path's |dLoss/dw~| for one neuron
and orthonormal features; for non-orthogonal features it is |E g| =
sqrt(g^T Gamma g) with g the feature-coordinate gradient, not |g|.

State: one flat float64 vector ``[S (2,r,r), A (2,r,r), B (2,r,r), w (2,n,r)]``
(for n = 1 and Gamma = I the fast path's layout and values).

Initialisation (see :func:`initial_state`): infinite width S = 0, A = B =
omega^2 I_r in the basis, i.e. A_feat = B_feat = omega^2 Gamma in feature
coordinates (NOT omega^2 I: W_K^T W_K -> omega^2 I_d in the ambient space);
finite width m: M_K, M_Q (m x r) iid N(0, omega^2/m), drawn like
``init.attention_init`` (equal to it when r = P). Neurons: the configured
init gives feature coordinates w~_feat (per neuron; ``gaussian:SIGMA`` draws
every neuron independently, n = 1 draws ``init.neuron_init``'s numbers); the
neuron is the smallest ambient vector with those feature coordinates,
w = E Gamma^{-1} w~_feat, so w~ = C Gamma^{-1} w~_feat in the basis.

Recorded quantities (:func:`observables`) are in feature coordinates: S, A, B
(T, 2, P, P), w (T, 2, P) = the mean over a head's neurons (w_neurons
(T, 2, n, P) all of them), u (T, n_samples, 2) the pre-activation of the mean
neuron (= the mean of the neurons' pre-activations; u_neurons all of them).
For noisy tokens the feature coordinates are the projections on the clean
features c_k, v_k.

Numba kernels below are ``@njit(cache=True)`` pure functions over arrays;
:class:`DenseSystem` adapts them to ``meanfield.core.integrate``; :func:`run`,
:func:`save` and :func:`simulate` mirror ``meanfield.mixture.run``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numba import njit

from ..core import integrate
from ..core.io import write_run
from . import kernels
from .config import MixtureConfig, gram_matrix, parse_neuron_init
from .data import SampleSet, TrainingSet, feature_labels, sample_set, samples_group, training_set
from .stagetimes import DEFAULTS as STAGE_DEFAULTS
from .system import criterion_args, save_at, solver, stages

#: stop criteria (the fast path's names and codes)
CRITERIA = kernels.CRITERIA


# ------------------------------------------------------------------ data in a basis


@dataclass(frozen=True)
class DenseData:
    """Tokens in an orthonormal basis Q of a subspace containing every token.

    samples: the sample structure (labels ``y``, ``weight``, ``consistent``,
    ``group``, ``flipped``, and the clean tokens ``idx``/``sgn``);
    X (n, L, r): token coordinates, X[s, i] = Q^T (token i of sample s);
    C (r, P): the features' coordinates (E = Q C); gram (P, P) = C^T C;
    Q (d, r), E (d, P), tokens (n, d, L): the ambient picture (training sets only).
    """

    samples: SampleSet
    X: np.ndarray
    C: np.ndarray
    gram: np.ndarray
    Q: np.ndarray | None = None
    E: np.ndarray | None = None
    tokens: np.ndarray | None = None

    @property
    def r(self) -> int:
        return int(self.X.shape[2])

    @property
    def P(self) -> int:
        return int(self.C.shape[1])

    @property
    def n(self) -> int:
        return int(self.X.shape[0])


def population_data(K: int, L: int, p=None, label_prob: float = 0.5, label_noise: float = 0.0,
                    gram=None) -> DenseData:
    """The exact population (``data.sample_set``) with features of Gram matrix
    ``gram`` (None: orthonormal): basis coordinates x = sgn C[:, idx],
    C = chol(gram)^T."""
    samples = sample_set(K, L, p, label_prob, label_noise)
    P = 2 * K
    G = np.eye(P) if gram is None else np.asarray(gram, dtype=float)
    C = np.linalg.cholesky(G).T.copy()
    X = np.ascontiguousarray(np.transpose(C[:, samples.idx] * samples.sgn[None], (1, 2, 0)))
    return DenseData(samples=samples, X=X, C=C, gram=G.copy())


def basis_of(E: np.ndarray, tokens: np.ndarray, rtol: float = 1e-10) -> np.ndarray:
    """Orthonormal Q (d, r): the first P columns span the features E (QR, signs
    fixed), the others the part of the tokens (n, d, L) outside them (left
    singular vectors above ``rtol`` times the largest)."""
    d, P = E.shape
    Q1, R = np.linalg.qr(E)
    Q1 = Q1 * np.where(np.diag(R) < 0, -1.0, 1.0)
    Z = np.transpose(tokens, (1, 0, 2)).reshape(d, -1)
    Z = Z - Q1 @ (Q1.T @ Z)
    Z = Z - Q1 @ (Q1.T @ Z)  # reorthogonalise once
    if Z.size == 0:
        return Q1
    U, s, _ = np.linalg.svd(Z, full_matrices=False)
    scale = max(float(np.abs(tokens).max()), float(np.abs(E).max()))
    keep = s > rtol * scale * max(1, Z.shape[1])
    return np.concatenate([Q1, U[:, keep]], axis=1) if keep.any() else Q1


def training_data(ts: TrainingSet) -> DenseData:
    """A finite (noisy) training set in the basis of :func:`basis_of`; checks
    that the basis holds every token to 1e-10 relative."""
    Q = basis_of(ts.E, ts.X)
    X = np.ascontiguousarray(np.einsum("dr,sdl->slr", Q, ts.X))
    back = np.einsum("dr,slr->sdl", Q, X)
    err = float(np.max(np.abs(back - ts.X))) if ts.X.size else 0.0
    if err > 1e-10 * max(1.0, float(np.max(np.abs(ts.X)))):
        raise RuntimeError(f"the token basis misses a token by {err:.3g}")
    C = Q.T @ ts.E
    return DenseData(samples=ts.samples, X=X, C=C, gram=ts.E.T @ ts.E, Q=Q, E=ts.E, tokens=ts.X)


def data_of(cfg: MixtureConfig) -> DenseData:
    """The dense data of a config: the population with ``feature_gram``, or the
    finite training set when ``n_train`` is given."""
    gram = gram_matrix(cfg.feature_gram, cfg.K)
    if cfg.n_train is not None:
        ts = training_set(cfg.K, cfg.L, cfg.n_train, cfg.p, cfg.label_prob, cfg.label_noise, cfg.noise_sigma,
                          cfg.ambient_d, cfg.data_seed, gram)
        return training_data(ts)
    return population_data(cfg.K, cfg.L, cfg.p, cfg.label_prob, cfg.label_noise, gram)


# ------------------------------------------------------------------ state layout


def state_size(r: int, nn: int) -> int:
    return 6 * r * r + 2 * nn * r


def pack(S, A, B, w) -> np.ndarray:
    """Flat state from S, A, B (2, r, r) and w (2, n, r) (or (2, r): one neuron)."""
    return np.concatenate([np.ravel(S), np.ravel(A), np.ravel(B), np.ravel(w)]).astype(np.float64)


def unpack(y: np.ndarray, r: int, nn: int):
    """Views (S, A, B, w) of a flat state (or a (T, size) stack): S, A, B (..., 2, r, r),
    w (..., 2, n, r)."""
    lead = y.shape[:-1]
    n2 = 2 * r * r
    return (y[..., :n2].reshape(lead + (2, r, r)), y[..., n2:2 * n2].reshape(lead + (2, r, r)),
            y[..., 2 * n2:3 * n2].reshape(lead + (2, r, r)), y[..., 3 * n2:].reshape(lead + (2, nn, r)))


# ------------------------------------------------------------------ numba kernels


# the scalar ReLU' / logistic helpers are the fast path's (one copy)
_relu_prime = kernels.relu_prime
_softplus_neg = kernels.softplus_neg
_sigmoid_neg = kernels.sigmoid_neg


@njit(cache=True)
def loss_grads_into(y, r, nn, X, lab, weight, r0, grad, u, margin, G, dw, p, zbar, T, v, om):
    """Forward (and, if ``grad``, backward) pass over every sample; returns the loss.

    y: flat state; X (n, L, r) token coordinates; lab, weight (n,).
    Outputs: u (n, 2, nn) pre-activations, margin (n,) = y f; if grad:
    G (2, r, r) = dLoss/dS and dw (2, nn, r) = n dLoss/dw~ (the neurons'
    mean-field velocity, = dLoss/dw~ for one neuron).
    Scratch: p (2, L, L) [h, query l, key i], zbar (2, r), T (L, r), v (L,), om (r,).
    """
    n = X.shape[0]
    L = X.shape[1]
    r2 = r * r
    woff = 6 * r2
    if grad:
        for h in range(2):
            for a in range(r):
                for b in range(r):
                    G[h, a, b] = 0.0
            for q in range(nn):
                for a in range(r):
                    dw[h, q, a] = 0.0
    loss = 0.0
    for s in range(n):
        f = 0.0
        for h in range(2):
            So = h * r2
            # T[l] = S x_l (query side)
            for l in range(L):
                for a in range(r):
                    acc = 0.0
                    for b in range(r):
                        acc += y[So + a * r + b] * X[s, l, b]
                    T[l, a] = acc
            for a in range(r):
                zbar[h, a] = 0.0
            for l in range(L):
                mx = -math.inf
                for i in range(L):
                    z = 0.0
                    for a in range(r):
                        z += X[s, i, a] * T[l, a]
                    p[h, l, i] = z
                    if z > mx:
                        mx = z
                den = 0.0
                for i in range(L):
                    e = math.exp(p[h, l, i] - mx)
                    p[h, l, i] = e
                    den += e
                for i in range(L):
                    p[h, l, i] /= den
                    c = p[h, l, i] / L
                    for a in range(r):
                        zbar[h, a] += c * X[s, i, a]
            wo = woff + h * nn * r
            acc_f = 0.0
            for q in range(nn):
                uq = 0.0
                for a in range(r):
                    uq += y[wo + q * r + a] * zbar[h, a]
                u[s, h, q] = uq
                if uq > 0.0:
                    acc_f += uq
            f += (1.0 - 2.0 * h) * acc_f / nn
        m = lab[s] * f
        margin[s] = m
        loss += weight[s] * _softplus_neg(m)
        if not grad:
            continue
        g = _sigmoid_neg(m)
        for h in range(2):
            base = -weight[s] * g * lab[s] * (1.0 - 2.0 * h)
            wo = woff + h * nn * r
            for a in range(r):
                om[a] = 0.0
            active = False
            for q in range(nn):
                c = base * _relu_prime(u[s, h, q], r0)
                if c == 0.0:
                    continue
                active = True
                for a in range(r):
                    dw[h, q, a] += c * zbar[h, a]
                    om[a] += (c / nn) * y[wo + q * r + a]
            if not active:
                continue
            # om = dLoss/dzbar; v_i = om . x_i; dLoss/dlogit[i, l] = (1/L) p[l, i] (v_i - vbar_l)
            for i in range(L):
                acc = 0.0
                for a in range(r):
                    acc += om[a] * X[s, i, a]
                v[i] = acc
            # T[i] = sum_l D[i, l] x_l ; G += sum_i x_i T[i]^T
            for i in range(L):
                for b in range(r):
                    T[i, b] = 0.0
            for l in range(L):
                vbar = 0.0
                for i in range(L):
                    vbar += p[h, l, i] * v[i]
                for i in range(L):
                    D = p[h, l, i] * (v[i] - vbar) / L
                    if D != 0.0:
                        for b in range(r):
                            T[i, b] += D * X[s, l, b]
            for i in range(L):
                for a in range(r):
                    xa = X[s, i, a]
                    if xa != 0.0:
                        for b in range(r):
                            G[h, a, b] += xa * T[i, b]
    return loss


# The attention part of the GD map / flow is the same closed form as the fast
# path's (metric = identity in the orthonormal basis): one copy of it, in kernels.
attention_update_into = kernels.attention_update_into


@njit(cache=True)
def criterion_of(kind, nn, loss, margin, consistent, dw):
    """The quantity a stop criterion compares: 1 loss, 2/3/4 min margin of the
    consistent / inconsistent / all samples, 5 the neurons' velocity norm."""
    if kind == 1:
        return loss
    if kind == 5:
        acc = 0.0
        for h in range(dw.shape[0]):
            for q in range(dw.shape[1]):
                for a in range(dw.shape[2]):
                    acc += dw[h, q, a] * dw[h, q, a]
        return math.sqrt(acc / nn)
    val = math.inf
    for s in range(margin.shape[0]):
        if kind == 4 or (kind == 2 and consistent[s]) or (kind == 3 and not consistent[s]):
            if margin[s] < val:
                val = margin[s]
    return val


@njit(cache=True)
def loss_and_grads(y, r, nn, X, lab, weight, r0):
    """(loss, G (2, r, r), dw (2, nn, r), margin (n,), u (n, 2, nn)) at state y."""
    n, L = X.shape[0], X.shape[1]
    u = np.empty((n, 2, nn))
    margin = np.empty(n)
    G = np.empty((2, r, r))
    dw = np.empty((2, nn, r))
    loss = loss_grads_into(y, r, nn, X, lab, weight, r0, True, u, margin, G, dw, np.empty((2, L, L)),
                           np.empty((2, r)), np.empty((L, r)), np.empty(L), np.empty(r))
    return loss, G, dw, margin, u


@njit(cache=True)
def forward(y, r, nn, X, lab, weight, u, margin):
    """Pre-activations u (n, 2, nn), margins (n,) and the loss at state y."""
    L = X.shape[1]
    G = np.empty((2, 1, 1))
    dw = np.empty((2, 1, 1))
    return loss_grads_into(y, r, nn, X, lab, weight, 1.0, False, u, margin, G, dw, np.empty((2, L, L)),
                           np.empty((2, r)), np.empty((L, r)), np.empty(L), np.empty(r))


@njit(cache=True)
def flow_rhs(y, out, r, nn, X, lab, weight, r0, train_w, train_att):
    """Gradient-flow right-hand side dy/dt into ``out``; returns the loss."""
    n, L = X.shape[0], X.shape[1]
    u = np.empty((n, 2, nn))
    margin = np.empty(n)
    G = np.empty((2, r, r))
    dw = np.empty((2, nn, r))
    loss = loss_grads_into(y, r, nn, X, lab, weight, r0, True, u, margin, G, dw, np.empty((2, L, L)),
                           np.empty((2, r)), np.empty((L, r)), np.empty(L), np.empty(r))
    r2 = r * r
    if train_att:
        attention_update_into(y, out, r, G, 1.0, False, np.empty((3, r, r)))
    else:
        for i in range(6 * r2):
            out[i] = 0.0
    for h in range(2):
        for q in range(nn):
            for a in range(r):
                out[6 * r2 + (h * nn + q) * r + a] = -dw[h, q, a] if train_w else 0.0
    return loss


@njit(cache=True)
def gd_advance(y, nsteps, eta, r, nn, X, lab, weight, consistent, r0, train_w, train_att,
               crit_kind, crit_op, crit_thresh, max_abs):
    """Up to ``nsteps`` exact GD steps on ``y`` in place; the criterion is checked
    before each step. Returns (steps_done, code, loss): code 0 all done,
    1 criterion holds, 2 non-finite state or loss, 3 an entry above max_abs
    (with 2 and 3 ``y`` keeps the last accepted state)."""
    n, L = X.shape[0], X.shape[1]
    u = np.empty((n, 2, nn))
    margin = np.empty(n)
    G = np.empty((2, r, r))
    dw = np.empty((2, nn, r))
    p = np.empty((2, L, L))
    zbar = np.empty((2, r))
    T = np.empty((L, r))
    v = np.empty(L)
    om = np.empty(r)
    T3 = np.empty((3, r, r))
    new = np.empty_like(y)
    r2 = r * r
    woff = 6 * r2
    ny = y.shape[0]
    k = 0
    while True:
        loss = loss_grads_into(y, r, nn, X, lab, weight, r0, True, u, margin, G, dw, p, zbar, T, v, om)
        if not math.isfinite(loss):
            return k, 2, loss
        if crit_kind != 0:
            c = criterion_of(crit_kind, nn, loss, margin, consistent, dw)
            if (crit_op > 0 and c >= crit_thresh) or (crit_op < 0 and c <= crit_thresh):
                return k, 1, loss
        if k == nsteps:
            return k, 0, loss
        if train_att:
            attention_update_into(y, new, r, G, eta, True, T3)
        else:
            for i in range(woff):
                new[i] = y[i]
        for h in range(2):
            for q in range(nn):
                for a in range(r):
                    j = woff + (h * nn + q) * r + a
                    new[j] = y[j] - eta * dw[h, q, a] if train_w else y[j]
        for i in range(ny):
            if not math.isfinite(new[i]):
                return k, 2, loss
            if abs(new[i]) > max_abs:
                return k, 3, loss
        for i in range(ny):
            y[i] = new[i]
        k += 1


# ------------------------------------------------------------------ the system


@dataclass
class DenseSystem:
    """The dense reduced dynamics as a system for ``meanfield.core.integrate``;
    ``mode`` of a stage is ``(train_w, train_att)``."""

    data: DenseData
    n_neurons: int = 1
    relu_prime_at_zero: float = 1.0
    max_abs: float = math.inf

    def _args(self):
        d = self.data
        return d.r, int(self.n_neurons), d.X, d.samples.y, d.samples.weight

    def gd_advance(self, y, nsteps, eta, mode, criterion):
        kind, op, thr = criterion_args(criterion)
        done, code, _ = gd_advance(y, int(nsteps), float(eta), *self._args(), self.data.samples.consistent,
                                   float(self.relu_prime_at_zero), bool(mode[0]), bool(mode[1]), kind, op, thr,
                                   float(self.max_abs))
        return int(done), int(code)

    def rhs(self, y, mode):
        out = np.empty_like(y)
        flow_rhs(y, out, *self._args(), float(self.relu_prime_at_zero), bool(mode[0]), bool(mode[1]))
        return out

    def criterion_value(self, y, name):
        loss, G, dw, margin, u = loss_and_grads(np.ascontiguousarray(y), *self._args(),
                                                float(self.relu_prime_at_zero))
        return float(criterion_of(CRITERIA[name], int(self.n_neurons), loss, margin, self.data.samples.consistent,
                                  dw))


# ------------------------------------------------------------------ initial state


def _streams(seed: int):
    # the same streams as meanfield.mixture.init: attention first, neurons second
    a, b = np.random.SeedSequence(seed).spawn(2)
    return np.random.default_rng(a), np.random.default_rng(b)


def neuron_features(K: int, spec: str, nn: int, seed: int = 0) -> np.ndarray:
    """Initial neurons in feature coordinates, (2, nn, P). ``gaussian:SIGMA``
    draws every neuron independently (nn = 1: the numbers of
    ``init.neuron_init``); zero and const give every neuron of a head the same
    vector."""
    P = 2 * K
    kind, payload = parse_neuron_init(spec, K)
    if kind == "zero":
        return np.zeros((2, nn, P))
    if kind == "const":
        return np.broadcast_to(np.array(payload, dtype=float)[:, None, :], (2, nn, P)).copy()
    _, rng = _streams(seed)
    return payload * rng.standard_normal((2, nn, P))


def initial_state(cfg: MixtureConfig, data: DenseData) -> np.ndarray:
    """The flat dense state at t = 0 (see the module docstring)."""
    r, nn = data.r, cfg.n_neurons
    if cfg.width is None:
        S = np.zeros((2, r, r))
        A = np.broadcast_to(cfg.omega**2 * np.eye(r), (2, r, r)).copy()
        B = A.copy()
    else:
        rng, _ = _streams(cfg.seed)
        S, A, B = (np.empty((2, r, r)) for _ in range(3))
        scale = cfg.omega / np.sqrt(cfg.width)
        for h in range(2):
            MK = rng.standard_normal((cfg.width, r)) * scale
            MQ = rng.standard_normal((cfg.width, r)) * scale
            S[h] = MK.T @ MQ
            A[h] = MK.T @ MK
            B[h] = MQ.T @ MQ
    wf = neuron_features(cfg.K, cfg.neuron_init, nn, cfg.seed)
    w = np.einsum("ra,hqa->hqr", data.C, np.linalg.solve(data.gram, wf.reshape(-1, data.P).T).T.reshape(wf.shape))
    return pack(S, A, B, w)


# ------------------------------------------------------------------ runs


def system_of(cfg: MixtureConfig, data: DenseData | None = None) -> DenseSystem:
    return DenseSystem(data if data is not None else data_of(cfg), cfg.n_neurons, cfg.relu_prime_at_zero,
                       cfg.max_abs)


def run(cfg: MixtureConfig, y0: np.ndarray | None = None, monitor: integrate.Monitor | None = None,
        data: DenseData | None = None) -> integrate.Trajectory:
    """Integrate the dense reduced dynamics for ``cfg`` (basis-coordinate states)."""
    system = system_of(cfg, data)
    y = initial_state(cfg, system.data) if y0 is None else np.asarray(y0, dtype=np.float64)
    if y.shape != (state_size(system.data.r, cfg.n_neurons),):
        raise ValueError(f"y0: must have shape ({state_size(system.data.r, cfg.n_neurons)},), got {y.shape}")
    return solver(cfg).solve(system, y, stages(cfg), save_at(cfg), monitor)


def to_features(data: DenseData, Y: np.ndarray, nn: int) -> dict[str, np.ndarray]:
    """Basis states (T, size) -> feature coordinates: S, A, B (T, 2, P, P),
    w_neurons (T, 2, nn, P), w (T, 2, P) (mean over neurons)."""
    Y = np.atleast_2d(np.asarray(Y, dtype=np.float64))
    S, A, B, w = unpack(Y, data.r, nn)
    C = data.C
    f = lambda M: np.einsum("ra,...rs,sb->...ab", C, M, C)  # noqa: E731
    wn = np.einsum("ra,...r->...a", C, w)
    return {"S": f(S), "A": f(A), "B": f(B), "w_neurons": wn, "w": wn.mean(axis=-2)}


def observables(data: DenseData, Y: np.ndarray, nn: int, relu_prime_at_zero: float = 1.0) -> dict[str, np.ndarray]:
    """Recorded quantities of basis states Y (T, size), in feature coordinates:
    S, A, B, w, w_neurons; loss (T,), margin (T, n), u (T, n, 2) (the mean
    neuron's pre-activation), u_neurons (T, n, 2, nn), g (T, n), and
    grad_w (T,) (the ``grad_w`` criterion)."""
    Y = np.atleast_2d(np.asarray(Y, dtype=np.float64))
    T = Y.shape[0]
    n = data.n
    loss = np.empty(T)
    margin = np.empty((T, n))
    un = np.empty((T, n, 2, nn))
    gw = np.empty(T)
    for k in range(T):
        l, G, dw, m, u = loss_and_grads(np.ascontiguousarray(Y[k]), data.r, nn, data.X, data.samples.y,
                                        data.samples.weight, float(relu_prime_at_zero))
        loss[k], margin[k], un[k] = l, m, u
        gw[k] = math.sqrt(float(np.sum(dw * dw)) / nn)
    out = to_features(data, Y, nn)
    with np.errstate(over="ignore"):
        g = 1.0 / (1.0 + np.exp(margin))
    out.update(loss=loss, margin=margin, u=un.mean(axis=-1), u_neurons=un, g=g, grad_w=gw)
    return out


def stage_times(t, loss, margin, consistent, grad_w, schedule: str, stage_ends=None, clean=None) -> dict:
    """``meanfield.mixture.stagetimes.stage_times`` with the neuron-gradient norm
    given (``grad_w``, one per record) instead of recomputed by the fast
    kernels; same criteria and defaults. ``clean`` (n,) bool: the samples whose
    margins count (default all; with label noise the unflipped ones)."""
    crit = dict(STAGE_DEFAULTS)
    t = np.asarray(t, dtype=float)
    out = {"T1": math.nan, "T2": math.nan, "T_loss": math.nan}
    if t.size == 0:
        return {**out, "criteria": crit}
    c = np.asarray(consistent, dtype=bool)
    m = np.asarray(margin)
    if clean is not None:
        keep = np.asarray(clean, dtype=bool)
        c, m = c[keep], m[:, keep]
    mc = m[:, c].min(axis=1) if c.any() else np.full(t.size, np.inf)
    mi = m[:, ~c].min(axis=1) if (~c).any() else np.full(t.size, np.inf)

    def first(mask, start=0):
        idx = np.flatnonzero(mask[start:])
        return float(t[start + idx[0]]) if idx.size else math.nan

    if schedule == "three-stage":
        ends = [e for e in (stage_ends or []) if e["stage"] == 1]
        T1 = float(ends[0]["t"]) if ends else math.nan
        crit["T1"] = "end of stage 1"
    else:
        g = np.asarray(grad_w, dtype=float)
        T1 = first((mc >= crit["margin"]) & (g <= crit["grad_ratio"] * g[0]))
        crit["T1"] = "first record with consistent margin >= margin and |dLoss/dw| <= grad_ratio |dLoss/dw|(0)"
    out["T1"] = T1
    if not math.isnan(T1):
        i1 = int(np.searchsorted(t, T1 - 1e-12 * max(1.0, abs(T1))))
        out["T2"] = first(mi >= crit["margin"], i1)
    crit["T2"] = "first record at or after T1 with inconsistent margin >= margin"
    out["T_loss"] = first(np.asarray(loss) <= crit["loss_level"])
    crit["T_loss"] = "first record with loss <= loss_level"
    return {**out, "criteria": crit}


def simulate(cfg: MixtureConfig, data: DenseData | None = None) -> dict:
    """Run ``cfg`` on the dense path and return a run-like dict (the keys of a
    run file; ``attrs`` with T1, T2, T_loss; ``data`` the DenseData)."""
    data = data if data is not None else data_of(cfg)
    traj = run(cfg, data=data)
    arr = traj.arrays()
    obs = observables(data, arr["y"], cfg.n_neurons, cfg.relu_prime_at_zero)
    smp = data.samples
    st = stage_times(arr["t"], obs["loss"], obs["margin"], smp.consistent, obs["grad_w"], cfg.schedule,
                     traj.stage_ends, ~smp.is_flipped)
    out = {"t": arr["t"], "step": arr["step"], "stage": arr["stage"], **obs, "samples": samples_group(smp),
           "features": feature_labels(cfg.K), "y_basis": arr["y"]}
    out["attrs"] = {"K": cfg.K, "L": cfg.L, "omega": cfg.omega, "eta": cfg.eta, "schedule": cfg.schedule,
                    "width": -1 if cfg.width is None else cfg.width, "stage_ends": traj.stage_ends,
                    "status": traj.status, "T1": st["T1"], "T2": st["T2"], "T_loss": st["T_loss"],
                    "basis_dim": data.r, "n_neurons": cfg.n_neurons}
    out["config"] = cfg
    out["data"] = data
    return out


def save(path: str | Path, cfg: MixtureConfig, traj: integrate.Trajectory, status: str | None = None,
         message: str | None = None, extra_attrs: dict | None = None, data: DenseData | None = None) -> Path:
    """Write the run file of a dense run: the fast path's datasets (feature
    coordinates) plus ``feature_gram`` (P, P), ``w_neurons`` / ``u_neurons``
    (several neurons) and a ``training_set`` group (E, tokens, basis Q) for
    finite training sets; attributes ``dense_path``, ``basis_dim``,
    ``n_neurons``."""
    data = data if data is not None else data_of(cfg)
    nn = cfg.n_neurons
    arr = traj.arrays()
    Y = arr["y"] if arr["y"].size else np.empty((0, state_size(data.r, nn)))
    obs = observables(data, Y, nn, cfg.relu_prime_at_zero) if len(Y) else {
        k: np.empty((0,) + s) for k, s in (("loss", ()), ("w", (2, data.P)), ("S", (2, data.P, data.P)),
                                           ("A", (2, data.P, data.P)), ("B", (2, data.P, data.P)),
                                           ("margin", (data.n,)), ("u", (data.n, 2)), ("grad_w", ()),
                                           ("w_neurons", (2, nn, data.P)), ("u_neurons", (data.n, 2, nn)))}
    smp = data.samples
    out = {
        "features": np.array(feature_labels(cfg.K), dtype=object),
        "heads": np.array(["+", "-"], dtype=object),
        "t": arr["t"], "step": arr["step"], "stage": arr["stage"],
        "loss": obs["loss"], "w": obs["w"], "S": obs["S"], "A": obs["A"], "B": obs["B"],
        "margin": obs["margin"], "u": obs["u"],
        "samples": samples_group(smp),
        "feature_gram": data.gram,
    }
    if nn > 1:
        out["w_neurons"] = obs["w_neurons"]
        out["u_neurons"] = obs["u_neurons"]
    if data.tokens is not None:
        out["training_set"] = {"E": data.E, "tokens": data.tokens, "Q": data.Q}
    attrs = {
        "K": cfg.K, "L": cfg.L, "omega": cfg.omega, "eta": cfg.eta, "method": cfg.method,
        "schedule": cfg.schedule, "width": -1 if cfg.width is None else cfg.width, "seed": cfg.seed,
        "n_samples": smp.n, "stage_ends": traj.stage_ends,
        "stopped_at_step": int(arr["step"][-1]) if arr["step"].size else 0,
        "stopped_at_t": float(arr["t"][-1]) if arr["t"].size else 0.0,
        "warnings": list(traj.warnings),
        "dense_path": 1, "basis_dim": data.r, "n_neurons": nn,
    }
    st = stage_times(arr["t"], obs["loss"], obs["margin"], smp.consistent, obs["grad_w"], cfg.schedule,
                     traj.stage_ends, ~smp.is_flipped)
    attrs.update({"T1": st["T1"], "T2": st["T2"], "T_loss": st["T_loss"], "stage_time_criteria": st["criteria"]})
    attrs.update(extra_attrs or {})
    return write_run(path, system="mixture", config=cfg.to_dict(), status=status or traj.status,
                     message=message or traj.message, data=out, attrs=attrs)
