"""The actual ODE of each state entry of a small description (``meanfield model derive --format latex``).

For a description with at most :data:`MAX_ENTRIES` independent state entries
(every closure the engine's finite-data kernels run: merged or separate
keys/queries, any number of heads, values token / linear / neuron (any
number of neurons) / matrix with readouts, any Gram matrix, trainable signs,
relative positional biases, causal masks, per-group rates; and the exact
Gaussian population of ``icl_regression`` data, L = (1/2) (T . M T - 2 m . T + c0)
with its moments) the loss is written out explicitly over the description's
data, in the state
entries as scalar symbols named as in the run file (``W[h,v1,v2]``,
``S[h,v1,v2]``, ``A[h,v1,v2]`` (a symmetric block: once, upper triangle),
``w[h,out1,n1,v1]``, ``V.r1[h,v1,r1]``, ``a[h]``, ``b[h,0]``):

* the score matrix the head reads: W~ (merged) or S = Q[K, Q] (separate);
  logits z_iq = scale t_i^T W~ t_q (+ b[l - i] with positional biases),
  attention p_i = c_i e^{z_i} / sum_j c_j e^{z_j} (softmax) or c_i z_i / L_keys
  (linear), over the keys the head sees (query_self, causal mask);
  zbar = sum_q omega_q sum_i p_iq t_i;
* the head's value rows: zbar itself (``value = "token"``), w~_row
  (linear / neuron) or R_c = Q[r_c, V] (matrix); u_row = value_row . zbar,
  out_c = a (1/n) sum_neurons act(u) (act = relu for neurons);
  f = sum_heads out; the loss (squared 1/2 |f - y|^2, logistic
  log(1 + e^{-y f}), cross-entropy) summed with the sequences' weights.

Each entry's gradient-flow right-hand side is then, from G_X = dL/dX (sympy
differentiation of that explicit loss; a Gram block read by the loss
treated as independent of the others):

* narrow entries: dW~/dt = -rho_W Gamma G_W Gamma, dw~/dt = -n rho_V Gamma g,
  da/dt = -rho_a dL/da, db/dt = -rho_b dL/db;
* Gram entries (the general closure map, :func:`meanfield.engine.symbolic.derive_general`):
  dQ/dt = -(X^T Q + Q X), X = Ghat Gamma_r^rho D, Ghat = G + G^T,
  Gamma_r^rho the block metric with each object's columns scaled by its
  group's rate, D the trained columns.

:func:`entry_latex` prints the loss and every right-hand side over shared
subexpressions xi_k (sympy ``cse``, :func:`shared_form`): expanded, a few
sequences already give 10^5 characters per description.

The GD map of a narrow entry is X' = X + eta dX/dt; a Gram entry's adds the
eta^2 term of the general map (printed by the block maps above it).
``tests/test_derive_entries.py`` checks every right-hand side, lambdified
(expanded, and in the printed shared form evaluated in order), against the
engine's own kernel derivative (``flow_rhs``) at random states
(and the narrow GD maps against its GD step). Larger descriptions get the
general block maps only (:func:`meanfield.engine.symbolic.description_latex`),
with one line saying why.
"""

from __future__ import annotations

#: the most state entries for which the entry-by-entry ODE is printed
MAX_ENTRIES = 12


def _count(desc) -> int:
    from .reduce import layout

    return sum(b.count for b in layout(desc).blocks)


def supported(desc) -> str | None:
    """None if :func:`entry_system` applies to ``desc``, else why not (one phrase).

    Parameters
    ----------
    desc : Description

    Returns
    -------
    str or None

    Examples
    --------
    >>> import meanfield as mf
    >>> supported(mf.load("incontext", K=2, N=2)) is None
    True
    """
    n = _count(desc)
    if n > MAX_ENTRIES:
        return f"{n} independent state entries (> {MAX_ENTRIES})"
    return None


def _relu_class(r0):
    """relu as a sympy function whose derivative is Heaviside(x, r0) (the engine's relu'(0) = r0);
    printed \\operatorname{relu}, lambdified with :data:`NUMPY_FUNCTIONS`."""
    import sympy as sp

    class relu(sp.Function):
        @classmethod
        def eval(cls, x):
            if x.is_Number:
                return x if x > 0 else sp.Integer(0)

        def fdiff(self, argindex=1):
            return sp.Heaviside(self.args[0], r0)

        def _latex(self, printer):
            return r"\operatorname{relu}\left(" + printer._print(self.args[0]) + r"\right)"

    return relu


