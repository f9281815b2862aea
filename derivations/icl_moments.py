"""The Gaussian moments of in-context linear regression, derived with sympy (symbolically in N).

    python derivations/icl_moments.py [--out DIR]

writes ``DIR/icl_moments.tex`` (default DIR: derivations/generated). Nothing
is expanded by hand: every Gaussian moment comes from differentiating a
moment generating function, exp(t^T C t / 2), with sympy.

1. Given the task w, the context tokens z_i = (x_i, y_i) are iid N(0, C_w).
   With G = (1/N) sum_i z_i z_i^T, E[G_ab G_ce | w] = (1/N^2) sum_{i, i'}
   E[z_ia z_ib z_i'c z_i'e]: N terms with i = i' (a fourth moment of one
   Gaussian vector) and N (N - 1) with i != i' (a product of second moments).
   :func:`check_conditional_fourth_moment` derives it for a symbolic 3 x 3 C and
   symbolic N and checks E[G_ab G_ce | w] = C_ab C_ce + (C_ac C_be + C_ae C_bc) / N.
2. :func:`symbolic_moments` builds C_w with symbolic Lambda and Sigma_w entries
   (d = 1 or 2) and the task w as symbols, takes the expectation over
   w ~ N(0, Sigma_w) of every entry of E[G_ab G_ce | w], of C_ab (Lambda w)_j
   (= E[G_ab x_qj y_q | w]: x_q is independent of G given w) and of
   w^T Lambda w + sigma^2 (= E[y_q^2]), and evaluates them at given numbers:
   ``tests/test_icl_moments.py`` compares them with
   ``meanfield.engine.gaussian.Moments`` (numeric Isserlis on coefficient tensors).
"""

from __future__ import annotations

import argparse
import itertools
from functools import lru_cache
from pathlib import Path

import numpy as np
import sympy as sp

HERE = Path(__file__).resolve().parent
N = sp.Symbol("N", positive=True, integer=True)


def _moment(C: sp.Matrix, idx: tuple) -> sp.Expr:
    """E[z_idx1 ... z_idxk] for z ~ N(0, C): derivatives of exp(t^T C t / 2) at t = 0."""
    n = C.shape[0]
    t = sp.symbols(f"t0:{n}")
    mgf = sp.exp((sp.Matrix(t).T * C * sp.Matrix(t))[0, 0] / 2)
    expr = mgf
    for i in idx:
        expr = sp.diff(expr, t[i])
    return sp.expand(expr.subs({ti: 0 for ti in t}))


def check_conditional_fourth_moment(P: int = 3) -> None:
    """E[G_ab G_ce | w] = C_ab C_ce + (C_ac C_be + C_ae C_bc)/N, derived symbolically in N (raises if not)."""
    c = {}
    for a in range(P):
        for b in range(a, P):
            c[a, b] = c[b, a] = sp.Symbol(f"C{a}{b}")
    C = sp.Matrix(P, P, lambda i, j: c[i, j])
    memo: dict = {}

    def mom(idx):  # a Gaussian moment is symmetric in its indices: derive each multiset once
        key = tuple(sorted(idx))
        if key not in memo:
            memo[key] = _moment(C, key)
        return memo[key]

    for a, b, cc, e in itertools.product(range(P), repeat=4):
        same = mom((a, b, cc, e))                  # i = i': one token's fourth moment
        diff = mom((a, b)) * mom((cc, e))          # i != i': independent tokens
        EGG = (N * same + N * (N - 1) * diff) / N ** 2
        claim = C[a, b] * C[cc, e] + (C[a, cc] * C[b, e] + C[a, e] * C[b, cc]) / N
        if sp.expand(EGG - claim) != 0:  # a polynomial in the C entries and 1/N
            raise AssertionError(f"E[G G | w] at {(a, b, cc, e)}: {sp.simplify(EGG)} != {claim}")


def _sym_matrix(name: str, d: int) -> sp.Matrix:
    s = {}
    for i in range(d):
        for j in range(i, d):
            s[i, j] = s[j, i] = sp.Symbol(f"{name}{i}{j}")
    return sp.Matrix(d, d, lambda i, j: s[i, j])


