"""The explicit finite-width network generated from a model description: the engine's oracle.

An independent code path (``docs/engine.md``): plain numpy weights, its own
forward pass and its own hand-written backward pass, full-batch GD on the
explicit weights with the description's stages; nothing of the engine's
reduction or kernels (``reduce``, ``kernels``, ``system``) is used to train it.
From the engine it takes only the description (``description.py``) and, for
the comparison, the names of the reduced variables.

The network (the conventions of :class:`meanfield.engine.description.Head`):

* dictionary: an embedding E (d x P, d > P) with E^T E = Gamma,
  E = O chol(Gamma)^T with O a random orthonormal d x P frame; a token with
  coefficient vector t is the vector x = E t in R^d.
* per head j: keys/queries either wide W_K, W_Q in R^{m x d} (``separate``;
  logit of key x_i for query x_l: z_il = scale x_i^T W_K^T W_Q x_l) or one
  narrow W in R^{d x d} (``merged``; z_il = scale x_i^T W x_l);
  attention over the keys with multiplicities c_i: softmax
  p_il = c_i e^{z_il} / sum_k c_k e^{z_kl}, or linear p_il = c_i z_il / L_eff
  (L_eff = sum of the key counts); queries: ``mean`` (every position, weight
  c_l / L_eff), ``last`` (the last position with c > 0; with
  ``query_self = false`` it is not a key) or ``fixed`` (x_q = E query_vector);
  zbar = sum_l q_l sum_i p_il x_i (and its coefficient vector tbar).
* value: ``neuron`` (narrow w_{c,q} in R^d, C outputs x n neurons:
  out_c = (1/n) sum_q relu(w_{c,q}^T zbar), neurons step eta n: the mean-field
  time scale), ``linear`` (out_c = w_c^T zbar), ``matrix`` (wide M_V in R^{m x d}
  and readouts r_c in R^m: out_c = r_c^T M_V zbar), ``token`` (out = tbar,
  P outputs); f = sum_j a_j out_j (a_j the head's sign, trainable or not).
* loss per sequence: logistic log(1 + e^{-y f}); squared 1/2 |f - y|^2;
  cross_entropy logsumexp(f) - f_y; the total is sum_s weight_s loss_s.

How it is computed. Every token is x = E t, so the network reads each weight
only through its product with E: the wide weights through M_K = W_K E,
M_Q = W_Q E, M_V = M_V E (m x P, formed from the explicit weights at every step,
cost m d P: the d x d matrix W_K^T W_Q is never formed), the neurons through
E^T w, a merged W through E^T W E. So z_il = scale t_i^T M_K^T M_Q t_l,
w^T zbar = (E^T w)^T tbar, M_V zbar = M_V E tbar, and dL/datt_i = dL/dzbar . x_i
= (E^T dL/dzbar) . t_i. Every gradient of a wide weight or neuron is a matrix
times E^T (an outer product, cost m P d), and the weights themselves are
updated explicitly: W <- W - eta (A B) with B a P x d matrix.

Backward pass (written out here): dL/df -> dL/dout_j = a_j dL/df,
dL/da_j = sum_s dL/df . out_j; value gradients (dL/dw = (sum_s du_s tbar_s) E^T,
dL/dM_V = (sum_s dh_s tbar_s^T) E^T, dL/dr_c); E^T dL/dzbar; dL/dp_il =
q_l dL/dzbar . x_i; softmax dL/dz_il = p_il (dL/dp_il - sum_k p_kl dL/dp_kl),
linear dL/dz_il = c_i dL/dp_il / L_eff; with Z = scale sum dL/dz_il x_i x_l^T
= E Zt E^T, Zt = scale sum dL/dz_il t_i t_l^T (P x P): dL/dW_K = W_Q Z^T =
M_Q (Zt^T E^T), dL/dW_Q = W_K Z = M_K (Zt E^T), dL/dW = E Zt E^T.

Projection to the reduced variables (per head): S = E^T W_K^T W_Q E,
A = E^T W_K^T W_K E, B = E^T W_Q^T W_Q E (separate) or W~ = E^T W E (merged);
w~ = E^T w; for a value matrix V = E^T M_V^T M_V E, R_c = E^T M_V^T r_c,
rr = [r_c . r_c'] (and the cross blocks with keys/queries, which the loss
never reads).

Public: :func:`embedding`, :class:`Oracle` (``products``, ``loss_grads``,
``step``, ``project``, ``run``), :func:`sample_weights`, :func:`pack`. It drives
``meanfield model particles`` and ``meanfield mixture particles``
(``meanfield.engine.finite.ParticleSystem``: the wide weights stepped in place
(:meth:`Oracle.step_in_place`) or two preallocated sets stepped in turn, the
products of each updated weight formed block by block right after its update).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: parameter groups (description.GROUPS) and the weights each moves
GROUP_WEIGHTS = {"attention": ("WK", "WQ", "W", "b"), "values": ("w", "MV"), "readout": ("r",), "signs": ("a",)}


def _lr(eta, k: str) -> float:
    """The step size of weight ``k``: ``eta`` a number (every weight) or a dict of the
    weights' own rates (keys WK, WQ, W, w, MV, r, a; ``meanfield.engine.rates.weight_rates``)."""
    return eta[k] if isinstance(eta, dict) else eta