#: what :func:`sympy.lambdify` needs besides numpy to evaluate :func:`entry_system`'s expressions
NUMPY_FUNCTIONS = {"relu": lambda x: x * (x > 0)}


def _entries(desc, lay):
    """(name, flat indices of the entry in y, block) of every independent state entry, in layout order."""
    from .reduce import H_QOFF, H_N

    feats = list(desc.dictionary.names)
    P = lay.P
    out = []
    for k, h in enumerate(desc.model.heads):
        objs = {o[0]: o for o in lay.objects[k]}
        N = int(lay.hi[k, H_N])
        qoff = int(lay.hi[k, H_QOFF])
        for b in (b for b in lay.blocks if b.head == h.name):
            if b.kind == "gram":
                a, c = {"A": ("K", "K"), "S": ("K", "Q"), "B": ("Q", "Q")}.get(b.name) or b.name.split(".", 1)
                la = feats if objs[a][2] == P else [a]
                lc = feats if objs[c][2] == P else [c]
                for i in range(b.shape[0]):
                    for j in range(b.shape[1]):
                        if a == c and j < i:
                            continue
                        r, s = b.rows[0] + i, b.cols[0] + j
                        out.append((f"{b.name}[{h.name},{la[i]},{lc[j]}]", (qoff + r * N + s, qoff + s * N + r),
                                    ("gram", k, r, s)))
            elif b.name == "W":
                for i in range(P):
                    for j in range(P):
                        out.append((f"W[{h.name},{feats[i]},{feats[j]}]", (b.offset + i * P + j,), ("W", k, i, j)))
            elif b.name == "w":
                C, n, _ = b.shape
                for c in range(C):
                    for q in range(n):
                        for i in range(P):
                            out.append((f"w[{h.name},out{c + 1},n{q + 1},{feats[i]}]",
                                        (b.offset + (c * n + q) * P + i,), ("w", k, c * n + q, i)))
            elif b.name == "a":
                out.append((f"a[{h.name}]", (b.offset,), ("a", k)))
            elif b.name == "b":
                for t in range(b.shape[0]):
                    out.append((f"b[{h.name},{t}]", (b.offset + t,), ("b", k, t)))
    return out


def _stage_arrays(desc, lay, stage: int):
    """(trained-group bits, Gr, hf) of stage ``stage`` (its rates: meanfield.engine.rates)."""
    from .packed import mode_of
    from .rates import has_rates, rate_arrays

    tr = desc.training
    st = tr.stages[stage]
    if has_rates(tr):
        Gr, hf = rate_arrays(lay, tr, st)
    else:
        Gr, hf = lay.Gr, lay.hf
    return mode_of(st.train) & 15, Gr, hf


