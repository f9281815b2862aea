"""The Gram-closure state of a description: layout, names, packed arrays, initial state.

Per head, the wide objects (width m) share one hidden space and are stacked
U = [U_K, U_Q, U_V, u_r1 .. u_rC] (U_a = M_a E for a matrix, u for a hidden
vector); the state holds the whole joint Gram Q_h = U^T U (N_h x N_h, every
pair, not only the pairs the model reads): for keys/queries the blocks
A = Q[K, K], S = Q[K, Q], B = Q[Q, Q]; for a value matrix read by readout
vectors r_c the block R = Q[r, V] and the others. Narrow objects (no width)
are stored reduced: W~ = E^T W E (merged keys/queries, P x P), value vectors
w~ = E^T w (C outputs x n_neurons x P); small parameters (trainable signs)
as they are.

Flat state ``y``: for each head in order, [Q_h (N_h^2), W~_h (P^2, merged),
w~_h (C n P, neuron/linear values), a_h (1, trainable sign)].

Initial state (:func:`initial_state`):

* infinite width: Q_h = blockdiag(omega^2 Gamma (K), omega_q^2 Gamma (Q; omega_q = omega unless given),
  omega_v^2 Gamma (V), sigma_r^2 (each r_c)), i.e. the expectation, with the
  head's ``init_gram`` blocks set (``meanfield.engine.inits``);
* finite width m (:func:`initial_weights`): ``SeedSequence(seed).spawn(2)``;
  the first stream draws, head by head and object by object in the order
  K, Q, V, r_1..r_C, Z = standard_normal((m, width_a)) and sets
  U_a = (omega_a / sqrt(m)) Z C_a with C_a = chol(Gamma)^T (C_a = 1 for
  orthonormal features and for vectors), so the rows of U_a are iid
  N(0, omega_a^2 / m Gamma_a); Q_h = U^T U. An explicit network started from
  M_a with M_a E = U_a (e.g. M_a = U_a Gamma^{-1} E^T, the smallest such) starts
  from the same Gram state. For the mixture this is exactly the stream and
  order of ``meanfield.models.mixture.init`` / the dense path;
* narrow: W~ = 0 (or the head's ``init_W``); value vectors from the head's
  ``init_w`` or ``neuron_init`` (zero | const | gaussian
  drawn from the second stream as ``sigma * standard_normal((H, C n, R))``),
  given in report coordinates and mapped to the smallest ambient vector with
  those coordinates (w~ = Gamma C (C^T Gamma C)^{-1} w_rep); signs their value.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..core.config import ConfigError
from .objects import Description

from .tables import (ATT, F_LR, F_RA, F_RB, F_RIDGE, F_RV, F_RW, F_SCALE, F_SIGN, GROUP_BIT,  # noqa: F401
                     GROUP_CODE, H_AOFF, H_ATT, H_BL, H_BOFF, H_C, H_IK, H_IQ, H_IR, H_IV, H_KQ, H_MASK, H_N,
                     H_NN, H_QOFF, H_QRY, H_QSELF, H_VAL, H_VOFF, H_WOFF, KQC, LOSS, QRY, VAL)


@dataclass(frozen=True)
class Block:
    """A named piece of the state: ``kind`` gram | narrow | small; ``head``;
    ``name`` (S, A, B, W, w, a, or the pair of objects like "V.r1");
    offset/shape into the flat state (for gram blocks: rows/cols in Q_h)."""

    head: str
    name: str
    kind: str
    shape: tuple
    offset: int
    rows: tuple = ()
    cols: tuple = ()
    count: int = 0  # independent reduced variables (symmetric blocks counted once)


@dataclass
class Layout:
    P: int
    heads: tuple
    size: int
    objects: list  # per head: [(name, start, width, group)]
    blocks: list = field(default_factory=list)
    hi: np.ndarray = None
    hf: np.ndarray = None
    qv: np.ndarray = None
    Gr: np.ndarray = None
    grp: np.ndarray = None
    Nmax: int = 0

    def block(self, head: str, name: str) -> Block:
        for b in self.blocks:
            if b.head == head and b.name == name:
                return b
        raise KeyError(f"no block {name!r} in head {head!r}")

    def get(self, y: np.ndarray, head: str, name: str) -> np.ndarray:
        """The block ``name`` of ``head`` from a state (or a (T, size) stack)."""
        b = self.block(head, name)
        lead = y.shape[:-1]
        if b.kind == "gram":
            Q = self.gram(y, head)
            r0, r1 = b.rows
            c0, c1 = b.cols
            return Q[..., r0:r1, c0:c1]
        n = int(np.prod(b.shape))
        return y[..., b.offset:b.offset + n].reshape(lead + b.shape)

    def gram(self, y: np.ndarray, head: str) -> np.ndarray:
        """The Gram matrix Q_h of ``head`` in a state (or a (T, size) stack): a view into ``y``."""
        hidx = [h.name for h in self.heads].index(head)
        N = int(self.hi[hidx, H_N])
        off = int(self.hi[hidx, H_QOFF])
        return y[..., off:off + N * N].reshape(y.shape[:-1] + (N, N))

    def counts(self) -> dict:
        return {f"{b.head}:{b.name}": b.count for b in self.blocks}


def layout(desc: Description) -> Layout:
    P = desc.P
    heads = desc.model.heads
    H = len(heads)
    Gamma = desc.dictionary.Gamma
    hi = np.full((H, 19), -1, dtype=np.int64)
    hf = np.zeros((H, 8))
    qv = np.zeros((H, P))
    objects = []
    off = 0
    Nmax = 1
    for k, h in enumerate(heads):
        objs = []
        start = 0
        if h.kq == "separate":
            objs += [("K", start, P, "attention"), ("Q", start + P, P, "attention")]
            start += 2 * P
        if h.value == "matrix":
            objs.append(("V", start, P, "values"))
            start += P
            for c in range(h.outputs):
                objs.append((f"r{c + 1}", start, 1, "readout"))
                start += 1
        objects.append(objs)
        N = start
        Nmax = max(Nmax, N)
        hi[k, H_ATT] = ATT[h.attention]
        hi[k, H_KQ] = KQC[h.kq]
        hi[k, H_QRY] = QRY[h.query]
        hi[k, H_QSELF] = 1 if h.query_self else 0
        hi[k, H_MASK] = 1 if getattr(h, "mask", "none") == "causal" else 0
        hi[k, H_VAL] = VAL[h.value]
        hi[k, H_NN] = h.n_neurons
        hi[k, H_C] = h.outputs
        hi[k, H_N] = N
        d = {o[0]: o[1] for o in objs}
        hi[k, H_IK] = d.get("K", -1)
        hi[k, H_IQ] = d.get("Q", -1)
        hi[k, H_IV] = d.get("V", -1)
        hi[k, H_IR] = d.get("r1", -1)
        hi[k, H_QOFF] = off if N else -1
        off += N * N
        if h.kq == "merged":
            hi[k, H_WOFF] = off
            off += P * P
        if h.value in ("neuron", "linear"):
            hi[k, H_VOFF] = off
            off += h.outputs * h.n_neurons * P
        if h.train_sign:
            hi[k, H_AOFF] = off
            off += 1
        if getattr(h, "rpe", 0):
            hi[k, H_BOFF] = off
            hi[k, H_BL] = h.rpe - 1
            off += 2 * h.rpe - 1
        hf[k, F_SCALE] = h.scale
        hf[k, F_SIGN] = h.sign
        hf[k, F_LR] = float(h.n_neurons)  # mean-field neuron scale: step eta * n
        hf[k, F_RW] = hf[k, F_RV] = hf[k, F_RA] = hf[k, F_RB] = 1.0  # rate factors of W~, w~, a (meanfield.engine.rates)
        hf[k, F_RIDGE] = float(getattr(getattr(desc, "training", None), "ridge", 0.0) or 0.0)
        if h.query_vector is not None:
            qv[k] = h.query_vector
    Gr = np.zeros((H, Nmax, Nmax))
    grp = np.full((H, Nmax), -1, dtype=np.int64)
    for k, objs in enumerate(objects):
        for name, s, w, g in objs:
            Gr[k, s:s + w, s:s + w] = Gamma if w == P else 1.0
            grp[k, s:s + w] = GROUP_CODE[g]
    lay = Layout(P=P, heads=heads, size=off, objects=objects, hi=hi, hf=hf, qv=qv, Gr=Gr, grp=grp, Nmax=Nmax)
    # named blocks
    for k, h in enumerate(heads):
        objs = objects[k]
        for i, (a, sa, wa, _) in enumerate(objs):
            for b, sb, wb, _ in objs[i:]:
                name = {"K.K": "A", "K.Q": "S", "Q.Q": "B"}.get(f"{a}.{b}", f"{a}.{b}")
                cnt = wa * (wa + 1) // 2 if a == b else wa * wb
                lay.blocks.append(Block(h.name, name, "gram", (wa, wb), int(hi[k, H_QOFF]), (sa, sa + wa),
                                        (sb, sb + wb), cnt))
        if hi[k, H_WOFF] >= 0:
            lay.blocks.append(Block(h.name, "W", "narrow", (P, P), int(hi[k, H_WOFF]), count=P * P))
        if hi[k, H_VOFF] >= 0:
            shp = (h.outputs, h.n_neurons, P)
            lay.blocks.append(Block(h.name, "w", "narrow", shp, int(hi[k, H_VOFF]), count=int(np.prod(shp))))
        if hi[k, H_AOFF] >= 0:
            lay.blocks.append(Block(h.name, "a", "small", (1,), int(hi[k, H_AOFF]), count=1))
        if hi[k, H_BOFF] >= 0:
            nb = 2 * int(hi[k, H_BL]) + 1
            lay.blocks.append(Block(h.name, "b", "narrow", (nb,), int(hi[k, H_BOFF]), count=nb))
    return lay


def _scale(init, name: str, group: str) -> float:
    """The init scale of a wide object: omega (keys; queries unless omega_q is
    given), omega_v (value matrix), sigma_r (readouts)."""
    if group == "attention":
        return init.omega if name != "Q" or getattr(init, "omega_q", None) is None else init.omega_q
    return init.omega_v if group == "values" else init.sigma_r


def _streams(seed: int):
    a, b = np.random.SeedSequence(seed).spawn(2)
    return np.random.default_rng(a), np.random.default_rng(b)


def _chol_t(G: np.ndarray) -> np.ndarray | None:
    if np.array_equal(G, np.eye(G.shape[0])):
        return None
    return np.linalg.cholesky(G).T


def initial_weights(desc: Description, lay: Layout | None = None) -> list[np.ndarray]:
    """The sampled hidden-space factors U_h = [U_K, U_Q, U_V, u_r...] (m x N_h)
    of every head at finite width (see the module docstring for the law and
    the order of the draws); an explicit network can start from weights M_a
    with M_a E = U_a to share the engine's initial Gram state."""
    lay = lay or layout(desc)
    m = desc.init.width
    if m is None:
        raise ValueError("initial_weights: only at finite width (init.width = m)")
    rng, _ = _streams(desc.init.seed)
    Ct = _chol_t(desc.dictionary.Gamma)
    out = []
    for k, objs in enumerate(lay.objects):
        cols = []
        for name, s, w, g in objs:
            om = _scale(desc.init, name, g)
            Z = rng.standard_normal((m, w)) * (om / np.sqrt(m))
            if w == lay.P and Ct is not None:
                Z = Z @ Ct
            cols.append(Z)
        out.append(np.concatenate(cols, axis=1) if cols else np.zeros((m, 0)))
    return out


