"""Trainable token embeddings: the closed state (K, E) and its exact GD map (``meanfield.engine.embeddings``).

With ``[dictionary] trainable = true`` the token vectors e_1..e_P (the columns
of E, d x P, d = ``[dictionary] ambient``, default P) are parameters. The wide
weights M_a (m x d_a; d_a = d for a matrix acting on tokens, 1 for a read-out
vector) are then read through U_a = M_a E, whose step needs M_b M_a^T, which
no Gram of the U sees; but the loss still reads the hidden index only through
inner products, so the Gram over the *ambient* index closes (derivation:
``docs/engine.md``, "Trainable embeddings"). Per head, with M = [M_K, M_Q,
M_V, r_1..r_C] (m x D_h, D_h = sum d_a) and Eb = blockdiag(E or 1 per object)
(D_h x N_h), the state is

* K_h = M^T M (D_h x D_h): the wide weights' Gram in the ambient space (at
  m = inf its expectation blockdiag(omega_a^2 I_{d_a}); at finite m the
  Gram of the sampled weights);
* E (d x P, shared by the heads), the merged W (d x d), the value vectors w
  (C n x d) in ambient coordinates, the signs a;

and the engine's reduced state is Q_h = Eb^T K_h Eb, W~ = E^T W E,
w~ = E^T w: the generic kernels give the loss and G = dLoss/dQ,
g = dLoss/d(narrow) from it, and with Ghat = G + G^T, X = Eb Ghat Eb^T and
H the ambient diagonal of the wide objects' rates (0 when untrained),

    K' = (I - H X) K (I - X H)                      (M' = M (I - X H), exactly)
    E' = E - eta_E [sum_a (K Eb Ghat)_{a a} + W E G_W^T + W^T E G_W + w^T g]
    W' = W - eta_keys E G_W E^T,  w' = w - eta_values lr g E^T,  a' = a - eta_signs g_a

(all from the same state: one simultaneous GD step). The state has
sum_h D_h^2 + d P + ... numbers, independent of m; m = inf is exact.
Embeddings train in every stage at the rate of the group ``embeddings``
(``meanfield.engine.rates``; 0 freezes them).

Refused (one line naming the field, :func:`check`): positions (absolute or
relative, and masks: not derived here), ``init_gram`` and ``init_from`` (they
give Q, not the ambient K), normalised GD, a report map, a data family.
"""

from __future__ import annotations

import math

import numpy as np

from ..core import integrate
from ..core.config import ConfigError
from . import kernels
from .objects import STAGE_SHIFT, Description
from .packed import EngineSystem, pack
from .reduce import F_LR, H_AOFF, H_BL, H_BOFF, H_N, H_QOFF, H_VOFF, H_WOFF, _scale, _streams, initial_state

#: the rate group and the stage bit of each wide object (by its name's first letter)
_WIDE_GROUP = {"K": ("keys", 1), "Q": ("queries", 1), "V": ("values", 2), "r": ("readout", 4)}


def check(desc: Description) -> None:
    """One-line refusals of what trainable embeddings do not support.

    Parameters
    ----------
    desc : Description
        A description with ``dictionary.trainable``.

    Returns
    -------
    None

    Examples
    --------
    >>> check(desc)   # doctest: +SKIP
    """
    dic = desc.dictionary
    why = "the ambient Gram K of the wide weights is the state, which "
    if dic.report is not None:
        raise ConfigError("dictionary.trainable: not with a report map (the reported coordinates assume a fixed E)")
    if "population" in desc.data.extra:
        raise ConfigError("dictionary.trainable: not with a data family (its population loss is for fixed tokens)")
    for i, h in enumerate(desc.model.heads):
        if h.mask != "none" or h.rpe:
            raise ConfigError(f"heads[{i}].{'mask' if h.mask != 'none' else 'rpe'}: not with dictionary.trainable "
                              "(positions with trainable embeddings are not derived here)")
        if h.init_gram:
            raise ConfigError(f"heads[{i}].init_gram: not with dictionary.trainable ({why}Gram blocks of Q do not "
                              "determine)")
    if desc.init.init_from is not None:
        raise ConfigError(f"init_from: not with dictionary.trainable ({why}a run file's Q does not determine)")
    if desc.training.normalise != "none":
        raise ConfigError("normalise: not with dictionary.trainable (normalised GD of the embeddings is not derived)")