def entry_system(desc, stage: int = 0) -> dict:
    """The explicit loss and the gradient-flow right-hand side of every state entry.

    Parameters
    ----------
    desc : Description
        one :func:`supported` accepts.
    stage : int
        the training stage (0-based) whose trained groups and rates apply.

    Returns
    -------
    dict
        ``entries`` (names, in the layout's order; a symmetric Gram block's
        entries once, upper triangle), ``symbols`` (sympy Symbols),
        ``index`` (name -> the flat state indices holding the entry),
        ``loss`` (sympy expression), ``grad`` (name -> dL/dX), ``rhs``
        (name -> dX/dt), ``narrow`` (the names whose GD map is X + eta dX/dt).

    Examples
    --------
    >>> import meanfield as mf
    >>> s = entry_system(mf.load("incontext", K=2, N=2))
    >>> s["entries"]
    ['W[h,v1,v1]', 'W[h,v1,v2]', 'W[h,v2,v1]', 'W[h,v2,v2]']
    """
    import numpy as np
    import sympy as sp

    from .reduce import F_RA, F_RB, F_RV, F_RW, F_LR, H_N, layout

    lay = layout(desc)
    P = lay.P
    ents = _entries(desc, lay)
    names = [e[0] for e in ents]
    syms = [sp.Symbol(n, real=True) for n in names]
    bits, Gr, hf = _stage_arrays(desc, lay, stage)
    nq = sp.nsimplify
    Gam = sp.Matrix(P, P, lambda i, j: nq(float(desc.dictionary.Gamma[i, j])))
    # the symbol of every piece of the state, by position
    gram, W, w, a, bias = {}, {}, {}, {}, {}
    for (n, _idx, key), x in zip(ents, syms):
        if key[0] == "gram":
            gram[(key[1], key[2], key[3])] = x
            gram[(key[1], key[3], key[2])] = x
        elif key[0] == "W":
            W[key[1:]] = x
        elif key[0] == "w":
            w[key[1:]] = x
        elif key[0] == "a":
            a[key[1]] = x
        else:
            bias[key[1:]] = x
    d = desc.data
    tokens = np.asarray(d.tokens, dtype=float)
    counts = np.asarray(d.count_array, dtype=float)
    weight = np.asarray(d.weight, dtype=float)
    target = np.asarray(d.target, dtype=float)
    L = tokens.shape[1]
    heads = desc.model.heads
    H = len(heads)
    obj = [{o[0]: o for o in lay.objects[k]} for k in range(H)]

    def score(k):
        if heads[k].kq == "merged":
            return sp.Matrix(P, P, lambda i, j: W[(k, i, j)])
        sK, sQ = obj[k]["K"][1], obj[k]["Q"][1]
        return sp.Matrix(P, P, lambda i, j: gram[(k, sK + i, sQ + j)])

    def value_rows(k):
        h = heads[k]
        if h.value == "matrix":
            sV = obj[k]["V"][1]
            return [sp.Matrix([gram[(k, obj[k][f"r{c + 1}"][1], sV + i)] for i in range(P)]) for c in range(h.outputs)]
        return [sp.Matrix([w[(k, r, i)] for i in range(P)]) for r in range(h.outputs * h.n_neurons)]

    Sc = [score(k) for k in range(H)]
    Vr = [None if heads[k].value == "token" else value_rows(k) for k in range(H)]
    r0 = nq(float(desc.model.relu_prime_at_zero))
    total = 0
    extra = getattr(d, "extra", None) or {}
    if "population" in extra:
        total = _population_loss(extra["population"]["law"], heads, Sc, Vr, a)
    for s in range(0 if "population" in extra else d.n):
        T = [sp.Matrix([nq(x) for x in tokens[s, i]]) for i in range(L)]
        c = [nq(counts[s, i]) for i in range(L)]
        pos = [i for i in range(L) if counts[s, i] > 0]
        last = pos[-1]
        leff = sum(c)
        f = None
        for k, h in enumerate(heads):
            if h.query == "mean":
                queries = [(l, T[l], c[l] / leff) for l in pos]
            elif h.query == "last":
                queries = [(last, T[last], 1)]
            else:
                queries = [(-1, sp.Matrix([nq(x) for x in h.query_vector]), 1)]
            excl = last if (h.query == "last" and not h.query_self) else -1
            zbar = sp.zeros(P, 1)
            for l, tq, om in queries:
                lim = l + 1 if (getattr(h, "mask", "none") == "causal" and l >= 0) else L
                keys = [i for i in pos if i != excl and i < lim]
                rpe = getattr(h, "rpe", 0)
                z = {}
                for i in keys:
                    z[i] = (T[i].T * Sc[k] * tq)[0, 0]
                    extra = bias[(k, l - i + rpe - 1)] if (rpe and l >= 0) else 0
                    z[i] = (nq(h.scale) * z[i] + extra)
                if h.attention == "softmax":
                    den = sum(c[j] * sp.exp(z[j]) for j in keys)
                    p = {i: c[i] * sp.exp(z[i]) / den for i in keys}
                else:
                    lk = sum(c[j] for j in keys)
                    p = {i: c[i] * z[i] / lk for i in keys}
                zbar += om * sum((p[i] * T[i] for i in keys), sp.zeros(P, 1))
            sign = a[k] if k in a else nq(h.sign)
            if h.value == "token":
                out = zbar
            else:
                nn = h.n_neurons
                u = [(row.T * zbar)[0, 0] for row in Vr[k]]
                act = _relu_class(r0) if h.value == "neuron" else (lambda x: x)
                out = sp.Matrix([sum(act(u[cc * nn + q]) for q in range(nn)) / nn for cc in range(h.outputs)])
            out = sign * out
            f = out if f is None else f + out
        if desc.model.loss == "squared":
            y = target[s] if target.ndim == 2 else np.array([target[s]])
            ls = sum((f[kk] - nq(y[kk])) ** 2 for kk in range(f.shape[0])) / 2
        elif desc.model.loss == "logistic":
            ls = sp.log(1 + sp.exp(-nq(float(np.ravel(target[s])[0])) * f[0]))
        else:
            ls = -f[int(np.ravel(target[s])[0])] + sp.log(sum(sp.exp(f[kk]) for kk in range(f.shape[0])))
        total += nq(weight[s]) * ls

    grad = {n: sp.diff(total, x) for n, x in zip(names, syms)}
    hn = {e[2]: e[0] for e in ents}  # ("W", k, i, j), ("w", k, row, i), ("b", k, t), ... -> name
    rhs, narrow = {}, []
    tr_att, tr_val, tr_r, tr_sgn = bool(bits & 1), bool(bits & 2), bool(bits & 4), bool(bits & 8)
    for k, h in enumerate(heads):
        if h.kq == "merged":
            GW = sp.Matrix(P, P, lambda i, j: grad[hn[("W", k, i, j)]])
            V = Gam * GW * Gam
            for i in range(P):
                for j in range(P):
                    n = hn[("W", k, i, j)]
                    rhs[n] = -nq(float(hf[k, F_RW])) * V[i, j] if tr_att else sp.Integer(0)
                    narrow.append(n)
        if h.value in ("neuron", "linear"):
            lr = nq(float(hf[k, F_LR] * hf[k, F_RV]))
            for r in range(h.outputs * h.n_neurons):
                g = sp.Matrix([grad[hn[("w", k, r, i)]] for i in range(P)])
                v = Gam * g
                for i in range(P):
                    n = hn[("w", k, r, i)]
                    rhs[n] = -lr * v[i] if tr_val else sp.Integer(0)
                    narrow.append(n)
        if k in a:
            n = f"a[{h.name}]"
            rhs[n] = -nq(float(hf[k, F_RA])) * grad[n] if tr_sgn else sp.Integer(0)
            narrow.append(n)
        for (kk, t), x in bias.items():
            if kk == k:
                n = hn[("b", k, t)]
                rhs[n] = -nq(float(hf[k, F_RB])) * grad[n] if tr_att else sp.Integer(0)
                narrow.append(n)
        N = int(lay.hi[k, H_N])
        if N:
            Q = sp.Matrix(N, N, lambda i, j: gram[(k, i, j)])
            Gm = sp.zeros(N, N)  # G = dL/dQ on the blocks the loss reads (read blocks independent)
            reads = [("K", "Q")] if h.kq == "separate" else []
            reads += [(f"r{cc + 1}", "V") for cc in range(h.outputs)] if h.value == "matrix" else []
            for oa, ob in reads:
                _, sa, wa, _g = obj[k][oa]
                _, sb, wb, _g = obj[k][ob]
                for i in range(sa, sa + wa):
                    for j in range(sb, sb + wb):
                        Gm[i, j] = grad[hn[("gram", k, min(i, j), max(i, j))]]
            Ghat = Gm + Gm.T
            on = {0: tr_att, 1: tr_val, 2: tr_r}
            Dg = sp.diag(*[1 if on.get(int(lay.grp[k, j]), False) else 0 for j in range(N)])
            Grs = sp.Matrix(N, N, lambda i, j: nq(float(Gr[k, i, j])))
            X = Ghat * Grs * Dg
            dQ = -(X.T * Q + Q * X)
            for e in ents:
                if e[2][0] == "gram" and e[2][1] == k:
                    rhs[e[0]] = dQ[e[2][2], e[2][3]]
    return {"entries": names, "symbols": syms, "index": {e[0]: e[1] for e in ents}, "loss": total,
            "grad": grad, "rhs": rhs, "narrow": narrow, "stage": stage}