def embedding(Gamma: np.ndarray, d: int, seed) -> np.ndarray:
    """E (d x P) with E^T E = Gamma: a random orthonormal frame O (d x P, from
    ``default_rng(seed)``) times chol(Gamma)^T."""
    Gamma = np.asarray(Gamma, float)
    P = Gamma.shape[0]
    if d < P:
        raise ValueError(f"d: the ambient dimension must be >= P = {P}; got {d}")
    rng = np.random.default_rng(seed)
    O, R = np.linalg.qr(rng.normal(size=(d, P)))
    O = O * np.sign(np.diag(R))[None, :]
    return O @ np.linalg.cholesky(Gamma).T


def _relu(x):
    return np.maximum(x, 0.0)


def _writable(b, x):
    """``b`` if it can receive a result shaped like ``x`` (C-contiguous, writeable, not ``x``), else None."""
    if b is None or b is x or b.shape != x.shape or not b.flags.c_contiguous or not b.flags.writeable:
        return None
    return b


@dataclass
class _Head:
    """Static per-head data (from the description's Head)."""

    name: str
    attention: str
    kq: str
    query: str
    scale: float
    value: str
    n: int
    C: int
    train_sign: bool
    Xq: np.ndarray       # (S, Lq, d) query tokens
    Tq: np.ndarray       # (S, Lq, P) their coefficients
    qw: np.ndarray       # (S, Lq) query weights
    ck: np.ndarray       # (S, L) key multiplicities
    Leff: np.ndarray     # (S,) sum of key counts
    TqT: np.ndarray = None    # (S, P, Lq) Tq transposed (contiguous)
    qw3: np.ndarray = None    # (S, Lq, 1)
    ck3: np.ndarray = None    # (S, L, 1)
    lin3: np.ndarray = None   # (S, L, 1) c_i / L_eff (linear attention)
    every_key: bool = True    # every key has c > 0 (no masking in the softmax)
    unit_counts: bool = True  # every key has c = 1 (no multiplicities in the softmax)
    bidx: np.ndarray = None   # (S, L, Lq) index of the relative positional bias b[pos(query) - i] (None: no bias)


#: the weights whose gradient is A B with A m x P (or C x n x P) and B P x d (every token lies in span(E))
_FACTORED = ("WK", "WQ", "MV", "w")
#: the wide weights (m x d), in the order of their columns in the products' U
_WIDE = ("WK", "WQ", "MV")
#: multiply-adds per matrix product in the per-step passes over m rows: OpenBLAS runs a
#: product of at most 65536 x 4 on the calling thread; above it spreads thin m x P products
#: over its threads, which is slower than one thread (several times on a busy machine:
#: m = 1e5, d = 5: 15 steps/s with 2 BLAS threads, 85 with one, measured on 2 loaded cores)
_BLAS_MNK = 1 << 18