def describe_state(desc: Description, lay) -> dict:
    """The ambient state of trainable embeddings for ``meanfield model derive`` (JSON-able).

    Parameters
    ----------
    desc : Description
    lay : Layout
        The reduced layout (``meanfield.engine.reduce.layout``).

    Returns
    -------
    dict
        ambient d, the state size and, per head, the ambient width D_h of its K_h.

    Examples
    --------
    >>> describe_state(desc, layout(desc))["ambient"]   # doctest: +SKIP
    2
    """
    el = EmbeddingLayout(desc, lay)
    return {"ambient": el.d, "state_size": el.size, "K": {h.name: el.heads[k]["D"] for k, h in
                                                        enumerate(desc.model.heads)},
            "gd_map": "K' = (I - H X) K (I - X H), X = Eb Ghat Eb^T; E' = E - eta_E [sum_a (K Eb Ghat)_aa + "
                      "W E G_W^T + W^T E G_W + w^T g]; W' = W - eta E G_W E^T; w' = w - eta lr g E^T",
            "reduced": "Q = Eb^T K Eb, W~ = E^T W E, w~ = E^T w, Gamma = E^T E"}


class EmbeddingLayout:
    """Offsets of the ambient state (module docstring): per head K_h, W, w, a, b; then E."""

    def __init__(self, desc: Description, lay):
        P = lay.P
        d = desc.dictionary.ambient or P
        self.P, self.d = P, d
        self.heads = []
        off = 0
        for k, objs in enumerate(lay.objects):
            amb = []
            start = 0
            for name, s, w, g in objs:
                da = d if w == P else 1
                amb.append((name, s, w, start, da, g))
                start += da
            h = {"objects": amb, "D": start, "K": off}
            off += start * start
            if lay.hi[k, H_WOFF] >= 0:
                h["W"] = off
                off += d * d
            if lay.hi[k, H_VOFF] >= 0:
                rows = desc.model.heads[k].outputs * desc.model.heads[k].n_neurons
                h["w"], h["rows"] = off, rows
                off += rows * d
            if lay.hi[k, H_AOFF] >= 0:
                h["a"] = off
                off += 1
            if lay.hi[k, H_BOFF] >= 0:
                h["b"], h["nb"] = off, 2 * int(lay.hi[k, H_BL]) + 1
                off += h["nb"]
            self.heads.append(h)
        self.E = off
        self.size = off + d * P

    def E_of(self, y):
        return y[..., self.E:self.E + self.d * self.P].reshape(y.shape[:-1] + (self.d, self.P))

    def Eb(self, E, k):
        """blockdiag(E or 1 per object of head k) (D_h x N_h)."""
        h = self.heads[k]
        N = sum(o[2] for o in h["objects"])
        out = np.zeros((h["D"], N))
        for name, s, w, a, da, g in h["objects"]:
            out[a:a + da, s:s + w] = E if w == self.P else 1.0
        return out