def _population_loss(law, heads, Sc, Vr, a):
    """The exact population loss of Gaussian prompts (``meanfield.engine.population``) in the state entries:
    L = (1/2) (T . M T - 2 m . T + c0), T_abj = sum_k a_k scale_k v_k[a] S_k[b, j] (j < d),
    M = K4 (x) Lambda, with the law's exact moments (``meanfield.engine.gaussian.Moments``)."""
    import sympy as sp

    mom = law.moments()
    P, d = law.P, law.d
    nq = sp.nsimplify
    T = {}
    for k, h in enumerate(heads):
        ak = a[k] if k in a else nq(h.sign)
        v = Vr[k][0]
        for aa in range(P):
            for b in range(P):
                for j in range(d):
                    T[(aa, b, j)] = T.get((aa, b, j), 0) + ak * nq(h.scale) * v[aa] * Sc[k][b, j]
    Lam = law.Lambda
    quad = 0
    for (aa, b, j), t1 in T.items():
        for (c, e, l), t2 in T.items():
            coef = float(mom.K4[aa, b, c, e]) * float(Lam[j, l])
            if coef != 0.0:
                quad += nq(coef) * t1 * t2
    lin = sum(nq(float(mom.m[aa, b, j])) * t for (aa, b, j), t in T.items() if mom.m[aa, b, j] != 0.0)
    return (quad - 2 * lin + nq(float(mom.c0))) / 2


