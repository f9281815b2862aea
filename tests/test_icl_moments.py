"""The exact population loss and gradient of Gaussian in-context regression, held to independent truths.

``meanfield.engine.population.PopulationSystem`` evaluates the population loss
(1/2) E[(yhat - y_q)^2] and its gradient with respect to every block the
engine holds (S = Q[K, Q] or the merged W~, the value vector w~ or R = Q[r1, V],
trainable signs) through closed-form Gaussian moments
(``meanfield.engine.gaussian``). Here they are compared with

* Monte Carlo over 10^6 sampled prompts, through a forward pass of the
  prediction written here from the prompt itself (G = (1/N) sum z_i z_i^T,
  head k: a_k scale_k v_k^T G S_k z_q) and its per-prompt gradient, within 4
  standard errors estimated from the same samples (the error bound shrinks as
  1/sqrt(n)); merged and separate keys/queries, 1 and 3 heads, d = 1, 3, 5,
  random weights, anisotropic Lambda, non-identity Sigma_w, label noise;
* at d = 1, N = 2, a brute-force exact expectation: tensor Gauss-Hermite
  quadrature over all seven Gaussian variables (x_1, x_2, x_q, w, eps_1,
  eps_2, eps_q), 5 nodes each, exact for polynomials of degree <= 9 in each
  variable (the loss and its gradient have degree <= 4 in each), to 1e-12;
* the closed form L* = (1/2)(tr Lambda - tr(Lambda Gamma^{-1} Lambda)) of the
  ZFB predictor, and the sympy derivation (``derivations/icl_moments.py``).
"""

from __future__ import annotations

import numpy as np
import pytest

from meanfield.engine.description import description_from_dict
from meanfield.engine.gaussian import GaussianPrompts
from meanfield.engine.population import PopulationSystem
from meanfield.engine.reduce import H_AOFF, H_IK, H_IQ, H_IR, H_IV, H_N, H_QOFF, H_VOFF, H_WOFF, layout


def spd(rng, d, scale=1.0):
    A = rng.normal(size=(d, d)) * 0.4 + np.eye(d)
    return scale * (A @ A.T) / d + 0.2 * np.eye(d)


def raw_of(d, N, Lam, Sw, sigma, heads, width="inf"):
    return {"name": "t", "data": {"family": "icl_regression", "d": d, "N": N, "cov": Lam.tolist(),
                                  "task_cov": Sw.tolist(), "noise": sigma},
            "heads": heads, "model": {"loss": "squared"},
            "parameters": {"steps": 1, "eta": 0.1, "width": width}}


def heads_of(kq, H, rng):
    out = []
    for j in range(H):
        h = {"name": f"h{j}", "attention": "linear", "kq": kq, "query": "last", "query_self": False,
             "value": "matrix" if (kq == "separate" and j % 2 == 1) else "linear",
             "scale": float(rng.uniform(0.5, 1.5)), "sign": float(rng.choice([-1.0, 1.0])), "train_sign": j == 1}
        out.append(h)
    return out


def random_state(desc, rng):
    """A random reduced state (Gram blocks from random factors U, narrow blocks random)."""
    lay = layout(desc)
    y = np.zeros(lay.size)
    for k, h in enumerate(desc.model.heads):
        N = int(lay.hi[k, H_N])
        if N:
            U = rng.normal(size=(4, N)) * 0.6
            off = int(lay.hi[k, H_QOFF])
            y[off:off + N * N] = (U.T @ U).ravel()
        if lay.hi[k, H_WOFF] >= 0:
            o = int(lay.hi[k, H_WOFF])
            y[o:o + lay.P ** 2] = rng.normal(size=lay.P ** 2) * 0.5
        if lay.hi[k, H_VOFF] >= 0:
            o = int(lay.hi[k, H_VOFF])
            y[o:o + lay.P] = rng.normal(size=lay.P)
        if lay.hi[k, H_AOFF] >= 0:
            y[int(lay.hi[k, H_AOFF])] = rng.uniform(0.5, 1.5)
    return lay, y


