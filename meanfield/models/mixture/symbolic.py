"""Sympy derivation of the reduced K-mixture dynamics, rendered as LaTeX, JSON or Python.

Job: for given K, L, write down in closed form (with sympy) the reduced system of
``docs``/``kernels``: per head h in {+, -} the score variables S_h[a, b] (P*P),
the symmetric key / query self-scores A_h[a, b], B_h[a, b] (a <= b), the neuron
alignments w~_h[a] (P), on the exact finite sample set ``data.sample_set(K, L)``;
the pre-activations u_h(X_n), the margin y f, the logistic loss, and by
symbolic differentiation G_h = dLoss/dS_h and dLoss/dw~_h; then the
gradient-flow right-hand side and the exact GD map

    dS/dt = -(A G + G B),  dA/dt = -(G S^T + S G^T),  dB/dt = -(G^T S + S^T G),
    dw~/dt = -dLoss/dw~,
    S' = S - eta (G B + A G) + eta^2 G S^T G,  A' = A - eta (G S^T + S G^T) + eta^2 G B G^T,
    B' = B - eta (G^T S + S^T G) + eta^2 G^T A G,  w~' = w~ - eta dLoss/dw~.

How it is derived (nothing here is copied from ``kernels``, which it is tested
against):

- logits z[i, l] = sgn_i sgn_l S_h[idx_i, idx_l] (key token i, query token l),
  attention exp(z[i, l] - M_l) / sum_j exp(z[j, l] - M_l), where M_l is a free
  symbol (at run time: the largest logit of query l). u is exactly independent of
  M_l, so differentiating with M_l held fixed is exact; it only keeps every
  exponential <= 1 in the generated code.
- u_h(X_n) = (1/L) sum_l sum_i softmax_i(...) sgn_i w~_h[idx_i] (queries averaged
  before the ReLU), f = relu(u_+) - relu(u_-), Loss = sum_n weight_n l(y_n f_n)
  with l(z) = log(1 + exp(-z)).
- relu, relu' (relu'(0) = r0 at run time), l and -l' = 1/(1 + exp(z)) are opaque
  sympy functions (``meanfield.engine.codegen``, with its numba printer) with their derivatives declared (l' is checked against sympy's
  own derivative of log(1 + exp(-z)) at build time). By the chain rule, done by
  sympy: lambda_{h,n} = dLoss/du_h(X_n) and du_h(X_n)/dS_h[a, b], du_h(X_n)/dw~_h[a]
  (sympy ``diff`` of the explicit expressions), G_h[a, b] = sum_n lambda_{h,n}
  du_h(X_n)/dS_h[a, b].
- the flow and GD right-hand sides are not derived here: they are the engine's
  general closure map (``meanfield.engine.symbolic``) on the mixture head's
  blocks, named S, A, B by ``symbolic_gram`` (Gamma = I:
  ``symbolic_gram.orthonormal``), evaluated on the matrices of these symbols;
  the symmetry of dA/dt, dB/dt, A', B' is checked symbolically at build time.
  What this module adds is the mixture's own: its sample set, the two signed
  heads with mean query before the ReLU, the logistic loss, and the names of
  the entries (its paper's symbols).

Public: :func:`variables` (JSON-able variable list and counts), :func:`render`
(``"latex"``: a paper-ready fragment; ``"json"``: the variable list;
``"python"``: numba source with ``loss_grads(y, r0)``, ``flow_rhs(y, r0)``,
``gd_map(y, eta, r0)`` on the flat state of ``kernels.layout(P)``),
:func:`write` (import a written ``.py`` file with ``meanfield.engine.codegen.load_generated``). Output is deterministic (same text every run).
"""

from __future__ import annotations

import json
from fractions import Fraction
from functools import lru_cache
from pathlib import Path

import sympy as sp

from ...engine.codegen import HELPERS as _HELPERS, IMPORTS, check_opaque_derivatives, code as _code, \
    cse_lines as _cse_lines, logloss, long_sum, relu
from .data import feature_labels, sample_set

HEADS = ("+", "-")
HEAD_SIGN = {"+": 1, "-": -1}
_TAG = {"+": "p", "-": "m"}  # heads in Python identifiers
KINDS = ("score", "key_self_score", "query_self_score", "neuron")
FORMATS = ("latex", "json", "python")
_EXT = {"latex": "tex", "json": "json", "python": "py"}


