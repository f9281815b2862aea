"""The general Gram-closure map (meanfield/engine/symbolic.py) against explicit weights.

Independent of the engine's kernels: explicit wide weights M_K, M_Q, M_V in
R^{m x d} and a hidden readout r in R^m, narrow w in R^d and W in R^{d x d},
tokens in span(E) with E^T E = Gamma (random SPD), and a random smooth loss of
Gram blocks (log-sum-exp of scores, softplus of value readouts, a quadratic of
the value self-block, a tanh of a cross-head block, couplings with w~ and W~).
Its gradient with respect to the EXPLICIT weights is written here by hand
(chain rule) and cross-checked by central finite differences; one explicit
GD step (masked: only the trained objects move) is then compared with the
derived map (sympy, lambdified) evaluated on the Gram state. The map is a
polynomial of degree 2 in eta evaluated in floating point, so the tolerance
is rounding: 1e-12 relative to the size of the state.
"""

from __future__ import annotations

import numpy as np
import pytest

from meanfield.engine import symbolic as derive

sympy = pytest.importorskip("sympy")

RTOL = 1e-12


def _softplus(z):
    return np.logaddexp(0.0, z)


def _sigmoid(z):
    return 0.5 * (1.0 + np.tanh(0.5 * z))


class Problem:
    """A random instance: dictionary, explicit weights and a loss of the Gram blocks."""

    def __init__(self, m: int, P: int = 3, d: int = 6, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.m, self.P, self.d = m, P, d
        L = rng.normal(size=(P, P)) + 2.0 * np.eye(P)
        self.Gamma = L @ L.T / P
        O, _ = np.linalg.qr(rng.normal(size=(d, P)))
        self.E = O @ np.linalg.cholesky(self.Gamma).T  # E^T E = Gamma
        self.MK, self.MQ, self.MV = (rng.normal(size=(m, d)) / np.sqrt(m) for _ in range(3))
        self.r = rng.normal(size=m) / np.sqrt(m)
        self.w = rng.normal(size=d)
        self.W = rng.normal(size=(d, d)) / d
        # loss coefficients
        self.C = rng.normal(size=(P, P))          # log-sum-exp coefficients on S = Q_KQ
        self.X = rng.normal(size=(4, P))          # value readout probes
        self.alpha = rng.normal(size=4)
        self.T = rng.normal(size=(P, P))
        self.T = (self.T + self.T.T) / 2          # target of Q_VV
        self.R4 = rng.normal(size=(P, P)) / P     # tanh(<R4, Q_KV>)
        self.b = rng.normal(size=P)               # coupling <w~, S b>
        self.T6 = rng.normal(size=(P, P))         # 0.5 |W~ - T6|^2 + 0.1 <W~, S>

    # -- reduced quantities
    def blocks(self, MK=None, MQ=None, MV=None, r=None):
        MK = self.MK if MK is None else MK
        MQ = self.MQ if MQ is None else MQ
        MV = self.MV if MV is None else MV
        r = self.r if r is None else r
        U = np.concatenate([MK @ self.E, MQ @ self.E, MV @ self.E, r[:, None]], axis=1)
        return U, U.T @ U

    def sl(self):
        P = self.P
        return {"K": slice(0, P), "Q": slice(P, 2 * P), "V": slice(2 * P, 3 * P), "r": slice(3 * P, 3 * P + 1)}

    def loss_Q(self, Q, wt, Wt):
        """Loss and its gradients (G = dL/dQ with the blocks independent, g = dL/dw~, G_W = dL/dW~)."""
        s = self.sl()
        S, RV, VV, KV = Q[s["K"], s["Q"]], Q[s["r"], s["V"]][0], Q[s["V"], s["V"]], Q[s["K"], s["V"]]
        G = np.zeros_like(Q)
        # log-sum-exp over keys of every query column
        Z = self.C * S
        mx = Z.max(axis=0)
        lse = mx + np.log(np.exp(Z - mx).sum(axis=0))
        p = np.exp(Z - lse)
        L = lse.sum()
        GS = self.C * p
        # softplus of value readouts
        z = self.X @ RV
        L += float(self.alpha @ _softplus(z))
        G[s["r"], s["V"]] += ((self.alpha * _sigmoid(z)) @ self.X)[None, :]
        # quadratic on the value self-block
        L += 0.25 * float(np.sum((VV - self.T) ** 2))
        G[s["V"], s["V"]] += 0.5 * (VV - self.T)
        # tanh of a cross block
        c = float(np.sum(self.R4 * KV))
        L += np.tanh(c)
        G[s["K"], s["V"]] += (1.0 - np.tanh(c) ** 2) * self.R4
        # coupling of the neuron and the scores
        L += float(wt @ S @ self.b)
        GS = GS + np.outer(wt, self.b)
        g = S @ self.b
        # merged matrix
        L += 0.5 * float(np.sum((Wt - self.T6) ** 2)) + 0.1 * float(np.sum(Wt * S))
        GW = (Wt - self.T6)
        GS = GS + 0.1 * Wt
        GW = GW + 0.1 * S
        G[s["K"], s["Q"]] += GS
        return L, G, g, GW

    def loss(self, MK, MQ, MV, r, w, W):
        _, Q = self.blocks(MK, MQ, MV, r)
        return self.loss_Q(Q, self.E.T @ w, self.E.T @ W @ self.E)[0]

    def grads(self):
        """dLoss/d(explicit weights) by the chain rule, written out by hand."""
        U, Q = self.blocks()
        L, G, g, GW = self.loss_Q(Q, self.E.T @ self.w, self.E.T @ self.W @ self.E)
        s = self.sl()
        dU = U @ (G + G.T)                       # dL/dU for L(U^T U)
        gK = dU[:, s["K"]] @ self.E.T            # U_K = M_K E  =>  dL/dM_K = dL/dU_K E^T
        gQ = dU[:, s["Q"]] @ self.E.T
        gV = dU[:, s["V"]] @ self.E.T
        gr = dU[:, s["r"]][:, 0]
        gw = self.E @ g                           # w~ = E^T w
        gW = self.E @ GW @ self.E.T               # W~ = E^T W E
        return L, (gK, gQ, gV, gr, gw, gW), (Q, G, g, GW)

    def state(self):
        return (self.MK, self.MQ, self.MV, self.r, self.w, self.W)


@pytest.mark.parametrize("m", [1, 3, 50])
def test_hand_gradient_matches_finite_differences(m):
    pb = Problem(m, seed=m)
    _, grads, _ = pb.grads()
    rng = np.random.default_rng(10 + m)
    x0 = pb.state()
    for _ in range(3):
        dirs = [rng.normal(size=x.shape) for x in x0]
        h = 1e-5
        plus = [x + h * v for x, v in zip(x0, dirs)]
        minus = [x - h * v for x, v in zip(x0, dirs)]
        fd = (pb.loss(*plus) - pb.loss(*minus)) / (2 * h)
        an = sum(float(np.sum(gx * v)) for gx, v in zip(grads, dirs))
        assert abs(fd - an) <= 1e-7 * max(1.0, abs(an)), (fd, an)


def _explicit_step(pb: Problem, eta: float, trained: dict):
    _, (gK, gQ, gV, gr, gw, gW), (Q, G, g, GW) = pb.grads()
    f = {k: float(v) for k, v in trained.items()}
    MK = pb.MK - eta * f["K"] * gK
    MQ = pb.MQ - eta * f["Q"] * gQ
    MV = pb.MV - eta * f["V"] * gV
    r = pb.r - eta * f["r"] * gr
    w = pb.w - eta * gw
    W = pb.W - eta * gW
    _, Q1 = pb.blocks(MK, MQ, MV, r)
    return Q, G, g, GW, Q1, pb.E.T @ w, pb.E.T @ W @ pb.E


def _metric_and_mask(pb: Problem, trained: dict):
    P = pb.P
    Gm = np.zeros((3 * P + 1, 3 * P + 1))
    D = np.zeros_like(Gm)
    for k, sl in pb.sl().items():
        Gm[sl, sl] = pb.Gamma if k != "r" else 1.0
        D[sl, sl] = np.eye(sl.stop - sl.start) * float(trained[k])
    return Gm, D


MASKS = [dict(K=True, Q=True, V=True, r=True), dict(K=False, Q=True, V=True, r=False),
         dict(K=True, Q=True, V=False, r=False)]


@pytest.mark.parametrize("m", [1, 3, 50])
@pytest.mark.parametrize("mask", range(len(MASKS)))
def test_derived_map_equals_explicit_gd_step(m, mask):
    trained = MASKS[mask]
    pb = Problem(m, seed=100 + m)
    eta = 0.05
    Q, G, g, GW, Q1, wt1, Wt1 = _explicit_step(pb, eta, trained)
    Gm, D = _metric_and_mask(pb, trained)
    f = derive.numeric_general()
    Gh = G + G.T
    Qd = f["Q"](Q, Gh, Gm, D, eta)
    scale = max(1.0, np.abs(Q1).max())
    assert np.abs(Qd - Q1).max() <= RTOL * scale
    wt0, Wt0 = pb.E.T @ pb.w, pb.E.T @ pb.W @ pb.E
    wd = np.asarray(f["w"](wt0[:, None], pb.Gamma, g[:, None], eta)).reshape(-1)
    Wd = f["W"](Wt0, pb.Gamma, GW, eta)
    assert np.abs(wd - wt1).max() <= RTOL * max(1.0, np.abs(wt1).max())
    assert np.abs(Wd - Wt1).max() <= RTOL * max(1.0, np.abs(Wt1).max())
    # the test can fail: the map without its eta^2 term is far off (the term is not negligible here)
    Q_first = Q - eta * (D @ Gm @ Gh @ Q + Q @ Gh @ Gm @ D)
    if any(trained.values()):
        assert np.abs(Q_first - Q1).max() > 1e3 * RTOL * scale
    # and a wrong order of the metric (Gamma Q Ghat instead of Q Ghat Gamma) is caught
    Q_wrong = Q - eta * (D @ Gm @ Gh @ Q + Gm @ Q @ Gh @ D) + eta**2 * D @ Gm @ Gh @ Q @ Gh @ Gm @ D
    if trained["K"]:
        assert np.abs(Q_wrong - Q1).max() > 1e3 * RTOL * scale


@pytest.mark.parametrize("m", [1, 3, 50])
def test_flow_is_the_eta_derivative_of_explicit_gd(m):
    """The explicit step is exactly quadratic in eta, so a central difference in eta
    gives its linear coefficient (the flow) up to rounding."""
    trained = MASKS[0]
    pb = Problem(m, seed=200 + m)
    h = 1e-3
    Q, G, g, GW, Qp, _, _ = _explicit_step(pb, h, trained)
    *_, Qm, _, _ = _explicit_step(pb, -h, trained)
    Gm, D = _metric_and_mask(pb, trained)
    rhs = derive.numeric_general()["flow_Q"](Q, G + G.T, Gm, D)
    fd = (Qp - Qm) / (2 * h)
    assert np.abs(rhs - fd).max() <= 1e-9 * max(1.0, np.abs(rhs).max())


@pytest.mark.parametrize("m", [1, 3, 50])
def test_block_map_equals_explicit_gd_step(m):
    """The block-by-block expansion (what the per-description LaTeX prints), for the
    loss's read blocks (K, Q), (r, V), (V, V), (K, V)."""
    trained = MASKS[0]
    pb = Problem(m, seed=300 + m)
    eta = 0.25
    Q, G, g, GW, Q1, _, _ = _explicit_step(pb, eta, trained)
    objs = [("K", "Gamma", True), ("Q", "Gamma", True), ("V", "Gamma", True), ("r", None, True)]
    reads = [("K", "Q"), ("r", "V"), ("V", "V"), ("K", "V")]
    nb = derive.numeric_blocks(objs, reads)
    s = pb.sl()
    args = []
    for kind, key in nb["args"]:
        if kind == "Q":
            args.append(Q[s[key[0]], s[key[1]]])
        elif kind == "G":
            args.append(G[s[key[0]], s[key[1]]])
        else:
            args.append(pb.Gamma)
    scale = max(1.0, np.abs(Q1).max())
    for (a, b), fn in nb["map"].items():
        got = np.asarray(fn(*args, eta), float).reshape(Q1[s[a], s[b]].shape)
        assert np.abs(got - Q1[s[a], s[b]]).max() <= RTOL * scale, (a, b)


def test_derivation_checks():
    res = derive.derive_general()
    assert res["gradient_is_U_Ghat"]
    assert all(res["matches_expected"].values())
    from meanfield.models.mixture.symbolic_gram import derive as mixture_derive

    chk = mixture_derive()["checks"]
    for key in ("gram_metric", "orthonormal", "frozen", "proposed_differs"):
        assert chk[key] and all(chk[key].values()), (key, chk[key])


def test_committed_latex_is_current():
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "derivations" / "generated" / "engine_general.tex"
    import importlib.util

    spec = importlib.util.spec_from_file_location("engine_general", path.parents[1] / "engine_general.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    from meanfield.models.mixture.symbolic_gram import derive as mixture_derive

    assert path.read_text() == mod.HEADER + derive.general_latex(mixture_derive()["checks"])
    text = path.read_text()
    assert r"\allowdisplaybreaks" in text and r"\eta^{2}" in text


def test_import_meanfield_engine_derive_does_not_import_sympy():
    import subprocess
    import sys

    code = "import sys, meanfield.engine.symbolic; print('sympy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ------------------------------------------------------------------ per-description LaTeX

def _random_desc(seed, m=3):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from test_engine_oracle import random_raw

    from meanfield.engine.description import description_from_dict

    return description_from_dict(random_raw(seed, m=m))


def test_description_latex_names_every_reduced_variable():
    from meanfield.models.mixture.family import mixture_description
    from meanfield.engine.reduce import layout
    from meanfield.models.mixture.config import make_config

    d = mixture_description(make_config({"K": 2, "L": 3}))
    tex = derive.description_latex(d)
    assert r"\allowdisplaybreaks" in tex and "S' &= S - \\eta" in tex
    assert "S[c_{1},v_{1}]' &=" in tex  # entry by entry in the features' names (P = 4, Gamma = I)
    lay = layout(d)
    assert f"{sum(b.count for b in lay.blocks)} independent reduced variables" in tex
    for seed in (1, 4, 10):
        d = _random_desc(seed)
        tex = derive.description_latex(d)
        for h in d.model.heads:
            assert f"Head ${derive._tex_name(h.name)}$" in tex
        for b in layout(d).blocks:
            assert f"${derive._var_tex(b.name)}$ & {b.kind} & {b.count}" in tex


@pytest.mark.parametrize("seed", [1, 4, 10])
def test_printed_block_maps_are_the_engines_gd_step(seed):
    """The per-head block equations the LaTeX prints (``block_map`` on the head's
    objects and read blocks), evaluated with the engine's G at its state, give the
    engine's next Gram state: the printed derivation is what runs."""
    from meanfield.engine import system as esys
    from meanfield.engine.reduce import H_N, H_QOFF, initial_state

    d = _random_desc(seed)
    sysm = esys.system_of(d)
    lay = sysm.pk.lay
    y = initial_state(d, lay)
    _, G, _, _, _ = sysm.loss_and_grads(y)
    y1 = y.copy()
    mode = esys.mode_of(("attention", "values", "readout", "signs"))
    sysm.gd_advance(y1, 1, d.training.eta, mode, None)
    checked = 0
    for k, h in enumerate(d.model.heads):
        st = derive.head_structure(d, k, lay)
        if not st["objects"]:
            continue
        nb = derive.numeric_blocks([(nm, metric, True) for nm, metric, _ in st["objects"]], st["reads"],
                                   names=st["names"])
        N, off = int(lay.hi[k, H_N]), int(lay.hi[k, H_QOFF])
        Q0 = y[off:off + N * N].reshape(N, N)
        Q1 = y1[off:off + N * N].reshape(N, N)
        sl = {nm: slice(s, s + w) for nm, s, w, _ in lay.objects[k]}
        args = []
        for kind, key in nb["args"]:
            if kind == "Q":
                args.append(Q0[sl[key[0]], sl[key[1]]])
            elif kind == "G":
                args.append(G[k][sl[key[0]], sl[key[1]]])
            else:
                args.append(d.dictionary.Gamma)
        for (a, b), fn in nb["map"].items():
            ref = Q1[sl[a], sl[b]]
            got = np.asarray(fn(*args, d.training.eta), float).reshape(ref.shape)
            assert np.abs(got - ref).max() <= 1e-12 * max(1.0, np.abs(Q1).max()), (h.name, a, b)
            checked += 1
    assert checked > 0
