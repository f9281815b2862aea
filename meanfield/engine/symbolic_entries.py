"""The actual ODE of each state entry of a small description (``meanfield model derive --format latex``).

For a description with at most :data:`MAX_ENTRIES` state entries whose heads
all have narrow state (``kq = "merged"``: the score matrix W~ itself;
``value`` token, linear or one neuron) and the identity Gram matrix, the
loss is written out explicitly over the description's finite data set, in
the state entries as scalar symbols named as in the run file
(``W[h,v1,v2]``, ``w[h,out1,n1,v1]``): logits z_iq = scale t_i^T W~ t_q,
attention p_i = c_i e^{z_i} / sum_j c_j e^{z_j} (softmax) or c_i z_i / L_eff
(linear), zbar = sum_q omega_q sum_i p_iq t_i, the head output (zbar for
``value = "token"``; w~ . zbar, relu(w~ . zbar)), f = sum_heads a_h out_h and
the loss (squared 1/2 |f - y|^2, logistic log(1 + e^{-y f}), cross-entropy)
averaged with the sequences' weights. Each entry X then follows the GD map
X' = X - eta dL/dX (flow: dX/dt = -dL/dX), printed with dL/dX expanded.
``tests/test_derive_entries.py`` checks these maps against the engine's own
GD step at random states. Other descriptions get the general block maps
(:func:`meanfield.engine.symbolic.description_latex`).
"""

from __future__ import annotations

#: the most state entries for which the entry-by-entry ODE is printed
MAX_ENTRIES = 12


def supported(desc) -> str | None:
    """None if :func:`entry_system` applies to ``desc``, else why not (one phrase)."""
    from .reduce import layout

    n = sum(b.count for b in layout(desc).blocks)
    if n > MAX_ENTRIES:
        return f"{n} independent state entries (> {MAX_ENTRIES})"
    if desc.dictionary.gram is not None:
        return "a non-identity Gram matrix"
    for h in desc.model.heads:
        if h.kq != "merged":
            return f"head {h.name}: kq = {h.kq} (wide Gram blocks)"
        if h.value not in ("token", "linear", "neuron") or h.n_neurons != 1:
            return f"head {h.name}: value = {h.value}" + (f" with {h.n_neurons} neurons" if h.n_neurons != 1 else "")
        if h.train_sign:
            return f"head {h.name}: a trained sign"
    return None