_TEX_BASE = {"W": r"\tilde W", "w": r"\tilde w"}


def _tex_parts(name: str) -> tuple[str, str]:
    base, _, idx = name.partition("[")
    if "." in base:  # a Gram block between two objects: Q^{V r1}
        x, y = base.split(".")
        base = rf"Q^{{{x}{y}}}"
    return _TEX_BASE.get(base, base), idx.rstrip("]")


def _tex_entry(name: str) -> str:
    base, idx = _tex_parts(name)
    return rf"{base}_{{{idx}}}"


def _stage_keys(desc):
    """The stages (0-based) with a distinct (trained groups, rates) pair, in order."""
    from .reduce import layout

    lay = layout(desc)
    seen, out = [], []
    for i in range(len(desc.training.stages)):
        bits, Gr, hf = _stage_arrays(desc, lay, i)
        key = (bits, Gr.tobytes(), hf.tobytes())
        if key not in seen:
            seen.append(key)
            out.append(i)
    return out


def shared_form(system: dict) -> dict:
    """The loss and the right-hand sides of :func:`entry_system` over shared subexpressions (sympy ``cse``),
    the form :func:`entry_latex` prints (the expanded expressions run to 10^5 characters for a few sequences).

    Parameters
    ----------
    system : dict
        what :func:`entry_system` returns.

    Returns
    -------
    dict
        ``shared``: [(xi_k, expression)] in order (each in the entries and the xi_j before it),
        ``loss`` and ``rhs`` (name -> expression) in the entries and the xi_k.

    Examples
    --------
    >>> import meanfield as mf
    >>> f = shared_form(entry_system(mf.load("incontext", K=2, N=2)))
    >>> sorted(f["rhs"]) == sorted(entry_system(mf.load("incontext", K=2, N=2))["entries"])
    True
    """
    import sympy as sp

    names = system["entries"]
    exprs = [system["loss"]] + [system["rhs"][n] for n in names]
    shared, reduced = sp.cse(exprs, symbols=sp.numbered_symbols("xi_", real=True), optimizations=None)
    return {"shared": list(shared), "loss": reduced[0], "rhs": dict(zip(names, reduced[1:]))}


def entry_latex(desc) -> str:
    """The LaTeX (amsmath) of :func:`entry_system`: the loss and each entry's ODE, per distinct stage.

    Parameters
    ----------
    desc : Description
        one :func:`supported` accepts.

    Returns
    -------
    str

    Examples
    --------
    >>> import meanfield as mf
    >>> r"\\dot{\\tilde W}_{h,v1,v1}" in entry_latex(mf.load("incontext", K=2, N=2))
    True
    """
    import sympy as sp

    lines = []
    for i in _stage_keys(desc):
        s = entry_system(desc, stage=i)
        rep = {x: sp.Symbol(_tex_entry(n)) for n, x in zip(s["entries"], s["symbols"])}
        sf = shared_form(s)
        st = desc.training.stages[i]
        pop = "population" in (getattr(desc.data, "extra", None) or {})
        lines += [(r"\paragraph{Each state entry.} The " if not lines else rf"\paragraph{{Stage {i + 1}.}} The ")
                  + ("exact population loss of the Gaussian prompts (closed-form moments)" if pop else
                     f"loss over the description's {desc.data.n} weighted sequences") + ", in the state entries, "
                  r"over the shared subexpressions $\xi_k$:", r"\begin{align}"]
        body = [rf"{sp.latex(x)} &= {sp.latex(e.xreplace(rep))}" for x, e in sf["shared"]]
        body.append(r"\mathcal{L} &= " + sp.latex(sf["loss"].xreplace(rep)))
        lines += [" \\\\\n".join(body), r"\end{align}"]
        lines += [rf"Gradient flow of stage {i + 1} ({st.name}: trains {', '.join(st.train) or 'nothing'}); "
                  r"GD: $X' = X + \eta\,\dot X$ for the narrow entries (a Gram entry adds the $\eta^2$ term "
                  r"of its block map above):", r"\begin{align}"]
        body = []
        for n in s["entries"]:
            base, idx = _tex_parts(n)
            body.append(rf"\dot{{{base}}}_{{{idx}}} &= {sp.latex(sf['rhs'][n].xreplace(rep))}")
        lines.append(" \\\\\n".join(body))
        lines.append(r"\end{align}")
    return "\n".join(lines) + "\n"