def initial_weights(desc: Description, lay=None):
    """The explicit initial weights of a trainable-embedding run at finite width m:
    (E0, [M_h (m x D_h)], narrow) with E0 = [chol(Gamma)^T; 0] (d x P) and M_h's
    object columns drawn as ``reduce.initial_weights`` draws them (the first
    stream, head by head, object by object, standard_normal((m, d_a)) omega_a /
    sqrt(m)); at d = P these are exactly the fixed-dictionary run's U_a = M_a E0.

    Parameters
    ----------
    desc : Description
    lay : Layout or None

    Returns
    -------
    tuple (numpy.ndarray, list of numpy.ndarray, numpy.ndarray)
        E0, the per-head wide weights, and the ambient initial state (:func:`ambient_initial`).

    Examples
    --------
    >>> E0, M, y0 = initial_weights(desc)   # doctest: +SKIP
    """
    lay = lay or pack(desc).lay
    el = EmbeddingLayout(desc, lay)
    m = desc.init.width
    if m is None:
        raise ValueError("initial_weights: only at finite width (init.width = m)")
    rng, _ = _streams(desc.init.seed)
    Ms = []
    for h in el.heads:
        cols = [rng.standard_normal((m, da)) * (_scale(desc.init, name, g) / np.sqrt(m))
                for name, s, w, a, da, g in h["objects"]]
        Ms.append(np.concatenate(cols, axis=1) if cols else np.zeros((m, 0)))
    y = ambient_initial(desc, lay, Ms)
    return el.E_of(y).copy(), Ms, y


def ambient_initial(desc: Description, lay, Ms=None) -> np.ndarray:
    """The ambient initial state: K_h = M_h^T M_h (``Ms`` given) or its m = inf
    expectation blockdiag(omega_a^2 I); E0; the narrow values of the reduced
    initial state mapped to the smallest ambient ones (W = E0^{+T} W~ E0^+,
    w = E0^{+T} w~, E0^+ = Gamma^{-1} E0^T).

    Parameters
    ----------
    desc : Description
    lay : Layout
        The reduced layout.
    Ms : list of numpy.ndarray or None
        Per head the explicit wide weights (m x D_h); None: infinite width.

    Returns
    -------
    numpy.ndarray
        The flat ambient state (:class:`EmbeddingLayout`).

    Examples
    --------
    >>> y0 = ambient_initial(desc, pack(desc).lay)   # doctest: +SKIP
    """
    el = EmbeddingLayout(desc, lay)
    P, d = el.P, el.d
    G = desc.dictionary.Gamma
    E0 = np.zeros((d, P))
    E0[:P] = np.linalg.cholesky(G).T
    Ep = np.linalg.solve(G, E0.T)  # P x d
    yr = initial_state(desc, lay)
    y = np.zeros(el.size)
    for k, h in enumerate(el.heads):
        D = h["D"]
        if Ms is not None:
            K = Ms[k].T @ Ms[k]
        else:
            K = np.zeros((D, D))
            for name, s, w, a, da, g in h["objects"]:
                K[a:a + da, a:a + da] = _scale(desc.init, name, g) ** 2 * np.eye(da)
        y[h["K"]:h["K"] + D * D] = K.ravel()
        if "W" in h:
            o = int(lay.hi[k, H_WOFF])
            y[h["W"]:h["W"] + d * d] = (Ep.T @ yr[o:o + P * P].reshape(P, P) @ Ep).ravel()
        if "w" in h:
            o, rows = int(lay.hi[k, H_VOFF]), h["rows"]
            y[h["w"]:h["w"] + rows * d] = (yr[o:o + rows * P].reshape(rows, P) @ Ep).ravel()
        if "a" in h:
            y[h["a"]] = yr[int(lay.hi[k, H_AOFF])]
        if "b" in h:
            o = int(lay.hi[k, H_BOFF])
            y[h["b"]:h["b"] + h["nb"]] = yr[o:o + h["nb"]]
    y[el.E:] = E0.ravel()
    return y