# ----------------------------------------------------------------- names

def _feat_tex(label: str) -> str:
    return f"{label[0]}_{{{label[1:]}}}" if len(label) > 2 else f"{label[0]}_{label[1:]}"


def _pairs(P: int, sym: bool):
    return [(a, b) for a in range(P) for b in range(P) if not sym or a <= b]


def variables(K: int, L: int) -> dict:
    """The reduced variables of the full system, per head and kind, with counts.

    Names: ``S+[c1,v1]`` (score, key feature first), ``A+[a,b]`` / ``B+[a,b]``
    (key / query self-scores, a <= b in basis order), ``w+[c1]`` (neuron).
    """
    samples = sample_set(K, L)
    lab = feature_labels(K)
    P = 2 * K
    heads = {}
    total = 0
    for h in HEADS:
        kinds = {}
        for kind, letter, sym in (("score", "S", False), ("key_self_score", "A", True),
                                  ("query_self_score", "B", True)):
            names = [f"{letter}{h}[{lab[a]},{lab[b]}]" for a, b in _pairs(P, sym)]
            kinds[kind] = {"count": len(names), "names": names}
        names = [f"w{h}[{lab[a]}]" for a in range(P)]
        kinds["neuron"] = {"count": len(names), "names": names}
        total += sum(v["count"] for v in kinds.values())
        heads[h] = kinds
    return {"K": K, "L": L, "n_samples": samples.n, "heads": heads, "total": total}


# ----------------------------------------------------------------- the system