class Oracle:
    """The explicit network of a description at width m in R^d.

    ``desc``: a :class:`meanfield.engine.description.Description`; ``E``:
    the embedding (d x P, E^T E = the dictionary's Gram). Weights are a dict
    per head (see :func:`sample_weights`). Every weight is read through its
    products with E (:meth:`products`: W_K E, W_Q E, M_V E, w E, E^T W E),
    computed from the explicit weights at each step; gradients of the wide
    weights and neurons are formed as (factor) E^T (module docstring)."""

    def __init__(self, desc, E: np.ndarray):
        self.desc = desc
        self.E = np.asarray(E, float)
        d, P = self.E.shape
        if P != desc.P:
            raise ValueError(f"E: must have P = {desc.P} columns; got {P}")
        self.d, self.P = d, P
        self.ET = np.ascontiguousarray(self.E.T)
        data = desc.data
        self.T = np.ascontiguousarray(np.asarray(data.tokens, float))   # (S, L, P)
        self.T2 = self.T.reshape(-1, P)                                  # (S L, P)
        self.X = self.T @ self.E.T                                # (S, L, d)
        self.c = np.asarray(data.count_array, float)             # (S, L)
        self.weight = np.asarray(data.weight, float)
        self.weight2 = self.weight[:, None]
        self.target = np.asarray(data.target, float)
        self.loss_kind = desc.model.loss
        self.r0 = float(desc.model.relu_prime_at_zero)
        S, L = self.c.shape
        self.heads = []
        for h in desc.model.heads:
            ck = self.c.copy()
            if h.query == "mean":
                Xq, Tq = self.X, self.T
                qw = self.c / self.c.sum(axis=1, keepdims=True)
            elif h.query == "last":
                last = np.array([np.flatnonzero(self.c[s] > 0)[-1] for s in range(S)])
                Xq = self.X[np.arange(S), last][:, None, :]
                Tq = self.T[np.arange(S), last][:, None, :]
                qw = np.ones((S, 1))
                if not h.query_self:
                    ck[np.arange(S), last] = 0.0
            else:
                t = np.asarray(h.query_vector, float)
                Tq = np.broadcast_to(t, (S, 1, P)).copy()
                Xq = Tq @ self.E.T
                qw = np.ones((S, 1))
            C = P if h.value == "token" else int(h.outputs)
            Leff = ck.sum(axis=1)
            if h.mask == "causal" and h.query == "mean":  # key i visible to query l iff i <= l
                vis = np.tril(np.ones((L, L), bool)).T[None] | (self.c[:, None, :] == 0)   # (S, L keys, L queries)
                ck3 = ck[:, :, None] * vis
                Lq = ck3.sum(axis=1, keepdims=True)                                  # (S, 1, Lq)
                self.heads.append(_Head(h.name, h.attention, h.kq, h.query, float(h.scale), h.value,
                                        int(h.n_neurons), C, bool(h.train_sign), Xq, Tq, qw, ck, Leff,
                                        TqT=np.ascontiguousarray(Tq.transpose(0, 2, 1)), qw3=qw[:, :, None].copy(),
                                        ck3=ck3, lin3=ck3 / Lq, every_key=False, unit_counts=False))
                continue
            self.heads.append(_Head(h.name, h.attention, h.kq, h.query, float(h.scale), h.value, int(h.n_neurons), C,
                                    bool(h.train_sign), Xq, Tq, qw, ck, Leff,
                                    TqT=np.ascontiguousarray(Tq.transpose(0, 2, 1)), qw3=qw[:, :, None].copy(),
                                    ck3=ck[:, :, None].copy(), lin3=(ck / Leff[:, None])[:, :, None],
                                    every_key=bool(np.all(ck > 0)), unit_counts=bool(np.all(ck == 1))))
        for hd, h in zip(self.heads, desc.model.heads):
            if h.rpe:  # b[l - i + rpe - 1] for key i and query position l
                qpos = np.arange(L)[None, :] if h.query == "mean" else np.array(
                    [np.flatnonzero(self.c[s] > 0)[-1] for s in range(S)])[:, None]
                hd.bidx = (qpos[:, None, :] - np.arange(L)[None, :, None] + h.rpe - 1) * np.ones((S, 1, 1), int)

    # ------------------------------------------------------------ forward / backward

    def products(self, params: list[dict]) -> list[dict]:
        """The weights seen by the tokens (every token is x = E t): per head W_K E,
        W_Q E, M_V E (m x P; views into one m x (P per wide weight) array ``_U``, keys
        ``_keys``), w E (C x n x P) and E^T W E (P x P, merged), computed from the
        explicit weights (cost m d P; the d x d matrix W_K^T W_Q is never formed)."""
        E, P = self.E, self.P
        out = []
        for p in params:
            q = {}
            keys = tuple(k for k in _WIDE if k in p)
            if keys:
                U = np.empty((p[keys[0]].shape[0], P * len(keys)))
                for i, k in enumerate(keys):
                    q[k] = U[:, i * P:(i + 1) * P]
                    np.matmul(p[k], E, out=q[k])
                q["_U"], q["_keys"] = U, keys
            if "w" in p:
                q["w"] = p["w"] @ E
            if "W" in p:
                q["W"] = self.ET @ p["W"] @ E
            if "b" in p:
                q["b"] = p["b"]
            out.append(q)
        return out

    @staticmethod
    def gram(pe: dict) -> np.ndarray:
        """U^T U of a head's products (U = [W_K E, W_Q E, M_V E], the wide weights it
        has), computed once per set of products."""
        G = pe.get("_G")
        if G is None:
            U = pe["_U"]
            rows = max(1, _BLAS_MNK // (U.shape[1] ** 2))
            if U.shape[0] <= rows:
                G = U.T @ U
            else:                       # by blocks of rows: each product on the calling thread
                G = np.zeros((U.shape[1], U.shape[1]))
                for r in range(0, U.shape[0], rows):
                    Ub = U[r:r + rows]
                    G += Ub.T @ Ub
            pe["_G"] = G
        return G

    def _logits(self, hd: _Head, pe: dict) -> np.ndarray:
        """z[s, i, l] = scale x_i^T K x_l with K = W_K^T W_Q or W: = scale t_i^T (E^T K E) t_l
        (E^T W_K^T W_Q E = (W_K E)^T (W_Q E), from the Gram U^T U when it is at hand)."""
        if hd.kq == "separate":
            G = pe.get("_G")
            KP = pe["WK"].T @ pe["WQ"] if G is None else G[:self.P, self.P:2 * self.P]
        else:
            KP = pe["W"]
        z = (self.T @ KP) @ hd.TqT
        if hd.scale != 1.0:
            z *= hd.scale
        if hd.bidx is not None:
            z = z + pe["b"][hd.bidx]
        return z

    def _attention(self, hd: _Head, z: np.ndarray) -> np.ndarray:
        if hd.attention == "softmax":
            if hd.every_key:
                e = np.exp(z - z.max(axis=1, keepdims=True))
                if not hd.unit_counts:
                    e *= hd.ck3
            else:
                ck = hd.ck3
                zm = np.where(ck > 0, z, -np.inf).max(axis=1, keepdims=True)
                e = ck * np.exp(np.where(ck > 0, z - zm, 0.0))
            e /= e.sum(axis=1, keepdims=True)
            return e
        return z * hd.lin3

    def forward(self, params: list[dict], we: list[dict] | None = None):
        """Loss and the per-head intermediates (for :meth:`backward`); ``we``: the
        :meth:`products` of ``params`` when already computed."""
        we = self.products(params) if we is None else we
        f = None
        cache = []
        for hd, p, pe in zip(self.heads, params, we):
            z = self._logits(hd, pe)
            pa = self._attention(hd, z)                         # (S, L, Lq)
            att = (pa @ hd.qw3)[:, :, 0]                        # total weight of key i
            tbar = (att[:, None, :] @ self.T)[:, 0, :]         # (S, P): zbar = E tbar
            if hd.value == "neuron":
                wP = pe["w"]
                C, n = wP.shape[0], wP.shape[1]
                u = (tbar @ wP.reshape(C * n, -1).T).reshape(-1, C, n)   # w^T zbar = (E^T w)^T tbar
                out = _relu(u).mean(axis=2) if n > 1 else np.maximum(u[:, :, 0], 0.0)
            elif hd.value == "linear":
                u = tbar @ pe["w"][:, 0].T
                out = u
            elif hd.value == "matrix":
                hv = tbar @ pe["MV"].T                          # (S, m): M_V zbar
                u = hv
                out = hv @ p["r"].T                              # (S, C)
            else:
                u = None
                out = tbar
            a = float(p["a"])
            f = a * out if f is None else f + a * out
            cache.append({"z": z, "pa": pa, "tbar": tbar, "u": u, "out": out})
        loss_s, dldf = self._loss(f)
        return float(self.weight @ loss_s), {"f": f, "heads": cache, "dldf": self.weight2 * dldf,
                                             "loss_s": loss_s, "we": we}

    def _loss(self, f: np.ndarray):
        """Per-sequence loss (S,) and dloss/df (S, C)."""
        y = self.target
        if self.loss_kind == "logistic":
            m = y * f[:, 0]
            loss = np.logaddexp(0.0, -m)
            g = -y * 0.5 * (1.0 - np.tanh(0.5 * m))  # -y sigmoid(-m)
            return loss, g[:, None]
        if self.loss_kind == "squared":
            yy = y.reshape(f.shape)
            r = f - yy
            return 0.5 * np.sum(r * r, axis=1), r
        k = y.astype(int)
        mx = f.max(axis=1, keepdims=True)
        lse = mx[:, 0] + np.log(np.exp(f - mx).sum(axis=1))
        sm = np.exp(f - lse[:, None])
        loss = lse - f[np.arange(len(k)), k]
        g = sm.copy()
        g[np.arange(len(k)), k] -= 1.0
        return loss, g

    def margins(self, f: np.ndarray) -> np.ndarray:
        """y f (logistic); for cross-entropy f_y - max_{c != y} f_c; for squared -max_c |f_c - y_c|."""
        y = self.target
        if self.loss_kind == "logistic":
            return y * f[:, 0]
        if self.loss_kind == "cross_entropy":
            k = y.astype(int)
            g = f.copy()
            fy = f[np.arange(len(k)), k]
            g[np.arange(len(k)), k] = -np.inf
            return fy - g.max(axis=1)
        return -np.max(np.abs(f - y.reshape(f.shape)), axis=1)

    def _backward(self, params: list[dict], cache: dict) -> list[dict]:
        """The gradients, those of W_K, W_Q, M_V and the neurons w as factor pairs
        (A, B) with dLoss/dweight = A B (A: m x P or C x n x P, B: P x d); the others in full."""
        dldf = cache["dldf"]                                     # (S, C), weights included
        grads = []
        for hd, p, pe, c in zip(self.heads, params, cache["we"], cache["heads"]):
            a = float(p["a"])
            g: dict = {"a": np.array(float((dldf * c["out"]).sum()))}
            dout = a * dldf                                      # (S, C)
            tbar = c["tbar"]
            if hd.value == "neuron":
                u = c["u"]
                C, n = u.shape[1], u.shape[2]
                if self.r0 == 1.0:
                    rp = u >= 0.0
                elif self.r0 == 0.0:
                    rp = u > 0.0
                else:
                    rp = np.where(u > 0, 1.0, np.where(u < 0, 0.0, self.r0))
                du = dout[:, :, None] * rp
                if hd.n != 1:
                    du /= hd.n
                du = du.reshape(-1, C * n)                       # (S, C n)
                g["w"] = ((du.T @ tbar).reshape(C, n, -1), self.ET)  # dL/dw = sum_s du zbar = (du^T tbar) E^T
                dzE = du @ pe["w"].reshape(C * n, -1)            # E^T dL/dzbar (S, P)
            elif hd.value == "linear":
                g["w"] = ((dout.T @ tbar)[:, None, :], self.ET)
                dzE = dout @ pe["w"][:, 0]
            elif hd.value == "matrix":
                hv = c["u"]                                      # (S, m)
                g["r"] = dout.T @ hv                             # (C, m)
                dh = dout @ p["r"]                               # (S, m)
                g["MV"] = (dh.T @ tbar, self.ET)                 # dL/dM_V = dh^T zbar = (dh^T tbar) E^T
                dzE = dh @ pe["MV"]                              # (S, P)
            else:
                # out = tbar = sum_i att_i t_i: dL/datt_i = dout . t_i
                dzE = dout
            datt = (self.T @ dzE[:, :, None])[:, :, 0]           # dL/datt_i = dL/dzbar . x_i
            dp = datt[:, :, None] * hd.qw[:, None, :]          # (S, L, Lq)
            pa = c["pa"]
            if hd.attention == "softmax":
                dzl = pa * (dp - (pa * dp).sum(axis=1, keepdims=True))
            else:
                dzl = hd.lin3 * dp
            if hd.bidx is not None:   # dL/db_delta = sum of dL/dz_il over l - i = delta
                g["b"] = np.bincount(hd.bidx.ravel(), weights=dzl.ravel(), minlength=p["b"].size)
            # Z = scale sum dL/dz_il x_i x_l^T = E Zt E^T
            Zt = self.T2.T @ (dzl @ hd.Tq).reshape(-1, self.P)   # sum_s sum_il dzl t_i t_l^T
            if hd.scale != 1.0:
                Zt *= hd.scale
            if hd.kq == "separate":
                g["WK"] = (pe["WQ"], Zt.T @ self.ET)             # W_Q Z^T = (W_Q E) (Zt^T E^T)
                g["WQ"] = (pe["WK"], Zt @ self.ET)               # W_K Z = (W_K E) (Zt E^T)
            else:
                g["W"] = self.E @ Zt @ self.ET
            grads.append(g)
        return grads

    def backward(self, params: list[dict], cache: dict) -> list[dict]:
        """dLoss/d(every explicit weight), per head (same keys as the weights)."""
        grads = self._backward(params, cache)
        for g in grads:
            for k in _FACTORED:
                if k in g:
                    g[k] = g[k][0] @ g[k][1]
        return grads

    def loss_grads(self, params, we=None):
        loss, cache = self.forward(params, we)
        return loss, self.backward(params, cache), cache

    # ------------------------------------------------------------ GD

    def step(self, params: list[dict], eta: float, train: tuple[str, ...], grads=None, we=None,
             out=None, products: bool = False):
        """One full-batch GD step on the explicit weights of the groups in ``train``
        (neurons of ``value = neuron`` step eta n: the mean-field time scale):
        weight - lr dLoss/dweight, the gradient of W_K, W_Q, M_V, w formed as
        A (lr B) (:meth:`_backward`; B is P x d). ``grads``: full gradients to use
        instead; ``we``: the :meth:`products` of ``params``; ``out``: weights (same
        layout, plus ``_U`` per head) whose C-contiguous arrays may be overwritten with
        the result (preallocated buffers; an array of ``params`` or ``we`` is never
        written). Untrained weights are shared with ``params``, not copied.
        ``products``: return (new weights, their :meth:`products`), the product of
        each updated weight with E formed block of rows by block of rows right after
        its update (while the block is in cache: one pass over the weights per step)."""
        factored = grads is None
        if factored or products:
            we = self.products(params) if we is None else we
        if factored:
            _, cache = self.forward(params, we)
            grads = self._backward(params, cache)
        P = self.P
        res, res_we = [], []
        for j, (hd, p, g) in enumerate(zip(self.heads, params, grads)):
            q = dict(p)
            buf = out[j] if out is not None else {}
            qe = None
            if products:
                pe = we[j]
                qe = {k: v for k, v in pe.items() if k != "_G"}
                if "_U" in pe:
                    U = _writable(buf.get("_U"), pe["_U"])
                    U = np.empty_like(pe["_U"]) if U is None else U
                    for i, k in enumerate(pe["_keys"]):
                        qe[k] = U[:, i * P:(i + 1) * P]
                    qe["_U"] = U
            trained = set()
            for grp in train:
                for k in GROUP_WEIGHTS[grp]:
                    if k not in g or k not in p:
                        continue
                    if k == "a" and not hd.train_sign:
                        continue
                    trained.add(k)
                    lr = _lr(eta, k) * hd.n if (k == "w" and hd.value == "neuron") else _lr(eta, k)
                    x = p[k]
                    b = _writable(buf.get(k), x)
                    if factored and k in _FACTORED:
                        A, B = g[k]
                        dest = qe.get(k) if (qe is not None and k in _WIDE) else None
                        q[k] = self._update(x, A, lr * B, b, dest)
                        if qe is not None and k not in _WIDE:
                            qe[k] = q[k] @ self.E
                        continue
                    if b is None or x.ndim == 0:
                        q[k] = x - lr * g[k]
                    else:
                        np.multiply(g[k], lr, out=b)
                        np.subtract(x, b, out=b)
                        q[k] = b
                    if qe is not None and k in qe:
                        if k in _WIDE:
                            np.matmul(q[k], self.E, out=qe[k])
                        else:
                            qe[k] = self.ET @ q[k] @ self.E if k == "W" else q[k] if k == "b" else q[k] @ self.E
            if qe is not None and "_U" in qe:
                for k in qe["_keys"]:
                    if k not in trained:
                        qe[k][...] = we[j][k]
            res.append(q)
            res_we.append(qe)
        return (res, res_we) if products else res

    #: rows per block of :meth:`_update`: at most about 2 MB of weights (the block stays in
    #: cache) and at most _BLAS_MNK multiply-adds per product (each on the calling thread)
    BLOCK_BYTES = 1 << 21

    def _update(self, x, A, B, b, pe=None):
        """x - A B (B: P x d, lr included), into ``b`` when given; ``pe`` (rows x P):
        where to write the result times E, block by block."""
        if b is None:
            new = x - A @ B
            if pe is not None:
                np.matmul(new, self.E, out=pe)
            return new
        d = self.d
        x2, b2, A2 = x.reshape(-1, d), b.reshape(-1, d), A.reshape(-1, self.P)
        rows = b2.shape[0]
        step = max(16, min(self.BLOCK_BYTES // (8 * d), _BLAS_MNK // (d * self.P)))
        scratch = np.empty((min(step, rows), d)) if b is x else None
        for r in range(0, rows, step):
            sl = slice(r, r + step)
            bb = b2[sl]
            if scratch is None:
                np.matmul(A2[sl], B, out=bb)
                np.subtract(x2[sl], bb, out=bb)
            else:                           # in place: x's block is read and written once
                sc = scratch[:bb.shape[0]]
                np.matmul(A2[sl], B, out=sc)
                np.subtract(bb, sc, out=bb)
            if pe is not None:
                np.matmul(bb, self.E, out=pe[sl])
        return b

    def step_in_place(self, params: list[dict], eta: float, train: tuple[str, ...], we, accept):
        """A GD step (:meth:`step`) that writes the wide weights in place: one read and
        one write of each per step, no second set. First the products of the result are
        predicted from the gradient factors (M - A (lr B E), m x P: the weights are not
        touched) and ``accept(new weights, predicted products)`` decides (finite
        projection, bounds); if it refuses, nothing is written and None is returned.
        Else each trained wide weight is updated in place block by block and its
        products are formed from the updated explicit weights; returns (weights, their
        :meth:`products`). Narrow weights (neurons, merged W, read-outs, signs) are new arrays."""
        _, cache = self.forward(params, we)
        grads = self._backward(params, cache)
        P = self.P
        res, pred, plan = [], [], []
        for j, (hd, p, g) in enumerate(zip(self.heads, params, grads)):
            pe = we[j]
            q = dict(p)
            qe = {k: v for k, v in pe.items() if k != "_G"}
            if "_U" in pe:
                U = pe["_U"].copy()
                for i, k in enumerate(pe["_keys"]):
                    qe[k] = U[:, i * P:(i + 1) * P]
                qe["_U"] = U
            for grp in train:
                for k in GROUP_WEIGHTS[grp]:
                    if k not in g or k not in p or (k == "a" and not hd.train_sign):
                        continue
                    lr = _lr(eta, k) * hd.n if (k == "w" and hd.value == "neuron") else _lr(eta, k)
                    if k in _WIDE:
                        A, B = g[k]
                        lrB = lr * B
                        qe[k] -= A @ (lrB @ self.E)         # predicted (W - A lrB) E
                        plan.append((q, qe, k, A, lrB))
                    elif k in _FACTORED:
                        A, B = g[k]
                        q[k] = p[k] - A @ (lr * B)
                        qe[k] = q[k] @ self.E
                    else:
                        q[k] = p[k] - lr * g[k]
                        if k == "W":
                            qe[k] = self.ET @ q[k] @ self.E
                        elif k == "b":
                            qe[k] = q[k]
            res.append(q)
            pred.append(qe)
        if not accept(res, pred):
            return None
        for q, qe, k, A, lrB in plan:
            x = q[k]
            self._update(x, A, lrB, x, qe[k])   # in place; the products from the updated weights
            qe.pop("_G", None)
        return res, pred

    # ------------------------------------------------------------ projection

    def project(self, params: list[dict], we=None) -> list[dict]:
        """The reduced variables of every head (feature coordinates, module docstring)."""
        we = self.products(params) if we is None else we
        out = []
        for hd, p, pe in zip(self.heads, params, we):
            r: dict = {"a": float(p["a"])}
            if hd.kq == "separate":
                MK, MQ = pe["WK"], pe["WQ"]
                r.update(S=MK.T @ MQ, A=MK.T @ MK, B=MQ.T @ MQ)
            else:
                r["W"] = pe["W"]
            if hd.value in ("neuron", "linear"):
                r["w"] = pe["w"]
            elif hd.value == "matrix":
                MV = pe["MV"]
                r.update(V=MV.T @ MV, R=p["r"] @ MV, rr=p["r"] @ p["r"].T)
            out.append(r)
        return out

    # ------------------------------------------------------------ training

    def criterion_value(self, params, name: str, consistent=None, we=None) -> float:
        loss, cache = self.forward(params, we)
        if name == "loss":
            return loss
        if name == "grad_w":
            grads = self.backward(params, cache)
            s = 0.0
            for hd, g in zip(self.heads, grads):
                if "w" in g:
                    # ambient velocity of the neurons (n dL/dw per neuron, L2 over the neurons)
                    s += float(np.sum((hd.n * g["w"]) ** 2)) / hd.n
            return math.sqrt(s)
        m = self.margins(cache["f"])
        cons = np.asarray(self.desc.data.flag("consistent") if consistent is None else consistent, bool)
        sel = {"consistent_margin": cons, "inconsistent_margin": ~cons, "min_margin": np.ones_like(cons)}[name]
        return float(m[sel].min()) if sel.any() else math.inf

    def run(self, params: list[dict], stages=None, eta: float | None = None, record_every: int = 1,
            project=None):
        """Full-batch GD through the description's stages (each: train groups, steps,
        criterion checked before every step). Returns {"t": steps (T,), "states":
        [projected state per record], "params": final weights, "stage_ends": [...],
        "loss": (T,)}; ``project``: the function of the weights recorded as a state
        (default :meth:`project`; ``lambda p: pack(desc, E, p)`` for the engine's flat layout)."""
        tr = self.desc.training
        stages = tr.stages if stages is None else stages
        eta = tr.eta if eta is None else eta
        ts, states, losses, ends = [], [], [], []
        nstep = 0

        def record(p):
            ts.append(nstep)
            states.append(self.project(p) if project is None else project(p))
            losses.append(self.forward(p)[0])

        record(params)
        status = "ok"
        from .rates import has_rates, schedule_factor, weight_rates

        rated = has_rates(tr)
        for i, st in enumerate(stages):
            n = int(st.length)
            reason = "length"
            start = nstep
            spec, origin, horizon = (st.eta_schedule, None, float(st.length)) if st.eta_schedule else (
                tr.eta_schedule, 0, float(tr.horizon))
            for _ in range(n):
                if rated:  # each weight its group's rate, times the schedule at this step
                    eta = weight_rates(tr, st, schedule_factor(spec, nstep - (start if origin is None else origin),
                                                               horizon))
                if st.criterion is not None:
                    name, op, val = st.criterion
                    v = self.criterion_value(params, name)
                    if (v >= val) if op == ">=" else (v <= val):
                        reason = "criterion"
                        break
                new = self.step(params, eta, st.train)
                if not all(np.all(np.isfinite(x)) for q in new for x in q.values()):
                    status = "diverged"
                    break
                params = new
                nstep += 1
                if nstep % record_every == 0:
                    record(params)
            ends.append({"stage": i, "step": nstep, "reason": reason})
            if status != "ok":
                break
        if not ts or ts[-1] != nstep:
            record(params)
        return {"t": np.array(ts), "states": states, "loss": np.array(losses), "params": params,
                "stage_ends": ends, "status": status}


_PLANS: dict = {}


def _pack_plan(lay):
    """Per head (objects, N, Q offset, W~ offset, w~ offset, a offset) of a layout, as Python ints."""
    key = id(lay)
    hit = _PLANS.get(key)
    if hit is not None and hit[0] is lay:
        return hit[1]
    from . import reduce as R

    plan = [(tuple(o[0] for o in lay.objects[k]), int(lay.hi[k, R.H_N]), int(lay.hi[k, R.H_QOFF]),
             int(lay.hi[k, R.H_WOFF]), int(lay.hi[k, R.H_VOFF]), int(lay.hi[k, R.H_AOFF]))
            for k in range(len(lay.objects))]
    if len(_PLANS) > 64:
        _PLANS.clear()
    _PLANS[key] = (lay, plan)
    return plan


def pack(desc, E: np.ndarray, params: list[dict], lay=None, we=None) -> np.ndarray:
    """The engine's flat reduced state (its layout, ``reduce.layout``) of explicit weights:
    Q_h = U^T U with U = [M_K E, M_Q E, M_V E, r_1 .. r_C], W~ = E^T W E, w~ = E^T w, a
    (``we``: those products, :meth:`Oracle.products` of ``params``, when already computed)."""
    if lay is None:
        from . import reduce as R

        lay = R.layout(desc)
    y = np.zeros(lay.size)
    names = {"K": "WK", "Q": "WQ", "V": "MV"}
    for k, (p, (objs, N, qoff, woff, voff, aoff)) in enumerate(zip(params, _pack_plan(lay))):
        if N:
            if we is not None and "_U" in we[k] and tuple(names.get(o) for o in objs) == we[k]["_keys"]:
                Q = Oracle.gram(we[k])      # the products' U is the layout's (no read-outs)
            else:
                cols = []
                for name in objs:
                    if name in names:
                        cols.append(p[names[name]] @ E if we is None else we[k][names[name]])
                    else:
                        cols.append(p["r"][int(name[1:]) - 1][:, None])
                U = np.concatenate(cols, axis=1)
                Q = U.T @ U
            y[qoff:qoff + N * N] = Q.ravel()
        if woff >= 0:
            y[woff:woff + lay.P ** 2] = (E.T @ p["W"] @ E if we is None else we[k]["W"]).ravel()
        if voff >= 0:
            wt = p["w"] @ E if we is None else we[k]["w"]
            y[voff:voff + wt.size] = wt.ravel()
        if aoff >= 0:
            y[aoff] = float(p["a"])
        if lay.hi[k, 17] >= 0:  # relative positional biases (meanfield.engine.positions)
            y[int(lay.hi[k, 17]):int(lay.hi[k, 17]) + p["b"].size] = p["b"]
    return y


from .oracle_init import sample_weights, weights_from_engine_init  # noqa: E402,F401  (re-exported)
