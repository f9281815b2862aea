"""The finite-width particle sampler: explicit GD on the two-headed network.

An independent check of the reduced system (``meanfield.mixture.kernels``):
here the state is the EXPLICIT finite-width network of ``docs/conventions.md``,
per head j in (0: "+", 1: "-") the weights W_K[j], W_Q[j] (m x d, one row per
"particle" = attention neuron) and the neuron w[j] (d), in an ambient space
R^d, d >= 2K, whose features are the columns of a random orthonormal
embedding E (d x P, P = 2K, ``model.embedding``). Training is plain
full-batch GD on the population loss of the exact sample set, with its own
forward and backward pass; nothing of the reduced dynamics is used for it
(from ``kernels`` only ``pack``, the record layout, and the ``CRITERIA``
name table).

Structure used for speed (cost O(m d P) per step, not O(n_samples m d)):
every token is a signed feature, X_i = sgn_i E[:, idx_i], so

    W_K X_i = sgn_i (W_K E)[:, idx_i],     logits[i, l] = sgn_i sgn_l (M_K^T M_Q)[idx_i, idx_l]

with M_K = W_K E, M_Q = W_Q E (m x P), and backpropagation gives gradients of
rank <= P in the ambient space,

    dLoss/dW_K = (M_Q G^T) E^T,   dLoss/dW_Q = (M_K G) E^T,   dLoss/dw = E dw~

where G[a, b] = sum over samples and token pairs (key i, query l) with
idx_i = a, idx_l = b of dLoss/dlogit[i, l] sgn_i sgn_l. The GD update is applied
to the FULL ambient W (m x d) and M = W E is recomputed from the updated W in
the same pass over memory (so the weights, not the projections, are the
state: the orthogonal part W (I - E E^T) is carried along and must stay put).

Initial weights (finite width m = ``cfg.width``, seed = ``cfg.seed``), chosen
so that the projected initial state equals ``init.initial_state(cfg)`` (to
rounding: E^T E = I only to ~1e-16):

* ``SeedSequence(seed).spawn(4)``: children 0 and 1 are ``init.py``'s streams
  (attention, neurons); child 2 draws the orthogonal parts; child 3 draws the
  embedding E (unless ``embed_seed`` is given: then
  ``default_rng(embed_seed)``).
* per head (head 0 then head 1): M_K then M_Q, m x P iid N(0, omega^2/m) from
  child 0 (exactly as ``init.attention_init`` draws them);
* W = M E^T + Z (I - E E^T), Z m x d iid N(0, omega^2/m) from child 2 (per
  head: Z_K then Z_Q; none when d = P). Then W has iid N(0, omega^2/m)
  entries and W E = M;
* w = E w~0 with w~0 = ``init.neuron_init(K, cfg.neuron_init, seed)`` (no
  orthogonal part).

Recording: at record times the weights are projected on the features,
S = M_K^T M_Q, A = M_K^T M_K, B = M_Q^T M_Q, w~ = E^T w per head, and packed
into the reduced layout with ``kernels.pack`` (for that only); recorded
quantities then come from THE observable function
``meanfield.mixture.observables.observables`` (through ``run.save``), as for
the reduced system.

Numba: every kernel is ``@njit(cache=True)``, pure over arrays. The update
pass over the m rows (the only O(m d P) work per step) runs in parallel over
fixed blocks of ``BLOCK`` rows, and every sum over rows is added block by
block in order, so results do not depend on the number of threads; small
problems run on one thread (:func:`auto_threads`). Reductions may be
reassociated by LLVM (``fastmath`` reassoc/contract, NaN and inf semantics
kept), so rows are summed in a vectorised order: agreement with the reduced
system is to rounding (~1e-15 relative), not bitwise. Kinks: where a
pre-activation is an exact tie u = 0 in one path (ReLU'(0) decides) the other
may see +-1e-17 and take the other branch; with zero neurons u = 0 exactly
in both (w = 0 exactly), and no other tie has been seen at finite width.

API: :func:`run_particles` (a trajectory of projected reduced states, on the
reduced run's stages and record grid), :func:`particles_to_file` (the HDF5
run file), :func:`make_particles` / :class:`ProjectedParticles` (the system
``run_particles`` hands to the shared ``GDMap``; it holds the weights),
:class:`ParticleSystem` (the System protocol on a flat particle state, small
m), :func:`initial_particles`, :func:`projected_state`,
:func:`loss_and_gradients`, and the numba kernels.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from pathlib import Path

import numba
import numpy as np
from numba import njit, prange

from ..core import integrate
from ..core.config import ConfigError
from . import kernels
from .config import MixtureConfig
from .data import SampleSet
from .init import neuron_init
from .model import embedding
from . import run as _run
from .system import criterion_args

BLOCK = 1024  # rows per parallel task; sums over rows are added block by block, in order
# LLVM may reassociate and fuse (vectorised dot products) but keeps NaN/inf semantics
FM = {"reassoc", "contract"}
# below this much work per step (m (d + P) per head) the passes run on one thread: thread
# start-up and synchronisation would cost more than they save (much more on a busy machine)
PAR_MIN = 1 << 18

# ----------------------------------------------------------------- numba kernels


@njit(cache=True, fastmath=FM)
def project_rows(W, ET, M):
    """M[h] = W[h] @ ET^T for every head: W (H, m, d), ET = E^T (P, d) -> M (H, m, P)."""
    H, m, d = W.shape
    P = ET.shape[0]
    nb = (m + BLOCK - 1) // BLOCK
    for t in range(H * nb):
        h = t // nb
        r0 = (t % nb) * BLOCK
        r1 = min(m, r0 + BLOCK)
        for r in range(r0, r1):
            for a in range(P):
                s = 0.0
                for x in range(d):
                    s += W[h, r, x] * ET[a, x]
                M[h, r, a] = s


@njit(cache=True, fastmath=FM)
def gram(X, Y, out):
    """out[h] = X[h]^T Y[h]: X, Y (H, m, P) -> out (H, P, P); block sums added in order."""
    H, m, P = X.shape
    nb = (m + BLOCK - 1) // BLOCK
    part = np.zeros((H * nb, P, P))
    for t in range(H * nb):
        h = t // nb
        r0 = (t % nb) * BLOCK
        r1 = min(m, r0 + BLOCK)
        for r in range(r0, r1):
            for a in range(P):
                xa = X[h, r, a]
                for b in range(P):
                    part[t, a, b] += xa * Y[h, r, b]
    for h in range(H):
        for a in range(P):
            for b in range(P):
                s = 0.0
                for k in range(nb):
                    s += part[h * nb + k, a, b]
                out[h, a, b] = s


@njit(cache=True)
def project_vec(w, E, out):
    """out[h] = E^T w[h]: w (H, d) -> (H, P)."""
    H, d = w.shape
    P = E.shape[1]
    for h in range(H):
        for a in range(P):
            s = 0.0
            for x in range(d):
                s += w[h, x] * E[x, a]
            out[h, a] = s


@njit(cache=True)
def _softplus_neg(z):
    # log(1 + exp(-z)), stable for both signs
    if z > 0.0:
        return np.log1p(np.exp(-z))
    return -z + np.log1p(np.exp(z))


@njit(cache=True)
def _sigmoid_neg(z):
    # 1 / (1 + exp(z)) = -l'(z), stable
    if z > 0.0:
        e = np.exp(-z)
        return e / (1.0 + e)
    return 1.0 / (1.0 + np.exp(z))


@njit(cache=True)
def network(Sg, wt, idx, sgn, lab, weight, r0, u, margin, G, dwt):
    """Forward and backward pass of the explicit network on every sample.

    Inputs are the particle products the tokens see: Sg[h] = (W_K E)^T (W_Q E)
    (so that (W_K X_i).(W_Q X_l) = sgn_i sgn_l Sg[h, idx_i, idx_l]) and
    wt[h] = E^T w[h] (so that w^T X_i = sgn_i wt[h, idx_i]).
    Outputs: u (n, 2) pre-activations, margin (n,), and the loss (returned);
    G[h] (P, P) with dLoss/dW_K = (W_Q E) G^T E^T, dLoss/dW_Q = (W_K E) G E^T;
    dwt[h] (P,) with dLoss/dw = E dwt. ReLU'(0) = r0.
    """
    n, L = idx.shape
    G[:] = 0.0
    dwt[:] = 0.0
    p = np.empty((2, L, L))  # p[h, l, i]: query l attends to key i
    v = np.empty((2, L))     # v[h, i] = w_h^T X_i
    loss = 0.0
    for s in range(n):
        f = 0.0
        for h in range(2):
            for i in range(L):
                v[h, i] = sgn[s, i] * wt[h, idx[s, i]]
            uh = 0.0
            for l in range(L):
                mx = -np.inf
                for i in range(L):
                    z = sgn[s, i] * sgn[s, l] * Sg[h, idx[s, i], idx[s, l]]
                    p[h, l, i] = z
                    if z > mx:
                        mx = z
                den = 0.0
                for i in range(L):
                    e = np.exp(p[h, l, i] - mx)
                    p[h, l, i] = e
                    den += e
                for i in range(L):
                    p[h, l, i] /= den
                    uh += p[h, l, i] * v[h, i]
            uh /= L
            u[s, h] = uh
            if uh > 0.0:
                f += uh if h == 0 else -uh
        mg = lab[s] * f
        margin[s] = mg
        loss += weight[s] * _softplus_neg(mg)
        g = _sigmoid_neg(mg)
        for h in range(2):
            uh = u[s, h]
            rp = 1.0 if uh > 0.0 else (0.0 if uh < 0.0 else r0)
            # dLoss/du_h = weight * l'(y f) * y * a_h * relu'(u_h),  l' = -g
            c = -weight[s] * g * lab[s] * (1.0 if h == 0 else -1.0) * rp
            if c == 0.0:
                continue
            for l in range(L):
                vbar = 0.0
                for i in range(L):
                    vbar += p[h, l, i] * v[h, i]
                for i in range(L):
                    # du/dlogit[i, l] = (1/L) p[l, i] (v_i - vbar_l)
                    D = c * p[h, l, i] * (v[h, i] - vbar) / L
                    G[h, idx[s, i], idx[s, l]] += D * sgn[s, i] * sgn[s, l]
                    # du/dw = (1/L) sum_l sum_i p[l, i] X_i
                    dwt[h, idx[s, i]] += c * p[h, l, i] * sgn[s, i] / L
    return loss


@njit(cache=True)
def criterion(kind, loss, margin, consistent, dwt, E):
    """The quantity of stop criterion ``kind`` (codes of ``kernels.CRITERIA``):
    1 loss, 2/3/4 min margin of consistent/inconsistent/all samples,
    5 norm of the ambient gradient dLoss/dw = E dw~ (both heads)."""
    if kind == 1:
        return loss
    if kind == 5:
        d, P = E.shape
        s = 0.0
        for h in range(dwt.shape[0]):
            for x in range(d):
                gx = 0.0
                for a in range(P):
                    gx += E[x, a] * dwt[h, a]
                s += gx * gx
        return np.sqrt(s)
    val = np.inf
    for s in range(margin.shape[0]):
        if kind == 4 or (kind == 2 and consistent[s]) or (kind == 3 and not consistent[s]):
            if margin[s] < val:
                val = margin[s]
    return val


@njit(cache=True, parallel=True, fastmath=FM)
def update_rows(WK, WQ, E, ET, KE, QE, G, step, KEn, QEn, Sp, dAp, dBp, uK, uQ):
    """One GD update of every row of W_K, W_Q in place: W -= step * (U E^T) with
    U_K = (W_Q E) G^T, U_Q = (W_K E) G taken from the current projections KE, QE
    (H, m, P); the projections of the updated rows go to KEn, QEn, and
    per-block partial sums of KEn^T QEn, diag(KEn^T KEn), diag(QEn^T QEn)
    to Sp (H nb, P, P), dAp, dBp (H nb, P). ``step = -eta`` undoes a step
    (to rounding). ET = E^T (contiguous); uK, uQ (H nb, P): scratch, one row
    per task."""
    H, m, d = WK.shape
    P = E.shape[1]
    nb = (m + BLOCK - 1) // BLOCK
    for t in prange(H * nb):
        h = t // nb
        r0 = (t % nb) * BLOCK
        r1 = min(m, r0 + BLOCK)
        for a in range(P):
            dAp[t, a] = 0.0
            dBp[t, a] = 0.0
            for b in range(P):
                Sp[t, a, b] = 0.0
        for r in range(r0, r1):
            for a in range(P):
                sk = 0.0
                sq = 0.0
                for b in range(P):
                    sk += G[h, a, b] * QE[h, r, b]
                    sq += G[h, b, a] * KE[h, r, b]
                uK[t, a] = step * sk
                uQ[t, a] = step * sq
            for a in range(P):
                ka = uK[t, a]
                qa = uQ[t, a]
                for x in range(d):
                    WK[h, r, x] -= ka * ET[a, x]
                    WQ[h, r, x] -= qa * ET[a, x]
            for a in range(P):
                sk = 0.0
                sq = 0.0
                for x in range(d):
                    sk += WK[h, r, x] * ET[a, x]
                    sq += WQ[h, r, x] * ET[a, x]
                KEn[h, r, a] = sk
                QEn[h, r, a] = sq
            for a in range(P):
                ka = KEn[h, r, a]
                dAp[t, a] += ka * ka
                dBp[t, a] += QEn[h, r, a] * QEn[h, r, a]
                for b in range(P):
                    Sp[t, a, b] += ka * QEn[h, r, b]


@njit(cache=True)
def _sum_blocks(Sp, dAp, dBp, nb, S, dA, dB):
    H, P = S.shape[0], S.shape[1]
    for h in range(H):
        for a in range(P):
            x = 0.0
            y = 0.0
            for k in range(nb):
                x += dAp[h * nb + k, a]
                y += dBp[h * nb + k, a]
            dA[h, a] = x
            dB[h, a] = y
            for b in range(P):
                z = 0.0
                for k in range(nb):
                    z += Sp[h * nb + k, a, b]
                S[h, a, b] = z


@njit(cache=True)
def _check(S, dA, dB, wt, max_abs):
    """0, or the reduced system's code for the first bad entry in the order
    S, A, B, w~: 2 non-finite, 3 above max_abs. A and B are Gram matrices, so
    |A[a, b]| <= max(A[a, a], A[b, b]): their diagonals decide."""
    for arr in (S.ravel(), dA.ravel(), dB.ravel(), wt.ravel()):
        for i in range(arr.shape[0]):
            if not np.isfinite(arr[i]):
                return 2
            if abs(arr[i]) > max_abs:
                return 3
    return 0


@njit(cache=True)
def _copy2(dst, src):
    # dst[:] = src for 2-d arrays of equal shape, as a loop: the slice assignment
    # would compile numba's shape-mismatch message machinery (~5 s on first use)
    for i in range(dst.shape[0]):
        for j in range(dst.shape[1]):
            dst[i, j] = src[i, j]


@njit(cache=True)
def _copy3(dst, src):
    # dst[:] = src for 3-d arrays of equal shape (see _copy2)
    for i in range(dst.shape[0]):
        for j in range(dst.shape[1]):
            for k in range(dst.shape[2]):
                dst[i, j, k] = src[i, j, k]


@njit(cache=True)
def gd_advance_particles(WK, WQ, w, E, KE, QE, fresh, nsteps, eta, idx, sgn, lab, weight, consistent, r0,
                         train_w, train_att, crit_kind, crit_op, crit_thresh, max_abs, logit_scale=1.0):
    """Up to ``nsteps`` full-batch GD steps of the explicit network, in place.

    WK, WQ (2, m, d), w (2, d): the weights; E (d, P); KE, QE (2, m, P): W E,
    recomputed here when ``fresh`` and kept equal to the weights' projections
    on return. Semantics of the reduced ``kernels.gd_advance``: before each
    step the criterion is checked at the current state; returns (steps_done,
    code, loss) with code 0 all done, 1 criterion holds, 2 non-finite, 3 an
    entry of the projected state (S, A, B, w~) would exceed ``max_abs``; with
    codes 2 and 3 the refused step is undone (attention weights to rounding,
    their projections KE, QE exactly). ``logit_scale``: the factor c in
    front of the attention logits (softmax_scale; the network sees c S and
    dLoss/dS = c G).
    """
    H, m, d = WK.shape
    P = E.shape[1]
    n = idx.shape[0]
    nb = (m + BLOCK - 1) // BLOCK
    ET = np.ascontiguousarray(E.T)
    if fresh:
        project_rows(WK, ET, KE)
        project_rows(WQ, ET, QE)
    S = np.empty((H, P, P))
    gram(KE, QE, S)
    Af = np.empty((H, P, P))
    gram(KE, KE, Af)
    Bf = np.empty((H, P, P))
    gram(QE, QE, Bf)
    dA = np.empty((H, P))
    dB = np.empty((H, P))
    for h in range(H):
        for a in range(P):
            dA[h, a] = Af[h, a, a]
            dB[h, a] = Bf[h, a, a]
    wt = np.empty((H, P))
    project_vec(w, E, wt)
    u = np.empty((n, 2))
    margin = np.empty(n)
    G = np.empty((H, P, P))
    dwt = np.empty((H, P))
    KEn = np.empty_like(KE)
    QEn = np.empty_like(QE)
    Sp = np.empty((H * nb, P, P))
    dAp = np.empty((H * nb, P))
    dBp = np.empty((H * nb, P))
    uK = np.empty((H * nb, P))
    uQ = np.empty((H * nb, P))
    Sn = np.empty((H, P, P))
    dAn = np.empty((H, P))
    dBn = np.empty((H, P))
    wn = np.empty_like(w)
    wtn = np.empty((H, P))
    Sc = np.empty((H, P, P))
    k = 0
    while True:
        # one call site of network (each call site is compiled into this kernel again)
        Sg = S
        if logit_scale != 1.0:
            for h in range(H):
                for a in range(P):
                    for b in range(P):
                        Sc[h, a, b] = logit_scale * S[h, a, b]
            Sg = Sc
        loss = network(Sg, wt, idx, sgn, lab, weight, r0, u, margin, G, dwt)
        if logit_scale != 1.0:
            for h in range(H):
                for a in range(P):
                    for b in range(P):
                        G[h, a, b] *= logit_scale
        if not np.isfinite(loss):
            return k, 2, loss
        if crit_kind != 0:
            c = criterion(crit_kind, loss, margin, consistent, dwt, E)
            if (crit_op > 0 and c >= crit_thresh) or (crit_op < 0 and c <= crit_thresh):
                return k, 1, loss
        if k == nsteps:
            return k, 0, loss
        if train_att:
            update_rows(WK, WQ, E, ET, KE, QE, G, eta, KEn, QEn, Sp, dAp, dBp, uK, uQ)
            _sum_blocks(Sp, dAp, dBp, nb, Sn, dAn, dBn)
        else:
            _copy3(Sn, S)
            _copy2(dAn, dA)
            _copy2(dBn, dB)
        if train_w:
            for h in range(H):
                for x in range(d):
                    gx = 0.0
                    for a in range(P):
                        gx += E[x, a] * dwt[h, a]
                    wn[h, x] = w[h, x] - eta * gx
            project_vec(wn, E, wtn)
        else:
            _copy2(wn, w)
            _copy2(wtn, wt)
        code = _check(Sn, dAn, dBn, wtn, max_abs)
        if code != 0:
            if train_att:  # undo: U was computed from KE, QE, which still hold the old projections
                update_rows(WK, WQ, E, ET, KE, QE, G, -eta, KEn, QEn, Sp, dAp, dBp, uK, uQ)
            return k, code, loss
        if train_att:
            _copy3(KE, KEn)
            _copy3(QE, QEn)
            _copy3(S, Sn)
            _copy2(dA, dAn)
            _copy2(dB, dBn)
        if train_w:
            _copy2(w, wn)
            _copy2(wt, wtn)
        k += 1


@njit(cache=True)
def loss_and_gradients(WK, WQ, w, E, idx, sgn, lab, weight, r0, logit_scale=1.0):
    """(loss, dLoss/dW_K, dLoss/dW_Q (2, m, d), dLoss/dw (2, d), margin (n,), u (n, 2), dw~ (2, P))
    of the explicit network (allocating; for the flow right-hand side and tests); logits times
    ``logit_scale``."""
    H, m, d = WK.shape
    P = E.shape[1]
    n = idx.shape[0]
    KE = np.empty((H, m, P))
    QE = np.empty((H, m, P))
    ET = np.ascontiguousarray(E.T)
    project_rows(WK, ET, KE)
    project_rows(WQ, ET, QE)
    S = np.empty((H, P, P))
    gram(KE, QE, S)
    wt = np.empty((H, P))
    project_vec(w, E, wt)
    u = np.empty((n, 2))
    margin = np.empty(n)
    G = np.empty((H, P, P))
    dwt = np.empty((H, P))
    for h in range(H):
        for a in range(P):
            for b in range(P):
                S[h, a, b] *= logit_scale
    loss = network(S, wt, idx, sgn, lab, weight, r0, u, margin, G, dwt)
    for h in range(H):
        for a in range(P):
            for b in range(P):
                G[h, a, b] *= logit_scale
    gK = np.zeros((H, m, d))
    gQ = np.zeros((H, m, d))
    gw = np.zeros((H, d))
    uk = np.empty(P)
    uq = np.empty(P)
    for h in range(H):
        for r in range(m):
            for a in range(P):
                sk = 0.0
                sq = 0.0
                for b in range(P):
                    sk += G[h, a, b] * QE[h, r, b]
                    sq += G[h, b, a] * KE[h, r, b]
                uk[a] = sk
                uq[a] = sq
            for x in range(d):
                for a in range(P):
                    gK[h, r, x] += uk[a] * E[x, a]
                    gQ[h, r, x] += uq[a] * E[x, a]
        for x in range(d):
            for a in range(P):
                gw[h, x] += E[x, a] * dwt[h, a]
    return loss, gK, gQ, gw, margin, u, dwt


# ----------------------------------------------------------------- setup


def default_d(K: int) -> int:
    """Default ambient dimension: 2K + 1 (one direction orthogonal to every
    feature, so that the frozen orthogonal part of the weights is exercised)."""
    return 2 * K + 1


def _check_cfg(cfg: MixtureConfig, d: int | None) -> int:
    if cfg.width is None:
        raise ConfigError("width: the particle sampler needs a finite width m (an integer >= 1), got infinite")
    if cfg.dense:
        raise ConfigError("feature_gram/n_train/n_neurons: the particle sampler covers the paper's data "
                          "(orthonormal features, one neuron per head); use the default for these fields")
    if cfg.method != "gd":
        raise ConfigError(f"method: the particle sampler runs gradient descent only (method = gd), got {cfg.method!r}")
    d = default_d(cfg.K) if d is None else d
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < cfg.P:
        raise ConfigError(f"d: the ambient dimension must be an integer >= 2K = {cfg.P}, got {d!r}")
    return int(d)


def streams(seed: int):
    """The four random streams: (attention M, neurons, orthogonal parts, embedding),
    children 0..3 of ``SeedSequence(seed)``; 0 and 1 are ``init.py``'s."""
    return [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(4)]