class _System:
    """All symbols and closed-form expressions for one (K, L)."""

    def __init__(self, K: int, L: int):
        check_opaque_derivatives()
        self.K, self.L, self.P = K, L, 2 * K
        P = self.P
        self.samples = smp = sample_set(K, L)
        self.labels = lab = feature_labels(K)
        self.n = smp.n
        # exact rational weights
        self.weight = []
        for wt in smp.weight:
            fr = Fraction(float(wt)).limit_denominator(10**12)
            assert abs(float(fr) - float(wt)) <= 1e-15 * float(wt)
            self.weight.append(sp.Rational(fr.numerator, fr.denominator))
        self.label = [int(v) for v in smp.y]

        # variables
        self.S, self.A, self.B, self.w = {}, {}, {}, {}
        self.G = {}
        self.tex = {}  # Symbol -> LaTeX
        for h in HEADS:
            t = _TAG[h]
            S = sp.zeros(P, P)
            A = sp.zeros(P, P)
            B = sp.zeros(P, P)
            G = sp.zeros(P, P)
            for a in range(P):
                for b in range(P):
                    fa, fb = _feat_tex(lab[a]), _feat_tex(lab[b])
                    s = sp.Symbol(f"S_{t}_{lab[a]}_{lab[b]}", real=True)
                    self.tex[s] = rf"({fa}^\top W_{{K{h}}}^\top W_{{Q{h}}} {fb})"
                    S[a, b] = s
                    g = sp.Symbol(f"G_{t}_{lab[a]}_{lab[b]}", real=True)
                    self.tex[g] = rf"G_{{{h}}}[{fa},{fb}]"
                    G[a, b] = g
                    if a <= b:
                        sa = sp.Symbol(f"A_{t}_{lab[a]}_{lab[b]}", real=True)
                        sb = sp.Symbol(f"B_{t}_{lab[a]}_{lab[b]}", real=True)
                        self.tex[sa] = rf"({fa}^\top W_{{K{h}}}^\top W_{{K{h}}} {fb})"
                        self.tex[sb] = rf"({fa}^\top W_{{Q{h}}}^\top W_{{Q{h}}} {fb})"
                        A[a, b] = A[b, a] = sa
                        B[a, b] = B[b, a] = sb
            w = []
            for a in range(P):
                s = sp.Symbol(f"w_{t}_{lab[a]}", real=True)
                self.tex[s] = rf"(w_{h}^\top {_feat_tex(lab[a])})"
                w.append(s)
            self.S[h], self.A[h], self.B[h], self.G[h], self.w[h] = S, A, B, G, w

        self._build_forward()
        self._build_backward()
        self._build_updates()

    # token helpers
    def token_tex(self, n: int, i: int) -> str:
        a, s = int(self.samples.idx[n, i]), float(self.samples.sgn[n, i])
        return ("-" if s < 0 else "") + _feat_tex(self.labels[a])

    def _build_forward(self):
        L, smp = self.L, self.samples
        self.M = {}        # (h, n) -> [M_l symbols]
        self.zl = {}       # (h, n) -> [[z_il for i] for l]  (sympy, in S)
        self.query = {}    # (h, n) -> [(numerator N_l, denominator D_l)] with M
        self.u = {}        # (h, n) -> u expression (S, w, M)
        self.U = {}        # (h, n) -> Symbol u_{t}_{n}
        for h in HEADS:
            t = _TAG[h]
            S, w = self.S[h], self.w[h]
            for n in range(self.n):
                idx = [int(v) for v in smp.idx[n]]
                sgn = [int(v) for v in smp.sgn[n]]
                Ms, zs, qs = [], [], []
                total = sp.Integer(0)
                for l in range(L):
                    M = sp.Symbol(f"M_{t}_{n}_{l}", real=True)
                    z = [sgn[i] * sgn[l] * S[idx[i], idx[l]] for i in range(L)]
                    e = [sp.exp(z[i] - M) for i in range(L)]
                    N = sp.Add(*[e[i] * sgn[i] * w[idx[i]] for i in range(L)])
                    D = sp.Add(*e)
                    Ms.append(M)
                    zs.append(z)
                    qs.append((N, D))
                    total += N / D
                self.M[h, n], self.zl[h, n], self.query[h, n] = Ms, zs, qs
                self.u[h, n] = sp.Rational(1, L) * total
                self.U[h, n] = sp.Symbol(f"u_{t}_{n}", real=True)
                self.tex[self.U[h, n]] = rf"u_{h}(X_{{{n + 1}}})"

    def _build_backward(self):
        P = self.P
        # dLoss/du from the loss written in the u symbols
        self.margin = []
        for n in range(self.n):
            f = relu(self.U["+", n]) - relu(self.U["-", n])
            self.margin.append(self.label[n] * f)
        self.loss = sp.Add(*[self.weight[n] * logloss(self.margin[n]) for n in range(self.n)])
        self.lam = {}      # (h, n) -> dLoss/du_h(X_n)
        self.Lam = {}      # (h, n) -> Symbol
        for h in HEADS:
            for n in range(self.n):
                self.lam[h, n] = sp.diff(self.loss, self.U[h, n])
                s = sp.Symbol(f"lam_{_TAG[h]}_{n}", real=True)
                self.Lam[h, n] = s
                self.tex[s] = rf"\lambda_{{{h},{n + 1}}}"
        # du/dS and du/dw per sample (only the variables that occur)
        self.du = {}       # (h, n) -> {variable Symbol: derivative}
        for h in HEADS:
            Svars = set(self.S[h])
            wvars = set(self.w[h])
            for n in range(self.n):
                u = self.u[h, n]
                fs = u.free_symbols
                d = {}
                for v in sorted(fs & (Svars | wvars), key=sp.default_sort_key):
                    dv = sp.diff(u, v)
                    if dv != 0:
                        d[v] = dv
                self.du[h, n] = d
        # G = dLoss/dS, dw = dLoss/dw~ in terms of lambda symbols and du
        self.Gexpr = {}
        self.dwexpr = {}
        for h in HEADS:
            for a in range(P):
                for b in range(P):
                    v = self.S[h][a, b]
                    self.Gexpr[h, a, b] = [(n, self.du[h, n][v]) for n in range(self.n) if v in self.du[h, n]]
            for a in range(P):
                v_ = self.w[h][a]
                self.dwexpr[h, a] = [(n, self.du[h, n][v_]) for n in range(self.n) if v_ in self.du[h, n]]

    def _build_updates(self):
        """The flow and GD maps of S, A, B: the engine's closure map on the mixture head
        (``symbolic_gram.orthonormal``: Gamma = I), evaluated on this system's matrices."""
        from .symbolic_gram import on_matrices, orthonormal

        P = self.P
        self.eta = sp.Symbol("eta", real=True)
        maps = orthonormal()
        self.flow = {}
        self.gd = {}
        for h in HEADS:
            mats = {"S": self.S[h], "A": self.A[h], "B": self.B[h], "G": self.G[h]}
            gd = tuple(on_matrices(maps[nm], mats, self.eta) for nm in "SAB")
            flow = tuple(on_matrices(maps[nm], mats, None) for nm in "SAB")
            for M in (flow[1], flow[2], gd[1], gd[2]):
                for a in range(P):
                    for b in range(a + 1, P):
                        assert sp.expand(M[a, b] - M[b, a]) == 0
            self.flow[h] = flow
            self.gd[h] = gd

    # ------------------------------------------------------------ p-form (LaTeX)
    def p_symbol(self, h, n, i, l):
        """Symbol of the attention of query token l on key token i in sample n, head h
        (identical tokens share one symbol)."""
        idx, sgn = self.samples.idx[n], self.samples.sgn[n]

        def key(j):
            return f"{int(idx[j])}{'m' if sgn[j] < 0 else 'p'}"

        p = sp.Symbol(f"p_{_TAG[h]}_{n}_{key(i)}_{key(l)}", positive=True)
        self.tex[p] = rf"p^{{{h}}}_{{{n + 1}}}({self.token_tex(n, i)} \mid {self.token_tex(n, l)})"
        return p

    def p_form(self, h, n, expr):
        """Rewrite a derivative of u_h(X_n) in the attention probabilities (exact:
        exp(z[i, l] - M_l) = p(i | l) D_l with D_l the softmax denominator)."""
        L = self.L
        qs = self.query[h, n]
        Dsub, esub = {}, {}
        for l in range(L):
            N, D = qs[l]
            dsym = sp.Symbol(f"D_{self.p_symbol(h, n, l, l).name}", positive=True)
            Dsub[D] = dsym
            for i in range(L):
                e = sp.exp(self.zl[h, n][l][i] - self.M[h, n][l])
                esub[e] = self.p_symbol(h, n, i, l) * dsym
        out = sp.expand(expr.xreplace(Dsub).xreplace(esub))
        fs = out.free_symbols
        assert not any(s.name.startswith(("D_", "M_", "S_")) for s in fs), out
        return sp.factor(out)