def entry_system(desc) -> dict:
    """The explicit loss and the GD map of every state entry.

    Parameters
    ----------
    desc : Description
        one :func:`supported` accepts.

    Returns
    -------
    dict
        ``entries`` (names, in the run file's order), ``symbols`` (sympy
        Symbols), ``loss`` (sympy expression), ``grad`` (name -> dL/dX),
        ``eta``.

    Examples
    --------
    >>> import meanfield as mf
    >>> s = entry_system(mf.load("incontext", K=2, N=2))
    >>> s["entries"]
    ['W[h,v1,v1]', 'W[h,v1,v2]', 'W[h,v2,v1]', 'W[h,v2,v2]']
    """
    import numpy as np
    import sympy as sp

    feats = list(desc.dictionary.names)
    P = len(feats)
    d = desc.data
    tokens = np.asarray(d.tokens, dtype=float)
    counts = d.count_array
    weight = np.asarray(d.weight, dtype=float)
    target = np.asarray(d.target, dtype=float)
    names, syms = [], []

    def sym(name):
        s = sp.Symbol(name, real=True)
        names.append(name)
        syms.append(s)
        return s

    heads = []
    for h in desc.model.heads:
        W = sp.Matrix(P, P, lambda a, b: sym(f"W[{h.name},{feats[a]},{feats[b]}]"))
        w = None
        if h.value in ("linear", "neuron"):
            w = [sp.Matrix([sym(f"w[{h.name},out{c + 1},n1,{feats[a]}]") for a in range(P)]) for c in range(h.outputs)]
        heads.append((h, W, w))
    r0 = float(desc.model.relu_prime_at_zero)
    total = 0
    for s in range(d.n):
        keep = [i for i in range(tokens.shape[1]) if counts[s, i] != 0]
        T = [sp.Matrix([sp.nsimplify(x) for x in tokens[s, i]]) for i in keep]
        c = [sp.nsimplify(counts[s, i]) for i in keep]
        f = None
        for h, W, w in heads:
            ck = list(c)
            if h.query == "mean":
                Leff = sum(c)
                queries = [(T[q], c[q] / Leff) for q in range(len(T))]
            elif h.query == "last":
                queries = [(T[-1], 1)]
                if not h.query_self:
                    ck[-1] = 0
            else:
                queries = [(sp.Matrix([sp.nsimplify(x) for x in h.query_vector]), 1)]
            zbar = sp.zeros(P, 1)
            for tq, om in queries:
                z = [sp.nsimplify(h.scale) * (T[i].T * W * tq)[0, 0] for i in range(len(T))]
                if h.attention == "softmax":
                    den = sum(ck[j] * sp.exp(z[j]) for j in range(len(T)))
                    p = [ck[i] * sp.exp(z[i]) / den for i in range(len(T))]
                else:
                    Leff = sum(ck)
                    p = [ck[i] * z[i] / Leff for i in range(len(T))]
                zbar += om * sum((p[i] * T[i] for i in range(len(T))), sp.zeros(P, 1))
            if h.value == "token":
                out = zbar
            else:
                u = [(w[cc].T * zbar)[0, 0] for cc in range(h.outputs)]
                out = sp.Matrix([sp.Max(0, x) if h.value == "neuron" else x for x in u])
            out = sp.nsimplify(h.sign) * out
            f = out if f is None else f + out
        if desc.model.loss == "squared":
            y = target[s] if target.ndim == 2 else np.array([target[s]])
            ls = sum((f[k] - sp.nsimplify(y[k])) ** 2 for k in range(f.shape[0])) / 2
        elif desc.model.loss == "logistic":
            ls = sp.log(1 + sp.exp(-sp.nsimplify(target[s]) * f[0]))
        else:
            ls = -f[int(target[s])] + sp.log(sum(sp.exp(f[k]) for k in range(f.shape[0])))
        total += sp.nsimplify(weight[s]) * ls
    grad = {}
    for n, x in zip(names, syms):
        g = sp.diff(total, x)
        g = g.replace(lambda e: isinstance(e, sp.Heaviside), lambda e: sp.Heaviside(e.args[0], sp.nsimplify(r0)))
        grad[n] = g
    return {"entries": names, "symbols": syms, "loss": total, "grad": grad, "eta": sp.Symbol("eta", positive=True)}


def _tex_entry(name: str) -> str:
    base, _, idx = name.partition("[")
    base = {"W": r"\tilde W", "w": r"\tilde w"}.get(base, base)
    return rf"{base}_{{{idx.rstrip(']')}}}"


def entry_latex(desc) -> str:
    """The LaTeX (amsmath) of :func:`entry_system`: the loss and each entry's GD map.

    Parameters
    ----------
    desc : Description

    Returns
    -------
    str

    Examples
    --------
    >>> print(entry_latex(mf.load("incontext", K=2, N=2)))   # doctest: +SKIP
    """
    import sympy as sp

    s = entry_system(desc)
    rep = {x: sp.Symbol(_tex_entry(n)) for n, x in zip(s["entries"], s["symbols"])}
    lines = [r"\paragraph{Each state entry.} The loss over the description's "
             f"{desc.data.n} weighted sequences, in the state entries, and the GD map of every entry "
             r"($X' = X - \eta\,\partial\mathcal{L}/\partial X$; gradient flow: "
             r"$\dot X = -\partial\mathcal{L}/\partial X$):",
             r"\begin{align}", r"\mathcal{L} &= " + sp.latex(s["loss"].xreplace(rep)) + r"\\"]
    body = []
    for n, x in zip(s["entries"], s["symbols"]):
        tex = _tex_entry(n)
        body.append(rf"{tex}' &= {tex} - \eta\left({sp.latex(s['grad'][n].xreplace(rep))}\right)")
    lines.append(" \\\\\n".join(body))
    lines.append(r"\end{align}")
    return "\n".join(lines) + "\n"