def initial_particles(cfg: MixtureConfig, d: int | None = None, embed_seed: int | None = None):
    """(E (d, P), W_K (2, m, d), W_Q (2, m, d), w (2, d)) for a finite-width config
    (see the module docstring for the streams); their projection equals
    ``init.initial_state(cfg)`` to rounding."""
    d = _check_cfg(cfg, d)
    K, P, m = cfg.K, cfg.P, cfg.width
    r_att, _, r_perp, r_emb = streams(cfg.seed)
    E = embedding(K, d, r_emb if embed_seed is None else np.random.default_rng(embed_seed))
    E = np.ascontiguousarray(E)
    scale = cfg.omega / np.sqrt(m)
    WK = np.empty((2, m, d))
    WQ = np.empty((2, m, d))
    for h in range(2):  # the order of init.attention_init: head 0 M_K, M_Q, head 1 M_K, M_Q
        WK[h] = (r_att.standard_normal((m, P)) * scale) @ E.T
        WQ[h] = (r_att.standard_normal((m, P)) * scale) @ E.T
    if d > P:
        for h in range(2):
            for W in (WK, WQ):
                Z = r_perp.standard_normal((m, d)) * scale
                W[h] += Z - (Z @ E) @ E.T
    w = neuron_init(K, cfg.neuron_init, cfg.seed) @ E.T
    return E, WK, WQ, np.ascontiguousarray(w)


