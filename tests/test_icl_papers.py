"""The icl paper package (meanfield/models/icl): closed forms against independent
computations (Monte Carlo with a stated bound, the engine's Isserlis moments,
numerical minimisation, an ODE solver), and every checker failing on a
constructed wrong run."""

from __future__ import annotations

import math

import numpy as np
import pytest

from meanfield.engine.gaussian import GaussianPrompts
from meanfield.models.icl import common, onestep, saddles, softmax, theory, zfb

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]
MODELS = ROOT / "meanfield" / "models"


def _law(d=3, N=5, sigma=0.3, seed=0):
    rng = np.random.default_rng(seed)
    B = rng.standard_normal((d, d))
    Lam = B @ B.T / d + 0.3 * np.eye(d)
    C = rng.standard_normal((d, d))
    Sw = C @ C.T / d + 0.5 * np.eye(d)
    return GaussianPrompts(d, N, Lam, Sw, sigma)


def _T_of_A(A, d):
    """The prediction tensor of yhat = x_q^T A h (T[y, b, j] = A[j, b])."""
    T = np.zeros((d + 1, d + 1, d))
    T[d, :d, :] = np.asarray(A).T
    return T


def test_linear_loss_equals_engine_moments_and_monte_carlo():
    law = _law()
    d = law.d
    rng = np.random.default_rng(1)
    A = rng.standard_normal((d, d)) * 0.3
    L = theory.linear_loss(A, law.Lambda, law.N, law.Sigma_w, law.sigma)
    # the engine's Isserlis tensors (meanfield.engine.gaussian): an independent derivation
    assert math.isclose(L, law.moments().loss(_T_of_A(A, d)), rel_tol=1e-12)
    g = theory.linear_loss_grad(A, law.Lambda, law.N, law.Sigma_w, law.sigma)
    gT = law.moments().grad(_T_of_A(A, d))
    np.testing.assert_allclose(g, gT[d, :d, :].T, rtol=1e-10, atol=1e-12)
    # Monte Carlo over sampled prompts: within 4 standard errors
    n = 200000
    x, y, xq, yq, _ = law.sample(n, np.random.default_rng(2))
    h = np.einsum("nid,ni->nd", x, y) / law.N
    e = 0.5 * (np.einsum("nj,jb,nb->n", xq, A, h) - yq) ** 2
    se = e.std(ddof=1) / math.sqrt(n)
    assert abs(e.mean() - L) <= 4 * se, (e.mean(), L, se)


def test_min_loss_is_a_minimum_and_matches_the_engine():
    from scipy.optimize import minimize

    law = _law(d=2, N=4)
    Lstar = theory.min_loss(law.Lambda, law.N, law.Sigma_w, law.sigma)
    res = minimize(lambda a: theory.linear_loss(a.reshape(2, 2), law.Lambda, law.N, law.Sigma_w, law.sigma),
                   np.zeros(4), method="BFGS", options={"gtol": 1e-12})
    assert math.isclose(res.fun, Lstar, rel_tol=1e-9)
    assert math.isclose(Lstar, law.moments().minimum_loss(), rel_tol=1e-10)
    # ZFB's closed form (Sigma_w = I, no noise), the spec's example
    assert abs(theory.zfb_min_loss([1.0, 0.5, 0.25], 8) - 0.280406976744186) < 1e-15


def test_plateau_levels_are_restricted_minima_and_tend_to_tail_sums():
    from scipy.optimize import minimize

    Lam, N = np.diag([0.4, 0.3, 0.2, 0.1]), 32
    lv = theory.plateau_levels(Lam, N)
    _, U = theory.eigen(Lam)
    for m in (1, 2):
        Um = U[:, :m]
        res = minimize(lambda c: theory.linear_loss(Um @ c.reshape(m, m) @ Um.T, Lam, N), np.zeros(m * m),
                       method="BFGS", options={"gtol": 1e-12})
        assert math.isclose(res.fun, lv[m], rel_tol=1e-9)
    np.testing.assert_allclose(theory.plateau_levels(Lam, 10 ** 10), theory.tail_sums(Lam), atol=1e-8)


def test_aligned_time_against_an_ode_solver():
    from scipy.integrate import solve_ivp

    b, a, u0 = 0.16, 0.071, 0.05
    t_pred = theory.aligned_time_to(b, a, u0, 0.5)
    target = (0.5 * b / a) ** (1 / 3)
    ev = lambda t, u: u[0] - target
    ev.terminal = True
    sol = solve_ivp(lambda t, u: [u[0] ** 2 * (b - a * u[0] ** 3)], (0, 10 * t_pred), [u0], events=ev,
                    rtol=1e-12, atol=1e-14)
    assert math.isclose(sol.t_events[0][0], t_pred, rel_tol=1e-8)