@lru_cache(maxsize=8)
def _system(K: int, L: int) -> _System:
    return _System(K, L)


# ----------------------------------------------------------------- LaTeX

def _ltx(sysm, expr):
    return sp.latex(expr, symbol_names=sysm.tex, mul_symbol=None, long_frac_ratio=2)


def _long_sum(sysm, expr, per_line):
    return long_sum(expr, per_line, lambda e: _ltx(sysm, e))


def _render_latex(sysm: _System) -> str:
    K, L, P, n = sysm.K, sysm.L, sysm.P, sysm.n
    lab = sysm.labels
    info = variables(K, L)
    out = []
    w = out.append
    w(f"% Generated by meanfield.models.mixture.symbolic for K={K}, L={L}: do not edit.")
    w(f"% Regenerate: meanfield mixture derive --K {K} --L {L} --format latex  (or: python derivations/mixture.py "
      f"--K {K} --L {L}).")
    w("% Needs amsmath. The align* blocks below are long: \\allowdisplaybreaks lets them break across pages.")
    w(r"\allowdisplaybreaks")
    w(rf"\section*{{Reduced dynamics of the two-headed transformer on the {K}-mixture, $L={L}$}}")
    w("")
    w(r"\paragraph{Variables.} Features $" + ", ".join(_feat_tex(x) for x in lab)
      + r"$ (orthonormal). For each head $h\in\{+,-\}$ (output sign $a_+=1$, $a_-=-1$):"
      r" scores $a^\top W_{Kh}^\top W_{Qh} b$ (key feature $a$, query feature $b$),"
      r" key self-scores $a^\top W_{Kh}^\top W_{Kh} b$ and query self-scores"
      r" $a^\top W_{Qh}^\top W_{Qh} b$ (symmetric, $a\le b$), neuron alignments $w_h^\top a$.")
    cnt = info["heads"]["+"]
    w(rf"Per head: {cnt['score']['count']} scores, {cnt['key_self_score']['count']} key and "
      rf"{cnt['query_self_score']['count']} query self-scores, {cnt['neuron']['count']} neuron "
      rf"alignments; {info['total']} variables in all.")
    w("")
    w(rf"\paragraph{{Samples.}} The population is the exact finite set of {n} samples"
      r" (tokens, label $y_n$, probability $\pi_n$):")
    w(r"\begin{align*}")
    rows = []
    for s in range(n):
        toks = ", ".join(sysm.token_tex(s, i) for i in range(L))
        cons = "consistent" if sysm.samples.consistent[s] else "inconsistent"
        rows.append(rf"X_{{{s + 1}}} &= [{toks}], & y_{{{s + 1}}} &= {sysm.label[s]:+d}, &"
                    rf" \pi_{{{s + 1}}} &= {sp.latex(sysm.weight[s])} && \text{{({cons})}}")
    w(" \\\\\n".join(rows))
    w(r"\end{align*}")
    w("")
    w(r"\paragraph{Pre-activations.} Attention of query token $q$ on key token $x$ of $X_n$:"
      r" $p^{h}_{n}(x \mid q) = e^{x^\top W_{Kh}^\top W_{Qh} q} / \sum_{x' \in X_n}"
      r" e^{x'^\top W_{Kh}^\top W_{Qh} q}$; the queries are averaged before the ReLU,"
      rf" $u_h(X_n) = \frac{{1}}{{{L}}}\sum_{{q\in X_n}}\sum_{{x\in X_n}} p^h_n(x\mid q)\, w_h^\top x$:")
    w(r"\begin{align*}")
    rows = []
    for h in HEADS:
        for s in range(n):
            terms = []
            for l in range(L):
                N, D = sysm.query[h, s][l]
                zero = {M: 0 for M in sysm.M[h, s]}
                terms.append(_ltx(sysm, N.xreplace(zero) / D.xreplace(zero)))
            rows.append(rf"u_{h}(X_{{{s + 1}}}) &= \frac{{1}}{{{L}}}\Big(" + "\\\\\n  &\\qquad + ".join(terms) + r"\Big)")
    w(" \\\\\n".join(rows))
    w(r"\end{align*}")
    w(r"Output $f(X_n) = \mathrm{relu}(u_+(X_n)) - \mathrm{relu}(u_-(X_n))$, loss"
      r" $\ell(z) = \log(1+e^{-z})$,")
    w(r"\begin{align*}")
    w(r"\mathcal{L} &= " + _long_sum(sysm, sysm.loss, 2))
    w(r"\end{align*}")
    w("")
    w(r"\paragraph{Gradients.} With $\mathrm{relu}'(0)$ a convention $r_0\in\{0,\tfrac12,1\}$,"
      r" $\sigma(t) = 1/(1+e^{-t}) = -\ell'(-t)$ and"
      r" $\lambda_{h,n} = \partial\mathcal{L}/\partial u_h(X_n)$:")
    w(r"\begin{align*}")
    w(" \\\\\n".join(rf"\lambda_{{{h},{s + 1}}} &= {_ltx(sysm, sysm.lam[h, s])}"
                     for h in HEADS for s in range(n)))
    w(r"\end{align*}")
    w(r"$G_h[a,b] = \partial\mathcal{L}/\partial(a^\top W_{Kh}^\top W_{Qh} b)"
      r" = \sum_n \lambda_{h,n}\, \partial u_h(X_n)/\partial(a^\top W_{Kh}^\top W_{Qh} b)$:")
    w(r"\begin{align*}")
    rows = []
    for h in HEADS:
        for a in range(P):
            for b in range(P):
                lhs = _ltx(sysm, sysm.G[h][a, b])
                terms = [rf"{_ltx(sysm, sysm.Lam[h, s])}\left({_ltx(sysm, sysm.p_form(h, s, d))}\right)"
                         for s, d in sysm.Gexpr[h, a, b]]
                rows.append(f"{lhs} &= " + ("\\\\\n  &\\qquad + ".join(terms) if terms else "0"))
    w(" \\\\\n".join(rows))
    w(r"\end{align*}")
    w(r"Neuron gradients:")
    w(r"\begin{align*}")
    rows = []
    for h in HEADS:
        for a in range(P):
            lhs = rf"\frac{{\partial\mathcal{{L}}}}{{\partial {_ltx(sysm, sysm.w[h][a])}}}"
            terms = [rf"{_ltx(sysm, sysm.Lam[h, s])}\left({_ltx(sysm, sysm.p_form(h, s, d))}\right)"
                     for s, d in sysm.dwexpr[h, a]]
            rows.append(f"{lhs} &= " + ("\\\\\n  &\\qquad + ".join(terms) if terms else "0"))
    w(" \\\\\n".join(rows))
    w(r"\end{align*}")
    w("")
    w(r"\paragraph{Gradient flow.} $\dot S_h = -(A_h G_h + G_h B_h)$,"
      r" $\dot A_h = -(G_h S_h^\top + S_h G_h^\top)$, $\dot B_h = -(G_h^\top S_h + S_h^\top G_h)$,"
      r" $\dot{\tilde w}_h = -\partial\mathcal{L}/\partial \tilde w_h$, entrywise:")
    w(r"\begin{align*}")
    rows = []
    for h in HEADS:
        dS, dA, dB = sysm.flow[h]
        for Mx, D, sym in ((sysm.S[h], dS, False), (sysm.A[h], dA, True), (sysm.B[h], dB, True)):
            for a, b in _pairs(P, sym):
                rows.append(rf"\tfrac{{d}}{{dt}}{_ltx(sysm, Mx[a, b])} &= {_long_sum(sysm, D[a, b], 2)}")
        for a in range(P):  # the neuron equations written out (the gradient terms above, negated)
            terms = [rf"{_ltx(sysm, sysm.Lam[h, s])}\left({_ltx(sysm, sysm.p_form(h, s, d))}\right)"
                     for s, d in sysm.dwexpr[h, a]]
            rows.append(rf"\tfrac{{d}}{{dt}}{_ltx(sysm, sysm.w[h][a])} &= "
                        + (r"-\Big(" + "\\\\\n  &\\qquad + ".join(terms) + r"\Big)" if terms else "0"))
    w(" \\\\\n".join(rows))
    w(r"\end{align*}")
    w("")
    w(r"\paragraph{Gradient descent.} One full-batch step of size $\eta$ on $W_{Kh}, W_{Qh}, w_h$"
      r" (any width) maps the variables exactly to")
    w(r"\begin{align*}")
    w(r"S_h' &= S_h - \eta\,(G_h B_h + A_h G_h) + \eta^2\, G_h S_h^\top G_h, \\")
    w(r"A_h' &= A_h - \eta\,(G_h S_h^\top + S_h G_h^\top) + \eta^2\, G_h B_h G_h^\top, \\")
    w(r"B_h' &= B_h - \eta\,(G_h^\top S_h + S_h^\top G_h) + \eta^2\, G_h^\top A_h G_h, \\")
    w(r"\tilde w_h' &= \tilde w_h - \eta\, \partial\mathcal{L}/\partial \tilde w_h,")
    w(r"\end{align*}")
    w(r"with $S_h = [a^\top W_{Kh}^\top W_{Qh} b]_{a,b}$, $A_h = [a^\top W_{Kh}^\top W_{Kh} b]_{a,b}$,"
      r" $B_h = [a^\top W_{Qh}^\top W_{Qh} b]_{a,b}$, $\tilde w_h = [w_h^\top a]_a$ over the features"
      r" in the order $" + ", ".join(_feat_tex(x) for x in lab) + "$.")
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------- Python