def projected_state(E, WK, WQ, w) -> np.ndarray:
    """The reduced flat state of explicit weights: S, A, B, w~ per head, packed
    with ``kernels.pack`` (the reduced layout; nothing else of kernels is used)."""
    P = E.shape[1]
    KE = np.empty(WK.shape[:2] + (P,))
    QE = np.empty(WQ.shape[:2] + (P,))
    ET = np.ascontiguousarray(E.T)
    project_rows(WK, ET, KE)
    project_rows(WQ, ET, QE)
    return _pack_projection(E, KE, QE, w)


def _pack_projection(E, KE, QE, w) -> np.ndarray:
    P = E.shape[1]
    S = np.empty((2, P, P))
    A = np.empty((2, P, P))
    B = np.empty((2, P, P))
    gram(KE, QE, S)
    gram(KE, KE, A)
    gram(QE, QE, B)
    wt = np.empty((2, P))
    project_vec(w, E, wt)
    return kernels.pack(S, A, B, wt)


def auto_threads(m: int, d: int, P: int) -> int:
    """Threads for the passes over the rows: 1 for small problems (m (d + P) <
    ``PAR_MIN``), else numba's current setting (``NUMBA_NUM_THREADS``)."""
    return 1 if m * (d + P) < PAR_MIN else numba.config.NUMBA_NUM_THREADS