def blocks(lay, y, k):
    """(S (P, P), v (P,), a, scale) of head k read from the state, written here from the layout's offsets."""
    P = lay.P
    N = int(lay.hi[k, H_N])
    if N:
        Q = y[int(lay.hi[k, H_QOFF]):int(lay.hi[k, H_QOFF]) + N * N].reshape(N, N)
    if lay.hi[k, H_WOFF] >= 0:
        S = y[int(lay.hi[k, H_WOFF]):int(lay.hi[k, H_WOFF]) + P * P].reshape(P, P)
    else:
        iK, iQ = int(lay.hi[k, H_IK]), int(lay.hi[k, H_IQ])
        S = Q[iK:iK + P, iQ:iQ + P]
    if lay.hi[k, H_VOFF] >= 0:
        v = y[int(lay.hi[k, H_VOFF]):int(lay.hi[k, H_VOFF]) + P]
    else:
        iR, iV = int(lay.hi[k, H_IR]), int(lay.hi[k, H_IV])
        v = Q[iR, iV:iV + P]
    a = y[int(lay.hi[k, H_AOFF])] if lay.hi[k, H_AOFF] >= 0 else lay.hf[k, 1]
    return S, v, a, lay.hf[k, 0]


def engine_grads(lay, G, gflat, k):
    """(dL/dS, dL/dv, dL/da) of head k from the engine's G = dLoss/dQ and narrow gradients."""
    P = lay.P
    if lay.hi[k, H_WOFF] >= 0:
        o = int(lay.hi[k, H_WOFF])
        dS = gflat[o:o + P * P].reshape(P, P)
    else:
        iK, iQ = int(lay.hi[k, H_IK]), int(lay.hi[k, H_IQ])
        dS = G[k, iK:iK + P, iQ:iQ + P]
    if lay.hi[k, H_VOFF] >= 0:
        o = int(lay.hi[k, H_VOFF])
        dv = gflat[o:o + P]
    else:
        iR, iV = int(lay.hi[k, H_IR]), int(lay.hi[k, H_IV])
        dv = G[k, iR, iV:iV + P]
    da = gflat[int(lay.hi[k, H_AOFF])] if lay.hi[k, H_AOFF] >= 0 else 0.0
    return np.concatenate([np.ravel(dS), np.ravel(dv), [da]])


def per_prompt(lay, y, Z, zq, yq):
    """Per-prompt loss (n,) and gradient (n, H, P^2 + P + 1) from the prompts themselves."""
    N = Z.shape[1]
    G = np.einsum("nia,nib->nab", Z, Z) / N
    H = len(lay.heads)
    fs, parts = [], []
    for k in range(H):
        S, v, a, sc = blocks(lay, y, k)
        Sz = np.einsum("bj,nj->nb", S, zq)           # S z_q
        GSz = np.einsum("nab,nb->na", G, Sz)          # G S z_q
        fs.append(a * sc * (GSz @ v))
        parts.append((S, v, a, sc, Sz, GSz))
    r = np.sum(fs, axis=0) - yq
    loss = 0.5 * r * r
    grads = []
    for k, (S, v, a, sc, Sz, GSz) in enumerate(parts):
        Gv = np.einsum("nab,a->nb", G, v)             # G^T v
        dS = (a * sc * r)[:, None, None] * Gv[:, :, None] * zq[:, None, :]
        dv = (a * sc * r)[:, None] * GSz
        da = (sc * r * (GSz @ v)) if lay.hi[k, H_AOFF] >= 0 else np.zeros_like(r)
        grads.append(np.concatenate([dS.reshape(len(r), -1), dv, da[:, None]], axis=1))
    return loss, np.stack(grads, axis=1)


def per_prompt_sums(lay, y, Z, zq, yq, G=None):
    """The sums over the prompts of the per-prompt loss and gradient (the same formulas as :func:`per_prompt`)
    and of their squares, without forming per-prompt (P, P) gradients: dS_n = c_n (G_n v) (x) z_q,n, so
    sum_n dS_n = (c G v)^T z_q and sum_n dS_n^2 = ((c G v)^2)^T z_q^2 (matrix products)."""
    if G is None:
        G = np.einsum("nia,nib->nab", Z, Z, optimize=True) / Z.shape[1]
    H = len(lay.heads)
    fs, parts = [], []
    for k in range(H):
        S, v, a, sc = blocks(lay, y, k)
        GSz = np.einsum("nab,nb->na", G, zq @ S.T)                  # G S z_q
        fs.append(a * sc * (GSz @ v))
        parts.append((S, v, a, sc, GSz))
    r = np.sum(fs, axis=0) - yq
    loss = 0.5 * r * r
    s1, s2 = [[loss.sum()]], [[(loss * loss).sum()]]
    for k, (S, v, a, sc, GSz) in enumerate(parts):
        cGv = (a * sc * r)[:, None] * (G @ v)                       # G symmetric: G^T v = G v
        s1.append((cGv.T @ zq).ravel())
        s2.append(((cGv * cGv).T @ (zq * zq)).ravel())
        dv = (a * sc * r)[:, None] * GSz
        s1.append(dv.sum(axis=0))
        s2.append((dv * dv).sum(axis=0))
        da = sc * r * (GSz @ v) if lay.hi[k, H_AOFF] >= 0 else np.zeros_like(r)
        s1.append([da.sum()])
        s2.append([(da * da).sum()])
    return np.concatenate([np.ravel(x) for x in s1]), np.concatenate([np.ravel(x) for x in s2])