def test_onestep_closed_forms_are_the_minimiser():
    # Mahankali's step size and non-isotropic preconditioner are the general minimiser at those laws
    d, N = 3, 7
    assert np.allclose(N * theory.onestep_step_size(d, N, 0.5) * np.eye(d),
                       theory.optimal_A(np.eye(d), N, np.eye(d), 0.5), atol=1e-14)
    Lam = np.diag([1.0, 0.5, 0.25])
    assert np.allclose(np.linalg.inv(Lam) * N / (N + d + 1), theory.optimal_A(Lam, N, np.linalg.inv(Lam)),
                       atol=1e-13)


def test_predict_and_gd_step_against_a_loop():
    rng = np.random.default_rng(3)
    d, N = 2, 3
    T = rng.standard_normal((d + 1, d + 1, d))
    x, y, xq = rng.standard_normal((1, N, d)), rng.standard_normal((1, N)), rng.standard_normal((1, d))
    z = np.concatenate([x[0], y[0][:, None]], axis=1)
    ref = sum(T[a, b, j] * np.mean(z[:, a] * z[:, b]) * xq[0, j]
              for a in range(d + 1) for b in range(d + 1) for j in range(d))
    assert math.isclose(common.predict(T, x, y, xq)[0], ref, rel_tol=1e-12)
    P = rng.standard_normal((d, d))
    ref = sum(xq[0, j] * P[j, k] * y[0, i] * x[0, i, k] for j in range(d) for k in range(d) for i in range(N))
    assert math.isclose(common.gd_step_prediction(P, x, y, xq)[0], ref, rel_tol=1e-12)


# ------------------------------------------------------------------ the checkers fail on wrong runs


def test_zfb_checker_fails_on_a_wrong_run():
    desc, r = common.engine_run(MODELS / "icl_zfb.toml")  # the shipped defaults converge
    m = zfb.measure(desc, r)
    assert all(c.passed for c in zfb.claims_from([m], None, {}))
    desc, r = common.engine_run(MODELS / "icl_zfb.toml", steps=20)  # stopped early: not at the minimum
    bad = zfb.measure(desc, r)
    cl = {c.name: c for c in zfb.claims_from([bad], None, {})}
    assert not cl["zfb_global_minimum"].passed
    wrong = dict(m, A_end=m["A_end"] + 0.1, A_err=m["A_err"] + 0.1)  # a predictor off Gamma^{-1}
    assert not {c.name: c for c in zfb.claims_from([wrong], None, {})}["zfb_predictor"].passed


def test_onestep_checker_fails_on_a_wrong_run():
    path = MODELS / "icl_onestep.toml"
    desc, r = common.engine_run(path, **onestep.LAWS["mahankali_anisotropic"])
    assert onestep.passes(onestep.measure("mahankali_anisotropic", desc, r))
    # the isotropic step size is not the non-isotropic law's predictor
    assert not onestep.passes(onestep.measure("mahankali_isotropic", desc, r))
    desc, r = common.engine_run(path, steps=30, **onestep.LAWS["ahn_preconditioner"])
    assert not onestep.passes(onestep.measure("ahn_preconditioner", desc, r))


def _fake(levels, t, loss):
    return {"levels": np.asarray(levels), "table": common.plateau_table(t, loss, levels)}


def test_saddle_measurements_fail_on_constructed_curves():
    levels = [0.5, 0.3, 0.15, 0.05]
    t = np.linspace(0, 1000, 2001)
    stair = np.full_like(t, 0.5)
    for tk, lv in zip((100, 300, 700), levels[1:]):
        stair = np.where(t >= tk, lv, stair)
    rows = common.plateau_table(t, stair, levels)
    assert all(r["visited"] for r in rows)
    # a curve that drops straight from L_0 to L_3: the merged criterion passes, the plateau rule fails
    drop = np.where(t >= 300, 0.05, 0.5)
    rows = common.plateau_table(t, drop, levels)
    assert rows[0]["visited"] and rows[-1]["visited"] and not any(r["visited"] for r in rows[1:-1])
    ok, parts = saddles.merged_ok({"table": common.plateau_table(t, stair, levels), "loss_end": 0.05, "L_star": 0.05})
    assert not ok and not parts["no_intermediate_plateau"]
    sep = {"table": common.plateau_table(t, drop, levels), "t_learned": [310.0, 305.0, 320.0], "loss_end": 0.05,
           "levels": np.asarray(levels)}
    ok, parts = saddles.separate_ok(sep)
    assert not ok and not parts["components_learned_in_eigenvalue_order"]
    ali = {"t_meas": [10.0, 20.0], "t_pred": [10.0, 25.0], "tol": [1.0, 1.0]}
    assert not saddles.aligned_ok(ali)


