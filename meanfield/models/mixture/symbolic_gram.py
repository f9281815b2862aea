"""The mixture head's exact GD map in FEATURE coordinates (Gram metric Gamma), from the engine's derivation.

Features E (d x P) with Gram matrix Gamma = E^T E (not the identity). Feature
coordinates of one head (``docs/conventions.md``, with E no longer
orthonormal):

    S = E^T W_K^T W_Q E,   A = E^T W_K^T W_K E,   B = E^T W_Q^T W_Q E,   w~ = E^T w.

Every token is in span(E), so the loss depends on the weights only through S
(the logits, with signs) and w~; G = dLoss/dS, g = dLoss/dw~. The map is NOT
derived again here: it is the engine's general Gram-closure map
(:func:`meanfield.engine.symbolic.derive_general`: one explicit full-batch GD
step on the stacked wide weights M = [W_K W_Q], rewritten by sympy in the Gram
variables) expanded on the mixture head's blocks by
:func:`meanfield.engine.symbolic.block_map` (keys K and queries Q acting on
tokens, metric Gamma, the loss reads Q_KQ = S), with the blocks named as in
the paper (Q_KQ = S, Q_KK = A, Q_QQ = B); the neuron map is the engine's
narrow-object map w~' = w~ - eta Gamma g. What this module adds is the
mixture's naming and its check against the paper's own closed form
(:data:`EXPECTED`, checked equal in :func:`derive`):

    S' = S - eta (A G Gamma + Gamma G B) + eta^2 Gamma G S^T G Gamma
    A' = A - eta (Gamma G S^T + S G^T Gamma) + eta^2 Gamma G B G^T Gamma
    B' = B - eta (Gamma G^T S + S^T G Gamma) + eta^2 Gamma G^T A G Gamma
    w~' = w~ - eta Gamma g

(Gamma = I gives the orthonormal map of ``kernels``, :func:`orthonormal`,
which ``meanfield.models.mixture.symbolic`` expands entry by entry.) Note the
first-order terms of A' and B': ``Gamma G S^T + S G^T Gamma`` and
``Gamma G^T S + S^T G Gamma``, not ``G S^T Gamma + Gamma S G^T`` /
``G^T S Gamma + Gamma S^T G`` (those agree only when Gamma commutes with
G S^T resp. G^T S); :func:`derive` shows the difference symbolically
(``mismatch``; ``checks["proposed_differs"]``). Gradient flow is the
eta-linear part. Several neurons per head (``dense``) change only the neuron
step, to w~_q' = w~_q - eta n Gamma dLoss/dw~_q (mean-field time scale).

Public: :func:`derive` (the maps and the checks), :func:`orthonormal`,
:func:`on_matrices`, :func:`latex`, :func:`gd_map_features` (numpy, from the derived expressions
via lambdify).

Example
-------
>>> from meanfield.models.mixture import symbolic_gram
>>> all(symbolic_gram.derive()["matches_expected"].values())  # doctest: +SKIP
True
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import sympy as sp

from ...engine import symbolic as engine_symbolic

P_ = engine_symbolic.symbols()["Gamma"].shape[0]  # the engine's symbolic size P
ETA = engine_symbolic.symbols()["eta"]
G = sp.MatrixSymbol("G", P_, P_)
GW = sp.MatrixSymbol("g", P_, 1)
# the paper's names of the reduced blocks
S = sp.MatrixSymbol("S", P_, P_)
A = sp.MatrixSymbol("A", P_, P_)
B = sp.MatrixSymbol("B", P_, P_)
GAMMA = sp.MatrixSymbol("Gamma", P_, P_)
WT = sp.MatrixSymbol("wt", P_, 1)
#: the mixture head's blocks in the engine's block map: keys K, queries Q (both on tokens), the loss reads Q_KQ
BLOCK_NAMES = {("K", "Q"): "S", ("K", "K"): "A", ("Q", "Q"): "B"}

EXPECTED = {
    "S": S - ETA * (A * G * GAMMA + GAMMA * G * B) + ETA**2 * GAMMA * G * S.T * G * GAMMA,
    "A": A - ETA * (GAMMA * G * S.T + S * G.T * GAMMA) + ETA**2 * GAMMA * G * B * G.T * GAMMA,
    "B": B - ETA * (GAMMA * G.T * S + S.T * G * GAMMA) + ETA**2 * GAMMA * G.T * A * G * GAMMA,
    "w": WT - ETA * GAMMA * GW,
}

#: the first-order terms of A' and B' as first proposed (checked NOT to be the GD map)
PROPOSED = {
    "A": A - ETA * (G * S.T * GAMMA + GAMMA * S * G.T) + ETA**2 * GAMMA * G * B * G.T * GAMMA,
    "B": B - ETA * (G.T * S * GAMMA + GAMMA * S.T * G) + ETA**2 * GAMMA * G.T * A * G * GAMMA,
}


def _naming() -> dict:
    """The engine's symbols of the mixture head -> the paper's."""
    s = engine_symbolic.symbols()
    return {sp.MatrixSymbol(r"\Gamma", P_, P_): GAMMA, sp.MatrixSymbol("G_{S}", P_, P_): G,
            s["Gamma"]: GAMMA, s["wt"]: WT, s["g"]: GW}


def _head_map(trained: bool) -> dict:
    """The engine's block map on the mixture head, in the paper's names: {"S", "A", "B"}."""
    objs = [("K", "Gamma", trained), ("Q", "Gamma", trained)]
    res = engine_symbolic.block_map(objs, [("K", "Q")], P=P_, names=BLOCK_NAMES)
    sub = _naming()
    return {nm: res["map"][key].xreplace(sub) for key, nm in BLOCK_NAMES.items()}


@lru_cache(maxsize=1)
def derive() -> dict:
    """The mixture head's GD map in feature coordinates, from the engine's derivation, and its checks.

    Returns
    -------
    dict
        ``map``: {"S", "A", "B", "w"} (reduced sympy expressions in :data:`S`,
        :data:`A`, :data:`B`, :data:`WT`, :data:`G`, :data:`GW`, :data:`GAMMA`,
        :data:`ETA`); ``matches_expected``: {name: bool} (equal to the paper's
        :data:`EXPECTED`); ``mismatch``: {"A", "B"}: the derived minus the
        first-proposed expressions (nonzero); ``checks``: {"gram_metric",
        "orthonormal", "frozen", "proposed_differs"}: {name: bool} (Gamma = I
        gives the orthonormal spec map; with the attention frozen (D = 0) S, A,
        B stay; the first-proposed A', B' are told apart).

    Example
    -------
    >>> all(derive()["checks"]["orthonormal"].values())  # doctest: +SKIP
    True
    """
    same = engine_symbolic.same_matrix_expr
    maps = _head_map(True)
    maps["w"] = engine_symbolic.derive_general()["map"]["w"].xreplace(_naming())
    matches = {k: same(maps[k], EXPECTED[k]) for k in maps}
    mismatch = {k: sp.expand(maps[k] - PROPOSED[k]) for k in PROPOSED}
    e = ETA
    spec = {"S": S - e * (G * B + A * G) + e**2 * G * S.T * G,
            "A": A - e * (G * S.T + S * G.T) + e**2 * G * B * G.T,
            "B": B - e * (G.T * S + S.T * G) + e**2 * G.T * A * G}
    frozen = _head_map(False)
    checks = {"gram_metric": {k: matches[k] for k in spec},
              "orthonormal": {k: same(_identity(maps[k]), spec[k]) for k in spec},
              "frozen": {k: same(frozen[k], {"S": S, "A": A, "B": B}[k]) for k in spec},
              "proposed_differs": {k: not same(maps[k], PROPOSED[k]) for k in PROPOSED}}
    return {"map": maps, "matches_expected": matches, "mismatch": mismatch, "checks": checks}


def _identity(expr):
    return sp.expand(expr.xreplace({GAMMA: sp.Identity(P_)}).doit())


@lru_cache(maxsize=1)
def orthonormal() -> dict:
    """The maps with Gamma = I by power of eta: {"S", "A", "B"}: {k: [(coefficient, factors)]}.

    ``factors`` is the tuple of matrix factors (:data:`S`, :data:`A`, :data:`B`,
    :data:`G` or their transposes) of one product; the coefficient is free of eta.

    Returns
    -------
    dict

    Example
    -------
    >>> sorted(orthonormal()["S"])  # doctest: +SKIP
    [0, 1, 2]
    """
    out = {}
    for nm in ("S", "A", "B"):
        parts = {}
        for k, terms in engine_symbolic.collect(_identity(derive()["map"][nm])).items():
            parts[k] = [(c, engine_symbolic.matrix_factors(M)[1]) for c, M in terms]
        out[nm] = parts
    return out


def _factor(f, mats):
    """One matrix factor of a reduced product (``S``, ``G.T``, ...) as this system's matrix."""
    return mats[f.arg.name].T if isinstance(f, sp.Transpose) else mats[f.name]