def _neuron_values(desc: Description, lay: Layout) -> list[np.ndarray | None]:
    """Initial value vectors (report coordinates mapped to the dictionary), per head."""
    spec = desc.init.neuron_init
    H = len(lay.heads)
    R = desc.dictionary.C.shape[1]
    kind, _, rest = spec.partition(":")
    rows = max(h.outputs * h.n_neurons for h in lay.heads)
    if kind == "zero":
        Wrep = np.zeros((H, rows, R))
    elif kind == "gaussian":
        _, rng = _streams(desc.init.seed)
        Wrep = float(rest) * rng.standard_normal((H, rows, R))
    else:
        vals = [float(v) for v in rest.split(",")]
        if len(vals) == R:
            Wrep = np.broadcast_to(np.array(vals), (H, rows, R)).copy()
        elif len(vals) == H * R:
            Wrep = np.broadcast_to(np.array(vals).reshape(H, 1, R), (H, rows, R)).copy()
        else:
            raise ConfigError(f"neuron_init: const needs {R} values (every head) or {H * R} (head by head); "
                              f"got {len(vals)}")
    G = desc.dictionary.Gamma
    C = desc.dictionary.C
    if desc.dictionary.report is not None:
        M = G @ C @ np.linalg.inv(C.T @ G @ C)
        Wd = np.einsum("pr,hqr->hqp", M, Wrep)
    else:
        Wd = Wrep
    out = []
    for k, h in enumerate(lay.heads):
        out.append(Wd[k, :h.outputs * h.n_neurons] if h.value in ("neuron", "linear") else None)
    return out