def test_softmax_criteria_fail():
    m = {"forward_rel_err": 0.0, "improvement_over_zero": 0.01, "improvement_se": 0.01}
    assert not softmax.ok(m)[0]
    assert not softmax.ok(dict(m, improvement_over_zero=1.0, forward_rel_err=1e-3))[0]
    assert softmax.ok(dict(m, improvement_over_zero=1.0))[0]


def test_softmax_forward_convention():
    # uniform attention at W = 0: the head outputs v . mean(z_i)
    rng = np.random.default_rng(0)
    Z = rng.standard_normal((4, 6, 3))
    v = rng.standard_normal(3)
    np.testing.assert_allclose(softmax.forward([(np.zeros((3, 3)), v, 1.0)], Z), Z[:, :-1, :].mean(axis=1) @ v)


# ------------------------------------------------------------------ the checks end to end


@pytest.mark.parametrize("name", ["icl_zfb", "icl_onestep", "icl_saddles"])
def test_quick_checks_write_reports(tmp_path, name):
    from meanfield.engine.checks import run_check

    claims, report = run_check(MODELS / f"{name}.toml", tmp_path, quick=True, log=lambda *a: None)
    text = report.read_text()
    assert "| claim | source | status |" in text
    if name == "icl_saddles":
        assert "Saddle-to-saddle table" in text and (tmp_path / "saddles_table.md").exists()
        byname = {c.name: c for c in claims}
        assert byname["zsls_aligned_scalar_odes"].passed
        assert byname["zsls_merged_single_drop"].passed
    else:
        assert all(c.passed for c in claims if c.source != "expected")


@pytest.mark.slow
def test_softmax_quick_check(tmp_path):
    from meanfield.engine.checks import run_check

    claims, _ = run_check(MODELS / "icl_softmax.toml", tmp_path, quick=True, log=lambda *a: None)
    assert claims[0].source == "expected" and "SAMPLED, NOT EXACT" in claims[0].statement
    assert claims[0].numbers["criteria"]["forward_matches_engine"]


def test_a_diverging_run_is_a_fail_not_a_crash(tmp_path):
    from meanfield.engine.checks import run_check

    # icl_onestep's check runs GD as described (icl_zfb's runs the gradient flow, which a large eta
    # only lengthens: its horizon is steps x eta)
    p = tmp_path / "icl_onestep.toml"
    import re

    p.write_text(re.sub(r"(?m)^eta = [0-9.]+", "eta = 500.0", (MODELS / "icl_onestep.toml").read_text()))
    claims, report = run_check(p, tmp_path / "out", quick=True, log=lambda *a: None)
    assert claims and not any(c.passed for c in claims)
    assert "did not complete" in claims[0].statement and "diverged" in claims[0].numbers["run_status"]


def test_docstring_examples():
    import doctest
    import importlib

    for m in ("theory", "common", "onestep", "saddles", "softmax", "zfb"):
        r = doctest.testmod(importlib.import_module(f"meanfield.models.icl.{m}"), optionflags=doctest.ELLIPSIS)
        assert r.failed == 0, m


