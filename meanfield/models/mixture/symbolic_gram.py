"""Sympy derivation of the exact GD map in FEATURE coordinates for non-orthogonal features.

Features E (d x P) with Gram matrix Gamma = E^T E (not the identity). Feature
coordinates of one head (``docs/conventions.md``, with E no longer
orthonormal):

    S = E^T W_K^T W_Q E,   A = E^T W_K^T W_K E,   B = E^T W_Q^T W_Q E,   w~ = E^T w.

Every token is in span(E), so the loss depends on the weights only through S
(the logits e_a^T W_K^T W_Q e_b = S[a, b], with signs) and w~; let
G = dLoss/dS and g = dLoss/dw~ at the current weights. One full-batch GD step
on the explicit weights is

    W_K' = W_K - eta dLoss/dW_K,   W_Q' = W_Q - eta dLoss/dW_Q,   w' = w - eta dLoss/dw,

and since the GD step only needs the gradient at the current point, the loss
may be replaced by its linearisation ``tr(G^T S(W)) + g^T E^T w`` with G, g held
fixed. :func:`derive` does exactly that with sympy's matrix calculus on
non-commutative matrix symbols (W_K, W_Q: m x d; E: d x P; G: P x P; all
sizes symbolic): it differentiates, forms S' = E^T W_K'^T W_Q' E, A', B', w~',
expands, and rewrites every product of the explicit symbols back into
S, S^T, A, B, Gamma (``E^T W_K^T W_Q E -> S`` etc.); it fails if anything
explicit is left over. The result (:data:`EXPECTED`, checked equal in
:func:`derive`):

    S' = S - eta (A G Gamma + Gamma G B) + eta^2 Gamma G S^T G Gamma
    A' = A - eta (Gamma G S^T + S G^T Gamma) + eta^2 Gamma G B G^T Gamma
    B' = B - eta (Gamma G^T S + S^T G Gamma) + eta^2 Gamma G^T A G Gamma
    w~' = w~ - eta Gamma g

(Gamma = I gives the orthonormal map of ``kernels``.) Note the first-order
terms of A' and B': ``Gamma G S^T + S G^T Gamma`` and ``Gamma G^T S + S^T G Gamma``,
not ``G S^T Gamma + Gamma S G^T`` / ``G^T S Gamma + Gamma S^T G`` (those agree
only when Gamma commutes with G S^T resp. G^T S); :func:`derive` shows the
difference symbolically (``mismatch`` in its result). Gradient flow is the
eta-linear part. Several neurons per head (``dense``) change only the neuron
step, to w~_q' = w~_q - eta n Gamma dLoss/dw~_q (mean-field time scale).

Public: :func:`derive` (the sympy result and checks), :func:`latex`,
:func:`gd_map_features` (numpy, from the derived expressions via lambdify).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import sympy as sp

from ...engine.symbolic import matrix_factors as _factors  # the one factoring of an expanded matrix product

m_, d_, P_ = sp.symbols("m d P", integer=True, positive=True)
ETA = sp.Symbol("eta")
W_K = sp.MatrixSymbol("W_K", m_, d_)
W_Q = sp.MatrixSymbol("W_Q", m_, d_)
W = sp.MatrixSymbol("w", d_, 1)
E = sp.MatrixSymbol("E", d_, P_)
G = sp.MatrixSymbol("G", P_, P_)
GW = sp.MatrixSymbol("g", P_, 1)
# reduced symbols
S = sp.MatrixSymbol("S", P_, P_)
A = sp.MatrixSymbol("A", P_, P_)
B = sp.MatrixSymbol("B", P_, P_)
GAMMA = sp.MatrixSymbol("Gamma", P_, P_)
WT = sp.MatrixSymbol("wt", P_, 1)

# products of explicit factors -> reduced symbols (longest first)
_PATTERNS = [
    ((E.T, W_K.T, W_Q, E), S),
    ((E.T, W_Q.T, W_K, E), S.T),
    ((E.T, W_K.T, W_K, E), A),
    ((E.T, W_Q.T, W_Q, E), B),
    ((E.T, W), WT),
    ((E.T, E), GAMMA),
]

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


def _reduce_factors(mats):
    out = []
    i = 0
    while i < len(mats):
        for pat, rep in _PATTERNS:
            k = len(pat)
            if tuple(mats[i:i + k]) == pat:
                out.append(rep)
                i += k
                break
        else:
            out.append(mats[i])
            i += 1
    return out


def to_reduced(expr: sp.MatrixExpr) -> sp.MatrixExpr:
    """Rewrite an expanded expression in the explicit symbols (W_K, W_Q, w, E)
    into the reduced symbols S, A, B, Gamma, w~; raises if an explicit factor
    is left over."""
    expr = sp.expand(expr)
    terms = expr.args if isinstance(expr, sp.MatAdd) else (expr,)
    out = []
    explicit = {W_K, W_Q, W, E, W_K.T, W_Q.T, W.T, E.T}
    for t in terms:
        coeff, mats = _factors(t)
        red = _reduce_factors(mats)
        left = [f for f in red if f in explicit]
        if left:
            raise ValueError(f"term {t} keeps explicit factors {left} after reduction")
        out.append(coeff * sp.MatMul(*red) if len(red) > 1 else coeff * red[0])
    return sp.MatAdd(*out).doit()


def _same(x: sp.MatrixExpr, y: sp.MatrixExpr) -> bool:
    return sp.expand(x - y).doit() == sp.ZeroMatrix(*x.shape) or sp.expand(x - y) == 0


@lru_cache(maxsize=1)
def derive() -> dict:
    """The GD map in feature coordinates, derived from one explicit GD step.

    Returns {"gradients": {"W_K", "W_Q", "w"} (sympy's matrix derivatives of the
    linearised loss), "map": {"S", "A", "B", "w"} (reduced expressions),
    "matches_expected": {name: bool}, "mismatch": {"A", "B"}: the derived
    minus the first-proposed expressions (nonzero)}."""
    # the linearised loss, term by term (sympy differentiates a Trace by a matrix
    # symbol, but not a sum of them)
    lin = (sp.Trace(G.T * E.T * W_K.T * W_Q * E), sp.Trace(GW.T * E.T * W))

    def grad(X):
        return sp.MatAdd(*[t.diff(X) for t in lin]).doit()

    dK, dQ, dw = grad(W_K), grad(W_Q), grad(W)
    for X, dX in ((W_K, dK), (W_Q, dQ), (W, dw)):
        if dX == 0 or dX.shape != X.shape:
            raise RuntimeError(f"sympy's matrix derivative by {X} failed: {dX}")
    K1 = W_K - ETA * dK
    Q1 = W_Q - ETA * dQ
    w1 = W - ETA * dw
    maps = {
        "S": to_reduced(E.T * K1.T * Q1 * E),
        "A": to_reduced(E.T * K1.T * K1 * E),
        "B": to_reduced(E.T * Q1.T * Q1 * E),
        "w": to_reduced(E.T * w1),
    }
    matches = {k: _same(maps[k], EXPECTED[k]) for k in maps}
    mismatch = {k: sp.expand(maps[k] - PROPOSED[k]) for k in PROPOSED}
    return {"gradients": {"W_K": dK, "W_Q": dQ, "w": dw}, "map": maps, "matches_expected": matches,
            "mismatch": mismatch}


def collect(expr: sp.MatrixExpr) -> dict[int, list[tuple[sp.Expr, sp.MatrixExpr]]]:
    """Terms of a reduced map by power of eta: {0: [...], 1: [...], 2: [...]},
    each (coefficient without eta, matrix product)."""
    out: dict[int, list] = {}
    terms = expr.args if isinstance(expr, sp.MatAdd) else (expr,)
    for t in terms:
        coeff, mats = _factors(t)
        k = int(sp.degree(coeff, ETA)) if coeff.has(ETA) else 0
        out.setdefault(k, []).append((sp.simplify(coeff / ETA**k), sp.MatMul(*mats) if len(mats) > 1 else mats[0]))
    return out


def latex() -> str:
    """The derived map as LaTeX (amsmath ``align``), grouped by powers of eta."""
    res = derive()
    names = {"S": "S'", "A": "A'", "B": "B'", "w": r"\tilde w'"}
    lines = []
    for name in ("S", "A", "B", "w"):
        parts = collect(res["map"][name])
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