def prompts(law, n, rng):
    x, yv, xq, yq, _ = law.sample(n, rng)
    Z = np.concatenate([x, yv[:, :, None]], axis=2)
    zq = np.concatenate([xq, np.zeros((n, 1))], axis=1)
    return Z, zq, yq


@pytest.mark.parametrize("d,N", [(1, 3), (3, 5), (5, 4)])
def test_population_equals_monte_carlo(d, N):
    rng = np.random.default_rng(100 + d)
    Lam, Sw, sigma = spd(rng, d), spd(rng, d, 0.8), 0.3
    law = GaussianPrompts(d, N, Lam, Sw, sigma)
    cases = []
    for kq in ("merged", "separate"):
        for H in (1, 3):
            desc = description_from_dict(raw_of(d, N, Lam, Sw, sigma, heads_of(kq, H, rng)))
            lay, y = random_state(desc, rng)
            loss, G, gflat, _, _ = PopulationSystem(desc).loss_and_grads(y)
            exact = np.concatenate([[loss]] + [engine_grads(lay, G, gflat, k) for k in range(H)])
            cases.append((f"{kq} H={H}", lay, y, exact))
    n, chunk = 10 ** 6, 100_000
    acc = [np.zeros(len(c[3])) for c in cases]
    acc2 = [np.zeros(len(c[3])) for c in cases]
    mc_rng = np.random.default_rng(7 + d)
    for _ in range(n // chunk):
        Z, zq, yq = prompts(law, chunk, mc_rng)
        G = np.einsum("nia,nib->nab", Z, Z, optimize=True) / N      # once per chunk, for every case
        for i, (_, lay, y, _) in enumerate(cases):
            a1, a2 = per_prompt_sums(lay, y, Z, zq, yq, G)
            acc[i] += a1
            acc2[i] += a2
    for i, (name, lay, y, exact) in enumerate(cases):
        mean = acc[i] / n
        se = np.sqrt(np.maximum(acc2[i] / n - mean ** 2, 0.0) / n)
        err = np.abs(mean - exact)
        bad = np.flatnonzero(err > 4 * se + 1e-13 * (1 + np.abs(exact)))
        assert bad.size == 0, (f"d={d} {name}: {bad.size} of {len(exact)} entries beyond 4 s.e.; first {bad[:5]}: "
                               f"exact {exact[bad[:5]]}, MC {mean[bad[:5]]} +- {se[bad[:5]]}")
        # the check has power: the loss is resolved to a small fraction of itself
        assert se[0] < 0.01 * exact[0]


def gauss_hermite_expectation(f, nodes=5):
    """E[f(g)] for g ~ N(0, I_7) by tensor Gauss-Hermite quadrature (probabilists' nodes)."""
    t, wts = np.polynomial.hermite_e.hermegauss(nodes)
    wts = wts / wts.sum()
    grids = np.meshgrid(*([t] * 7), indexing="ij")
    W = np.ones_like(grids[0])
    for g in np.meshgrid(*([wts] * 7), indexing="ij"):
        W = W * g
    pts = np.stack([g.ravel() for g in grids], axis=1)
    vals = f(pts)
    return np.einsum("n,n...->...", W.ravel(), vals)


@pytest.mark.parametrize("kq,H", [("merged", 1), ("merged", 3), ("separate", 1), ("separate", 3)])
def test_population_equals_quadrature_d1_N2(kq, H):
    rng = np.random.default_rng(5 + H + (kq == "merged"))
    lam, s, sigma = 0.7, 1.3, 0.4
    desc = description_from_dict(raw_of(1, 2, np.array([[lam]]), np.array([[s]]), sigma, heads_of(kq, H, rng)))
    lay, y = random_state(desc, rng)
    loss, G, gflat, _, _ = PopulationSystem(desc).loss_and_grads(y)
    exact = np.concatenate([[loss]] + [engine_grads(lay, G, gflat, k) for k in range(H)])

    def f(g):
        x1, x2, xq = np.sqrt(lam) * g[:, 0], np.sqrt(lam) * g[:, 1], np.sqrt(lam) * g[:, 2]
        w = np.sqrt(s) * g[:, 3]
        y1, y2 = w * x1 + sigma * g[:, 4], w * x2 + sigma * g[:, 5]
        yq = w * xq + sigma * g[:, 6]
        Z = np.stack([np.stack([x1, y1], 1), np.stack([x2, y2], 1)], axis=1)
        zq = np.stack([xq, np.zeros_like(xq)], 1)
        lo, gr = per_prompt(lay, y, Z, zq, yq)
        return np.concatenate([lo[:, None], gr.reshape(len(lo), -1)], axis=1)

    quad = gauss_hermite_expectation(f)
    np.testing.assert_allclose(exact, quad, rtol=1e-12, atol=1e-12 * max(1.0, np.abs(quad).max()))


def test_zfb_closed_form_minimum():
    """L* of the ZFB predictor x_q^T Gamma^{-1} h: the moments give the closed form (spec/icl.md)."""
    for d, N, ev in ((3, 8, [1, 0.5, 0.25]), (2, 3, [2.0, 0.3]), (5, 20, [1, 1, 1, 1, 1])):
        Lam = np.diag(ev)
        mom = GaussianPrompts(d, N, Lam, np.eye(d), 0.0).moments()
        Gam = (1 + 1 / N) * Lam + np.trace(Lam) / N * np.eye(d)
        Lstar = 0.5 * (np.trace(Lam) - np.trace(Lam @ np.linalg.inv(Gam) @ Lam))
        T = np.zeros((d + 1, d + 1, d))
        T[d, :d, :] = np.linalg.inv(Gam).T          # yhat = x_q^T Gamma^{-1} h, h_b = G[y, b]
        assert abs(mom.loss(T) - Lstar) <= 1e-13
        assert abs(mom.minimum_loss() - Lstar) <= 1e-12
    mom = GaussianPrompts(3, 8, np.diag([1, 0.5, 0.25]), np.eye(3), 0.0).moments()
    assert abs(mom.minimum_loss() - 0.280406976744186) <= 1e-14


def test_sympy_derivation_matches_moments():
    """The symbolic derivation (sympy, symbolic in N and in the entries of Lambda, Sigma_w) equals the
    numeric moment tensors at random values."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "derivations" / "icl_moments.py"
    spec = importlib.util.spec_from_file_location("icl_moments", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.check_conditional_fourth_moment()
    rng = np.random.default_rng(3)
    for d in (1, 2):
        Lam, Sw, sigma, N = spd(rng, d), spd(rng, d, 0.7), 0.35, 5
        K4s, ms, c0s = mod.symbolic_moments(d, Lam, Sw, sigma, N)
        mom = GaussianPrompts(d, N, Lam, Sw, sigma).moments()
        np.testing.assert_allclose(mom.K4, K4s, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(mom.m, ms, rtol=1e-12, atol=1e-12)
        assert abs(mom.c0 - c0s) < 1e-12


def test_factorised_sums_equal_per_prompt_values():
    """The Monte Carlo test's factorised sums are the sums of the per-prompt values (and squares) of per_prompt."""
    rng = np.random.default_rng(11)
    d, N = 3, 4
    Lam, Sw = spd(rng, d), spd(rng, d, 0.8)
    law = GaussianPrompts(d, N, Lam, Sw, 0.3)
    for kq in ("merged", "separate"):
        desc = description_from_dict(raw_of(d, N, Lam, Sw, 0.3, heads_of(kq, 3, rng)))
        lay, y = random_state(desc, rng)
        Z, zq, yq = prompts(law, 500, rng)
        loss, g = per_prompt(lay, y, Z, zq, yq)
        vals = np.concatenate([loss[:, None], g.reshape(500, -1)], axis=1)
        s1, s2 = per_prompt_sums(lay, y, Z, zq, yq)
        np.testing.assert_allclose(s1, vals.sum(axis=0), rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(s2, (vals * vals).sum(axis=0), rtol=1e-10, atol=1e-10)