@contextmanager
def _threads(n: int):
    old = numba.get_num_threads()
    numba.set_num_threads(max(1, min(int(n), numba.config.NUMBA_NUM_THREADS)))
    try:
        yield
    finally:
        numba.set_num_threads(old)


# ----------------------------------------------------------------- systems


class ParticleSystem:
    """The explicit network as a ``meanfield.core.integrate`` system on a FLAT
    particle state ``y = [W_K (2, m, d), W_Q (2, m, d), w (2, d)]`` (row-major;
    see :meth:`state` / :meth:`views`). ``mode`` is ``(train_w, train_att)``.
    Fine for small m (every record copies the whole state); for real runs
    :class:`ProjectedParticles` keeps the weights and exposes their projection.
    ``logit_scale`` c (softmax_scale): the logits are c X_i^T W_K^T W_Q X_l, and
    the projection reports c S, c A, c B (the variables of the reduced run,
    ``meanfield.mixture.softmax_scale``)."""

    def __init__(self, samples: SampleSet, E: np.ndarray, m: int, relu_prime_at_zero: float = 1.0,
                 max_abs: float = math.inf, threads: int | None = None, logit_scale: float = 1.0):
        self.samples = samples
        self.logit_scale = float(logit_scale)
        self.E = np.ascontiguousarray(E, dtype=np.float64)
        self.d, self.P = self.E.shape
        self.m = int(m)
        self.relu_prime_at_zero = float(relu_prime_at_zero)
        self.max_abs = float(max_abs)
        #: numba threads for the passes over the rows (None: :func:`auto_threads`)
        self.threads = auto_threads(self.m, self.d, self.P) if threads is None else int(threads)

    @property
    def size(self) -> int:
        return 4 * self.m * self.d + 2 * self.d

    def state(self, WK, WQ, w) -> np.ndarray:
        return np.concatenate([np.ravel(WK), np.ravel(WQ), np.ravel(w)]).astype(np.float64)

    def views(self, y):
        """(W_K, W_Q, w) views of a flat state."""
        n = 2 * self.m * self.d
        return (y[:n].reshape(2, self.m, self.d), y[n:2 * n].reshape(2, self.m, self.d),
                y[2 * n:].reshape(2, self.d))

    def project(self, y) -> np.ndarray:
        with _threads(self.threads):
            return self._scaled(projected_state(self.E, *self.views(np.ascontiguousarray(y))))

    def _scaled(self, z: np.ndarray) -> np.ndarray:
        if self.logit_scale != 1.0:
            z[: 6 * self.P * self.P] *= self.logit_scale
        return z

    def _advance(self, WK, WQ, w, KE, QE, fresh, nsteps, eta, mode, criterion):
        s = self.samples
        kind, op, thr = criterion_args(criterion)
        with _threads(self.threads):
            done, code, _ = gd_advance_particles(WK, WQ, w, self.E, KE, QE, fresh, int(nsteps), float(eta),
                                                 s.idx, s.sgn, s.y, s.weight, s.consistent,
                                                 self.relu_prime_at_zero, bool(mode[0]), bool(mode[1]), kind, op,
                                                 thr, self.max_abs, self.logit_scale)
        return int(done), int(code)

    def gd_advance(self, y, nsteps, eta, mode, criterion):
        WK, WQ, w = self.views(y)
        KE = np.empty((2, self.m, self.P))
        QE = np.empty((2, self.m, self.P))
        return self._advance(WK, WQ, w, KE, QE, True, nsteps, eta, mode, criterion)

    def _lg(self, y):
        s = self.samples
        WK, WQ, w = self.views(np.ascontiguousarray(y, dtype=np.float64))
        with _threads(self.threads):
            return loss_and_gradients(WK, WQ, w, self.E, s.idx, s.sgn, s.y, s.weight, self.relu_prime_at_zero,
                                      self.logit_scale)

    def rhs(self, y, mode):
        """Gradient flow: minus the gradient of the trained blocks."""
        loss, gK, gQ, gw, margin, u, dwt = self._lg(y)
        att = -np.concatenate([gK.ravel(), gQ.ravel()]) if mode[1] else np.zeros(4 * self.m * self.d)
        return np.concatenate([att, -gw.ravel() if mode[0] else np.zeros(2 * self.d)])

    def criterion_value(self, y, name):
        loss, gK, gQ, gw, margin, u, dwt = self._lg(y)
        return float(criterion(kernels.CRITERIA[name], loss, margin, self.samples.consistent, dwt, self.E))


