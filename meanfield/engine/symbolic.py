"""The general Gram-closure map, derived once with sympy; per-description LaTeX.

Objects (``docs/engine.md``): wide matrices M_1..M_r in R^{m x d} (and hidden
vectors u_b in R^m), written U_a = M_a E_a with E_a = E (d x P, Gram
Gamma = E^T E) for a matrix and E_a = 1 for a hidden vector; stacked
M = [M_1 ... M_r] (m x n), E_r = blockdiag(E_a) (n x N), U = M E_r (m x N),
Q = U^T U, Gamma_r = E_r^T E_r. A 0/1 block mask says which wide objects
train: D_M (n x n) on the weights, D (N x N) on the Gram side, with
D_M E_r = E_r D (both block diagonal on the same blocks).

:func:`derive_general` starts from ONE explicit full-batch GD step on the
weights, M' = M - eta (dLoss/dM) D_M, with the loss linearised at the current
point (a GD step only needs the gradient there): Loss ~ tr(G^T Q(M)), G = dLoss/dQ
with the blocks of Q treated as independent. sympy differentiates the trace by
the matrix symbol M, the result is checked to be M E_r Ghat E_r^T with
Ghat = G + G^T, and then U' = M' E_r and Q' = U'^T U' are expanded and every
product of explicit factors is rewritten in the reduced symbols
(E_r^T M^T M E_r -> Q, M E_r -> U, E_r^T E_r -> Gamma_r, D_M E_r -> E_r D).
It raises if an explicit factor is left over. The result (checked equal to
:data:`expected` in the same call):

    U'  = U (I - eta Ghat Gamma_r D)
    Q'  = Q - eta (D Gamma_r Ghat Q + Q Ghat Gamma_r D) + eta^2 D Gamma_r Ghat Q Ghat Gamma_r D
    dQ/dt = -(D Gamma_r Ghat Q + Q Ghat Gamma_r D)          (the eta-linear part)

and for the narrow objects (no width): w~ = E^T w (w in R^d read as w^T x) and
W~ = E^T W E (W in R^{d x d} read as x^T W x'):

    w~' = w~ - eta Gamma g,          g   = dLoss/dw~
    W~' = W~ - eta Gamma G_W Gamma,  G_W = dLoss/dW~

A paper builds its named-variable derivation on this one (the mixture:
``meanfield.models.mixture.symbolic_gram.derive``, in its package, not the
engine's): it instantiates the general map on its head's blocks (Q = [[A, S],
[S^T, B]], Ghat = [[0, G], [G^T, 0]], Gamma_r = blockdiag(Gamma, Gamma)) with
:func:`block_map`, names the blocks, and checks the result against the paper's
own closed form (and with Gamma = I the orthonormal map S' = S - eta (G B + A G)
+ eta^2 G S^T G), for D = I (simultaneous training) and D = 0 (attention frozen).

:func:`block_map` expands the general map block by block for a given list of
wide objects and the blocks the loss reads; it is what the per-description
LaTeX (:func:`description_latex`) prints.

sympy is imported inside the functions: importing this module (or
``meanfield``) does not import sympy.

Public: :func:`derive_general`, :func:`block_map`, :func:`same_matrix_expr`,
:func:`general_latex`, :func:`description_latex`.
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1)
def symbols() -> dict:
    """The sympy symbols of the general derivation (sizes symbolic)."""
    import sympy as sp

    m, n, N, d, P = sp.symbols("m n N d P", integer=True, positive=True)
    s = {
        "eta": sp.Symbol("eta"),
        "M": sp.MatrixSymbol("M", m, n),
        "Er": sp.MatrixSymbol("E_r", n, N),
        "G": sp.MatrixSymbol("G", N, N),
        "Ghat": sp.MatrixSymbol(r"\hat{G}", N, N),
        "DM": sp.MatrixSymbol("D_M", n, n),
        "D": sp.MatrixSymbol("D", N, N),
        "Q": sp.MatrixSymbol("Q", N, N),
        "U": sp.MatrixSymbol("U", m, N),
        "Gamma_r": sp.MatrixSymbol(r"\Gamma_r", N, N),
        "I": sp.Identity(N),
        # narrow objects
        "E": sp.MatrixSymbol("E", d, P),
        "w": sp.MatrixSymbol("w", d, 1),
        "W": sp.MatrixSymbol("W", d, d),
        "g": sp.MatrixSymbol("g", P, 1),
        "G_W": sp.MatrixSymbol("G_W", P, P),
        "wt": sp.MatrixSymbol(r"\tilde{w}", P, 1),
        "Wt": sp.MatrixSymbol(r"\tilde{W}", P, P),
        "Gamma": sp.MatrixSymbol(r"\Gamma", P, P),
    }
    return s


def expected() -> dict:
    """The maps the derivation must give (see the module docstring)."""
    s = symbols()
    eta, D, Gm, Gh, Q, U = s["eta"], s["D"], s["Gamma_r"], s["Ghat"], s["Q"], s["U"]
    return {
        "U": U - eta * U * Gh * Gm * D,
        "Q": Q - eta * (D * Gm * Gh * Q + Q * Gh * Gm * D) + eta**2 * D * Gm * Gh * Q * Gh * Gm * D,
        "w": s["wt"] - eta * s["Gamma"] * s["g"],
        "W": s["Wt"] - eta * s["Gamma"] * s["G_W"] * s["Gamma"],
    }


def matrix_factors(term):
    """(scalar coefficient, tuple of matrix factors) of one expanded product."""
    import sympy as sp

    if isinstance(term, sp.MatMul):
        coeff, mats = term.as_coeff_matrices()
        return coeff, tuple(mats)
    if isinstance(term, sp.MatrixExpr):
        return sp.Integer(1), (term,)
    raise TypeError(f"unexpected term {term!r}")


def _terms(expr):
    import sympy as sp

    expr = sp.expand(expr)
    return expr.args if isinstance(expr, sp.MatAdd) else (expr,)


def _rules():
    s = symbols()
    M, Er, DM, D, Q, U, Gm, E = s["M"], s["Er"], s["DM"], s["D"], s["Q"], s["U"], s["Gamma_r"], s["E"]
    return [
        ((Er.T, M.T, M, Er), (Q,)),
        ((M, Er), (U,)),
        ((Er.T, M.T), (U.T,)),
        ((Er.T, Er), (Gm,)),
        ((DM, Er), (Er, D)),       # D_M E_r = E_r D (block masks)
        ((Er.T, DM), (D, Er.T)),
        ((Gm, D), (D, Gm)),        # block diagonal on the same blocks: they commute
        ((E.T, s["W"], E), (s["Wt"],)),
        ((E.T, s["w"]), (s["wt"],)),
        ((E.T, E), (s["Gamma"],)),
    ]


def _symmetric():
    s = symbols()
    return {s["DM"].T: s["DM"], s["D"].T: s["D"], s["Ghat"].T: s["Ghat"], s["Q"].T: s["Q"],
            s["Gamma_r"].T: s["Gamma_r"], s["Gamma"].T: s["Gamma"]}


def _rewrite_factors(mats: tuple) -> tuple:
    """Apply the rewrite rules until nothing changes."""
    sym = _symmetric()
    mats = tuple(sym.get(f, f) for f in mats)
    rules = _rules()
    changed = True
    while changed:
        changed = False
        for i in range(len(mats)):
            for pat, rep in rules:
                k = len(pat)
                if mats[i:i + k] == pat:
                    mats = mats[:i] + rep + mats[i + k:]
                    changed = True
                    break
            if changed:
                break
    return mats


def to_reduced(expr):
    """Rewrite an expression in the explicit symbols (M, E_r, w, W, E) into the
    reduced ones (Q, U, Gamma_r, D, w~, W~, Gamma); raises if an explicit
    factor is left over."""
    import sympy as sp

    s = symbols()
    explicit = {s[k] for k in ("M", "Er", "DM", "E", "w", "W")}
    explicit |= {x.T for x in list(explicit)}
    out = []
    for t in _terms(expr):
        coeff, mats = matrix_factors(t)
        red = _rewrite_factors(mats)
        left = [f for f in red if f in explicit]
        if left:
            raise ValueError(f"term {t} keeps explicit factors {left} after reduction")
        out.append(coeff * (sp.MatMul(*red) if len(red) > 1 else red[0]))
    return sp.MatAdd(*out).doit() if len(out) > 1 else out[0]


def same(x, y) -> bool:
    """x == y as reduced matrix expressions (after expansion and the symmetric-symbol rules)."""
    import sympy as sp

    diff = sp.expand(x - y)
    if diff == 0 or diff == sp.ZeroMatrix(*x.shape):
        return True
    # cancel terms that agree after the symmetric-symbol normalisation
    acc: dict = {}
    for t in _terms(diff):
        coeff, mats = matrix_factors(t)
        key = _rewrite_factors(mats)
        acc[key] = sp.simplify(acc.get(key, 0) + coeff)
    return all(v == 0 for v in acc.values())


@lru_cache(maxsize=1)
def derive_general() -> dict:
    """The general closure map from one explicit GD step (module docstring).

    Returns {"gradient": sympy's dLoss/dM of the linearised loss,
    "gradient_is_U_Ghat": bool (dLoss/dM == M E_r (G + G^T) E_r^T),
    "map": {"U", "Q", "w", "W"}: the reduced maps, "flow": {"Q", "w", "W"}:
    the eta-linear parts (d/dt), "matches_expected": {name: bool}}."""
    import sympy as sp

    s = symbols()
    eta, M, Er, G, Gh, DM = s["eta"], s["M"], s["Er"], s["G"], s["Ghat"], s["DM"]
    lin = sp.Trace(G.T * Er.T * M.T * M * Er)
    grad = lin.diff(M).doit()
    if grad == 0 or grad.shape != M.shape:
        raise RuntimeError(f"sympy's matrix derivative by M failed: {grad}")
    ok_grad = same(grad, M * Er * (G + G.T) * Er.T)
    if not ok_grad:
        raise RuntimeError(f"dLoss/dM = {grad} is not M E_r (G + G^T) E_r^T")
    # G enters only through Ghat = G + G^T: step with the symmetric symbol
    M1 = M - eta * M * Er * Gh * Er.T * DM
    U1 = to_reduced(M1 * Er)
    Q1 = to_reduced(Er.T * M1.T * M1 * Er)
    # narrow objects
    E, w, W, g, GW = s["E"], s["w"], s["W"], s["g"], s["G_W"]
    gw = sp.Trace(g.T * E.T * w).diff(w).doit()
    gW = sp.Trace(GW.T * E.T * W * E).diff(W).doit()
    w1 = to_reduced(E.T * (w - eta * gw))
    W1 = to_reduced(E.T * (W - eta * gW) * E)
    maps = {"U": U1, "Q": Q1, "w": w1, "W": W1}
    exp = expected()
    matches = {k: same(maps[k], exp[k]) for k in maps}
    if not all(matches.values()):
        bad = [k for k, v in matches.items() if not v]
        raise RuntimeError(f"derived maps {bad} differ from the expected closure: "
                           + "; ".join(f"{k}' = {maps[k]}" for k in bad))
    flow = {k: _eta_part(maps[k], 1) for k in ("Q", "w", "W")}
    return {"gradient": grad, "gradient_is_U_Ghat": ok_grad, "map": maps, "flow": flow, "matches_expected": matches}


def collect(expr) -> dict:
    """Terms of a reduced map by power of eta: {k: [(coefficient without eta, matrix product)]}."""
    import sympy as sp

    s = symbols()
    eta = s["eta"]
    out: dict = {}
    for t in _terms(expr):
        coeff, mats = matrix_factors(t)
        k = int(sp.degree(coeff, eta)) if coeff.has(eta) else 0
        out.setdefault(k, []).append((sp.simplify(coeff / eta**k), sp.MatMul(*mats) if len(mats) > 1 else mats[0]))
    return out


def _eta_part(expr, k: int):
    """The coefficient of eta^k of a reduced map (a matrix expression)."""
    import sympy as sp

    terms = [c * M for c, M in collect(expr).get(k, [])]
    if not terms:
        return sp.ZeroMatrix(*expr.shape)
    return sp.MatAdd(*terms).doit() if len(terms) > 1 else terms[0]


# ---------------------------------------------------------------- block form

def block_map(objects: list[tuple[str, str | None, bool]], reads: list[tuple[str, str]], P=None,
              names: dict | None = None) -> dict:
    """The general map expanded block by block for one hidden space.

    ``objects``: (name, gram, trained) per wide object: gram is the name of its
    input metric (e.g. "Gamma" for a matrix acting on tokens, P x P) or None
    for a hidden vector (metric 1, size 1); ``trained``: in the mask D.
    ``reads``: the blocks (a, b) the loss reads (G_ab != 0; G_ba is then the
    separate block of the transposed pair, only present if listed).
    ``names``: optional {(a, b): symbol name} for the reduced blocks (e.g.
    {("K", "Q"): "S", ("K", "K"): "A", ("Q", "Q"): "B"}); default Q_{ab}.
    Returns {"Q": {(a, b): Q_ab symbol}, "G": {(a, b): G_ab symbol},
    "map": {(a, b): Q'_ab expression} for a <= b in the objects' order,
    "flow": {(a, b): dQ_ab/dt}}; the map is computed from the general formula
    with sympy block matrices (``block_collapse``)."""
    import sympy as sp

    s = symbols()
    eta = s["eta"]
    P = P if P is not None else sp.Symbol("P", integer=True, positive=True)
    names = dict(names or {})
    order = [o[0] for o in objects]
    size = {nm: (P if gram is not None else 1) for nm, gram, _ in objects}
    grams = {}
    for nm, gram, _ in objects:
        grams[nm] = (sp.MatrixSymbol(r"\Gamma" if gram == "Gamma" else gram, P, P) if gram is not None
                     else sp.Identity(1))
    trained = {nm: tr for nm, _, tr in objects}

    def qsym(a, b):
        ia, ib = order.index(a), order.index(b)
        if ia > ib:
            return qsym(b, a).T
        nm = names.get((a, b), f"Q_{{{a}{b}}}")
        return sp.MatrixSymbol(nm, size[a], size[b])

    Gs = {}
    for a, b in reads:
        if a not in size or b not in size:
            raise ValueError(f"reads: block ({a}, {b}) names an object not in {order}")
        nm = names.get((a, b), a + b)
        nm = nm[3:-1] if nm.startswith("Q_{") and nm.endswith("}") else nm
        Gs[(a, b)] = sp.MatrixSymbol(f"G_{{{nm}}}", size[a], size[b])

    def gblk(a, b):
        z = sp.ZeroMatrix(size[a], size[b])
        x = Gs.get((a, b), z)
        y = Gs[(b, a)].T if (b, a) in Gs else z
        return sp.MatAdd(x, y).doit() if (x != z and y != z) else (x if x != z else y)

    Qb = sp.BlockMatrix([[qsym(a, b) for b in order] for a in order])
    Ghb = sp.BlockMatrix([[gblk(a, b) for b in order] for a in order])
    Gmb = sp.BlockDiagMatrix(*[grams[a] for a in order])
    Db = sp.BlockDiagMatrix(*[(sp.Identity(size[a]) if trained[a] else sp.ZeroMatrix(size[a], size[a]))
                              for a in order])
    L = sp.block_collapse(Db * Gmb * Ghb)
    R = sp.block_collapse(Ghb * Gmb * Db)
    first = sp.block_collapse(L * Qb + Qb * R)
    second = sp.block_collapse(L * Qb * R)
    mp, fl, Q = {}, {}, {}
    for i, a in enumerate(order):
        for j, b in enumerate(order):
            if j < i:
                continue
            q = qsym(a, b)
            f1 = sp.expand(first.blocks[i, j])
            f2 = sp.expand(second.blocks[i, j])
            mp[(a, b)] = sp.expand(q - eta * f1 + eta**2 * f2)
            fl[(a, b)] = sp.expand(-f1)
            Q[(a, b)] = q
    return {"Q": Q, "G": Gs, "map": mp, "flow": fl}


def same_matrix_expr(x, y) -> bool:
    """True when two sympy matrix expressions are equal term by term (after
    expansion: every product's coefficient cancels)."""
    import sympy as sp

    d = sp.expand(sp.expand(x).doit() - sp.expand(y).doit()).doit()
    return d == 0 or d == sp.ZeroMatrix(*x.shape) or all(
        c == 0 for c in _collect_terms(d).values())


def _collect_terms(expr) -> dict:
    import sympy as sp

    acc: dict = {}
    for t in _terms(expr):
        coeff, mats = matrix_factors(t)
        acc[mats] = sp.simplify(acc.get(mats, 0) + coeff)
    return acc


# ---------------------------------------------------------------- LaTeX

def _latex_map(lhs: str, expr, symbol_tex=None) -> str:
    """``lhs &= expr`` with the terms grouped by powers of eta."""
    import sympy as sp

    symbol_tex = symbol_tex or {}

    def tex(M):
        t = sp.latex(M)
        for a, b in symbol_tex.items():
            t = t.replace(a, b)
        return t

    parts = collect(expr)
    txt = ""
    for k in sorted(parts):
        items = []
        for c, M in parts[k]:
            neg = c.could_extract_minus_sign()
            mag = -c if neg else c
            items.append(("-" if neg else "+", ("" if mag == 1 else sp.latex(mag) + " ") + tex(M)))
        if k == 0:
            inner = " ".join(f"{sg} {t}" for sg, t in items)
            txt += inner.removeprefix("+ ")
            continue
        fac = r"\eta" if k == 1 else rf"\eta^{{{k}}}"
        if len(items) == 1:
            sg, t = items[0]
            txt += rf" {sg} {fac}\,{t}"
        elif all(sg == "-" for sg, _ in items):
            txt += rf" - {fac}\left(" + " + ".join(t for _, t in items) + r"\right)"
        else:
            inner = " ".join(f"{sg} {t}" for sg, t in items).removeprefix("+ ")
            txt += rf" + {fac}\left({inner}\right)"
    return rf"{lhs} &= {txt.strip() or '0'}"


def general_latex(instance_check: dict | None = None) -> str:
    """The general map (derived) as a LaTeX fragment (amsmath), eta powers grouped.

    Parameters
    ----------
    instance_check : dict, optional
        The result of a check that the keys/queries instance below equals a
        paper's own derivation ({name: {block: bool}}, e.g.
        ``meanfield.models.mixture.symbolic_gram.derive()["checks"]``); the
        fragment says whether it passed. None: the fragment says it was not
        checked here.

    Returns
    -------
    str
        The LaTeX fragment.

    Example
    -------
    >>> from meanfield.engine.symbolic import general_latex
    >>> general_latex().startswith(r"\allowdisplaybreaks")  # doctest: +SKIP
    True
    """
    res = derive_general()
    chk = instance_check
    mp, fl = res["map"], res["flow"]
    lines = [
        r"\allowdisplaybreaks",
        "% wide objects U = [U_1 ... U_r], U_a = M_a E_a; Q = U^T U; G = dLoss/dQ (blocks independent);",
        "% Ghat = G + G^T; Gamma_r = blockdiag(E_a^T E_a); D = mask of the trained wide objects.",
        r"\paragraph{Gradient (sympy, linearised loss $\operatorname{tr}(G^\top E_r^\top M^\top M E_r)$).}",
        r"\begin{align}",
        rf"\frac{{\partial \mathcal{{L}}}}{{\partial M}} &= {_tex_plain(res['gradient'])} = U \hat{{G}} E_r^{{T}} \\",
        r"\end{align}",
        r"\paragraph{GD map (one explicit step $M' = M - \eta\, \partial_M \mathcal{L}\, D_M$).}",
        r"\begin{align}",
        _latex_map("U'", mp["U"]) + r" \\",
        _latex_map("Q'", mp["Q"]) + r" \\",
        _latex_map(r"\tilde{w}'", mp["w"]) + r" \\",
        _latex_map(r"\tilde{W}'", mp["W"]),
        r"\end{align}",
        r"\paragraph{Gradient flow (the $\eta$-linear part).}",
        r"\begin{align}",
        _latex_map(r"\frac{dQ}{dt}", fl["Q"]) + r" \\",
        _latex_map(r"\frac{d\tilde{w}}{dt}", fl["w"]) + r" \\",
        _latex_map(r"\frac{d\tilde{W}}{dt}", fl["W"]),
        r"\end{align}",
    ]
    names = {("K", "Q"): "S", ("K", "K"): "A", ("Q", "Q"): "B"}
    blk = block_map([("K", "Gamma", True), ("Q", "Gamma", True)], [("K", "Q")], names=names)
    ok = chk is not None and all(all(v.values()) for v in chk.values())
    ex = block_map([("K", "Gamma", True), ("Q", "Gamma", True), ("V", "Gamma", True), ("r", None, True)],
                   [("K", "Q"), ("r", "V")])
    sel = (("K", "Q"), ("V", "V"), ("V", "r"), ("r", "r"), ("K", "V"))
    lines += [
        r"\paragraph{The mixture head as an instance} ($Q = [[A, S], [S^T, B]]$, "
        r"$\hat G = [[0, G_S], [G_S^T, 0]]$, $\Gamma_r = \mathrm{blockdiag}(\Gamma, \Gamma)$, $D = I$; "
        + ("checked equal to the derived Gram-metric map of gram\\_metric.tex and, for $\\Gamma = I$, "
           "to $S' = S - \\eta(G B + A G) + \\eta^2 G S^T G$)." if ok else
           "not checked here)." if chk is None else "CHECK FAILED).")
        + r"",
        r"\begin{align}",
        " \\\\\n".join(_latex_map(f"{names[k]}'", blk["map"][k]) for k in (("K", "Q"), ("K", "K"), ("Q", "Q"))),
        r"\end{align}",
        r"\paragraph{Per block.} With $D_a \in \{0, I\}$ and $\Gamma_a$ the metric of object $a$ "
        r"($\Gamma$ for a matrix acting on tokens, $1$ for a hidden vector):",
        r"\begin{align}",
        r"Q_{ab}' &= Q_{ab} - \eta \sum_c \left(D_a \Gamma_a \hat{G}_{ac} Q_{cb}"
        r" + Q_{ac} \hat{G}_{cb} \Gamma_b D_b\right)"
        r" + \eta^{2} \sum_{c,e} D_a \Gamma_a \hat{G}_{ac} Q_{ce} \hat{G}_{eb} \Gamma_b D_b",
        r"\end{align}",
        r"\paragraph{Example: keys, queries, a value matrix $V$ and a hidden readout $r$} "
        r"(the loss reads $Q_{KQ}$ (scores) and $Q_{rV} = r^\top M_V E$ (value readouts); all trained):",
        r"\begin{align}",
        " \\\\\n".join(_latex_map(f"Q_{{{a}{b}}}'", ex["map"][(a, b)]) for a, b in sel),
        r"\end{align}",
    ]
    return "\n".join(lines) + "\n"


def _tex_plain(expr) -> str:
    import sympy as sp

    return sp.latex(expr)


# ---------------------------------------------------------------- numeric evaluation of the derived maps

@lru_cache(maxsize=1)
def numeric_general() -> dict:
    """The DERIVED general maps as numpy functions (sympy ``lambdify``):
    {"Q": f(Q, Ghat, Gamma_r, D, eta) -> Q', "U": f(U, Ghat, Gamma_r, D, eta) -> U',
    "flow_Q": f(Q, Ghat, Gamma_r, D) -> dQ/dt, "w": f(w~, Gamma, g, eta) -> w~',
    "W": f(W~, Gamma, G_W, eta) -> W~'}. Vectors are (P, 1) columns."""
    import sympy as sp

    res = derive_general()
    s = symbols()
    Q, Gh, Gm, D, eta, U = s["Q"], s["Ghat"], s["Gamma_r"], s["D"], s["eta"], s["U"]
    mp, fl = res["map"], res["flow"]
    lam = _lambdify
    return {"Q": lam((Q, Gh, Gm, D, eta), mp["Q"]), "U": lam((U, Gh, Gm, D, eta), mp["U"]),
            "flow_Q": lam((Q, Gh, Gm, D), fl["Q"]),
            "w": lam((s["wt"], s["Gamma"], s["g"], eta), mp["w"]),
            "W": lam((s["Wt"], s["Gamma"], s["G_W"], eta), mp["W"])}


def numeric_blocks(objects, reads, names=None) -> dict:
    """:func:`block_map` as numpy functions: returns {"args": [argument names in order],
    "map": {(a, b): f(*args, eta)}, "flow": {(a, b): f(*args)}}, where args are the
    upper blocks Q_ab (a <= b, in the objects' order), then the read blocks G_ab
    (in ``reads`` order), then the metric Gamma."""
    import sympy as sp

    res = block_map(objects, reads, names=names)
    P = sp.Symbol("P", integer=True, positive=True)
    gam = sp.MatrixSymbol(r"\Gamma", P, P)
    qs = list(res["Q"].items())
    gs = list(res["G"].items())
    args = [q for _, q in qs] + [g for _, g in gs] + [gam]
    eta = symbols()["eta"]
    lam = _lambdify
    return {"args": [("Q", k) for k, _ in qs] + [("G", k) for k, _ in gs] + [("Gamma", None)],
            "map": {k: lam(args + [eta], e) for k, e in res["map"].items()},
            "flow": {k: lam(args, e) for k, e in res["flow"].items()}}


def _lambdify(args, expr):
    """sympy lambdify after renaming the (LaTeX-named) matrix symbols to plain identifiers."""
    import sympy as sp

    ren = {}
    for i, a in enumerate(args):
        if isinstance(a, sp.MatrixSymbol):
            ren[a] = sp.MatrixSymbol(f"x{i}", *a.shape)
    return sp.lambdify([ren.get(a, a) for a in args], expr.xreplace(ren), modules="numpy")


# ---------------------------------------------------------------- per-description LaTeX

_BLOCK_TEX = {("K", "K"): "A", ("K", "Q"): "S", ("Q", "Q"): "B"}


def _obj_tex(name: str) -> str:
    return f"r_{{{name[1:]}}}" if name.startswith("r") else name


def head_structure(desc, k: int, lay=None) -> dict:
    """The wide objects of head ``k`` (name, metric name or None, group), the blocks
    its loss reads, and the block names; from the engine's layout."""
    from . import reduce as R

    lay = lay or R.layout(desc)
    h = desc.model.heads[k]
    objs = []
    for name, _s, _w, grp in lay.objects[k]:
        objs.append((name, None if name.startswith("r") else "Gamma", grp))
    reads = []
    if h.kq == "separate":
        reads.append(("K", "Q"))
    if h.value == "matrix":
        reads += [(f"r{c + 1}", "V") for c in range(h.outputs)]
    names = {}
    order = [o[0] for o in objs]
    for i, a in enumerate(order):
        for b in order[i:]:
            names[(a, b)] = _BLOCK_TEX.get((a, b), f"Q_{{{_obj_tex(a)}{_obj_tex(b)}}}")
    for a, b in reads:
        if order.index(a) > order.index(b):
            names.setdefault((a, b), f"Q_{{{_obj_tex(a)}{_obj_tex(b)}}}")
    return {"objects": objs, "reads": reads, "names": names}


def _entrywise(lhs_sym, expr, feats, P, gram_identity):
    """Entry-by-entry expansion of a P x P block map in scalar variables named by the features."""
    import sympy as sp

    mats = sorted({a for a in expr.atoms(sp.MatrixSymbol)}, key=str)
    rep = {}
    for M in mats:
        nm = str(M.name)
        if nm in (r"\Gamma",):
            rep[M] = sp.eye(P) if gram_identity else sp.Matrix(P, P, lambda i, j: sp.Symbol(
                rf"\Gamma_{{{feats[min(i, j)]},{feats[max(i, j)]}}}"))
            continue
        r, c = M.shape
        sym = (nm in ("A", "B") or nm.startswith("Q_{VV}"))

        def ent(i, j, nm=nm, sym=sym, r=r, c=c):
            a = feats[i] if r == P else ""
            b = feats[j] if c == P else ""
            if sym and i > j:
                a, b = feats[j], feats[i]
            idx = ",".join(x for x in (a, b) if x)
            return sp.Symbol(f"{nm}[{idx}]" if idx else nm)

        rep[M] = sp.Matrix(r, c, ent)
    val = sp.Matrix(expr.xreplace(rep).doit()) if not isinstance(expr, sp.Matrix) else expr
    lines = []
    for i in range(val.shape[0]):
        for j in range(val.shape[1]):
            a = feats[i] if val.shape[0] == P else ""
            b = feats[j] if val.shape[1] == P else ""
            e = sp.expand(val[i, j])
            eta = symbols()["eta"]
            poly = sp.Poly(e, eta)
            parts = []
            for (k,), coeff in sorted(poly.terms(), key=lambda t: t[0][0]):
                ct = sp.latex(coeff)
                if k == 0:
                    parts.append(ct)
                else:
                    fac = r"\eta" if k == 1 else rf"\eta^{{{k}}}"
                    parts.append(rf"+ {fac}\left({ct}\right)")
            lines.append(rf"{lhs_sym}[{','.join(x for x in (a, b) if x)}]' &= " + " ".join(parts))
    return lines


def description_latex(desc, entries: bool | None = None) -> str:
    """The reduced variables of a description (names, counts) and its update
    equations in those variables, head by head, as a LaTeX fragment (amsmath).

    Every map is the general closure map (:func:`derive_general`) expanded on
    the head's blocks by :func:`block_map` (all groups trained: a frozen group
    drops its terms, D_a = 0). ``entries``: also expand the read blocks entry
    by entry in the features' names (default: when P <= 4 with Gamma = I, or
    P <= 2 otherwise)."""
    import sympy as sp

    from . import reduce as R

    lay = R.layout(desc)
    P = desc.P
    feats = list(desc.dictionary.features)
    gram_identity = desc.dictionary.gram is None
    if entries is None:
        entries = P <= 4 if gram_identity else P <= 2
    Psym = sp.Symbol("P", integer=True, positive=True)
    gam = sp.MatrixSymbol(r"\Gamma", Psym, Psym)
    out = [r"\allowdisplaybreaks",
           f"% generated by meanfield.engine.symbolic.description_latex for model {desc.name!r}",
           rf"\paragraph{{Model {desc.name}.}} Features ({P}): " + ", ".join(f"${_tex_name(f)}$" for f in feats)
           + (r"; Gram $\Gamma = I$." if gram_identity else r"; Gram $\Gamma = E^\top E$ (given)."),
           rf"Loss: {desc.model.loss}; {len(desc.model.heads)} head(s); "
           rf"{sum(b.count for b in lay.blocks)} independent reduced variables (state size {lay.size}).",
           r"$G_X = \partial\mathcal{L}/\partial X$ for each block $X$ the loss reads (blocks independent).",
           "",
           r"\begin{tabular}{lllr}",
           r"head & variable & kind & count \\ \hline"]
    for b in lay.blocks:
        out.append(rf"${_tex_name(b.head)}$ & ${_var_tex(b.name)}$ & {b.kind} & {b.count} \\")
    out += [r"\end{tabular}", ""]
    for k, h in enumerate(desc.model.heads):
        st = head_structure(desc, k, lay)
        kind = (f"{h.attention} attention, {h.kq} keys/queries, query {h.query}, value {h.value}"
                + (f" ({h.n_neurons} neurons)" if h.value == "neuron" else "") + f", {h.outputs} output(s), "
                + f"sign {h.sign:g}" + (" (trained)" if h.train_sign else ""))
        out.append(rf"\paragraph{{Head ${_tex_name(h.name)}$}} ({kind}).")
        eqs = []
        ent_lines = []
        if st["objects"]:
            objs = [(nm, metric, True) for nm, metric, _g in st["objects"]]
            bm = block_map(objs, st["reads"], names=st["names"])
            for key, expr in bm["map"].items():
                if gram_identity:
                    expr = sp.expand(expr.xreplace({gam: sp.Identity(Psym)}).doit())
                lhs = st["names"][key]
                eqs.append(_latex_map(f"{lhs}'", expr))
                if entries and key in [tuple(sorted(r, key=[o[0] for o in objs].index)) for r in st["reads"]]:
                    Pn = P
                    e2 = expr.xreplace({Psym: Pn})
                    try:
                        ent_lines += _entrywise(lhs, _concrete(e2, Pn), [_tex_name(f) for f in feats], Pn,
                                                gram_identity)
                    except Exception as e:  # pragma: no cover - sympy shape corner cases
                        ent_lines.append(f"% entrywise expansion skipped: {e}")
        g = "" if gram_identity else r"\Gamma "
        g2 = "" if gram_identity else r" \Gamma"
        if h.kq == "merged":
            eqs.append(rf"\tilde W' &= \tilde W - \eta\,{g}G_{{\tilde W}}{g2}")
        if h.value in ("neuron", "linear"):
            lr = rf"{h.n_neurons}\," if h.value == "neuron" and h.n_neurons > 1 else ""
            eqs.append(rf"\tilde w_{{c,q}}' &= \tilde w_{{c,q}} - \eta\,{lr}{g}g_{{c,q}}")
        if h.train_sign:
            eqs.append(r"a' &= a - \eta\,\partial\mathcal{L}/\partial a")
        if eqs:
            out += [r"\begin{align}", " \\\\\n".join(eqs), r"\end{align}"]
        if ent_lines:
            out += ["Entry by entry:", r"\begin{align}", " \\\\\n".join(ent_lines), r"\end{align}"]
    return "\n".join(out) + "\n"


def _concrete(expr, P: int):
    """Replace the symbolic size P by the number in every matrix symbol of ``expr``."""
    import sympy as sp

    rep = {}
    for M in expr.atoms(sp.MatrixSymbol):
        r, c = M.shape
        rep[M] = sp.MatrixSymbol(M.name, int(r.subs("P", P)) if not isinstance(r, int) else r,
                                 int(c.subs("P", P)) if not isinstance(c, int) else c)
    return expr.xreplace(rep)


def _tex_name(s: str) -> str:
    s = str(s)
    if s in ("+", "-"):
        return s
    import re

    m = re.fullmatch(r"([A-Za-z]+)(\d+)", s)
    if m:
        base = m.group(1) if len(m.group(1)) == 1 else rf"\mathrm{{{m.group(1)}}}"
        return f"{base}_{{{m.group(2)}}}"
    if len(s) > 1 and s.isalpha():
        return rf"\mathrm{{{s}}}"
    return s.replace("_", r"\_")


def _var_tex(name: str) -> str:
    if name in ("A", "S", "B"):
        return name
    if name == "W":
        return r"\tilde W"
    if name == "w":
        return r"\tilde w"
    if "." in name:
        a, b = name.split(".")
        return f"Q_{{{_obj_tex(a)}{_obj_tex(b)}}}"
    return name
