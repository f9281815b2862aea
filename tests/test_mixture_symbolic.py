"""The sympy derivation (meanfield.models.mixture.symbolic) and its committed output.

(a) the committed files in derivations/generated/ are current (regenerating gives
    byte-identical text);
(b) the generated numba code (imported from the committed file) equals the
    hand-written kernels (loss, G, dLoss/dw~, margins, flow right-hand side, one
    exact GD step) to 1e-12 at random states with symmetric A, B, for
    relu'(0) = r0 in {0, 1/2, 1}, including states where some u are exactly 0;
(c) the JSON variable counts (16, 10, 10, 4 per head for K = 2, L = 3);
(d) the LaTeX uses the paper's notation and is structurally well formed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from meanfield.engine.codegen import load_generated
from meanfield.models.mixture import kernels, symbolic
from meanfield.models.mixture.data import sample_set

ROOT = Path(__file__).resolve().parents[1]
GEN = ROOT / "derivations" / "generated"
COMMITTED = [(2, 3), (2, 2)]
TOL = 1e-12


def _load(path: Path):
    return load_generated(path)


# ------------------------------------------------------------------ (a) current

@pytest.mark.parametrize("K,L", COMMITTED)
@pytest.mark.parametrize("fmt", symbolic.FORMATS)
def test_generated_files_are_current(K, L, fmt):
    path = GEN / symbolic.filename(K, L, fmt)
    assert path.exists(), f"{path} missing: run python derivations/mixture.py --K {K} --L {L}"
    assert symbolic.render(K, L, fmt) == path.read_text(encoding="utf-8"), (
        f"{path} is stale: run python derivations/mixture.py --K {K} --L {L}")


def test_write_returns_path(tmp_path):
    p = symbolic.write(2, 3, "json", tmp_path / "sub")
    assert p == tmp_path / "sub" / "mixture_K2_L3.json"
    assert p.read_text() == symbolic.render(2, 3, "json")
    with pytest.raises(ValueError, match="fmt"):
        symbolic.render(2, 3, "yaml")


# ------------------------------------------------------------------ (b) kernels

def _random_state(rng, P, scale=1.0, w_scale=1.0):
    S = rng.standard_normal((2, P, P)) * scale
    A = rng.standard_normal((2, P, P)) * scale
    B = rng.standard_normal((2, P, P)) * scale
    A = 0.5 * (A + A.transpose(0, 2, 1))
    B = 0.5 * (B + B.transpose(0, 2, 1))
    w = rng.standard_normal((2, P)) * w_scale
    return S, A, B, w


def _states(K, P, seed):
    """Random states, plus states with some pre-activations exactly 0."""
    rng = np.random.default_rng(seed)
    out = []
    for scale in (0.3, 1.0, 3.0):
        out.append(kernels.pack(*_random_state(rng, P, scale)))
    # zero neuron of the '-' head: u_- = 0 exactly on every sample
    S, A, B, w = _random_state(rng, P)
    w[1] = 0.0
    out.append(kernels.pack(S, A, B, w))
    # both neurons zero
    S, A, B, w = _random_state(rng, P)
    out.append(kernels.pack(S, A, B, np.zeros((2, P))))
    # infinite-width init S = 0, A = B = omega^2 I, neurons equal on the v features
    # (inconsistent samples then have u = 0 exactly)
    I = np.broadcast_to(np.eye(P), (2, P, P))
    w = np.zeros((2, P))
    w[0, K:] = 0.7
    w[1, K:] = -0.4
    w[:, :K] = 0.2 * rng.standard_normal((2, K))
    out.append(kernels.pack(np.zeros((2, P, P)), 0.01 * I, 0.01 * I, w))
    return out


def _close(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    assert a.shape == b.shape
    assert np.all(np.isfinite(a)) and np.all(np.isfinite(b))
    err = float(np.max(np.abs(a - b))) if a.size else 0.0
    assert err <= TOL * max(1.0, float(np.max(np.abs(b)))), err


@pytest.fixture(scope="module", params=COMMITTED, ids=lambda kl: f"K{kl[0]}_L{kl[1]}")
def generated(request):
    K, L = request.param
    return K, L, _load(GEN / symbolic.filename(K, L, "python"))


def _check_against_kernels(K, L, gen, seed):
    s = sample_set(K, L)
    P = s.P
    assert (gen.K, gen.L, gen.P, gen.N_SAMPLES, gen.STATE_SIZE) == (K, L, P, s.n, kernels.state_size(P))
    n_zero = 0
    sensitive = 0
    for y in _states(K, P, seed):
        by_r0 = {}
        for r0 in (0.0, 0.5, 1.0):
            loss, G, dw, margins = gen.loss_grads(y, r0)
            kloss, kG, kdw, kmargins, ku = kernels.loss_and_grads(
                y, P, s.idx, s.sgn, s.y, s.weight, r0)
            _close(loss, kloss)
            _close(G, kG)
            _close(dw, kdw)
            _close(margins, kmargins)
            n_zero += int(np.sum(ku == 0.0))

            f = gen.flow_rhs(y, r0)
            kf = np.empty_like(y)
            kernels.flow_rhs(y, kf, P, s.idx, s.sgn, s.y, s.weight, r0, True, True)
            _close(f, kf)

            for eta in (0.05, 0.5):
                nxt = gen.gd_map(y, eta, r0)
                ky = y.copy()
                steps, code, _ = kernels.gd_advance(
                    ky, 1, eta, P, s.idx, s.sgn, s.y, s.weight, s.consistent, r0,
                    True, True, 0, 1, 0.0, np.inf)
                assert (steps, code) == (1, 0)
                _close(nxt, ky)
                _, A1, B1, _ = kernels.unpack(nxt)
                assert np.array_equal(A1, A1.transpose(0, 2, 1))
                assert np.array_equal(B1, B1.transpose(0, 2, 1))
            by_r0[r0] = np.concatenate([G.ravel(), dw.ravel()])
        if np.max(np.abs(by_r0[0.0] - by_r0[1.0])) > 1e-6:
            sensitive += 1
    # the kink states really put some u at 0 and make the result depend on r0
    assert n_zero > 0
    assert sensitive >= 2


def test_generated_code_equals_kernels(generated):
    K, L, gen = generated
    _check_against_kernels(K, L, gen, seed=1234 + 10 * K + L)


def test_generated_code_large_scores_are_finite(generated):
    # softmax shifts keep exp() bounded: large scores must not overflow
    K, L, gen = generated
    s = sample_set(K, L)
    rng = np.random.default_rng(7)
    y = kernels.pack(*_random_state(rng, s.P, scale=400.0))
    loss, G, dw, margins = gen.loss_grads(y, 1.0)
    kloss, kG, kdw, kmargins, _ = kernels.loss_and_grads(y, s.P, s.idx, s.sgn, s.y, s.weight, 1.0)
    _close(loss, kloss)
    _close(G, kG)
    _close(dw, kdw)


@pytest.mark.slow
@pytest.mark.parametrize("K,L", [(2, 4), (3, 3)])
def test_uncommitted_sizes_equal_kernels(K, L, tmp_path):
    # duplicate tokens (K=2, L=4) and K = 3: generate, compile, compare
    path = symbolic.write(K, L, "python", tmp_path)
    _check_against_kernels(K, L, _load(path), seed=99)


# ------------------------------------------------------------------ (c) JSON

def test_json_counts_K2_L3():
    data = json.loads((GEN / "mixture_K2_L3.json").read_text())
    assert data["K"] == 2 and data["L"] == 3 and data["n_samples"] == 8
    assert set(data["heads"]) == {"+", "-"}
    for h in ("+", "-"):
        d = data["heads"][h]
        assert {k: d[k]["count"] for k in symbolic.KINDS} == {
            "score": 16, "key_self_score": 10, "query_self_score": 10, "neuron": 4}
        for k in symbolic.KINDS:
            assert len(d[k]["names"]) == d[k]["count"] == len(set(d[k]["names"]))
        assert f"S{h}[c1,v1]" in d["score"]["names"]
        assert f"A{h}[c1,v1]" in d["key_self_score"]["names"]
        assert f"A{h}[v1,c1]" not in d["key_self_score"]["names"]
        assert f"w{h}[v2]" in d["neuron"]["names"]
    assert data["total"] == 80
    assert data == symbolic.variables(2, 3)


@pytest.mark.parametrize("K,L", [(2, 2), (3, 3), (4, 3)])
def test_variable_counts_general(K, L):
    P = 2 * K
    v = symbolic.variables(K, L)
    for h in ("+", "-"):
        assert [v["heads"][h][k]["count"] for k in symbolic.KINDS] == [P * P, P * (P + 1) // 2,
                                                                    P * (P + 1) // 2, P]
    assert v["total"] == 2 * (P * P + P * (P + 1) + P)
    assert v["n_samples"] == sample_set(K, L).n


# ------------------------------------------------------------------ (d) LaTeX

def test_latex_notation_and_structure():
    tex = (GEN / "mixture_K2_L3.tex").read_text()
    for needle in (r"c_1^\top W_{K+}^\top W_{Q+} v_1", r"c_1^\top W_{K+}^\top W_{K+} v_1",
                   r"c_1^\top W_{Q+}^\top W_{Q+} v_1", r"w_+^\top c_1", r"c_2^\top W_{K-}^\top W_{Q-} v_2",
                   r"u_+(X_{1})", r"G_{+}[c_1,v_1]", r"\mathcal{L}"):
        assert needle in tex, needle
    # the 8 samples, the flow equation of every variable (36 per head + 4 neurons)
    assert len(re.findall(r"^X_\{\d+\} &=", tex, flags=re.M)) == 8
    assert tex.count(r"\tfrac{d}{dt}") == 80
    # well formed: braces balance, environments match, \left/\right pair on each line
    assert tex.count("{") - tex.count(r"\{") == tex.count("}") - tex.count(r"\}")
    assert re.findall(r"\\begin\{(\w+\*?)\}", tex) == re.findall(r"\\end\{(\w+\*?)\}", tex)
    for line in tex.splitlines():
        assert line.count(r"\left") == line.count(r"\right"), line
    assert "\\documentclass" not in tex  # a fragment to paste into a paper


def test_latex_gradient_formulas_evaluate_to_kernels():
    # the p-form of G and dLoss/dw~ printed in the LaTeX, evaluated numerically
    K, L = 2, 3
    sysm = symbolic._system(K, L)
    s = sample_set(K, L)
    P = s.P
    rng = np.random.default_rng(3)
    y = kernels.pack(*_random_state(rng, P))
    S, _, _, w = kernels.unpack(y)
    r0 = 0.5
    _, G, dw, margin, u = kernels.loss_and_grads(y, P, s.idx, s.sgn, s.y, s.weight, r0)
    for hi, h in enumerate(symbolic.HEADS):
        vals = {sysm.w[h][a]: w[hi, a] for a in range(P)}
        lam = {}
        for n in range(s.n):
            rp = 1.0 if u[n, hi] > 0 else (0.0 if u[n, hi] < 0 else r0)
            lam[n] = -s.weight[n] * s.y[n] * symbolic.HEAD_SIGN[h] * rp / (1.0 + np.exp(margin[n]))
            for l in range(L):
                z = np.array([s.sgn[n, i] * s.sgn[n, l] * S[hi, s.idx[n, i], s.idx[n, l]] for i in range(L)])
                p = np.exp(z - z.max())
                p /= p.sum()
                for i in range(L):
                    vals[sysm.p_symbol(h, n, i, l)] = p[i]
        for a in range(P):
            for b in range(P):
                g = sum(lam[n] * float(sysm.p_form(h, n, d).xreplace(vals)) for n, d in sysm.Gexpr[h, a, b])
                assert abs(g - G[hi, a, b]) < 1e-12
            g = sum(lam[n] * float(sysm.p_form(h, n, d).xreplace(vals)) for n, d in sysm.dwexpr[h, a])
            assert abs(g - dw[hi, a]) < 1e-12