@lru_cache(maxsize=None)
def symbolic_tensors(d: int):
    """(K4, m, c0, symbols) as sympy expressions in the entries of Lambda, Sigma_w, sigma and N."""
    Lam, Sw = _sym_matrix("l", d), _sym_matrix("s", d)
    sigma = sp.Symbol("sigma", nonnegative=True)
    w = sp.symbols(f"w0:{d}")
    wv = sp.Matrix(w)
    P = d + 1
    Cw = sp.zeros(P, P)
    Cw[:d, :d] = Lam
    Cw[:d, d] = Lam * wv
    Cw[d, :d] = (Lam * wv).T
    Cw[d, d] = (wv.T * Lam * wv)[0, 0] + sigma ** 2

    moments: dict = {}

    def Ew(expr):
        """E over w ~ N(0, Sigma_w) of a polynomial in w, monomial by monomial."""
        poly = sp.Poly(sp.expand(expr), *w)
        out = 0
        for powers, coef in poly.terms():
            idx = tuple(i for i, p in enumerate(powers) for _ in range(p))
            if len(idx) % 2:
                continue
            if idx not in moments:
                moments[idx] = _moment(Sw, idx)
            out += coef * moments[idx]
        return sp.expand(out)

    K4 = {}
    for a, b, c, e in itertools.product(range(P), repeat=4):
        cond = Cw[a, b] * Cw[c, e] + (Cw[a, c] * Cw[b, e] + Cw[a, e] * Cw[b, c]) / N
        K4[a, b, c, e] = Ew(cond)
    Lw = Lam * wv
    m = {(a, b, j): Ew(Cw[a, b] * Lw[j]) for a in range(P) for b in range(P) for j in range(d)}
    c0 = Ew((wv.T * Lam * wv)[0, 0]) + sigma ** 2
    return K4, m, c0, (Lam, Sw, sigma)


def symbolic_moments(d: int, Lam, Sw, sigma: float, Nval: int):
    """The derived K4 (P, P, P, P), m (P, P, d) and c0 evaluated at numbers."""
    K4, m, c0, (L, S, sg) = symbolic_tensors(d)
    subs = {N: Nval, sg: sigma}
    for i in range(d):
        for j in range(d):
            subs[L[i, j]] = float(Lam[i, j])
            subs[S[i, j]] = float(Sw[i, j])
    P = d + 1
    K = np.zeros((P, P, P, P))
    for k, v in K4.items():
        K[k] = float(v.subs(subs))
    mm = np.zeros((P, P, d))
    for k, v in m.items():
        mm[k] = float(v.subs(subs))
    return K, mm, float(c0.subs(subs))


def latex() -> str:
    """The d = 1 moments (Lambda = lambda, Sigma_w = s) as an amsmath fragment."""
    check_conditional_fourth_moment(2)
    K4, m, c0, (L, S, sg) = symbolic_tensors(1)
    lam, s = L[0, 0], S[0, 0]
    ren = {L[0, 0]: sp.Symbol("lambda"), S[0, 0]: sp.Symbol("s")}
    names = ["x", "y"]
    lines = ["% E[G_ab G_ce | w] = C_ab C_ce + (C_ac C_be + C_ae C_bc)/N, derived symbolically in N",
             "\\begin{align*}"]
    for key, v in sorted(K4.items()):
        if v == 0:
            continue
        a, b, c, e = (names[i] for i in key)
        lines.append(f"E[G_{{{a}{b}}} G_{{{c}{e}}}] &= {sp.latex(sp.factor(v.subs(ren)))} \\\\")
    for key, v in sorted(m.items()):
        if v == 0:
            continue
        a, b, _ = (names[i] if i < 2 else "" for i in key)
        lines.append(f"E[G_{{{a}{b}}} x_q y_q] &= {sp.latex(sp.factor(v.subs(ren)))} \\\\")
    lines.append(f"E[y_q^2] &= {sp.latex(c0.subs(ren))}")
    lines.append("\\end{align*}")
    del lam, s
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(HERE / "generated"))
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "icl_moments.tex"
    path.write_text("% generated by derivations/icl_moments.py: Gaussian in-context regression moments (d = 1)\n"
                    + latex())
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