def _render_python(sysm: _System) -> str:
    K, L, P, n = sysm.K, sysm.L, sysm.P, sysm.n
    n2 = P * P
    size = 6 * n2 + 2 * P
    off = {"S": 0, "A": 2 * n2, "B": 4 * n2, "w": 6 * n2}
    hi = {h: k for k, h in enumerate(HEADS)}

    def read_vars(kinds):
        lines = []
        for h in HEADS:
            base = hi[h] * n2
            if "S" in kinds:
                lines += [f"    {sysm.S[h][a, b]} = y[{off['S'] + base + a * P + b}]" for a, b in _pairs(P, False)]
            if "A" in kinds:
                lines += [f"    {sysm.A[h][a, b]} = y[{off['A'] + base + a * P + b}]" for a, b in _pairs(P, True)]
            if "B" in kinds:
                lines += [f"    {sysm.B[h][a, b]} = y[{off['B'] + base + a * P + b}]" for a, b in _pairs(P, True)]
            if "w" in kinds:
                lines += [f"    {sysm.w[h][a]} = y[{off['w'] + hi[h] * P + a}]" for a in range(P)]
        return lines

    def nested_max(args):
        s = args[0]
        for a in args[1:]:
            s = f"max({s}, {a})"
        return s

    o = []
    w = o.append
    w(f'"""Generated by meanfield.models.mixture.symbolic for K={K}, L={L}: do not edit.')
    w("")
    w(f"Regenerate with ``python derivations/mixture.py --K {K} --L {L}``.")
    w("")
    w("Closed-form reduced dynamics of the two-headed transformer on the exact")
    w(f"{K}-mixture sample set ({n} samples, L = {L}). State ``y``: flat float64 vector in")
    w(f"the layout of ``meanfield.models.mixture.kernels.layout({P})``: S (2,P,P), A (2,P,P),")
    w("B (2,P,P), w (2,P), C order, head 0 = '+'. A and B are read from their upper")
    w("triangles (a <= b); outputs write both triangles. ``r0`` = relu'(0).")
    w("")
    w("loss_grads(y, r0) -> (loss, G (2,P,P), dw (2,P), margins (n,))")
    w("flow_rhs(y, r0)   -> dy/dt (flat)")
    w("gd_map(y, eta, r0) -> next GD state (flat)")
    w("")
    w("Import with ``meanfield.engine.codegen.load_generated(path)`` (a fixed module")
    w("name keeps numba's on-disk cache valid across runs).")
    w('"""')
    w("")
    o.extend(IMPORTS)
    w("")
    w(f"K = {K}")
    w(f"L = {L}")
    w(f"P = {P}")
    w(f"N_SAMPLES = {n}")
    w(f"STATE_SIZE = {size}")
    w(f"FEATURES = {tuple(sysm.labels)!r}")
    w(_HELPERS)
    # ---- loss_grads
    w("")
    w("@njit(cache=True)")
    w("def loss_grads(y, r0):")
    w('    """(loss, G = dLoss/dS (2,P,P), dw = dLoss/dw~ (2,P), margins y_n f(X_n) (n,))."""')
    o.extend(read_vars("Sw"))
    w("    # softmax shifts: the largest logit of each query (u does not depend on them)")
    for h in HEADS:
        for s in range(n):
            for l in range(L):
                w(f"    {sysm.M[h, s][l]} = {nested_max([_code(z) for z in sysm.zl[h, s][l]])}")
    w("    # pre-activations u_h(X_n) and their partial derivatives du_h(X_n)/d(variable)")
    names, exprs = [], []
    for h in HEADS:
        for s in range(n):
            names.append(str(sysm.U[h, s]))
            exprs.append(sysm.u[h, s])
    dname = {}
    for h in HEADS:
        for s in range(n):
            for v, d in sysm.du[h, s].items():
                nm = f"du_{_TAG[h]}_{s}__{v}"
                dname[h, s, v] = nm
                names.append(nm)
                exprs.append(d)
    o.extend(_cse_lines(names, exprs, "x"))
    w("    # margins, loss, lambda_{h,n} = dLoss/du_h(X_n)")
    names = [f"m_{s}" for s in range(n)] + ["loss"] + [str(sysm.Lam[h, s]) for h in HEADS for s in range(n)]
    exprs = list(sysm.margin) + [sysm.loss] + [sysm.lam[h, s] for h in HEADS for s in range(n)]
    o.extend(_cse_lines(names, exprs, "t"))
    w("    G = np.zeros((2, P, P))")
    for h in HEADS:
        for a in range(P):
            for b in range(P):
                terms = sysm.Gexpr[h, a, b]
                if terms:
                    rhs = " + ".join(f"{sysm.Lam[h, s]}*{dname[h, s, sysm.S[h][a, b]]}" for s, _ in terms)
                    w(f"    G[{hi[h]}, {a}, {b}] = {rhs}")
    w("    dw = np.zeros((2, P))")
    for h in HEADS:
        for a in range(P):
            terms = sysm.dwexpr[h, a]
            if terms:
                rhs = " + ".join(f"{sysm.Lam[h, s]}*{dname[h, s, sysm.w[h][a]]}" for s, _ in terms)
                w(f"    dw[{hi[h]}, {a}] = {rhs}")
    w("    margins = np.empty(N_SAMPLES)")
    for s in range(n):
        w(f"    margins[{s}] = m_{s}")
    w("    return loss, G, dw, margins")

    def read_G():
        lines = []
        for h in HEADS:
            for a in range(P):
                for b in range(P):
                    lines.append(f"    {sysm.G[h][a, b]} = G[{hi[h]}, {a}, {b}]")
        return lines

    def update_body(mats, with_w):
        names, exprs, slots = [], [], []
        for h in HEADS:
            for key, Mx, sym in zip("SAB", mats[h], (False, True, True)):
                for a, b in _pairs(P, sym):
                    names.append(f"n_{key}_{_TAG[h]}_{a}_{b}")
                    exprs.append(Mx[a, b])
                    pos = [off[key] + hi[h] * n2 + a * P + b]
                    if sym and a != b:
                        pos.append(off[key] + hi[h] * n2 + b * P + a)
                    slots.append(pos)
        lines = _cse_lines(names, exprs, "x")
        lines.append(f"    out = np.empty({size})")
        for nm, pos in zip(names, slots):
            for p in pos:
                lines.append(f"    out[{p}] = {nm}")
        for h in HEADS:
            for a in range(P):
                lines.append(f"    out[{off['w'] + hi[h] * P + a}] = {with_w(h, a)}")
        return lines

    # ---- flow_rhs
    w("")
    w("")
    w("@njit(cache=True)")
    w("def flow_rhs(y, r0):")
    w('    """Gradient-flow right-hand side dy/dt: dS = -(A G + G B), dA = -(G S^T + S G^T),')
    w('    dB = -(G^T S + S^T G), dw~ = -dLoss/dw~."""')
    w("    loss, G, dw, margins = loss_grads(y, r0)")
    o.extend(read_vars("SAB"))
    o.extend(read_G())
    o.extend(update_body(sysm.flow, lambda h, a: f"-dw[{hi[h]}, {a}]"))
    w("    return out")
    # ---- gd_map
    w("")
    w("")
    w("@njit(cache=True)")
    w("def gd_map(y, eta, r0):")
    w('    """One exact GD step: S\' = S - eta (G B + A G) + eta^2 G S^T G,')
    w("    A' = A - eta (G S^T + S G^T) + eta^2 G B G^T, B' = B - eta (G^T S + S^T G) + eta^2 G^T A G,")
    w('    w~\' = w~ - eta dLoss/dw~."""')
    w("    loss, G, dw, margins = loss_grads(y, r0)")
    o.extend(read_vars("SABw"))
    o.extend(read_G())
    o.extend(update_body(sysm.gd, lambda h, a: f"{sysm.w[h][a]} - eta*dw[{hi[h]}, {a}]"))
    w("    return out")
    return "\n".join(o) + "\n"


# ----------------------------------------------------------------- public API

def render(K: int, L: int, fmt: str) -> str:
    """The derivation for (K, L) as text: ``fmt`` in {"latex", "json", "python"}."""
    if fmt not in FORMATS:
        raise ValueError(f"fmt: must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if fmt == "json":
        return json.dumps(variables(K, L), indent=2) + "\n"
    sysm = _system(int(K), int(L))
    return _render_latex(sysm) if fmt == "latex" else _render_python(sysm)


def filename(K: int, L: int, fmt: str) -> str:
    """``mixture_K{K}_L{L}.{tex,json,py}``."""
    if fmt not in FORMATS:
        raise ValueError(f"fmt: must be one of {', '.join(FORMATS)}, got {fmt!r}")
    return f"mixture_K{K}_L{L}.{_EXT[fmt]}"


def write(K: int, L: int, fmt: str, out_dir) -> Path:
    """Render and write ``out_dir/mixture_K{K}_L{L}.{tex,json,py}``; returns the path."""
    text = render(K, L, fmt)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / filename(K, L, fmt)
    from meanfield.core.io import write_text_atomic  # whole or absent; a full disk names the path

    return write_text_atomic(path, text)