class EmbeddingSystem(EngineSystem):
    """The exact dynamics of trainable embeddings for ``meanfield.core.integrate``: its
    states are ambient (:class:`EmbeddingLayout`); :meth:`reduce` maps them to the
    engine's reduced layout, on which :meth:`loss_and_grads` (the kernels) works."""

    def __init__(self, desc: Description):
        from .rates import RATE_GROUPS, has_rates, stage_base_eta, stage_group_rates

        pk = pack(desc)
        super().__init__(pk, desc.training.max_abs, None)
        self.desc = desc
        self.el = EmbeddingLayout(desc, pk.lay)
        tr = desc.training
        if has_rates(tr):
            self.rho = []
            for st in tr.stages:
                base = stage_base_eta(tr, st)
                r = stage_group_rates(tr, st)
                self.rho.append({g: (r[g] / base if base > 0 else 0.0) for g in RATE_GROUPS})
        else:
            self.rho = None
        self.size = self.el.size

    def initial_state(self) -> np.ndarray:
        """The ambient initial state (finite width: the sampled weights' Gram)."""
        if self.desc.init.width is not None:
            return initial_weights(self.desc, self.pk.lay)[2]
        return ambient_initial(self.desc, self.pk.lay)

    def reduce(self, y) -> np.ndarray:
        """Ambient state(s) (..., size) -> the engine's reduced state(s) (..., lay.size)."""
        y = np.asarray(y, dtype=np.float64)
        if y.ndim == 2:
            return np.stack([self.reduce(v) for v in y]) if len(y) else np.empty((0, self.pk.lay.size))
        lay, el = self.pk.lay, self.el
        P = el.P
        E = el.E_of(y)
        out = np.zeros(lay.size)
        for k, h in enumerate(el.heads):
            N, D = int(lay.hi[k, H_N]), h["D"]
            if N:
                Eb = el.Eb(E, k)
                Q = Eb.T @ y[h["K"]:h["K"] + D * D].reshape(D, D) @ Eb
                o = int(lay.hi[k, H_QOFF])
                out[o:o + N * N] = Q.ravel()
            if "W" in h:
                o = int(lay.hi[k, H_WOFF])
                out[o:o + P * P] = (E.T @ y[h["W"]:h["W"] + el.d ** 2].reshape(el.d, el.d) @ E).ravel()
            if "w" in h:
                o, rows = int(lay.hi[k, H_VOFF]), h["rows"]
                out[o:o + rows * P] = (y[h["w"]:h["w"] + rows * el.d].reshape(rows, el.d) @ E).ravel()
            if "a" in h:
                out[int(lay.hi[k, H_AOFF])] = y[h["a"]]
            if "b" in h:
                o = int(lay.hi[k, H_BOFF])
                out[o:o + h["nb"]] = y[h["b"]:h["b"] + h["nb"]]
        return out

    def perturb(self, y, rng, eps) -> np.ndarray:
        """``y`` perturbed by eps (the symmetry probe, ``meanfield.engine.symmetry``): each K_h
        by a congruence (it stays a Gram), everything else by eps x scale noise."""
        yp = y + eps * max(1.0, float(np.abs(y).max())) * rng.standard_normal(y.shape)
        for h in self.el.heads:
            D = h["D"]
            K = y[h["K"]:h["K"] + D * D].reshape(D, D)
            M = np.eye(D) + eps * rng.standard_normal((D, D))
            yp[h["K"]:h["K"] + D * D] = (M.T @ K @ M).ravel()
        return yp

    def embedding_gram(self, y) -> np.ndarray:
        """Gamma = E^T E of ambient state(s) (..., P, P)."""
        E = self.el.E_of(np.asarray(y, dtype=np.float64))
        return np.einsum("...dp,...dq->...pq", E, E)

    def _rates(self, mode):
        from .rates import RATE_GROUPS

        if self.rho is None:
            return {g: 1.0 for g in RATE_GROUPS}
        return self.rho[int(mode) >> STAGE_SHIFT]

    def _move(self, y, G, gflat, eta, mode, exact):
        """The GD step from ``y`` (exact) or, with ``exact=False`` and eta = 1, dy/dt."""
        lay, el = self.pk.lay, self.el
        P, d = el.P, el.d
        bits = int(mode) & ((1 << STAGE_SHIFT) - 1)
        rho = self._rates(mode)
        E = el.E_of(y)
        out = y.copy() if exact else np.zeros_like(y)
        gE = np.zeros((d, P))
        for k, h in enumerate(el.heads):
            N, D = int(lay.hi[k, H_N]), h["D"]
            if N:
                K = y[h["K"]:h["K"] + D * D].reshape(D, D)
                Eb = el.Eb(E, k)
                Gh = G[k, :N, :N] + G[k, :N, :N].T
                KEG = K @ Eb @ Gh
                hv = np.zeros(D)
                for name, s, w, a, da, g in h["objects"]:
                    if w == P:
                        gE += KEG[a:a + da, s:s + w]
                    grp, bit = _WIDE_GROUP[name[0]]
                    if bits & bit:
                        hv[a:a + da] = eta * rho[grp]
                A = (Eb @ Gh @ Eb.T) * hv[None, :]          # X H
                if exact:
                    I = np.eye(D)
                    Kn = (I - A.T) @ K @ (I - A)
                else:
                    Kn = -(A.T @ K + K @ A)
                out[h["K"]:h["K"] + D * D] = Kn.ravel()
            if "W" in h:
                o = int(lay.hi[k, H_WOFF])
                gW = gflat[o:o + P * P].reshape(P, P)
                W = y[h["W"]:h["W"] + d * d].reshape(d, d)
                gE += W @ E @ gW.T + W.T @ E @ gW
                if bits & 1:
                    out[h["W"]:h["W"] + d * d] -= eta * rho["keys"] * (E @ gW @ E.T).ravel()
            if "w" in h:
                o, rows = int(lay.hi[k, H_VOFF]), h["rows"]
                g = gflat[o:o + rows * P].reshape(rows, P)
                wv = y[h["w"]:h["w"] + rows * d].reshape(rows, d)
                gE += wv.T @ g
                if bits & 2:
                    out[h["w"]:h["w"] + rows * d] -= eta * rho["values"] * lay.hf[k, F_LR] * (g @ E.T).ravel()
            if "a" in h and bits & 8:
                out[h["a"]] -= eta * rho["signs"] * gflat[int(lay.hi[k, H_AOFF])]
            if "b" in h and bits & 1:
                o = int(lay.hi[k, H_BOFF])
                out[h["b"]:h["b"] + h["nb"]] -= eta * rho["positions"] * gflat[o:o + h["nb"]]
        out[el.E:] -= eta * rho["embeddings"] * gE.ravel()
        return out

    def _grads(self, y):
        return super().loss_and_grads(self.reduce(y))

    def gd_advance(self, y, nsteps, eta, mode, criterion):
        pk, lay = self.pk, self.pk.lay
        kind, op, thr = integrate.criterion_args(criterion, kernels.CRITERIA)
        k = 0
        while True:
            loss, G, gflat, margin, _ = self._grads(y)
            if not math.isfinite(loss):
                return k, 2
            if kind != 0:
                c = kernels.eng_criterion(kind, loss, margin, pk.consistent, lay.hi, lay.hf, pk.Gam, gflat)
                if (op > 0 and c >= thr) or (op < 0 and c <= thr):
                    return k, 1
            if k == nsteps:
                return k, 0
            new = self._move(y, G, gflat, float(eta), mode, True)
            if not np.all(np.isfinite(new)):
                return k, 2
            if np.abs(new).max() > self.max_abs:
                return k, 3
            y[:] = new
            k += 1

    def rhs(self, y, mode):
        _, G, gflat, _, _ = self._grads(y)
        return self._move(np.asarray(y, dtype=np.float64), G, gflat, 1.0, mode, False)

    def criterion_value(self, y, name):
        return super().criterion_value(self.reduce(y), name)

    def extra_datasets(self, run) -> tuple[dict, dict]:
        """The run file's ``embedding_gram`` (T, P, P): Gamma(t) = E^T E at every record,
        and the attribute ``embeddings`` (the ambient dimension d)."""
        Y = getattr(run, "y_ambient", None)
        if Y is None or not len(Y):
            return {}, {"embeddings_ambient": self.el.d}
        return {"embedding_gram": self.embedding_gram(Y)}, {"embeddings_ambient": self.el.d}
