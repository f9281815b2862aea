"""Sympy derivation of the symmetry-reduced K-mixture dynamics (LaTeX / JSON / numba).

Job: the closed ODE (and exact GD map) in the orbit variables of
``meanfield.models.mixture.symmetry`` for the default configuration of (K, L): uniform
group weights, infinite-width attention init (S = 0, A = B = omega^2 I) and zero
neurons, whose group is S_K x Z_2.

Derivation (on top of ``meanfield.models.mixture.symbolic``'s full system, whose
closed-form u, Loss, lambda = dLoss/du, du/dS, du/dw~ and matrix updates are
reused unchanged):

1. the parametrisation of the invariant subspace: every full variable is
   replaced by +- its orbit variable (the symbol of the orbit's
   representative) or by 0 (``xreplace``);
2. pre-activations: u_{h'}(X_m) = u_h(X_n) for (h, n), (h', m) in one orbit of
   (head, sample) pairs; checked symbolically at build time (the substituted
   expressions, with the softmax shifts at 0, are identical), so one u symbol
   per orbit enters the loss and lambda;
3. gradients: G_h = dLoss/dS_h = sum_n lambda_{h,n} du_h(X_n)/dS_h (derivatives
   of the full system, then substituted) equals the H_h-average of
   sum_O |O| lambda_{h,r_O} du_h(X_{r_O})/dS_h over the orbits O of samples
   (representative r_O): G_h is invariant under the stabiliser H_h of the
   head, so each orbit variable of G is the signed mean over its orbit;
   likewise dLoss/dw~;
4. the flow and GD right-hand sides of the full system, with G replaced by +-
   its orbit variables, read at the representative coordinates.

Tests (``tests/test_mixture_symmetry.py``) show the generated code equal to the
numeric reduced kernels and to the projected full right-hand side at random
points of the subspace to 1e-12, and the committed files current.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import sympy as sp

from . import symbolic
from ...engine.codegen import HELPERS as _HELPERS, IMPORTS, code as _code, cse_lines as _cse_lines
from .symbolic import HEADS, _TAG, _feat_tex, _long_sum, _ltx

FORMATS = symbolic.FORMATS
_EXT = {"latex": "tex", "json": "json", "python": "py"}


def _reduction(K: int, L: int):
    from .config import make_config
    from .symmetry import Reduction, group_of_config

    return Reduction(group_of_config(make_config(K=K, L=L)))


class _SymReduced:
    """Symbols and closed-form expressions of the reduced system for one (K, L)."""

    def __init__(self, K: int, L: int):
        self.K, self.L, self.P = K, L, 2 * K
        self.fs = fs = symbolic._system(K, L)
        self.red = red = _reduction(K, L)
        P = self.P
        n2 = P * P
        # flat index -> full symbol (A, B: one symbol for [a, b] and [b, a])
        flat = {}
        for hi, h in enumerate(HEADS):
            for a in range(P):
                for b in range(P):
                    flat[hi * n2 + a * P + b] = fs.S[h][a, b]
                    flat[2 * n2 + hi * n2 + a * P + b] = fs.A[h][a, b]
                    flat[4 * n2 + hi * n2 + a * P + b] = fs.B[h][a, b]
                flat[6 * n2 + hi * P + a] = fs.w[h][a]
        self.flat = flat
        self.z = [flat[int(i)] for i in red.rep]
        subs = {}
        for i, sym in flat.items():
            o = int(red.orbit_of[i])
            val = sp.Integer(0) if o < 0 else int(red.orbit_sign[i]) * self.z[o]
            assert subs.get(sym, val) == val, (sym, subs.get(sym), val)
            subs[sym] = val
        self.subs = subs
        # G orbit symbols (G transforms like S)
        Gsubs = {}
        self.Gz = {}
        for i in range(2 * n2):
            hi, r = divmod(i, n2)
            a, b = divmod(r, P)
            o = int(red.orbit_of[i])
            if o >= 0 and o not in self.Gz:
                _, hr, ar, br = _coord(P, int(red.rep[o]))
                self.Gz[o] = fs.G[HEADS[hr]][ar, br]
            Gsubs[fs.G[HEADS[hi]][a, b]] = sp.Integer(0) if o < 0 else int(red.orbit_sign[i]) * self.Gz[o]
        self.Gsubs = Gsubs
        self._forward()
        self._backward()
        self._updates()

    # ---------------------------------------------------------- u orbits
    def _forward(self):
        fs, red = self.fs, self.red
        fw_h, fw_n = red.fw
        self.fw = [(HEADS[int(h)], int(n)) for h, n in zip(fw_h, fw_n)]
        self.Usub = {}
        self.u = {}
        for o, (h, n) in enumerate(self.fw):
            self.u[h, n] = fs.u[h, n].xreplace(self.subs)
        for hi, h in enumerate(HEADS):
            for n in range(fs.n):
                rh, rn = self.fw[int(red.hn_orbit[hi, n])]
                self.Usub[fs.U[h, n]] = fs.U[rh, rn]
                # step 2: the substituted pre-activations of an orbit are identical
                zero = {M: 0 for M in fs.M[h, n]}
                zr = {M: 0 for M in fs.M[rh, rn]}
                mine = fs.u[h, n].xreplace(self.subs).xreplace(zero)
                rep = self.u[rh, rn].xreplace(zr)
                assert mine == rep or sp.simplify(mine - rep) == 0, (h, n, rh, rn)
        self.margin = [m.xreplace(self.Usub) for m in fs.margin]
        self.loss = fs.loss.xreplace(self.Usub)

    # ---------------------------------------------------------- gradients
    def _backward(self):
        fs, red, P = self.fs, self.red, self.P
        n2 = P * P
        bw_h, bw_n, bw_mult = red.bw
        self.bw = [(HEADS[int(h)], int(n), int(m)) for h, n, m in zip(bw_h, bw_n, bw_mult)]
        self.lam = {(h, n): fs.lam[h, n].xreplace(self.Usub) for h, n, _ in self.bw}
        self.du = {(h, n): {v: d.xreplace(self.subs) for v, d in fs.du[h, n].items()} for h, n, _ in self.bw}
        grad_heads = [HEADS[int(h)] for h in red.grad_heads]
        # raw sums C_h[a, b] = sum_O |O| lambda du/dS, D_h[a] likewise (as lists of (mult, (h, n), var))
        self.Gterms = {}   # orbit -> list of (sign, mult, h, n, full S symbol)
        self.dwterms = {}  # orbit -> list of (sign, mult, h, n, full w symbol)
        self.count = {}
        for h in grad_heads:
            hi = HEADS.index(h)
            for a in range(P):
                for b in range(P):
                    i = hi * n2 + a * P + b
                    self._add(i, fs.S[h][a, b], h, self.Gterms)
                i = 6 * n2 + hi * P + a
                self._add(i, fs.w[h][a], h, self.dwterms)
        self.Gexpr = {o: self._mean(o, t) for o, t in self.Gterms.items()}
        self.dwexpr = {o: self._mean(o, t) for o, t in self.dwterms.items()}
        # a symbol per neuron-gradient orbit
        self.dWz = {}
        for o in self.dwterms:
            _, hr, ar, _ = _coord(P, int(red.rep[o]))
            s = sp.Symbol(f"dw_{_TAG[HEADS[hr]]}_{self.fs.labels[ar]}", real=True)
            fs.tex[s] = rf"\frac{{\partial\mathcal{{L}}}}{{\partial {_ltx(fs, fs.w[HEADS[hr]][ar])}}}"
            self.dWz[o] = s

    def _add(self, i, var, h, table):
        o = int(self.red.orbit_of[i])
        if o < 0:
            return
        sg = int(self.red.orbit_sign[i])
        self.count[o] = self.count.get(o, 0) + 1
        terms = table.setdefault(o, [])
        for hh, n, mult in self.bw:
            if hh == h and var in self.du[h, n]:
                terms.append((sg, mult, h, n, var))

    def _mean(self, o, terms):
        tot = sp.Add(*[sg * mult * self.fs.Lam[h, n] * self.du[h, n][var] for sg, mult, h, n, var in terms])
        return sp.Rational(1, self.count[o]) * tot

    # ---------------------------------------------------------- updates
    def _updates(self):
        fs, red, P = self.fs, self.red, self.P
        self.flow, self.gd = [], []
        # entries of G that no sample reaches (e.g. two c features never share a sample) are 0
        self.Gzero = {self.Gz[o_]: sp.Integer(0) for o_ in self.Gz if not self.Gterms.get(o_)}
        rep_sub = {**self.subs, **{k: v.xreplace(self.Gzero) for k, v in self.Gsubs.items()}}
        for r, i in enumerate(red.rep):
            blk, hi, a, b = _coord(P, int(i))
            h = HEADS[hi]
            if blk == "w":
                # orbit of the neuron gradient at this representative
                self.flow.append(-self.dWz[r])
                self.gd.append(self.z[r] - fs.eta * self.dWz[r])
                continue
            k = "SAB".index(blk)
            self.flow.append(sp.expand(fs.flow[h][k][a, b].xreplace(rep_sub)))
            self.gd.append(sp.expand(fs.gd[h][k][a, b].xreplace(rep_sub)))


def _coord(P, i):
    from .symmetry import coordinate

    return coordinate(P, i)


@lru_cache(maxsize=4)
def _system(K: int, L: int) -> _SymReduced:
    return _SymReduced(int(K), int(L))


# ----------------------------------------------------------------- JSON

def _json(K: int, L: int) -> str:
    red = _reduction(K, L)
    data = red.to_json()
    data["configuration"] = {"p": "uniform", "attention_init": "infinite width: S = 0, A = B = omega^2 I",
                             "neuron_init": "zero"}
    return json.dumps(data, indent=2) + "\n"


# ----------------------------------------------------------------- LaTeX

def _latex(sr: _SymReduced) -> str:
    fs, red = sr.fs, sr.red
    K, L, P = sr.K, sr.L, sr.P
    lab = fs.labels
    grp = red.group
    c = red.counts()
    out = []
    w = out.append
    w(f"% Generated by meanfield.models.mixture.symmetry_symbolic for K={K}, L={L}: do not edit.")
    w(f"% Regenerate: python derivations/mixture_symmetry.py --K {K} --L {L}.  Needs amsmath.")
    w(rf"\section*{{Symmetry-reduced dynamics of the two-headed transformer on the {K}-mixture, $L={L}$}}")
    w("")
    w(r"\paragraph{Configuration.} Uniform group weights, infinite-width attention at initialisation"
      r" ($S_h = 0$, $A_h = B_h = \omega^2 I$), zero neurons. Variables and notation as in the full"
      rf" derivation (\texttt{{mixture\_K{K}\_L{L}.tex}}).")
    w("")
    struct = grp.structure().replace("x", "\\times")
    w(rf"\paragraph{{Symmetry group.}} Order {grp.order} (${struct}$):"
      r" signed permutations $R$ of the features with an optional exchange of the heads that map the"
      r" weighted sample set onto itself with every label multiplied by $(-1)^{\text{swap}}$ and fix the"
      rf" initial state (found among {grp.n_candidates} candidates; each verified numerically). Elements:")
    w(r"\begin{itemize}")
    for e in grp.elements:
        w(r"\item " + _element_tex(e, lab))
    w(r"\end{itemize}")
    w(r"An element acts by $X_{h'}[\sigma(a),\sigma(b)] = s_a s_b X_h[a,b]$ ($X\in\{S,A,B\}$),"
      r" $\tilde w_{h'}[\sigma(a)] = s_a \tilde w_h[a]$ for $R e_a = s_a e_{\sigma(a)}$.")
    w("")
    w(rf"\paragraph{{Invariant subspace.}} {c['independent']} orbit variables for the {c['full']} variables"
      rf" of the full system ({c['flat_state']} flat coordinates"
      + (f", {c['forced_zero_flat']} of them forced to 0" if c["forced_zero_flat"] else "") + "):")
    w(r"\begin{align*}")
    rows = []
    for r, mem in enumerate(red.members):
        seen = []
        for i, sg in mem:
            sym = sr.flat[i]
            t = ("-" if sg < 0 else "") + _ltx(fs, sym)
            if t not in seen:
                seen.append(t)
        rows.append(rf"z_{{{r + 1}}} &= " + " = ".join(seen))
    w(" \\\\\n".join(rows))
    w(r"\end{align*}")
    w("")
    w(r"\paragraph{Pre-activations.} On the subspace the pre-activations are equal on each orbit of"
      r" (head, sample) pairs; one per orbit is computed:")
    w(r"\begin{align*}")
    rows = []
    for o in red.sample_orbits():
        names = [f"u_{h}(X_{{{n + 1}}})" for h, n in o["members"]]
        rows.append(names[0] + (" &= " + " = ".join(names[1:]) if len(names) > 1 else " &"))
    w(" \\\\\n".join(rows))
    w(r"\end{align*}")
    w(r"Loss in the orbit pre-activations:")
    w(r"\begin{align*}")
    w(r"\mathcal{L} &= " + _long_sum(fs, sr.loss, 2))
    w(r"\end{align*}")
    w("")
    w(r"\paragraph{Gradients.} $G_h = \partial\mathcal{L}/\partial S_h$ is invariant under the stabiliser of"
      r" the head, so each of its orbit variables is a signed mean over the orbit of the contributions of"
      r" the orbit representatives $X_n$ of the samples, weighted by the orbit size $m_n$"
      r" ($\lambda_{h,n} = \partial\mathcal{L}/\partial u_h(X_n)$, attention probabilities $p$ as in the full"
      r" derivation):")
    w(r"\begin{align*}")
    rows = [rf"\lambda_{{{h},{n + 1}}} &= {_ltx(fs, sr.lam[h, n])} \quad (m_{{{n + 1}}} = {m})"
            for h, n, m in sr.bw]
    w(" \\\\\n".join(rows))
    w(r"\end{align*}")
    w(r"\begin{align*}")
    rows = []
    for table, lhs_of in ((sr.Gterms, lambda o: _ltx(fs, sr.Gz[o])), (sr.dwterms, lambda o: _ltx(fs, sr.dWz[o]))):
        for o in sorted(table):
            terms = []
            for sg, mult, h, n, var in table[o]:
                pf = _ltx(fs, fs.p_form(h, n, fs.du[h, n][var]).xreplace(sr.subs))
                coef = ("-" if sg < 0 else "+") + (str(mult) if mult != 1 else "")
                terms.append(rf"{coef}\,{_ltx(fs, fs.Lam[h, n])}\left({pf}\right)")
            if not terms:
                rows.append(rf"{lhs_of(o)} &= 0")
                continue
            body = "\\\\\n  &\\qquad ".join(terms)
            if body.startswith("+"):
                body = body[1:]
            pre = rf"\tfrac{{1}}{{{sr.count[o]}}}" if sr.count[o] != 1 else ""
            rows.append(rf"{lhs_of(o)} &= {pre}\Big({body}\Big)")
    w(" \\\\\n".join(rows))
    w(r"\end{align*}")
    w("")
    w(r"\paragraph{Reduced gradient flow.} The full flow read at the representatives,"
      r" with every variable and every entry of $G$ replaced by $\pm$ its orbit variable:")
    w(r"\begin{align*}")
    rows = [rf"\tfrac{{d}}{{dt}}{_ltx(fs, sr.z[r])} &= {_long_sum(fs, sr.flow[r], 2)}" for r in range(red.n)]
    w(" \\\\\n".join(rows))
    w(r"\end{align*}")
    w("")
    w(r"\paragraph{Reduced gradient descent.} The exact GD map of the full system"
      r" ($S_h' = S_h - \eta(G_hB_h + A_hG_h) + \eta^2 G_hS_h^\top G_h$, \ldots) read at the representatives:")
    w(r"\begin{align*}")
    rows = [rf"{_ltx(fs, sr.z[r])}' &= {_long_sum(fs, sr.gd[r], 2)}" for r in range(red.n)]
    w(" \\\\\n".join(rows))
    w(r"\end{align*}")
    return "\n".join(out) + "\n"


def _element_tex(e, lab):
    parts = [rf"{_feat_tex(lab[a])}\mapsto {'-' if e.sign[a] < 0 else ''}{_feat_tex(lab[e.perm[a]])}"
             for a in range(e.P) if e.perm[a] != a or e.sign[a] != 1]
    text = ", ".join(f"${p}$" for p in parts) if parts else "identity"
    if e.swap:
        text = ("" if not parts else text + ", ") + r"heads $+$ and $-$ exchanged"
    return text


# ----------------------------------------------------------------- Python

def _python(sr: _SymReduced) -> str:
    fs, red = sr.fs, sr.red
    K, L, P = sr.K, sr.L, sr.P
    n = fs.n
    nred = red.n
    o = []
    w = o.append
    w(f'"""Generated by meanfield.models.mixture.symmetry_symbolic for K={K}, L={L}: do not edit.')
    w("")
    w(f"Regenerate with ``python derivations/mixture_symmetry.py --K {K} --L {L}``.")
    w("")
    w(f"Symmetry-reduced dynamics (group of order {red.group.order}, {red.group.structure()}) in the")
    w(f"{nred} orbit variables ``z`` (names in VARIABLES, flat representative indices in REP;")
    w("embed with ORBIT_OF / ORBIT_SIGN: y[i] = ORBIT_SIGN[i] * z[ORBIT_OF[i]], 0 where ORBIT_OF[i] < 0).")
    w("``r0`` = relu'(0).")
    w("")
    w("loss_grads(z, r0) -> (loss, G (2,P,P), dw (2,P), margins (n,)); G, dw on the heads that hold")
    w("                     representatives (the others are 0)")
    w("flow_rhs(z, r0)     -> dz/dt")
    w("gd_map(z, eta, r0)  -> the next GD state in orbit variables")
    w('"""')
    w("")
    o.extend(IMPORTS)
    w("")
    w(f"K = {K}")
    w(f"L = {L}")
    w(f"P = {P}")
    w(f"N_SAMPLES = {n}")
    w(f"N_REDUCED = {nred}")
    w(f"STATE_SIZE = {red.N}")
    w(f"GROUP_ORDER = {red.group.order}")
    w(f"VARIABLES = {tuple(red.names)!r}")
    w(f"REP = np.array({[int(i) for i in red.rep]!r}, dtype=np.int64)")
    w(f"ORBIT_OF = np.array({[int(i) for i in red.orbit_of]!r}, dtype=np.int64)")
    w(f"ORBIT_SIGN = np.array({[float(s) for s in red.orbit_sign]!r})")
    w(_HELPERS)
    w("")
    w("@njit(cache=True)")
    w("def loss_grads(z, r0):")
    w('    """(loss, G (2,P,P), dw (2,P), margins (n,)) on the invariant subspace."""')
    for r, s in enumerate(sr.z):
        w(f"    {s} = z[{r}]")
    w("    # softmax shifts of the representative samples")
    need = list(dict.fromkeys([(h, k) for h, k in sr.fw] + [(h, k) for h, k, _ in sr.bw]))
    for h, k in need:
        for l in range(L):
            zl = [_code(sp.sympify(z).xreplace(sr.subs)) for z in fs.zl[h, k][l]]
            s = zl[0]
            for x in zl[1:]:
                s = f"max({s}, {x})"
            w(f"    {fs.M[h, k][l]} = {s}")
    w("    # one pre-activation per orbit of (head, sample); du of the sample-orbit representatives")
    names, exprs = [], []
    for h, k in sr.fw:
        names.append(str(fs.U[h, k]))
        exprs.append(sr.u[h, k])
    dname = {}
    for h, k, _ in sr.bw:
        for v, d in sr.du[h, k].items():
            nm = f"du_{_TAG[h]}_{k}__{v}"
            dname[h, k, v] = nm
            names.append(nm)
            exprs.append(d)
    o.extend(_cse_lines(names, exprs, "x"))
    w("    # margins (every sample), loss, lambda of the sample-orbit representatives")
    names = [f"m_{k}" for k in range(n)] + ["loss"] + [str(fs.Lam[h, k]) for h, k, _ in sr.bw]
    exprs = list(sr.margin) + [sr.loss] + [sr.lam[h, k] for h, k, _ in sr.bw]
    o.extend(_cse_lines(names, exprs, "t"))
    w("    # orbit variables of G and dLoss/dw~: signed means of the orbit-weighted contributions")

    def mean_code(o_, terms):
        if not terms:
            return "0.0"
        parts = [f"{'-' if sg < 0 else '+'}{mult}*{fs.Lam[h, k]}*{dname[h, k, var]}" for sg, mult, h, k, var in terms]
        body = " ".join(parts)
        return f"({body})/{sr.count[o_]}"

    for o_ in sorted(sr.Gterms):
        w(f"    {sr.Gz[o_]} = {mean_code(o_, sr.Gterms[o_])}")
    for o_ in sorted(sr.dwterms):
        w(f"    {sr.dWz[o_]} = {mean_code(o_, sr.dwterms[o_])}")
    w("    G = np.zeros((2, P, P))")
    w("    dw = np.zeros((2, P))")
    n2 = P * P
    for hh in red.grad_heads:
        hh = int(hh)
        for a in range(P):
            for b in range(P):
                i = hh * n2 + a * P + b
                oo = int(red.orbit_of[i])
                if oo >= 0:
                    sg = "-" if red.orbit_sign[i] < 0 else ""
                    w(f"    G[{hh}, {a}, {b}] = {sg}{sr.Gz[oo]}")
        for a in range(P):
            i = 6 * n2 + hh * P + a
            oo = int(red.orbit_of[i])
            if oo >= 0:
                sg = "-" if red.orbit_sign[i] < 0 else ""
                w(f"    dw[{hh}, {a}] = {sg}{sr.dWz[oo]}")
    w("    margins = np.empty(N_SAMPLES)")
    for k in range(n):
        w(f"    margins[{k}] = m_{k}")
    w("    return loss, G, dw, margins")

    def body(exprs, extra_args):
        lines = [f"    loss, G, dw, margins = loss_grads(z, r0)"]
        for r, s in enumerate(sr.z):
            lines.append(f"    {s} = z[{r}]")
        for o_, s in sorted(sr.Gz.items()):
            _, hr, ar, br = _coord(P, int(red.rep[o_]))
            lines.append(f"    {s} = G[{hr}, {ar}, {br}]")
        for o_, s in sorted(sr.dWz.items()):
            _, hr, ar, _ = _coord(P, int(red.rep[o_]))
            lines.append(f"    {s} = dw[{hr}, {ar}]")
        names = [f"d_{r}" for r in range(nred)]
        lines += _cse_lines(names, exprs, "x")
        lines.append(f"    out = np.empty({nred})")
        for r in range(nred):
            lines.append(f"    out[{r}] = d_{r}")
        lines.append("    return out")
        return lines

    w("")
    w("")
    w("@njit(cache=True)")
    w("def flow_rhs(z, r0):")
    w('    """dz/dt: the full flow right-hand side read at the representatives."""')
    o.extend(body(sr.flow, ""))
    w("")
    w("")
    w("@njit(cache=True)")
    w("def gd_map(z, eta, r0):")
    w('    """One exact GD step in orbit variables."""')
    o.extend(body(sr.gd, "eta"))
    return "\n".join(o) + "\n"


# ----------------------------------------------------------------- public API

def render(K: int, L: int, fmt: str) -> str:
    """The reduced derivation as text; ``fmt`` in {"latex", "json", "python"}."""
    if fmt not in FORMATS:
        raise ValueError(f"fmt: must be one of {', '.join(FORMATS)}, got {fmt!r}")
    K, L = int(K), int(L)
    if fmt == "json":
        return _json(K, L)
    sr = _system(K, L)
    return _latex(sr) if fmt == "latex" else _python(sr)


def filename(K: int, L: int, fmt: str) -> str:
    """``mixture_K{K}_L{L}_sym.{tex,json,py}``."""
    if fmt not in FORMATS:
        raise ValueError(f"fmt: must be one of {', '.join(FORMATS)}, got {fmt!r}")
    return f"mixture_K{K}_L{L}_sym.{_EXT[fmt]}"


def write(K: int, L: int, fmt: str, out_dir) -> Path:
    """Render and write ``out_dir/mixture_K{K}_L{L}_sym.{ext}``; returns the path."""
    text = render(K, L, fmt)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / filename(K, L, fmt)
    from meanfield.core.io import write_text_atomic  # whole or absent; a full disk names the path

    return write_text_atomic(path, text)
