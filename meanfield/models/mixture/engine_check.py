"""The engine's general Gram-closure map checked on the mixture head (a paper's check, kept in its package).

:func:`mixture_check` instantiates ``meanfield.engine.symbolic``'s general map
on the mixture head's blocks (Q = [[A, S], [S^T, B]], Ghat = [[0, G], [G^T, 0]],
Gamma_r = blockdiag(Gamma, Gamma)) with sympy block matrices and checks that it
gives :mod:`meanfield.models.mixture.symbolic_gram`'s derived Gram-metric map
(and with Gamma = I the orthonormal map S' = S - eta (G B + A G) + eta^2 G S^T G),
for D = I (simultaneous training) and D = 0 (attention frozen). sympy is
imported on use.

Example
-------
>>> from meanfield.models.mixture.engine_check import mixture_check
>>> all(all(v.values()) for v in mixture_check().values())  # doctest: +SKIP
True
"""

from __future__ import annotations

from functools import lru_cache

from ...engine.symbolic import block_map, same_matrix_expr, symbols


@lru_cache(maxsize=1)
def mixture_check() -> dict:
    """The general map on the mixture head (keys K, queries Q, loss reads S = Q_KQ)
    against ``meanfield.models.mixture.symbolic_gram``'s derived Gram-metric map, for
    simultaneous training (D = I) and attention frozen (D = 0); also Gamma = I
    against the orthonormal map of ``shared`` spec / ``kernels``.
    Returns {"gram_metric": {S, A, B: bool}, "orthonormal": {...}, "frozen": {...}}."""
    import sympy as sp

    from . import symbolic_gram as sg

    names = {("K", "Q"): "S", ("K", "K"): "A", ("Q", "Q"): "B"}
    P = sg.P_
    res = block_map([("K", "Gamma", True), ("Q", "Gamma", True)], [("K", "Q")], P=P, names=names)
    # identify the block symbols with symbolic_gram's
    sub = {sp.MatrixSymbol("S", P, P): sg.S, sp.MatrixSymbol("A", P, P): sg.A, sp.MatrixSymbol("B", P, P): sg.B,
           sp.MatrixSymbol(r"\Gamma", P, P): sg.GAMMA, sp.MatrixSymbol("G_{S}", P, P): sg.G,
           symbols()["eta"]: sg.ETA}
    derived_gram = sg.derive()["map"]
    out = {"gram_metric": {}, "orthonormal": {}, "frozen": {}}
    for (a, b), nm in names.items():
        mine = res["map"][(a, b)].xreplace(sub)
        out["gram_metric"][nm] = same_matrix_expr(mine, derived_gram[nm])
        ortho = mine.xreplace({sg.GAMMA: sp.Identity(P)}).doit()
        Sm, Am, Bm, Gm, e = sg.S, sg.A, sg.B, sg.G, sg.ETA
        spec = {"S": Sm - e * (Gm * Bm + Am * Gm) + e**2 * Gm * Sm.T * Gm,
                "A": Am - e * (Gm * Sm.T + Sm * Gm.T) + e**2 * Gm * Bm * Gm.T,
                "B": Bm - e * (Gm.T * Sm + Sm.T * Gm) + e**2 * Gm.T * Am * Gm}
        out["orthonormal"][nm] = same_matrix_expr(ortho, spec[nm])
    frozen = block_map([("K", "Gamma", False), ("Q", "Gamma", False)], [("K", "Q")], P=P, names=names)
    for (a, b), nm in names.items():
        out["frozen"][nm] = same_matrix_expr(frozen["map"][(a, b)].xreplace(sub), {"S": sg.S, "A": sg.A, "B": sg.B}[nm])
    # the comparison can fail: the first-proposed A', B' (wrong order of Gamma) must be told apart
    out["proposed_differs"] = {nm: not same_matrix_expr(res["map"][k].xreplace(sub), sg.PROPOSED[nm])
                               for k, nm in ((("K", "K"), "A"), (("Q", "Q"), "B"))}
    return out
