"""Exact symmetry reduction of the reduced K-mixture dynamics.

Job: for one configuration (K, L, group weights p, initial state) find, from the
definitions, the group of exact symmetries of the dynamics, the subspace of the
flat state (``kernels.layout``) it leaves invariant, and the closed dynamics in
orbit variables (one representative coordinate per orbit), numerically (numba
kernels used by :func:`reduce` / :func:`run_reduced`) and with sympy
(``meanfield.models.mixture.symmetry_symbolic.render`` / ``write``, which read this
module; generated files ``derivations/generated/mixture_K{K}_L{L}_sym.*``).

Candidates. An element g = (R, swap) is a signed permutation R of the P = 2K
features (R e_a = s_a e_{sigma(a)}), extended by the identity on the complement
of span(E), together with an optional exchange of the two heads. It acts on the
parameters by W_{K,h'} = W_{K,h} R^T, W_{Q,h'} = W_{Q,h} R^T, w_{h'} = R w_h
(h' = h, or the other head if ``swap``), an orthogonal map of parameter space,
so on the reduced variables by

    X_{h'}[sigma(a), sigma(b)] = s_a s_b X_h[a, b]  (X in S, A, B),
    w~_{h'}[sigma(a)] = s_a w~_h[a],

a signed permutation of the flat state coordinates. The network satisfies
f_{g theta}(R X) = (-1)^swap f_theta(X) (swapping the heads negates
f = relu(u_+) - relu(u_-); u values are permuted, never negated). Hence

    Loss(g theta) = sum_n weight_n l(y_n (-1)^swap f_theta(R^T X_n))

equals Loss(theta) for every theta iff R maps the weighted sample set onto
itself with every label multiplied by the same factor eps and eps = (-1)^swap
(:func:`sample_action`). "v -> -v with y -> -y" therefore needs the head swap
(it negates f); a sign flip of one group's v alone changes some labels and not
others and is never a symmetry; c -> -c produces tokens -c_k that no sample
has. The loss being invariant under an orthogonal map of the parameters, the
gradient flow and every GD step commute with g, at any width; at a given
initial state the symmetries of the run are the elements that also fix y0
(infinite width: S = 0, A = B = omega^2 I is fixed by every g).

Candidate sets: ``structured`` (default) is pi in S_K acting on the groups
(c_k -> c_pi(k), v_k -> v_pi(k)) times independent sign flips of every c_k and
every v_k times the head swap: K! 4^K 2 candidates; ``exhaustive`` is every
signed permutation of the P features (also mixing c and v) times the head
swap: P! 2^P 2 candidates (P <= 6). Every accepted candidate is also checked
numerically: the full flow right-hand side and one exact GD step commute with
the action at random states (relative 1e-12), and the loss is invariant; a
candidate that fails is not kept (and is reported: that would be a bug).

For uniform p and an infinite-width init with zero neurons the group is
S_K x Z_2 (order 2 K!): the group permutations and "swap the heads and negate
every v". p = (0.7, 0.3) keeps only Z_2.

Invariant subspace. Fix(G) intersected with {A_h = A_h^T, B_h = B_h^T} (which
the dynamics preserve): coordinates fall into orbits under G and the
transposition of A, B; an orbit reached with both signs is forced to 0. Orbit
variables z_r are the values of the representative (smallest flat index) of
each remaining orbit; ``embed(z)`` fills every member with its sign;
``project(y)`` reads the representatives; ``projector()`` is the group average.
K = 2, L = 3 (uniform p, zero neurons): 22 orbit variables (8 scores, 6 + 6
self-scores, 2 neuron alignments, all of head +) for the 80 variables of the
full system (104 flat coordinates); the same 22 for every K with uniform p.

Reduced right-hand side. On Fix(G): u_{h'}(X_{m}) = u_h(X_n) whenever
g maps (h, n) to (h', m), so one pre-activation per orbit of (head, sample)
pairs is computed. G_h = dLoss/dS_h is invariant under the stabiliser H_h of
head h, and sum_{n in O} c_n = (|O| / |H_h|) sum_{g in H_h} g c_{r_O} for the
contribution c_n of sample n, so G_h is the H_h-average (the signed mean over
each orbit of entries) of sum_O |O| c_{r_O}: one backward pass per orbit of
samples. The updates (flow, exact GD map) are evaluated at the representative
coordinates only.

Not a symmetry, not eliminated: the gradient flow also conserves
tr(M (A_h - B_h)) for M = I and M = the group permutation (K = 2), both 0 at
A = B, so a flow trajectory of K = 2, L = 3 spans 20 of the 22 orbit
dimensions; the exact GD map breaks these at O(eta^2) (its trajectory spans 21,
the last singular value ~1e-9 of ~4e2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from . import kernels
from .data import SampleSet, feature_labels, sample_set
from .symmetry_group import (BLOCKS, CANDIDATE_SETS, HEADS, KIND_NAMES, Element, _SampleIndex,  # noqa: F401
                             candidates, coordinate, coordinate_name, named_candidates, sample_action,
                             transpose_map)
from .symmetry_kernels import _red_grads, _scratch, red_flow_rhs, red_gd_advance
from .system import criterion_args, samples_of

NUMERIC_TOL = 1e-12


# ----------------------------------------------------------------- numeric checks

def _sym_random_state(rng, P, scale=1.0):
    S = rng.standard_normal((2, P, P)) * scale
    A = rng.standard_normal((2, P, P)) * scale
    B = rng.standard_normal((2, P, P)) * scale
    A = 0.5 * (A + A.transpose(0, 2, 1))
    B = 0.5 * (B + B.transpose(0, 2, 1))
    w = rng.standard_normal((2, P)) * scale
    return kernels.pack(S, A, B, w)


class _Numeric:
    """Full right-hand sides at a few random states, to test equivariance."""

    def __init__(self, samples: SampleSet, seed: int = 20240607, r0: float = 0.5):
        self.s = samples
        self.r0 = r0
        rng = np.random.default_rng(seed)
        self.states = [_sym_random_state(rng, samples.P, sc) for sc in (0.5, 1.5)]
        self.base = [self._eval(y) for y in self.states]

    def _eval(self, y):
        s = self.s
        f = np.empty_like(y)
        loss = kernels.flow_rhs(y, f, s.P, s.idx, s.sgn, s.y, s.weight, self.r0, True, True)
        g = y.copy()
        kernels.gd_advance(g, 1, 0.3, s.P, s.idx, s.sgn, s.y, s.weight, s.consistent, self.r0,
                           True, True, 0, 1, 0.0, np.inf)
        return loss, f, g

    def error(self, el: Element) -> float:
        """max over states of the relative violation of loss(g y) = loss(y),
        rhs(g y) = g rhs(y), gd(g y) = g gd(y)."""
        err = 0.0
        for y, (loss, f, g) in zip(self.states, self.base):
            loss2, f2, g2 = self._eval(el.apply(y))
            err = max(err, abs(loss2 - loss) / max(1.0, abs(loss)),
                      float(np.max(np.abs(f2 - el.apply(f)))) / max(1.0, float(np.max(np.abs(f)))),
                      float(np.max(np.abs(g2 - el.apply(g)))) / max(1.0, float(np.max(np.abs(g)))))
        return err


@dataclass
class Verdict:
    """What happened to one candidate."""

    element: Element
    reason: str                 # "" if accepted
    label_factor: int | None    # eps: labels multiplied by (None: the set is not preserved)
    fixes_init: bool | None
    numeric_error: float        # nan when not checked
    accepted: bool

    def to_json(self, labels=None) -> dict:
        num = None if math.isnan(self.numeric_error) else ("pass" if self.numeric_error <= NUMERIC_TOL else "fail")
        return {"element": self.element.describe(labels), "accepted": self.accepted, "reason": self.reason,
                "label_factor": self.label_factor, "fixes_init": self.fixes_init, "numeric_check": num}


@dataclass
class SymmetryGroup:
    """The symmetry group of one configuration (elements: identity first)."""

    K: int
    L: int
    p: tuple[float, ...]
    elements: list
    candidate_set: str
    n_candidates: int
    n_data_symmetries: int          # candidates that preserve the loss (before the init check)
    named: dict                     # name -> Verdict
    hidden: list = field(default_factory=list)      # numeric pass, data fail (verify="all")
    inconsistent: list = field(default_factory=list)  # data pass, numeric fail: a bug if not empty
    samples: SampleSet | None = field(default=None, repr=False)

    @property
    def order(self) -> int:
        return len(self.elements)

    @property
    def P(self) -> int:
        return 2 * self.K

    def generators(self) -> list:
        """A small generating set (greedy: add an element not yet generated)."""
        gens = []
        span = {Element.identity(self.P)}
        for el in self.elements:
            if el in span:
                continue
            gens.append(el)
            span = _closure(gens, self.P)
        return gens

    def structure(self) -> str:
        """E.g. ``S_2 x Z_2`` when the group is (group permutations) x (head swap)."""
        perms = [e for e in self.elements if not e.swap]
        has_swap = any(e.swap for e in self.elements)
        k = len(perms)
        pure = all(all(s == 1 for s in e.sign) for e in perms)
        if pure and k == math.factorial(self.K) and k > 1:
            base = f"S_{self.K}"
        elif k == 1:
            base = ""
        else:
            base = f"a group of {k} feature maps"
        if has_swap:
            return f"{base} x Z_2" if base else "Z_2"
        return base or "trivial"

    def to_json(self) -> dict:
        lab = feature_labels(self.K)
        return {
            "order": self.order,
            "structure": self.structure(),
            "elements": [e.to_json(lab) for e in self.elements],
            "generators": [e.describe(lab) for e in self.generators()],
            "candidate_set": self.candidate_set,
            "n_candidates": self.n_candidates,
            "n_loss_symmetries": self.n_data_symmetries,
            "named_candidates": {k: v.to_json(lab) for k, v in self.named.items()},
        }


def _closure(gens, P):
    out = {Element.identity(P)}
    frontier = list(out)
    while frontier:
        new = []
        for a in frontier:
            for g in gens:
                c = g.compose(a)
                if c not in out:
                    out.add(c)
                    new.append(c)
        frontier = new
    return out


def find_group(K: int, L: int, p=None, y0: np.ndarray | None = None, candidate_set: str = "structured",
               verify: str = "accepted", tol: float = NUMERIC_TOL, seed: int = 20240607,
               samples: SampleSet | None = None) -> SymmetryGroup:
    """The symmetry group of (K, L, p) at initial state ``y0`` (None: no init condition).

    ``verify``: "accepted" (numerically check the candidates that pass the data
    check, and the named ones), "all" (every candidate; reports ``hidden``
    symmetries that pass numerically but not by definition), "none".
    ``samples``: the weighted sample set to use instead of ``sample_set(K, L, p)``.
    """
    if samples is None:
        samples = sample_set(K, L, p)
    elif (samples.K, samples.L) != (K, L):
        raise ValueError(f"samples: built for K={samples.K}, L={samples.L}, not K={K}, L={L}")
    P = samples.P
    index = _SampleIndex(samples)
    num = _Numeric(samples, seed=seed) if verify != "none" else None
    y0 = None if y0 is None else np.asarray(y0, dtype=np.float64)
    if y0 is not None and y0.shape != (kernels.state_size(P),):
        raise ValueError(f"y0: expected shape ({kernels.state_size(P)},), got {y0.shape}")

    def judge(el):
        need = -1 if el.swap else 1  # swapping the heads negates f, so the labels must flip with it
        mapping, eps, reason = sample_action(el, samples, index, need)
        ok = mapping is not None
        if not ok:
            m2, e2, _ = sample_action(el, samples, index, -need)
            if m2 is not None:
                eps = e2
                reason = (f"labels are multiplied by {e2:+d} but f by {need:+d}: "
                          f"the loss is not preserved")
        fixes = None if (y0 is None or not ok) else bool(np.array_equal(el.apply(y0), y0))
        return ok, eps, reason, fixes

    elements, hidden, inconsistent = [], [], []
    n_cand = n_data = 0
    for el in candidates(K, candidate_set):
        n_cand += 1
        ok, eps, reason, fixes = judge(el)
        n_data += ok
        err = math.nan
        if num is not None and (ok or verify == "all"):
            err = num.error(el)
            if ok and not err <= tol:
                inconsistent.append(Verdict(el, "numeric check failed", eps, fixes, err, False))
                continue
            if not ok and err <= tol:
                hidden.append(Verdict(el, reason, eps, fixes, err, False))
        if ok and fixes is False:
            continue
        if ok:
            elements.append(el)
    named = {}
    for name, el in named_candidates(K).items():
        ok, eps, reason, fixes = judge(el)
        err = num.error(el) if num is not None else math.nan
        if ok and fixes is False:
            reason = "does not fix the initial state"
        acc = ok and fixes is not False and (num is None or err <= tol)
        named[name] = Verdict(el, "" if acc else (reason or "numeric check failed"), eps, fixes, err, acc)
    ident = Element.identity(P)
    assert elements and elements[0] == ident, "the identity must be a symmetry"
    # a group: closed under composition
    eset = set(elements)
    for a in elements:
        for b in elements:
            assert a.compose(b) in eset, "the accepted candidates are not closed under composition"
    return SymmetryGroup(K=K, L=L, p=samples.p, elements=elements, candidate_set=candidate_set,
                         n_candidates=n_cand, n_data_symmetries=n_data, named=named, hidden=hidden,
                         inconsistent=inconsistent, samples=samples)


def samples_of_config(cfg) -> SampleSet:
    """The exact sample set a ``MixtureConfig`` trains on (as ``run.run`` builds it)."""
    if getattr(cfg, "dense", False):
        raise ValueError("symmetry: configs on the dense path (feature_gram, n_train / noise_sigma, "
                         "n_neurons > 1) are not supported; the reduction is for the exact sample set")
    return samples_of(cfg)


def group_of_config(cfg, **kw) -> SymmetryGroup:
    """The symmetry group of a ``MixtureConfig`` (data and its initial state)."""
    from .init import initial_state

    return find_group(cfg.K, cfg.L, cfg.p, initial_state(cfg), samples=samples_of_config(cfg), **kw)


# ----------------------------------------------------------------- invariant subspace

class Reduction:
    """The invariant subspace of a symmetry group and the reduced dynamics on it.

    Attributes: ``N`` (flat state size), ``n`` (orbit variables), ``rep`` (flat
    index of each representative), ``orbit_of`` / ``orbit_sign`` (N,) (orbit
    index, -1 if forced to zero, and sign of every coordinate),
    ``members[r]`` (list of (flat index, sign)), ``names`` (the representatives'
    names), ``forced_zero`` (flat indices).
    """

    def __init__(self, group: SymmetryGroup):
        self.group = group
        self.K, self.L, self.P = group.K, group.L, group.P
        P = self.P
        self.samples = group.samples if group.samples is not None else sample_set(group.K, group.L, group.p)
        self.labels = feature_labels(group.K)
        N = self.N = kernels.state_size(P)
        maps = [e.state_map() for e in group.elements if not e.is_identity()] + [transpose_map(P)]
        orbit_of = np.full(N, -2, np.int64)
        orbit_sign = np.zeros(N)
        orbits = []
        for i in range(N):
            if orbit_of[i] != -2:
                continue
            k = len(orbits)
            members = {i: 1.0}
            stack = [i]
            conflict = False
            while stack:
                j = stack.pop()
                for dst, sgn in maps:
                    jj, ss = int(dst[j]), members[j] * sgn[j]
                    if jj in members:
                        if members[jj] != ss:
                            conflict = True
                    else:
                        members[jj] = ss
                        stack.append(jj)
            for j, s in members.items():
                orbit_of[j] = -1 if conflict else k
                orbit_sign[j] = 0.0 if conflict else s
            if not conflict:
                orbits.append(sorted(members.items()))
        assert np.all(orbit_of >= -1)
        self.orbit_of, self.orbit_sign = orbit_of, orbit_sign
        self.members = orbits
        self.n = len(orbits)
        self.rep = np.array([m[0][0] for m in orbits], np.int64)
        assert np.all(orbit_sign[self.rep] == 1.0)
        self.forced_zero = np.flatnonzero(orbit_of == -1)
        self.names = [coordinate_name(P, int(i), self.labels) for i in self.rep]
        self.kinds = [coordinate(P, int(i))[0] for i in self.rep]
        for a in (self.orbit_of, self.orbit_sign, self.rep, self.forced_zero):
            a.setflags(write=False)
        self._tables()

    # ---------------------------------------------------------- linear maps
    def embed(self, z: np.ndarray) -> np.ndarray:
        """Flat state(s) (..., N) of orbit variables z (..., n)."""
        z = np.asarray(z, dtype=np.float64)
        zp = np.concatenate([z, np.zeros(z.shape[:-1] + (1,))], axis=-1)
        return zp[..., self.orbit_of] * self.orbit_sign  # orbit -1 reads the appended 0

    def project(self, y: np.ndarray) -> np.ndarray:
        """Orbit variables read off the representatives (exact on the subspace)."""
        return np.asarray(y, dtype=np.float64)[..., self.rep]

    def project_average(self, y: np.ndarray) -> np.ndarray:
        """Orbit variables of the orthogonal projection of y on the subspace (signed orbit means)."""
        y = np.asarray(y, dtype=np.float64)
        out = np.zeros(y.shape[:-1] + (self.n,))
        for r, mem in enumerate(self.members):
            idx = [i for i, _ in mem]
            sg = np.array([s for _, s in mem])
            out[..., r] = (y[..., idx] * sg).mean(axis=-1)
        return out

    def embedding_matrix(self) -> np.ndarray:
        E = np.zeros((self.N, self.n))
        for r, mem in enumerate(self.members):
            for i, s in mem:
                E[i, r] = s
        return E

    def projector(self) -> np.ndarray:
        """The orthogonal projector on the subspace: E diag(1/|orbit|) E^T."""
        E = self.embedding_matrix()
        return E @ np.diag(1.0 / (E * E).sum(axis=0)) @ E.T

    def group_average(self) -> np.ndarray:
        """(1/|G'|) sum over G' = G x {1, transposition of A, B} of the action matrices."""
        mats = []
        tdst, _ = transpose_map(self.P)
        for e in self.group.elements:
            dst, sgn = e.state_map()
            M = np.zeros((self.N, self.N))
            M[dst, np.arange(self.N)] = sgn
            T = np.zeros((self.N, self.N))
            T[tdst, np.arange(self.N)] = 1.0
            mats += [M, T @ M]
        return sum(mats) / len(mats)

    def distance(self, y: np.ndarray) -> float:
        """max |y - embed(project_average(y))| over the state(s)."""
        return float(np.max(np.abs(y - self.embed(self.project_average(y)))))

    def counts(self) -> dict:
        by = {KIND_NAMES[b]: sum(1 for k in self.kinds if k == b) for b in BLOCKS}
        from .symbolic import variables

        return {"independent": self.n, "full": variables(self.K, self.L)["total"], "flat_state": self.N,
                "forced_zero_flat": int(self.forced_zero.size), "by_kind": by}

    # ---------------------------------------------------------- kernel tables
    def _tables(self):
        s, P = self.samples, self.P
        n = s.n
        # orbits of (head, sample) pairs: u_{h', m} = u_{h, n} on the subspace
        smaps = {}
        index = _SampleIndex(s)
        for e in self.group.elements:
            m, eps, _ = sample_action(e, s, index, -1 if e.swap else 1)
            assert m is not None and eps == (-1 if e.swap else 1)
            smaps[e] = m
        hn = np.full((2, n), -1, np.int64)
        fw_h, fw_n = [], []
        for h in range(2):
            for k in range(n):
                if hn[h, k] >= 0:
                    continue
                o = len(fw_h)
                fw_h.append(h)
                fw_n.append(k)
                for e, m in smaps.items():
                    hn[h ^ int(e.swap), m[k]] = o
        # heads whose variables are computed (hold representatives)
        grad_heads = sorted({coordinate(P, int(i))[1] for i in self.rep})
        bw_h, bw_n, bw_mult = [], [], []
        for h in grad_heads:
            seen = set()
            for k in range(n):
                if k in seen:
                    continue
                orb = {int(smaps[e][k]) for e in self.group.elements if not e.swap}
                seen |= orb
                bw_h.append(h)
                bw_n.append(k)
                bw_mult.append(float(len(orb)))
        rk, rh, ra, rb = [], [], [], []
        for i in self.rep:
            blk, h, a, b = coordinate(P, int(i))
            rk.append(BLOCKS.index(blk))
            rh.append(h)
            ra.append(a)
            rb.append(b)
        self.fw = (np.array(fw_h, np.int64), np.array(fw_n, np.int64))
        self.hn_orbit = hn
        self.bw = (np.array(bw_h, np.int64), np.array(bw_n, np.int64), np.array(bw_mult))
        self.grad_heads = np.array(grad_heads, np.int64)
        self.rep_coord = (np.array(rk, np.int64), np.array(rh, np.int64), np.array(ra, np.int64),
                          np.array(rb, np.int64))
        self.sample_maps = smaps
        self._args = (P, s.idx, s.sgn, s.y, s.weight, self.orbit_of, self.orbit_sign, self.fw[0], self.fw[1],
                      self.hn_orbit, self.bw[0], self.bw[1], self.bw[2], self.grad_heads, *self.rep_coord)

    def sample_orbits(self) -> list[dict]:
        """Orbits of (head, sample) pairs: the pre-activation u_h(X_n) is the same on each."""
        s = self.samples
        out = []
        for o, (h, k) in enumerate(zip(*self.fw)):
            mem = [(HEADS[hh], int(kk)) for hh in range(2) for kk in range(s.n) if self.hn_orbit[hh, kk] == o]
            out.append({"rep": (HEADS[int(h)], int(k)), "members": mem})
        return out

    # ---------------------------------------------------------- reduced dynamics
    def loss_grads(self, z, r0: float = 1.0):
        """(loss, G (2,P,P), dw (2,P), margins (n,), U (orbits of (h, n))); G and dw
        filled on the heads that hold representatives."""
        z = np.ascontiguousarray(z, dtype=np.float64)
        w = _scratch(z, self._args)
        loss = _red_grads(z, self._args, float(r0), w)
        return loss, w[3], w[4], w[2], w[1]

    def rhs(self, z, r0: float = 1.0, mode=(True, True)) -> np.ndarray:
        """Flow right-hand side in orbit variables (= project(full rhs(embed(z))))."""
        z = np.ascontiguousarray(z, dtype=np.float64)
        out = np.empty(self.n)
        red_flow_rhs(z, out, self._args, float(r0), bool(mode[0]), bool(mode[1]))
        return out

    def gd_map(self, z, eta: float, r0: float = 1.0, mode=(True, True)) -> np.ndarray:
        """One exact GD step in orbit variables."""
        z = np.array(z, dtype=np.float64, copy=True)
        done, code, _ = red_gd_advance(z, 1, float(eta), self._args, self.samples.consistent, float(r0),
                                       bool(mode[0]), bool(mode[1]), 0, 1, 0.0, np.inf)
        if (done, code) != (1, 0):
            raise FloatingPointError(f"gd_map: step failed (code {code})")
        return z

    def system(self, relu_prime_at_zero: float = 1.0, max_abs: float = math.inf) -> "ReducedSystem":
        return ReducedSystem(self, relu_prime_at_zero, max_abs)

    def to_json(self) -> dict:
        """Variables with their orbit members and signs, counts, the group."""
        P, lab = self.P, self.labels
        var = []
        for r, mem in enumerate(self.members):
            seen = {}
            for i, sg in mem:
                nm = coordinate_name(P, i, lab)
                seen.setdefault(nm, int(sg))
            var.append({"name": self.names[r], "kind": KIND_NAMES[self.kinds[r]],
                        "members": [{"name": k, "sign": v} for k, v in seen.items()]})
        zero = sorted({coordinate_name(P, int(i), lab) for i in self.forced_zero})
        s = self.samples
        orbits = [{"rep": f"u{h}(X{k + 1})",
                   "members": [f"u{hh}(X{kk + 1})" for hh, kk in o["members"]]}
                  for o in self.sample_orbits() for h, k in [o["rep"]]]
        return {"K": self.K, "L": self.L, "counts": self.counts(), "p": list(s.p), "n_samples": s.n,
                "group": self.group.to_json(), "variables": var, "forced_zero": zero,
                "preactivation_orbits": orbits, "samples": [s.describe(i) for i in range(s.n)]}


# ----------------------------------------------------------------- integrate adapter

@dataclass
class ReducedSystem:
    """The reduced dynamics in orbit variables as a system for ``meanfield.core.integrate``."""

    reduction: Reduction
    relu_prime_at_zero: float = 1.0
    max_abs: float = math.inf

    def gd_advance(self, z, nsteps, eta, mode, criterion):
        kind, op, thr = criterion_args(criterion)
        red = self.reduction
        done, code, _ = red_gd_advance(z, int(nsteps), float(eta), red._args, red.samples.consistent,
                                       float(self.relu_prime_at_zero), bool(mode[0]), bool(mode[1]),
                                       kind, op, thr, float(self.max_abs))
        return int(done), int(code)

    def rhs(self, z, mode):
        return self.reduction.rhs(z, self.relu_prime_at_zero, mode)

    def criterion_value(self, z, name):
        red = self.reduction
        loss, G, dw, margin, U = red.loss_grads(z, self.relu_prime_at_zero)
        if name == "grad_w":  # the full state's dLoss/dw~ (both heads)
            woff = 6 * red.P * red.P
            rk, rh, ra, rb = red.rep_coord
            tot = 0.0
            for i in range(woff, red.N):
                o = red.orbit_of[i]
                if o >= 0:
                    tot += dw[rh[o], ra[o]] ** 2
            return float(np.sqrt(tot))
        return float(kernels.criterion_value(kernels.CRITERIA[name], loss, margin, red.samples.consistent, dw))


# ----------------------------------------------------------------- public entry points

@dataclass
class Reduced:
    """What :func:`reduce` returns: the group, the reduction and its maps.

    ``embed(z) -> y``, ``project(y) -> z``, ``rhs(z, mode=(True, True))`` (flow),
    ``gd_map(z, eta, mode=(True, True))`` (one exact GD step), ``system`` (for
    ``meanfield.core.integrate`` solvers), ``z0`` (the initial orbit variables).
    """

    cfg: object
    group: SymmetryGroup
    reduction: Reduction
    z0: np.ndarray

    def embed(self, z):
        return self.reduction.embed(z)

    def project(self, y):
        return self.reduction.project(y)

    def rhs(self, z, mode=(True, True)):
        return self.reduction.rhs(z, self.cfg.relu_prime_at_zero, mode)

    def gd_map(self, z, eta=None, mode=(True, True)):
        return self.reduction.gd_map(z, self.cfg.eta if eta is None else eta, self.cfg.relu_prime_at_zero, mode)

    @property
    def system(self) -> ReducedSystem:
        return self.reduction.system(self.cfg.relu_prime_at_zero, self.cfg.max_abs)

    def __iter__(self):  # embed, project, rhs_reduced, gd_map_reduced = reduce(cfg)
        return iter((self.embed, self.project, self.rhs, self.gd_map))


def reduce(cfg, **kw) -> Reduced:
    """The symmetry reduction of a ``MixtureConfig`` (group from the data and the
    initial state, see :func:`find_group`; ``kw`` goes there)."""
    from .init import initial_state

    y0 = initial_state(cfg)
    group = find_group(cfg.K, cfg.L, cfg.p, y0, samples=samples_of_config(cfg), **kw)
    red = Reduction(group)
    z0 = red.project(y0)
    if not np.array_equal(red.embed(z0), y0):  # pragma: no cover - every element fixes y0
        raise AssertionError("the initial state is not in the invariant subspace")
    return Reduced(cfg, group, red, z0)


def run_reduced(cfg, monitor=None, reduced: Reduced | None = None):
    """Integrate ``cfg`` in orbit variables with the same solver, stages and
    records as ``run.run``. Returns (trajectory with full states embedded,
    trajectory in orbit variables, the :class:`Reduced`)."""
    import copy

    from .system import save_at, solver, stages

    red = reduced or reduce(cfg)
    traj = solver(cfg).solve(red.system, red.z0, stages(cfg), save_at(cfg), monitor)
    full = copy.copy(traj)
    full.y = [red.embed(z) for z in traj.y]
    return full, traj, red

