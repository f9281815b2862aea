"""The candidate symmetries of the mixture dynamics and their action (``meanfield.models.mixture.symmetry``).

An element g = (R, swap) is a signed permutation R of the P = 2K features with
an optional exchange of the two heads (:class:`Element`); it acts on the flat
state (``kernels.layout``) by a signed permutation of coordinates and on a
sample set by mapping tokens (:func:`sample_action`: a symmetry maps the
weighted samples onto themselves, every label times the same factor).
:func:`candidates` lists the structured or exhaustive candidate sets;
:func:`coordinate` / :func:`coordinate_name` name a flat-state coordinate.
The search for the group and the reduction live in
:mod:`meanfield.models.mixture.symmetry`.

Example
-------
>>> from meanfield.models.mixture.symmetry_group import coordinate
>>> coordinate(4, 0)
('S', 0, 0, 0)
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from . import kernels
from .data import SampleSet, feature_labels

HEADS = ("+", "-")
BLOCKS = ("S", "A", "B", "w")
KIND_NAMES = {"S": "score", "A": "key_self_score", "B": "query_self_score", "w": "neuron"}
CANDIDATE_SETS = ("structured", "exhaustive")


@dataclass(frozen=True)
class Element:
    """A candidate symmetry: R e_a = sign[a] e_{perm[a]} on the P features, and
    the head swap. Composition ``g.compose(h)`` applies h first."""

    perm: tuple[int, ...]
    sign: tuple[int, ...]
    swap: bool

    @property
    def P(self) -> int:
        return len(self.perm)

    @staticmethod
    def identity(P: int) -> "Element":
        return Element(tuple(range(P)), (1,) * P, False)

    def is_identity(self) -> bool:
        return (not self.swap and self.perm == tuple(range(self.P)) and all(s == 1 for s in self.sign))

    def compose(self, other: "Element") -> "Element":
        perm = tuple(self.perm[other.perm[a]] for a in range(self.P))
        sign = tuple(other.sign[a] * self.sign[other.perm[a]] for a in range(self.P))
        return Element(perm, sign, self.swap != other.swap)

    def inverse(self) -> "Element":
        perm = [0] * self.P
        sign = [0] * self.P
        for a in range(self.P):
            perm[self.perm[a]] = a
            sign[self.perm[a]] = self.sign[a]
        return Element(tuple(perm), tuple(sign), self.swap)

    def matrix(self) -> np.ndarray:
        """R (P, P): R[perm[a], a] = sign[a]."""
        R = np.zeros((self.P, self.P))
        for a in range(self.P):
            R[self.perm[a], a] = self.sign[a]
        return R

    def describe(self, labels=None) -> str:
        """E.g. ``c1->c2 c2->c1 v1->v2 v2->v1`` or ``v1->-v1 v2->-v2, heads +<->-``."""
        lab = labels or feature_labels(self.P // 2)
        parts = [f"{lab[a]}->{'-' if self.sign[a] < 0 else ''}{lab[self.perm[a]]}"
                 for a in range(self.P) if self.perm[a] != a or self.sign[a] != 1]
        text = " ".join(parts) if parts else "identity"
        if self.swap:
            text = ("" if not parts else text + ", ") + "heads +<->-"
        return text

    def to_json(self, labels=None) -> dict:
        lab = labels or feature_labels(self.P // 2)
        return {"features": {lab[a]: ("-" if self.sign[a] < 0 else "") + lab[self.perm[a]] for a in range(self.P)},
                "swap_heads": bool(self.swap), "text": self.describe(lab)}

    @lru_cache(maxsize=8192)
    def state_map(self) -> tuple[np.ndarray, np.ndarray]:
        """(dst, sgn) on the flat state: (g y)[dst[i]] = sgn[i] * y[i]."""
        P = self.P
        n2 = P * P
        N = kernels.state_size(P)
        dst = np.empty(N, np.int64)
        sgn = np.empty(N)
        perm, sign = self.perm, self.sign
        for blk in range(3):
            for h in range(2):
                h2 = h ^ int(self.swap)
                for a in range(P):
                    for b in range(P):
                        i = blk * 2 * n2 + h * n2 + a * P + b
                        dst[i] = blk * 2 * n2 + h2 * n2 + perm[a] * P + perm[b]
                        sgn[i] = sign[a] * sign[b]
        for h in range(2):
            h2 = h ^ int(self.swap)
            for a in range(P):
                i = 6 * n2 + h * P + a
                dst[i] = 6 * n2 + h2 * P + perm[a]
                sgn[i] = sign[a]
        dst.setflags(write=False)
        sgn.setflags(write=False)
        return dst, sgn

    def apply(self, y: np.ndarray) -> np.ndarray:
        """g y for a flat state (or a stack (..., N) of states)."""
        dst, sgn = self.state_map()
        out = np.empty_like(y)
        out[..., dst] = y * sgn
        return out


def transpose_map(P: int) -> tuple[np.ndarray, np.ndarray]:
    """(dst, sgn) of the transposition A_h -> A_h^T, B_h -> B_h^T (S and w fixed)."""
    n2 = P * P
    N = kernels.state_size(P)
    dst = np.arange(N)
    for blk in (1, 2):
        for h in range(2):
            for a in range(P):
                for b in range(P):
                    dst[blk * 2 * n2 + h * n2 + a * P + b] = blk * 2 * n2 + h * n2 + b * P + a
    return dst, np.ones(N)


def coordinate(P: int, i: int) -> tuple[str, int, int, int]:
    """Flat index -> (block, head index, a, b) (b = -1 for w)."""
    n2 = P * P
    if i < 6 * n2:
        blk, r = divmod(i, 2 * n2)
        h, r = divmod(r, n2)
        a, b = divmod(r, P)
        return BLOCKS[blk], h, a, b
    h, a = divmod(i - 6 * n2, P)
    return "w", h, a, -1


def coordinate_name(P: int, i: int, labels=None, canonical: bool = True) -> str:
    """``S+[c1,v1]``, ``A-[v1,v2]`` (canonical: a <= b for A, B as in
    ``symbolic.variables``), ``w+[c1]``."""
    lab = labels or feature_labels(P // 2)
    blk, h, a, b = coordinate(P, i)
    if blk == "w":
        return f"w{HEADS[h]}[{lab[a]}]"
    if canonical and blk in "AB" and a > b:
        a, b = b, a
    return f"{blk}{HEADS[h]}[{lab[a]},{lab[b]}]"


# ----------------------------------------------------------------- the data check

class _SampleIndex:
    """Samples as (token multiset, label) pairs, looked up by a canonical key;
    precomputed once. (With label noise a token multiset occurs with both labels.)"""

    def __init__(self, samples: SampleSet):
        self.samples = samples
        self.tokens = [list(zip(samples.idx[n].tolist(), samples.sgn[n].astype(int).tolist()))
                       for n in range(samples.n)]
        self.y = samples.y.astype(int).tolist()
        self.weight = samples.weight.tolist()
        self.keys = {(tuple(sorted(t)), self.y[n]): n for n, t in enumerate(self.tokens)}
        if len(self.keys) != samples.n:
            raise ValueError("samples: two samples with the same tokens and label")
        # check the groups round-robin, so that a non-symmetry is usually caught in a few samples
        pos = np.zeros(samples.n, np.int64)
        for k in range(samples.K):
            idx = np.flatnonzero(samples.group == k)
            pos[idx] = np.arange(idx.size)
        self.order = np.lexsort((samples.group, pos)).tolist()


def sample_action(el: Element, samples: SampleSet, index: _SampleIndex | None = None, eps: int | None = None):
    """How R acts on the weighted, labelled sample set.

    Returns ``(mapping, eps, reason)``: ``mapping[n] = m`` with R X_n = X_m (as
    multisets of tokens), ``y_m = eps y_n`` and ``weight_m == weight_n``, for the
    given label factor ``eps`` (None: +1, then -1); or ``(None, None, reason)``
    when R does not map the set onto itself that way.
    """
    ix = index if index is not None else _SampleIndex(samples)
    if eps is None:
        out = sample_action(el, samples, ix, 1)
        if out[0] is not None:
            return out
        other = sample_action(el, samples, ix, -1)
        return other if other[0] is not None else (None, None, out[2])
    perm, sign = el.perm, el.sign
    mapping = np.empty(samples.n, np.int64)
    for n in ix.order:
        toks = tuple(sorted([(perm[a], s * sign[a]) for a, s in ix.tokens[n]]))
        m = ix.keys.get((toks, eps * ix.y[n]))
        if m is None:
            if (toks, -eps * ix.y[n]) in ix.keys:
                return None, None, "some labels are flipped and others are not"
            return None, None, f"sample {samples.describe(n)} is mapped to a token multiset that is no sample"
        wn, wm = ix.weight[n], ix.weight[m]
        if abs(wn - wm) > 1e-12 * max(wn, wm):
            return None, None, (f"sample {samples.describe(n)} (weight {wn:.6g}) is mapped to "
                                f"{samples.describe(m)} (weight {wm:.6g})")
        mapping[n] = m
    if len(set(mapping.tolist())) != samples.n:  # pragma: no cover - keys are distinct
        return None, None, "not a bijection of the samples"
    mapping.setflags(write=False)
    return mapping, eps, ""


# ----------------------------------------------------------------- candidates

def candidates(K: int, kind: str = "structured"):
    """Candidate elements (the identity first). See the module docstring."""
    P = 2 * K
    if kind == "structured":
        for pi in itertools.permutations(range(K)):
            perm = tuple(pi) + tuple(K + p for p in pi)
            for cs in itertools.product((1, -1), repeat=K):
                for vs in itertools.product((1, -1), repeat=K):
                    for swap in (False, True):
                        yield Element(perm, cs + vs, swap)
    elif kind == "exhaustive":
        if P > 6:
            raise ValueError(f"candidates: exhaustive search needs P = 2K <= 6, got K = {K}")
        for perm in itertools.permutations(range(P)):
            for sign in itertools.product((1, -1), repeat=P):
                for swap in (False, True):
                    yield Element(tuple(perm), tuple(sign), swap)
    else:
        raise ValueError(f"candidates: kind must be one of {', '.join(CANDIDATE_SETS)}, got {kind!r}")


def named_candidates(K: int) -> dict[str, Element]:
    """Generators worth naming (some are symmetries, some are not)."""
    P = 2 * K
    ident = tuple(range(P))
    cyc = tuple(np.roll(np.arange(K), -1).tolist())
    cyc = cyc + tuple(K + c for c in cyc)
    swap12 = (1, 0) + tuple(range(2, K))
    swap12 = swap12 + tuple(K + c for c in swap12)
    c1 = tuple([-1] + [1] * (P - 1))
    v1 = tuple([1] * K + [-1] + [1] * (K - 1))
    vall = tuple([1] * K + [-1] * K)
    return {
        "group transposition (1 2)": Element(swap12, (1,) * P, False),
        "group cycle": Element(cyc, (1,) * P, False),
        "heads swapped with every v negated": Element(ident, vall, True),
        "every v negated (labels flip, f does not)": Element(ident, vall, False),
        "heads swapped alone (f flips, labels do not)": Element(ident, (1,) * P, True),
        "v1 negated (labels of group 1 only)": Element(ident, v1, False),
        "v1 negated with the heads swapped": Element(ident, v1, True),
        "c1 negated": Element(ident, c1, False),
    }