class ProjectedParticles:
    """The explicit network as a ``meanfield.core.integrate`` system whose ``y`` is the
    PROJECTED reduced state: it holds the weights itself (``WK``, ``WQ``, ``w``,
    with their projections ``KE``, ``QE``) and :meth:`gd_advance` advances them
    and writes their projection into ``y``. So the shared :class:`GDMap` drives
    stages, criteria and the record grid exactly as for the reduced run, while
    records stay small. GD only: :meth:`rhs` raises NotImplementedError."""

    def __init__(self, psys: ParticleSystem, WK, WQ, w):
        self.psys = psys
        self.WK = np.ascontiguousarray(WK, dtype=np.float64)
        self.WQ = np.ascontiguousarray(WQ, dtype=np.float64)
        self.w = np.ascontiguousarray(w, dtype=np.float64)
        self.KE = np.empty((2, psys.m, psys.P))
        self.QE = np.empty((2, psys.m, psys.P))
        self._fresh = True

    @property
    def max_abs(self) -> float:
        return self.psys.max_abs

    @property
    def E(self) -> np.ndarray:
        return self.psys.E

    def projection(self) -> np.ndarray:
        """The reduced flat state of the held weights."""
        with _threads(self.psys.threads):
            if self._fresh:
                ET = np.ascontiguousarray(self.E.T)
                project_rows(self.WK, ET, self.KE)
                project_rows(self.WQ, ET, self.QE)
                self._fresh = False
            return self.psys._scaled(_pack_projection(self.E, self.KE, self.QE, self.w))

    def gd_advance(self, y, nsteps, eta, mode, criterion):
        out = self.psys._advance(self.WK, self.WQ, self.w, self.KE, self.QE, self._fresh, nsteps, eta, mode,
                                 criterion)
        self._fresh = False
        y[:] = self.projection()
        return out

    def rhs(self, y, mode):
        raise NotImplementedError("the particle sampler runs gradient descent only (method = gd)")

    def criterion_value(self, y, name):
        """Evaluated on the held weights (``y`` is their projection)."""
        return self.psys.criterion_value(self.psys.state(self.WK, self.WQ, self.w), name)


