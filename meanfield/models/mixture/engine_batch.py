"""The mixture's batched kernels as the engine's batch of the mixture family (registered in ``.plugin``).

:func:`meanfield.engine.run_batch` is the one ensemble path. For a description
of family ``mixture`` that the hand kernels run (not dense, method gd or rk4,
and the description as the family built it: its training, model and tokens
those of its own config) it hands the batch to :func:`batch`: the initial
states go from the engine's layout (per head the Gram matrix
Q = [[A, S], [S^T, B]] of the keys and queries, then the neuron w) to the
mixture's flat (c S, c A, c B, w) (c the head's logit scale), the trajectories
run in :func:`meanfield.models.mixture.batched.advance` (its vectorised
lanes), and the records come back in the engine's layout. Anything else
returns None and the generic kernels run it. Equal to the generic batch to
rounding (``tests/test_engine_mixture_batch.py``).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from numba import njit

from ...core.batched import COMPLETE

HEADS = ("+", "-")


def _blocks(lay):
    """Per head: (offset and size N of its Gram matrix Q, the blocks A, S, B, offset and size of w)."""
    out = []
    for h in HEADS:
        A, S, B, w = (lay.block(h, k) for k in ("A", "S", "B", "w"))
        N = max(b.rows[1] for b in (A, S, B))
        out.append((S.offset, N, A, S, B, w.offset, int(np.prod(w.shape))))
    return out


def to_fast(lay, Y: np.ndarray, scales) -> np.ndarray:
    """Engine states (..., lay.size) -> the mixture's flat states (..., 6 P^2 + 2 P).

    Example
    -------
    >>> import meanfield as mf
    >>> from meanfield.engine.reduce import initial_state, layout
    >>> d = mf.load("mixture", K=2, L=3, width=4)
    >>> lay = layout(d)
    >>> y = initial_state(d, lay)
    >>> bool(np.array_equal(to_engine(lay, to_fast(lay, y, [1.0, 1.0]), [1.0, 1.0]), y))
    True
    """
    lead = Y.shape[:-1]
    Y2 = np.asarray(Y, np.float64).reshape((-1, Y.shape[-1]))
    S, A, B, w = [], [], [], []
    for (off, N, bA, bS, bB, woff, wn), c in zip(_blocks(lay), scales):
        Q = Y2[:, off:off + N * N].reshape(-1, N, N)
        for lst, blk in ((A, bA), (S, bS), (B, bB)):
            lst.append(c * Q[:, blk.rows[0]:blk.rows[1], blk.cols[0]:blk.cols[1]])
        w.append(Y2[:, woff:woff + wn])
    parts = [np.stack(x, axis=1).reshape(Y2.shape[0], -1) for x in (S, A, B, w)]  # kernels.pack's order
    return np.concatenate(parts, axis=1).reshape(lead + (-1,))


def _engine_map(lay, P: int, scales):
    """(dst, src, div): engine entry dst[i] = flat mixture entry src[i] / div[i] (the head's scale; 1 for w:
    x / 1 is x), one entry a written engine entry: each Gram block, then its mirror image (where the two meet,
    on the diagonal blocks A and B, the mirror's value)."""
    n2 = P * P
    last: dict = {}
    for j, ((off, N, bA, bS, bB, woff, wn), c) in enumerate(zip(_blocks(lay), scales)):
        for blk, base in ((bA, 2 * n2), (bS, 0), (bB, 4 * n2)):
            (r0, r1), (c0, c1) = blk.rows, blk.cols
            src = [[base + j * n2 + a * P + b for b in range(c1 - c0)] for a in range(r1 - r0)]
            for a in range(r1 - r0):
                for b in range(c1 - c0):
                    last[off + (r0 + a) * N + c0 + b] = (src[a][b], c)
            for a in range(r1 - r0):
                for b in range(c1 - c0):
                    last[off + (c0 + b) * N + r0 + a] = (src[a][b], c)
        for a in range(wn):
            last[woff + a] = (6 * n2 + j * P + a, 1.0)
    dst = np.array(list(last), np.int64)
    src = np.array([v[0] for v in last.values()], np.int64)
    div = np.array([v[1] for v in last.values()], np.float64)
    return dst, src, div


def to_engine(lay, Yf: np.ndarray, scales) -> np.ndarray:
    """The mixture's flat states (..., 6 P^2 + 2 P) -> engine states (..., lay.size): each Gram block
    (and its mirror image) divided by its head's scale, w as it is; every other entry 0. One gather of the
    entries (:func:`_engine_map`)."""
    lead = Yf.shape[:-1]
    F = Yf.reshape((-1, Yf.shape[-1]))
    P = int(round((-2 + math.sqrt(4 + 24 * F.shape[1])) / 12))
    if F.shape[1] != 6 * P * P + 2 * P:
        raise ValueError(f"to_engine: a mixture state has 6 P^2 + 2 P entries, got {F.shape[1]}")
    dst, src, div = _engine_map(lay, P, scales)
    out = np.zeros((F.shape[0], lay.size))
    _scatter(np.ascontiguousarray(F, np.float64), src, div, dst, out)
    return out.reshape(lead + (lay.size,))


@njit(cache=True, nogil=True)
def _scatter(F, src, div, dst, out):
    # out[r, dst[k]] = F[r, src[k]] / div[k]: numpy's column gather and scatter took 4x longer
    for r in range(F.shape[0]):
        for k in range(src.shape[0]):
            out[r, dst[k]] = F[r, src[k]] / div[k]


def _gridded(cfg, **kw):
    """``cfg`` recording every step (the engine batch sets its own grid: ``advance(..., every=)``)."""
    return dataclasses.replace(cfg, record_every=1, record_log=None, record_dt=None, **kw)


def _with_each(base, name: str, values) -> list:
    """``dataclasses.replace(base, **{name: float(v)})`` for each v, without its cost (a fresh ``__init__`` of
    every field: 16 us a config, a fifth of a 10^4-trajectory batch of 100 steps). MixtureConfig is a plain
    frozen dataclass (no ``__post_init__``, no slots), so a copy of its fields with one replaced is the same
    object ``replace`` makes."""
    assert dataclasses.is_dataclass(base) and not hasattr(type(base), "__post_init__")
    fields = dict(base.__dict__)
    out = []
    for v in values:
        c = object.__new__(type(base))
        fields[name] = float(v)
        c.__dict__.update(fields)
        out.append(c)
    return out


def _applies(desc) -> bool:
    """The description is the one the family built from its config, and the hand kernels run that config."""
    from .batched import batchable
    from .config import MixtureConfig
    from .family import mixture_description

    cfg = desc.parameters
    if not isinstance(cfg, MixtureConfig) or cfg.method not in ("gd", "rk4") or batchable(_gridded(cfg)) is not None:
        return False
    own = mixture_description(cfg)
    if desc.training != own.training or desc.model != own.model:
        return False
    a, b = np.asarray(desc.data.tokens), np.asarray(own.data.tokens)
    return a.shape == b.shape and bool(np.array_equal(a, b)) and bool(
        np.array_equal(np.asarray(desc.data.weight), np.asarray(own.data.weight)))


def batch(desc, Y0: np.ndarray, etas: np.ndarray, every: int, backend: str, max_bytes: float):
    """The engine batch of a mixture description on the hand kernels, or None where they do not apply.

    Parameters
    ----------
    desc : meanfield.engine.Description
        A description of family ``mixture``.
    Y0 : ndarray
        (B, state) initial states in the engine's layout.
    etas : ndarray
        (B,) step sizes (gd: eta; rk4: dt).
    every : int
        Records every ``every`` steps (0: initial, stage ends, final).
    backend : str
        ``cpu`` or ``cuda``.
    max_bytes : float
        The record buffers' ceiling.

    Returns
    -------
    dict or None
        The arrays of a :class:`meanfield.engine.batched.BatchRun` (engine layout).

    Example
    -------
    >>> import meanfield as mf
    >>> import meanfield.engine as me
    >>> d = mf.load("mixture", K=2, L=3, steps=20)
    >>> b = me.run_batch(d, seeds=[0, 1], widths=4)       # these kernels
    >>> g = me.run_batch(d, seeds=[0, 1], widths=4, fast=False)  # the generic ones
    >>> bool(abs(b.y - g.y).max() < 1e-12)
    True
    """
    if not _applies(desc):
        return None
    from .batched import advance

    from ...engine.reduce import layout

    cfg = desc.parameters
    gd = cfg.method == "gd"
    lay = layout(desc)
    scales = [h.scale for h in desc.model.heads]
    if [h.name for h in desc.model.heads] != list(HEADS):
        return None
    cfgs = _with_each(_gridded(cfg), "eta" if gd else "dt", etas)
    res = advance(cfgs, list(to_fast(lay, Y0, scales)), backend, max_bytes, every=int(every))
    B, ns = Y0.shape[0], max(1, len(desc.training.stages))
    n = res.n_records
    return dict(y=to_engine(lay, res.y_final, scales), loss=res.loss, steps=res.step[np.arange(B), n - 1].copy(),
                stop_stage=res.stop_stage, code=res.code,
                status=["complete" if c == COMPLETE else "diverged" for c in res.code],
                rec_t=res.t, rec_step=res.step, rec_stage=res.stage, rec_y=to_engine(lay, res.y, scales),
                n_records=n, end_step=res.end_step[:, :ns].copy(), end_t=res.end_t[:, :ns].copy(),
                end_reason=res.end_reason[:, :ns].copy())
