"""The exact population dynamics of linear-attention heads on Gaussian prompts (``meanfield.engine.population``).

A description whose data are the ``icl_regression`` family without
``samples`` (``meanfield.engine.gaussian``) has no finite set of sequences:
its loss is the population loss (1/2) E[(yhat - y_q)^2] over Gaussian prompts,
in closed form through the moment tensors of :class:`~meanfield.engine.gaussian.Moments`.
:class:`PopulationSystem` replaces the engine's per-sequence kernels by that
closed form and keeps everything else: the state layout, the exact GD map and
the flow on the Gram blocks (``meanfield.engine.kernels.eng_update``), the
record grid, stages, criteria, run files.

The heads in the class (one line, exit 2, otherwise): linear attention, the
last position as the query, the query not a key (``query = "last"``,
``query_self = false``), one output read through a value vector (``value =
"linear"``: narrow w~; ``value = "matrix"``: the Gram block R = Q[r1, V]),
keys and queries separate (S = Q[K, Q], any width m and m = infinity) or
merged (narrow W~), any number of heads, squared loss. Head k predicts
a_k scale_k v_k^T G S_k z_q (G = (1/N) sum_i z_i z_i^T, z_q = (x_q, 0)); the
sum over heads is yhat = sum_{a,b,j} T_abj G_ab x_qj with

    T_abj = sum_k a_k scale_k v_k[a] S_k[b, j]      (j < d: the query's y-entry is 0),

and L = (1/2) (T . M T - 2 m . T + c0) with M = K4 (x) Lambda. The backward
pass: gT = M T - m, dL/dS_k[b, j] = a_k scale_k sum_a v_k[a] gT_abj (0 on the
unread column j = y), dL/dv_k[a] = a_k scale_k sum_{b,j} S_k[b, j] gT_abj,
dL/da_k = scale_k sum v_k[a] S_k[b, j] gT_abj; they land where the engine's
G = dLoss/dQ and narrow gradients live, and the engine's map does the rest.
Cost per step: P^4 d + P^2 d^2 + H P^2 d (M T as K4 times T Lambda), no sample.

The recorded ``margin`` of the single population "sequence" is -sqrt(2 L)
(minus the root-mean-square residual: the squared loss's margin -|f - y| in
the mean-square sense); ``u`` is 0.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..core import integrate
from ..core.activations import accept_step
from ..core.config import ConfigError
from . import kernels, lowrank
from .gaussian import check_heads, convention_attrs
from .packed import EngineSystem, pack
from .reduce import H_N, H_QOFF


# ------------------------------------------------------------------ kernels


@njit(cache=True)
def pop_loss_grads(y, hi, hf, P, d, K4, Lam, m, c0, grad, T, U, gT, G, gflat):
    """Population loss at state y; if ``grad``: G = dLoss/dQ (H, N, N) and the
    narrow / small gradients ``gflat`` (the engine's layout). Scratch:
    T, gT (P^2 d), U (P^2 d)."""
    H = hi.shape[0]
    n = P * P * d
    for i in range(n):
        T[i] = 0.0
    for k in range(H):
        if hi[k, 1] == 0:
            sb = hi[k, 8] + hi[k, 9] * hi[k, 7] + hi[k, 10]
            ss = hi[k, 7]
        else:
            sb = hi[k, 13]
            ss = P
        if hi[k, 4] == 2:
            vb = hi[k, 8] + hi[k, 12] * hi[k, 7] + hi[k, 11]
        else:
            vb = hi[k, 14]
        ak = hf[k, 1]
        if hi[k, 15] >= 0:
            ak = y[hi[k, 15]]
        ak *= hf[k, 0]
        for a in range(P):
            va = ak * y[vb + a]
            if va == 0.0:
                continue
            for b in range(P):
                base = (a * P + b) * d
                for j in range(d):
                    T[base + j] += va * y[sb + b * ss + j]
    # U = T Lambda (over j), gT = K4 U - m
    PP = P * P
    for r in range(PP):
        for j in range(d):
            acc = 0.0
            for l in range(d):
                acc += T[r * d + l] * Lam[l, j]
            U[r * d + j] = acc
    for r in range(PP):
        for j in range(d):
            gT[r * d + j] = -m[r * d + j]
    for r in range(PP):
        for c in range(PP):
            kk = K4[r, c]
            if kk == 0.0:
                continue
            for j in range(d):
                gT[r * d + j] += kk * U[c * d + j]
    loss = c0
    for i in range(n):
        loss += T[i] * (gT[i] - m[i])
    loss *= 0.5
    if not grad:
        return loss
    for i in range(gflat.shape[0]):
        gflat[i] = 0.0
    for k in range(G.shape[0]):
        for a in range(G.shape[1]):
            for b in range(G.shape[2]):
                G[k, a, b] = 0.0
    for k in range(H):
        sep = hi[k, 1] == 0
        N = hi[k, 7]
        if sep:
            sb = hi[k, 8] + hi[k, 9] * N + hi[k, 10]
            ss = N
        else:
            sb = hi[k, 13]
            ss = P
        mat = hi[k, 4] == 2
        if mat:
            vb = hi[k, 8] + hi[k, 12] * N + hi[k, 11]
        else:
            vb = hi[k, 14]
        sg = hf[k, 1]
        if hi[k, 15] >= 0:
            sg = y[hi[k, 15]]
        sc = hf[k, 0]
        ak = sg * sc
        da = 0.0
        for a in range(P):
            va = y[vb + a]
            dv = 0.0
            for b in range(P):
                base = (a * P + b) * d
                for j in range(d):
                    g = gT[base + j]
                    s = y[sb + b * ss + j]
                    dv += s * g
                    if va != 0.0:
                        if sep:
                            G[k, hi[k, 9] + b, hi[k, 10] + j] += ak * va * g
                        else:
                            gflat[hi[k, 13] + b * P + j] += ak * va * g
            da += va * dv
            if mat:
                G[k, hi[k, 12], hi[k, 11] + a] += ak * dv
            else:
                gflat[hi[k, 14] + a] += ak * dv
        if hi[k, 15] >= 0:
            gflat[hi[k, 15]] += sc * da
    return loss


@njit(cache=True)
def pop_gd_advance(y, nsteps, eta, mode, hi, hf, Gr, grp, Gam, P, d, K4, Lam, m, c0, crit_kind, crit_op, crit_thresh,
                   max_abs, T, U, gT, G, gflat, margin, consistent, Xm, Ym, tmp, new, rank_m, col_n, col_off,
                   basis, have):
    """Up to ``nsteps`` exact GD steps of the population loss, in place (the
    engine's map ``kernels.eng_update``; criterion checked before each step;
    at finite width ``rank_m`` > 0 each step's Gram blocks projected back onto
    rank <= m, ``meanfield.engine.lowrank``).
    Returns (steps done, code, loss): 0 done, 1 criterion, 2 non-finite, 3 above max_abs."""
    k = 0
    while True:
        loss = pop_loss_grads(y, hi, hf, P, d, K4, Lam, m, c0, True, T, U, gT, G, gflat)
        if not math.isfinite(loss):
            return k, 2, loss
        if crit_kind != 0:
            margin[0] = -math.sqrt(max(2.0 * loss, 0.0))
            c = kernels.eng_criterion(crit_kind, loss, margin, consistent, hi, hf, Gam, gflat)
            if (crit_op > 0 and c >= crit_thresh) or (crit_op < 0 and c <= crit_thresh):
                return k, 1, loss
        if k == nsteps:
            return k, 0, loss
        kernels.eng_update(y, new, hi, hf, Gr, grp, Gam, G, gflat, eta, mode, True, Xm, Ym, tmp)
        code = accept_step(y, new, max_abs)
        if code != 0:
            return k, code, loss
        if rank_m > 0:
            lowrank.project_rank(y, hi, rank_m, col_n, col_off, basis, have)
        k += 1


# ------------------------------------------------------------------ the system


class PopulationSystem(EngineSystem):
    """The engine's system (``meanfield.core.integrate``) on the exact population
    loss of an ``icl_regression`` description (module docstring).

    Parameters
    ----------
    desc : Description
        A description whose ``data.extra["population"]`` holds the law.

    Example
    -------
    >>> import meanfield.engine as me
    >>> desc = me.load("meanfield/models/icl_zfb.toml", steps=10)
    >>> sys = PopulationSystem(desc)
    >>> loss, G, gflat, margin, u = sys.loss_and_grads(me.reduce.initial_state(desc))
    """

    def __init__(self, desc):
        check_heads(desc, exact=True)
        super().__init__(pack(desc), desc.training.max_abs)
        pop = desc.data.extra["population"]
        self.law = pop["law"]
        self.N_test = pop.get("N_test")
        self.mom = self.law.moments()
        P, d = self.law.P, self.law.d
        self.P, self.d = P, d
        self._arrays = self.moment_arrays(self.mom)
        lay = self.pk.lay
        n = P * P * d
        self._T, self._U, self._gT = np.zeros(n), np.zeros(n), np.zeros(n)
        self._G = np.zeros((len(lay.heads), lay.Nmax, lay.Nmax))
        self._gflat = np.zeros(lay.size)
        self._margin = np.zeros(1)
        self._Xm = np.zeros((lay.Nmax, lay.Nmax))
        self._Ym = np.zeros((lay.Nmax, lay.Nmax))
        self._tmp = np.zeros((P, P))
        self._new = np.zeros(lay.size)
        self._cons = np.ones(1, dtype=np.bool_)
        #: the width whose rank the GD map and the flow's steps keep (0: none; meanfield.engine.lowrank)
        self.rank_m = lowrank.width_to_hold(desc, lay)

    def hold_manifold(self, y) -> bool:
        """Put ``y``'s Gram blocks back on rank <= ``rank_m`` in place (``meanfield.engine.lowrank``;
        the flow solvers' hook, called after every accepted step); whether anything was done."""
        if self.rank_m <= 0:
            return False
        lowrank.project(y, self.pk.lay, self.rank_m, *self._rank_scratch())
        return True

    def _rank_scratch(self):
        """The projection's warm start (``lowrank.scratch``), kept between calls; a stale one only costs a
        full eigen-decomposition (the Ritz test refuses it)."""
        if getattr(self, "_basis", None) is None:
            self._basis = lowrank.scratch(self.pk.lay, max(self.rank_m, 1))
        return self._basis

    @staticmethod
    def moment_arrays(mom):
        """(K4 (P^2, P^2), Lambda, m (P^2 d,), c0) as the kernels take them."""
        P, d = mom.law.P, mom.law.d
        return (np.ascontiguousarray(mom.K4.reshape(P * P, P * P)), np.ascontiguousarray(mom.law.Lambda, float),
                np.ascontiguousarray(mom.m.reshape(-1)), float(mom.c0))

    def _lg(self, y, grad=True, arrays=None):
        lay = self.pk.lay
        K4, Lam, m, c0 = self._arrays if arrays is None else arrays
        return pop_loss_grads(np.require(y, np.float64, ["C"]), lay.hi, lay.hf, self.P, self.d, K4, Lam, m, c0, grad,
                              self._T, self._U, self._gT, self._G, self._gflat)

    def loss_and_grads(self, y):
        loss = self._lg(y)
        margin = np.array([-math.sqrt(max(2.0 * loss, 0.0))])
        u = np.zeros((1, len(self.pk.lay.heads), self.pk.R))
        return loss, self._G.copy(), self._gflat.copy(), margin, u

    def loss(self, y, N: int | None = None, Lambda=None) -> float:
        """The population loss of state ``y``, at another context length ``N``
        or input covariance ``Lambda`` if given (test-time shifts)."""
        law = self.law
        if N is not None:
            law = law.with_N(N)
        if Lambda is not None:
            law = law.with_cov(Lambda)
        arrays = self._arrays if law is self.law else self.moment_arrays(law.moments())
        return float(self._lg(y, grad=False, arrays=arrays))

    def gd_advance(self, y, nsteps, eta, mode, criterion):
        lay = self.pk.lay
        kind, op, thr = integrate.criterion_args(criterion, kernels.CRITERIA)
        if kind in (2, 3):
            raise ConfigError("criterion: the population has no consistent/inconsistent sequences; give loss, "
                              "min_margin or grad_w")
        K4, Lam, m, c0 = self._arrays
        done, code, _ = pop_gd_advance(y, int(nsteps), float(eta), int(mode), lay.hi, lay.hf, lay.Gr, lay.grp,
                                       self.pk.Gam, self.P, self.d, K4, Lam, m, c0, kind, op, thr,
                                       float(self.max_abs), self._T, self._U, self._gT, self._G, self._gflat,
                                       self._margin, self._cons, self._Xm, self._Ym, self._tmp, self._new,
                                       self.rank_m, H_N, H_QOFF, *self._rank_scratch())
        return int(done), int(code)

    def rhs(self, y, mode):
        lay = self.pk.lay
        self._lg(y)
        out = np.empty_like(y)
        kernels.eng_update(np.require(y, np.float64, ["C"]), out, lay.hi, lay.hf, lay.Gr, lay.grp, self.pk.Gam,
                           self._G, self._gflat, 1.0, int(mode), False, self._Xm, self._Ym, self._tmp)
        return out

    def criterion_value(self, y, name):
        loss, G, gflat, margin, u = self.loss_and_grads(y)
        lay = self.pk.lay
        return float(kernels.eng_criterion(kernels.CRITERIA[name], loss, margin, self._cons, lay.hi, lay.hf,
                                           self.pk.Gam, gflat))

    def T(self, y) -> np.ndarray:
        """The prediction tensor T (P, P, d) of state y (yhat = sum T_abj G_ab x_qj)."""
        self._lg(y, grad=False)
        return self._T.reshape(self.P, self.P, self.d).copy()

    def extra_datasets(self, run) -> tuple[dict, dict]:
        """(datasets, attributes) a run file adds: ``loss_min`` (the smallest loss
        of any prediction linear in G (x) x_q) and, with N_test, ``loss_test`` (T,)."""

        data = {}
        attrs = convention_attrs(self.law, {"N_test": self.N_test, "samples": 0, "seed": 0}, exact=True)
        attrs["loss_min"] = self.mom.minimum_loss()
        if self.rank_m > 0:
            attrs["rank_projection"] = (f"every step, each head's Gram state projected onto the positive "
                                        f"semi-definite matrices of rank <= {self.rank_m} (the width; "
                                        "meanfield.engine.lowrank, docs/engine.md 'Finite width')")
        if self.N_test:
            data["loss_test"] = np.array([self.loss(v, N=self.N_test) for v in run.y])
            attrs["loss_min_test"] = self.law.with_N(self.N_test).moments().minimum_loss()
        return data, attrs