def test_explicit_rank_one_network_equals_the_engine_where_the_engine_stays_rank_one():
    """explicit_run (the oracle's rank-one weights) against the engine from the aligned init
    (whose Gram state stays rank one): same losses and predictors over 300 GD steps."""
    path = MODELS / "icl_saddles.toml"
    desc, t, loss, As = saddles.explicit_run(path, "aligned", 0.3, 0, steps=300)
    d_e, r = saddles.run_from(path, "aligned", 0.3, 0, steps=300, record_every=1)
    assert saddles.rank_leak(d_e, r) <= 1e-12
    Ae, _ = common.predictor_series(r)
    idx = [int(round(x / d_e.training.eta)) for x in t]
    np.testing.assert_allclose(loss, r.loss[idx], rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(As, Ae[idx], rtol=1e-9, atol=1e-12)


def test_rank_leak_sees_a_rank_two_state():
    path = MODELS / "icl_saddles.toml"
    d_e, r = saddles.run_from(path, "aligned", 0.05, 0, steps=2)
    from meanfield.engine import reduce as R

    lay = R.layout(d_e)
    y = r.y[-1].copy()
    off, N = int(lay.hi[0, R.H_QOFF]), int(lay.hi[0, R.H_N])
    Q = y[off:off + N * N].reshape(N, N) + 1e-3 * np.eye(N)  # not a rank-one Gram any more
    y[off:off + N * N] = Q.ravel()
    r.y = np.vstack([r.y, y])
    assert saddles.rank_leak(d_e, r) > 1e-3


def test_engine_network_gap_sees_a_difference_and_a_missing_record():
    from types import SimpleNamespace

    t = np.array([0.0, 1.0, 2.0])
    loss = np.array([0.5, 0.4, 0.3])
    r = SimpleNamespace(t=np.array([0.0, 0.5, 1.0, 1.5, 2.0]), loss=np.array([0.5, 0.45, 0.4, 0.35, 0.3]))
    assert saddles.engine_network_gap(r, t, loss) == 0.0
    r.loss = r.loss.copy()
    r.loss[2] = 0.4 * (1 + 1e-6)
    assert abs(saddles.engine_network_gap(r, t, loss) - 1e-6) < 1e-12
    r2 = SimpleNamespace(t=np.array([0.0, 0.5, 2.0]), loss=np.array([0.5, 0.45, 0.3]))
    assert saddles.engine_network_gap(r2, t, loss) == float("inf")


# ------------------------------------------------------------------ Chen et al., multi-task (sampled)

def test_multitask_data_and_refusals():
    from meanfield.models.icl import multitask

    feats = multitask.features(2, 3)
    assert feats == ["x1", "x2", "x3", "x4", "x5", "x6", "y1", "y2", "y3"]
    D = multitask.prompts(feats, 2, 3, 5, 0.0, 7, 1)
    Z, Y = D["tokens"], D["target"]
    assert Z.shape == (7, 6, 9) and Y.shape == (7, 3) and np.all(Z[:, -1, 6:] == 0)
    # each task reads only its own block: y^t = w_t^T x^(t) for one w_t per prompt (least squares is exact)
    for n in range(7):
        for t in range(3):
            X = Z[n, :-1, 2 * t:2 * t + 2]
            w, *_ = np.linalg.lstsq(X, Z[n, :-1, 6 + t], rcond=None)
            np.testing.assert_allclose(X @ w, Z[n, :-1, 6 + t], atol=1e-12)
            assert abs(Z[n, -1, 2 * t:2 * t + 2] @ w - Y[n, t]) < 1e-10
    for args, field in (((feats, 2, 3, 5, 0.0, 0, 1), "samples"), ((feats, 2, 3, 5, -1.0, 7, 1), "noise"),
                        ((feats[:-1], 2, 3, 5, 0.0, 7, 1), "features"), ((feats, 2, 3, 5, 0.0, 10 ** 9, 1), "samples"),
                        ((feats, 0, 3, 5, 0.0, 7, 1), "d_task")):
        with pytest.raises(ValueError, match=field):
            multitask.prompts(*args)


def test_multitask_forward_against_a_loop():
    from meanfield.models.icl import multitask

    rng = np.random.default_rng(2)
    Z = rng.standard_normal((3, 5, 4))
    heads = [(rng.standard_normal((4, 4)), rng.standard_normal((2, 4)), -1.0),
             (rng.standard_normal((4, 4)), rng.standard_normal((2, 4)), 1.0)]
    O = multitask.head_outputs(heads, Z)
    for h, (W, V, a) in enumerate(heads):
        for n in range(3):
            z = np.array([Z[n, i] @ W @ Z[n, -1] for i in range(4)])
            p = np.exp(z) / np.exp(z).sum()
            want = a * V @ sum(p[i] * Z[n, i] for i in range(4))
            np.testing.assert_allclose(O[h, n], want, rtol=1e-12)


def test_multitask_criteria_fail():
    from meanfield.models.icl import multitask

    m = {"forward_rel_err": 0.0, "improvement_per_task": [1.0, 1.0], "improvement_se_per_task": [0.1, 0.1],
         "share": [[0.9, 0.2], [0.1, 0.8]]}
    assert multitask.ok(m)[0] == {"learns": True, "allocation": True}
    assert multitask.ok(dict(m, improvement_per_task=[1.0, 0.3]))[0]["learns"] is False
    assert multitask.ok(dict(m, share=[[0.9, 0.6], [0.1, 0.4]]))[0]["allocation"] is False   # one head, both tasks
    assert multitask.ok(dict(m, share=[[0.45, 0.2], [0.45, 0.8], [0.1, 0.0]]))[0]["allocation"] is False  # no majority
    assert multitask.ok(dict(m, forward_rel_err=1e-6))[0] == {"learns": False, "allocation": False}


def test_multitask_quick_claims():
    from meanfield.models.icl import multitask

    claims = multitask.check_claims(MODELS / "icl_softmax_multitask.toml", quick=True, log=lambda *a: None)
    assert [c.name for c in claims] == ["chen_multitask_learns", "chen_task_allocation"]
    assert all(c.source == "expected" and "SAMPLED, NOT EXACT" in c.statement for c in claims)
    assert claims[0].numbers["criteria"]["forward_matches_engine"]


def test_multitask_sizes_refused_before_building(tmp_path, capsys):
    from meanfield.cli import main

    for flags in (["--samples", "100000000"], ["--tasks", "100000"]):
        out = tmp_path / "x.h5"
        assert main(["model", "run", "icl_softmax_multitask", *flags, "--out", str(out), "--quiet"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "size" in err[0], err
        assert not out.exists()