def initial_state(desc: Description, lay: Layout | None = None) -> np.ndarray:
    lay = lay or layout(desc)
    if desc.init.init_from is not None:  # a run file's last state (meanfield.engine.initfrom)
        from .initfrom import initial_state as from_file

        return from_file(desc, lay)
    y = np.zeros(lay.size)
    G = desc.dictionary.Gamma
    U = initial_weights(desc, lay) if desc.init.width is not None else None
    vals = _neuron_values(desc, lay)
    for k, h in enumerate(lay.heads):
        N = int(lay.hi[k, H_N])
        if N:
            if U is None:
                Q = np.zeros((N, N))
                for name, s, w, g in lay.objects[k]:
                    om = _scale(desc.init, name, g)
                    Q[s:s + w, s:s + w] = om ** 2 * (G if w == lay.P else 1.0)
                if h.init_gram:  # the description's initial blocks (meanfield.engine.inits; infinite width)
                    from .inits import apply_gram

                    Q = apply_gram(Q, h, k, lay, desc.dictionary.features, desc.dictionary.groups)
            else:
                Q = U[k].T @ U[k]
            off = int(lay.hi[k, H_QOFF])
            y[off:off + N * N] = Q.ravel()
        if lay.hi[k, H_WOFF] >= 0 and h.init_W is not None:
            off = int(lay.hi[k, H_WOFF])
            y[off:off + lay.P ** 2] = np.asarray(h.init_W, dtype=float).ravel()
        if lay.hi[k, H_VOFF] >= 0:
            off = int(lay.hi[k, H_VOFF])
            v = vals[k] if h.init_w is None else np.broadcast_to(np.asarray(h.init_w, float), vals[k].shape)
            y[off:off + vals[k].size] = np.ravel(v)
        if lay.hi[k, H_AOFF] >= 0:
            y[int(lay.hi[k, H_AOFF])] = h.sign
    return y


def derive_summary(desc: Description) -> dict:
    """Names and counts of the reduced variables (JSON-able)."""
    lay = layout(desc)
    return {
        "model": desc.name, "P": lay.P, "features": list(desc.dictionary.features), "state_size": lay.size,
        "variables": [{"head": b.head, "name": b.name, "kind": b.kind, "shape": list(b.shape), "count": b.count}
                      for b in lay.blocks],
        "independent": int(sum(b.count for b in lay.blocks)),
        "gd_map": "Q' = (I - eta D Gamma_r Ghat) Q (I - eta Ghat Gamma_r D); w~' = w~ - eta lr Gamma g; "
                  "W~' = W~ - eta Gamma G_W Gamma; a' = a - eta dLoss/da",
        "flow": "dQ/dt = -(D Gamma_r Ghat Q + Q Ghat Gamma_r D); dw~/dt = -lr Gamma g; dW~/dt = -Gamma G_W Gamma",
    }