# ----------------------------------------------------------------- runs


def make_particles(cfg: MixtureConfig, d: int | None = None, embed_seed: int | None = None,
                   threads: int | None = None) -> ProjectedParticles:
    """The initialised particle system of a finite-width GD config (memory:
    about 32 m d bytes for the weights)."""
    d = _check_cfg(cfg, d)
    E, WK, WQ, w = initial_particles(cfg, d, embed_seed)
    from .run import samples_of

    samples = samples_of(cfg)  # group weights, label probability, label noise
    from .softmax_scale import logit_scale

    psys = ParticleSystem(samples, E, cfg.width, cfg.relu_prime_at_zero, cfg.max_abs, threads, logit_scale(cfg))
    return ProjectedParticles(psys, WK, WQ, w)


def run_particles(cfg: MixtureConfig, d: int | None = None, embed_seed: int | None = None,
                  monitor: integrate.Monitor | None = None, threads: int | None = None) -> integrate.Trajectory:
    """Train the explicit width-``cfg.width`` network in R^d (default 2K + 1) by
    full-batch GD with the stages and record grid of ``run.run(cfg)`` (the
    shared ``GDMap``, ``run.stages``, ``run.save_at``); returns the trajectory
    of PROJECTED reduced states (the reduced run's layout). ``cfg`` must have
    a finite width and method gd (else :class:`ConfigError`)."""
    system = make_particles(cfg, d, embed_seed, threads)
    y0 = system.projection()
    return _run.solver(cfg).solve(system, y0, _run.stages(cfg), _run.save_at(cfg), monitor)