def on_matrices(parts, mats, eta):
    """A reduced map ({eta power: [(coefficient, factors)]}, ``symbolic_gram.orthonormal``) on
    explicit matrices: the GD map (``eta`` a symbol) or the flow, its eta-linear part (``eta`` None).

    Parameters
    ----------
    parts : dict
        One entry of :func:`orthonormal`.
    mats : dict
        ``{"S", "A", "B", "G"}``: sympy matrices (P x P).
    eta : sympy.Symbol or None

    Returns
    -------
    sympy.Matrix

    The products are formed left to right, the eta-linear terms summed before they are
    scaled, a single eta^2 product scaled at its first factor (the form the generated
    kernels have always had: the same sympy expressions, so the same code).

    Example
    -------
    >>> M = {k: sp.Matrix(2, 2, lambda i, j: sp.Symbol(f"{k}{i}{j}")) for k in "SABG"}
    >>> on_matrices(orthonormal()["S"], M, None) == -(M["A"] * M["G"] + M["G"] * M["B"])  # doctest: +SKIP
    True
    """
    def product(c, fs, scale):
        fs = [_factor(f, mats) for f in fs]
        out = (c * scale) * fs[0]
        for f in fs[1:]:
            out = out * f
        return out

    if eta is None:
        terms = parts[1]
        c = terms[0][0]
        assert all(t[0] == c for t in terms)
        total = _sum([product(1, fs, 1) for _, fs in terms])
        return c * total if c != -1 else -total
    (c0, f0), = parts[0]
    out = product(c0, f0, 1)
    for k in sorted(parts):
        if k == 0:
            continue
        terms = parts[k]
        if len(terms) == 1:
            c, fs = terms[0]
            out = out + product(c, fs, eta**k)
            continue
        c = terms[0][0]
        assert all(t[0] == c for t in terms)
        total = _sum([product(1, fs, 1) for _, fs in terms])
        out = out - eta**k * total if c == -1 else out + (c * eta**k) * total
    return out


def _sum(mats):
    out = mats[0]
    for m in mats[1:]:
        out = out + m
    return out


def latex() -> str:
    """The derived map as LaTeX (amsmath ``align``), grouped by powers of eta."""
    res = derive()
    names = {"S": "S'", "A": "A'", "B": "B'", "w": r"\tilde w'"}
    lines = []
    for name in ("S", "A", "B", "w"):
        parts = engine_symbolic.collect(res["map"][name])
        txt = ""
        for k in sorted(parts):
            inner = ""
            for c, M in parts[k]:
                tex = sp.latex(M).replace("wt", r"\tilde w")
                sign = "-" if c.could_extract_minus_sign() else "+"
                mag = -c if sign == "-" else c
                inner += f" {sign} " + ("" if mag == 1 else sp.latex(mag) + " ") + tex
            inner = inner.strip()
            if k == 0:
                txt += inner.removeprefix("+ ")
            else:
                fac = r"\eta" if k == 1 else rf"\eta^{{{k}}}"
                if len(parts[k]) == 1:
                    txt += rf" {inner[0]} {fac}\,{inner[2:]}" if inner[0] in "+-" else rf" + {fac}\,{inner}"
                else:
                    neg = all(c.could_extract_minus_sign() for c, _ in parts[k])
                    if neg:
                        inner = " ".join(("+" if tok == "-" else tok) for tok in inner.split(" ")).removeprefix("+ ")
                        txt += rf" - {fac}\left({inner}\right)"
                    else:
                        txt += rf" + {fac}\left({inner.removeprefix('+ ')}\right)"
        lines.append(rf"{names[name]} &= {txt} \\")
    return "\\begin{align}\n" + "\n".join(lines) + "\n\\end{align}\n"


@lru_cache(maxsize=1)
def _numeric():
    res = derive()
    args = (S, A, B, WT, G, GW, GAMMA, ETA)
    return {k: sp.lambdify(args, res["map"][k], modules="numpy") for k in ("S", "A", "B", "w")}


def gd_map_features(S_, A_, B_, w_, G_, g_, gram, eta):
    """One GD step of one head in feature coordinates, evaluated from the DERIVED
    sympy expressions: (S', A', B', w~'), with S, A, B, G, gram (P, P),
    w~, g (P,) (g = dLoss/dw~; for n neurons pass n dLoss/dw~_q)."""
    f = _numeric()
    a = (np.asarray(S_, float), np.asarray(A_, float), np.asarray(B_, float),
         np.asarray(w_, float).reshape(-1, 1), np.asarray(G_, float), np.asarray(g_, float).reshape(-1, 1),
         np.asarray(gram, float), float(eta))
    return (np.asarray(f["S"](*a)), np.asarray(f["A"](*a)), np.asarray(f["B"](*a)),
            np.asarray(f["w"](*a)).reshape(-1))