def _attrs(cfg: MixtureConfig, d: int, embed_seed: int | None) -> dict:
    return {"particles": 1, "d": int(d), "width": int(cfg.width), "seed": int(cfg.seed),
            "embed_seed": -1 if embed_seed is None else int(embed_seed)}


def particles_to_file(cfg: MixtureConfig, out: str | Path, d: int | None = None, progress: bool = True,
                      embed_seed: int | None = None, checkpoint_s: float = 60.0, threads: int | None = None):
    """Run the particle sampler and write ``out`` in the mixture run format
    (``run.save``: system "mixture", recorded quantities from the shared
    observable function) with attrs particles = 1, d, width, seed, embed_seed
    (-1: E drawn from child 3 of SeedSequence(seed)). Progress on stderr and a
    checkpoint file (status "interrupted") every ``checkpoint_s`` seconds, as
    ``run.run_to_file``. Returns (trajectory, path)."""
    d = _check_cfg(cfg, d)
    attrs = _attrs(cfg, d, embed_seed)

    def ckpt(traj):
        _run.save(out, cfg, traj, status="interrupted",
                  message=f"checkpoint at step {traj.step[-1]}: the run was still going when this was written; "
                          f"if you read this, it ended early", extra_attrs=attrs)

    mon = integrate.Monitor(total=cfg.horizon, unit="step", quiet_s=2.0 if progress else math.inf,
                            checkpoint=ckpt, checkpoint_s=checkpoint_s, label="particles ")
    with mon:
        traj = run_particles(cfg, d, embed_seed, monitor=mon, threads=threads)
    path = _run.save(out, cfg, traj, extra_attrs=attrs)
    return traj, path
