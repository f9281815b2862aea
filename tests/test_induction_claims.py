"""Checkers of the induction claims (meanfield.models.induction.claims): each one
passes on a run or numbers that satisfy its claim and FAILS on one built to
violate it; the suite writes the report schema; the plot module and the
chi2 / check / plot verbs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from meanfield.cli import main
from meanfield.models.induction import claims as C
from meanfield.models.induction import suite as CS
from meanfield.models.induction import plot as P
from meanfield.models.induction.model import Arch, subset_label

ARCH = Arch(3, 3, 3, 2)
SUBSETS = ARCH.subsets  # (), (0,), (1,), (2,), (0,1), (0,2), (1,2)
I12 = SUBSETS.index((0, 1))


def synthetic_run(c_end=None, rpe_before=0.79, rpe_after=0.99, after_lags=(1, 2, 3), a_of_tau=None,
                  t1=400.0, t2=2400.0, n3=150, tau_max=600.0):
    """A run-like dict of a three-phase run: phase 1 moves c (uniform -> c_end),
    phase 2 moves the RPE (head h from ``rpe_before`` on lag h+1 to ``rpe_after`` on
    ``after_lags[h]``), phase 3 moves a along ``a_of_tau`` (log-spaced records)."""
    nS = len(SUBSETS)
    c_end = np.full(nS, 1 / nS) if c_end is None else np.asarray(c_end, float)
    a_of_tau = a_of_tau or (lambda tau: 1.0 + np.log1p(tau / 3.0))
    t = list(np.linspace(0, t1, 11)) + list(np.linspace(t1, t2, 11)[1:])
    stage = [1] * 11 + [2] * 10
    tau = np.geomspace(0.5, tau_max, n3)
    t += list(t2 + tau)
    stage += [3] * n3
    T = len(t)
    cw = np.empty((T, nS))
    rpe = np.empty((T, 3, 3))
    a = np.empty(T)

    def rpe_of(top, lags):
        r = np.full((3, 3), 0.0)
        for h in range(3):
            r[h] = (1 - top) / 2
            r[h, lags[h] - 1] = top
        return r

    for i, (ti, si) in enumerate(zip(t, stage)):
        f1 = min(ti / t1, 1.0)
        cw[i] = (1 - f1) / nS + f1 * c_end
        f2 = 0.0 if ti <= t1 else min((ti - t1) / (t2 - t1), 1.0)
        rpe[i] = rpe_of(rpe_before, (1, 2, 3)) if f2 == 0 else rpe_of(rpe_before + f2 * (rpe_after - rpe_before),
                                                                      after_lags if f2 > 0.5 else (1, 2, 3))
        a[i] = a_of_tau(ti - t2) if si == 3 else a_of_tau(0.0)
    return {"t": np.array(t), "stage": np.array(stage), "c_weight": cw, "rpe": rpe, "a": a,
            "subsets": [subset_label(S) for S in SUBSETS], "subset_members": ARCH.members, "lags": ARCH.lags,
            "attrs": {"stage_ends": [{"stage": 1, "t": t1}, {"stage": 2, "t": t2}, {"stage": 3, "t": t[-1]}]}}


def on12(mass):
    c = np.full(len(SUBSETS), (1 - mass) / (len(SUBSETS) - 1))
    c[I12] = mass
    return c


# ----------------------------------------------------------------- phase 1


def test_parent_selection_pass_and_fail():
    ok = C.check_parent_selection(synthetic_run(on12(0.97)), (1, 2))
    assert ok.passed and ok.numbers["c_mass_on_S_star"] == pytest.approx(0.97)
    assert ok.numbers["selected_lags"] == [1, 2] and ok.numbers["S_star"] == [1, 2]
    frozen = C.check_parent_selection(synthetic_run(None), (1, 2))  # phase 1 did nothing
    assert not frozen.passed and frozen.numbers["c_mass_on_S_star"] == pytest.approx(1 / 7)
    wrong = np.full(7, 0.01)
    wrong[SUBSETS.index((1, 2))] = 0.94
    assert not C.check_parent_selection(synthetic_run(wrong), (1, 2)).passed
    assert not C.check_parent_selection(synthetic_run(on12(0.8)), (1, 2)).passed  # not enough mass


def test_exponent_checker_pass_and_fail():
    subs = [(), (1,), (2,), (3,), (1, 2), (1, 3), (2, 3)]
    th2 = dict(zip(subs, [0, 0.145, 0.16, 0.146, 0.196, 0.158, 0.166]))
    th1 = dict(zip(subs, [0, 0.6, 0.67, 0.55, 1.29, 0.94, 1.0]))
    th3 = dict(zip(subs, [0, 0.062, 0.069, 0.062, 0.063, 0.054, 0.054]))
    rng = np.random.default_rng(0)
    # velocities affine in I~_2 (plus batch noise): exponent 2 wins
    like2 = {S: 0.3 * (v - 0.15) + 1e-4 * rng.standard_normal(10) for S, v in th2.items()}
    good = C.check_exponent({1: th1, 2: th2, 3: th3}, like2)
    assert good.passed and good.numbers["best_exponent"] == 2.0 and good.numbers["r2"]["2.0"] > 0.99
    assert good.numbers["top_observed"] == [1, 2]
    # velocities affine in I~_1: exponent 1 wins, the claim fails
    like1 = {S: 0.02 * (v - 0.5) + 1e-4 * rng.standard_normal(10) for S, v in th1.items()}
    bad = C.check_exponent({1: th1, 2: th2, 3: th3}, like1)
    assert not bad.passed and bad.numbers["best_exponent"] == 1.0
    # anti-correlated with I~_2 (negative slope) fails even if it fits
    anti = {S: -v for S, v in th2.items()}
    assert not C.check_exponent({1: th1, 2: th2}, anti).passed
    # Monte Carlo values: pairs the sample does not resolve are left out
    noisy = {S: v + 0.5 * rng.standard_normal(50) for S, v in th2.items()}
    ag = C.ranking_agreement(noisy, {S: float(np.mean(v)) for S, v in like2.items()})
    assert ag["unresolved"] > 0 and ag["concordant"] + ag["discordant"] + ag["unresolved"] == 21
    both = C.ranking_agreement_both(th2, like2)
    assert both["discordant"] == 0 and both["concordant"] >= 15


def _exponent_fixture(true_k, noise=1e-4, slope=0.3, seed=0):
    """Two parent-set configurations; theory I~_k(S) = sum_z-like power sums
    m_S^k * r_S with per-subset mass m_S and response r_S (so different k
    give differently shaped rankings); velocities affine in I~_{true_k}."""
    rng = np.random.default_rng(seed)
    ks = [round(v, 3) for v in np.arange(0.5, 4.01, 0.25)]
    theory, observed = {}, {}
    for c, (m, r) in enumerate([((0.9, 0.5, 0.3, 0.25, 0.6, 0.35), (0.2, 0.5, 0.9, 1.2, 0.4, 0.8)),
                                ((0.7, 0.45, 0.8, 0.2, 0.3, 0.55), (0.6, 1.1, 0.3, 1.5, 0.9, 0.5))]):
        subs = [(1,), (2,), (3,), (1, 2), (1, 3), (2, 3)]
        theory[c] = {k: {S: mi ** k * ri for S, mi, ri in zip(subs, m, r)} for k in ks}
        theory[c][ks[0]][()] = 0.0
        tr = {S: mi ** true_k * ri for S, mi, ri in zip(subs, m, r)}
        observed[c] = {S: slope * (1 + c) * v - 0.1 + noise * rng.standard_normal(10) for S, v in tr.items()}
    return theory, observed


def test_exponent_ci_checker_pass_and_fail():
    th, obs = _exponent_fixture(2.0)
    good = C.check_exponent_ci(th, obs)
    lo, hi = good.numbers["ci"]
    assert good.passed and lo <= 2.0 <= hi and hi - lo < 0.2 and good.numbers["k_hat"] == pytest.approx(2.0, abs=0.05)
    assert good.source == "proved"
    # velocities built from exponent 1 (or 3): the interval excludes 2, the claim FAILS
    for k in (1.0, 3.0):
        th, obs = _exponent_fixture(k)
        bad = C.check_exponent_ci(th, obs)
        assert not bad.passed and bad.numbers["k_hat"] == pytest.approx(k, abs=0.05)
        assert not bad.numbers["prefer_in_ci"]
    # noise so large that the measurement cannot tell 1, 2, 3 apart: FAILS though 2 is in the interval
    th, obs = _exponent_fixture(2.0, noise=0.5)
    vague = C.check_exponent_ci(th, obs)
    assert not vague.passed and not vague.numbers["neighbours_excluded"]
    # a 2x worse fit (k = 1.6, between the exponents) is resolved as not 2
    th, obs = _exponent_fixture(1.6)
    assert not C.check_exponent_ci(th, obs).passed


def test_other_prior_threshold_is_more_than_half():
    row = {"alpha": 1.0, "model": 0.75, "bayes": 0.5, "unigram": 1.0, "gih_a_end": 0.75}  # gain fraction exactly 1/2
    c = C.check_other_prior([row])
    assert not c.passed and c.numbers["frac_min"] == 0.5 and "more than half" in c.numbers["threshold_principle"]
    assert C.check_other_prior([dict(row, model=0.74, gih_a_end=0.74)]).passed
    assert c.numbers["tol"] == C.GIH_TOL and c.source == "expected"


def test_similarity_all_and_phase3_flow_match_the_model():
    """The vectorised K equals the oracle's; the quadrature flow of phase 3
    agrees with small-step GD on a (c, w fixed)."""
    from meanfield.models.induction import model as Mo
    from meanfield.models.induction.data import generate

    arch = Mo.Arch(3, 3, 3, 2)
    tok = generate(40, 3, 25, (1, 2), 0.3, (4,)).tokens
    th = Mo.init_params(arch, 3.0, 0.0, 1.0, 1.0)
    th[:arch.nS] = np.linspace(0.5, 1.5, arch.nS)
    K = C.similarity_all(th, tok, arch)
    c, w, _ = Mo.unpack(th, arch)
    for n in (0, 7, 39):
        u, _, _ = Mo.features(tok[n], w, arch)
        np.testing.assert_allclose(K[n], Mo.similarity(u, c, arch)[0], rtol=0, atol=1e-14)
    a_grid = np.linspace(1.0, 12.0, 3000)
    G = C.phase3_dloss_table(K, tok, a_grid)
    tau = np.array([0.0, 1.0, 5.0, 20.0])
    a_flow = C.phase3_flow(G, a_grid, tau)
    from meanfield.models.induction import generic as G  # the model's gradient (the engine's network)

    a, t, out, eta = 1.0, 0.0, [1.0], 2e-3
    for target in tau[1:]:
        while t < target - 1e-12:
            a -= eta * G.loss_and_grad(np.r_[th[:-1], a], tok, arch)[1][-1]
            t += eta
        out.append(a)
    np.testing.assert_allclose(a_flow, out, atol=2e-3)
    assert a_flow[-1] > a_flow[1] > 1.0


# ----------------------------------------------------------------- phase 2


def test_copier_pass_and_fail():
    run = synthetic_run(on12(0.97))
    ok = C.check_copier(run, (1, 2))
    assert ok.passed and ok.numbers["head_lags"] == [1, 2] and ok.numbers["rpe_top_after"][0] == pytest.approx(0.99)
    frozen = synthetic_run(on12(0.97), rpe_after=0.79)  # phase 2 did nothing
    assert not C.check_copier(frozen, (1, 2)).passed
    wrong_lag = synthetic_run(on12(0.97), after_lags=(1, 3, 3))  # head 2 copies a non-parent
    assert not C.check_copier(wrong_lag, (1, 2)).passed
    same_lag = synthetic_run(on12(0.97), after_lags=(1, 1, 3))  # both heads copy lag 1
    assert not C.check_copier(same_lag, (1, 2)).passed
    no2 = dict(run, stage=np.where(run["stage"] == 2, 1, run["stage"]))
    assert not C.check_copier(no2, (1, 2)).passed


# ----------------------------------------------------------------- phase 3


def test_log_growth_pass_and_fail():
    # the exact law da/dt = C e^{-a}: a = 1 + log(1 + tau / 3); its window slope in log tau is below 1, beta is 1
    good = C.check_log_growth(synthetic_run(on12(0.97), a_of_tau=lambda tau: 1 + np.log1p(tau / 3.0)), beta_se=0.02)
    assert good.passed and good.numbers["r2"] >= 0.95 and good.numbers["beta"] == pytest.approx(1.0, abs=0.02)
    assert good.numbers["slope"] < 0.95 and good.numbers["theory_in_ci"] and good.source == "proved"
    # without an uncertainty the claim cannot be decided
    assert not C.check_log_growth(synthetic_run(on12(0.97), a_of_tau=lambda tau: 1 + np.log1p(tau / 3.0))).passed
    # a = 2 log t (da/dt ~ e^{-a/2}): logarithmic, R^2 fine, slope positive -- but beta 1/2: FAILS
    twice = C.check_log_growth(synthetic_run(on12(0.97), a_of_tau=lambda tau: 1 + 2 * np.log1p(tau / 3.0)),
                               beta_se=0.05)
    assert not twice.passed and twice.numbers["r2"] > 0.95 and twice.numbers["beta"] == pytest.approx(0.5, abs=0.02)
    assert not twice.numbers["theory_in_ci"]
    # log growth that saturates at a finite optimum (the finite-L shape): da/dtau = e^{-a} - e^{-a*}
    tt = np.linspace(0, 700, 700001)
    aa = np.empty_like(tt)
    aa[0] = 1.0
    for i in range(1, tt.size):
        aa[i] = aa[i - 1] + 1e-3 * (math.exp(-aa[i - 1]) - math.exp(-5.7))
    sat = C.check_log_growth(synthetic_run(on12(0.97), a_of_tau=lambda tau: np.interp(tau, tt, aa)), beta_se=0.1)
    assert sat.passed and sat.numbers["a_end"] == pytest.approx(5.7, abs=0.2)
    # the approach to the optimum steepens the rate's decay (beta > 1): resolved as a deviation at a small se
    assert sat.numbers["beta"] > 1.05
    assert not C.check_log_growth(synthetic_run(on12(0.97), a_of_tau=lambda tau: np.interp(tau, tt, aa)),
                                  beta_se=0.01).passed
    linear = C.check_log_growth(synthetic_run(on12(0.97), a_of_tau=lambda tau: 1 + 0.01 * tau), beta_se=1.0)
    assert not linear.passed and linear.numbers["r2_linear"] > linear.numbers["r2"]
    expo = C.check_log_growth(synthetic_run(on12(0.97), a_of_tau=lambda tau: 1 + 4.6 * (1 - np.exp(-tau / 60))),
                              beta_se=1.0)
    assert not expo.passed and expo.numbers["curvature"] > 1.5
    power = C.check_log_growth(synthetic_run(on12(0.97), a_of_tau=lambda tau: 1 + np.sqrt(tau)), beta_se=1.0)
    assert not power.passed
    flat = C.check_log_growth(synthetic_run(on12(0.97), a_of_tau=lambda tau: 1.0 + 0 * tau), beta_se=1.0)
    assert not flat.passed
    run = synthetic_run(on12(0.97))
    no3 = {k: (v[run["stage"] != 3] if isinstance(v, np.ndarray) and v.shape[:1] == run["t"].shape else v)
           for k, v in run.items()}
    assert not C.check_log_growth(no3, beta_se=1.0).passed


def test_saturation_pass_and_fail():
    a_star = {50: 4.87, 100: 5.67, 200: 6.62}
    assert C.check_saturation(5.65, 5.67, a_star).passed
    assert not C.check_saturation(3.0, 5.67, a_star).passed                 # stopped while still growing
    assert not C.check_saturation(5.65, 5.67, {50: 4.9, 100: 5.67, 200: 5.1}).passed  # not increasing in L
    assert not C.check_saturation(49.99, 50.0, {50: 50.0, 100: 50.0}).passed  # no finite optimum
    c = C.check_saturation(5.65, 5.67, a_star)
    assert c.numbers["slope_a_star_vs_log_L"] > 0 and c.numbers["L"] == [50, 100, 200]


def test_gih_and_generalisation_checkers_pass_and_fail():
    base = {"gih_best": 0.2265, "gih_a_end": 0.2265, "bayes": 0.2223, "unigram": 0.698, "gih_inf": 6.0}
    assert C.check_gih(0.228, 0.585, base).passed
    assert not C.check_gih(0.585, 0.585, base).passed        # never trained
    assert not C.check_gih(0.30, 0.585, base).passed         # stuck far from the GIH
    rows = [{"L": 200, "model": 0.209, "bayes": 0.206, "unigram": 0.705},
            {"L": 400, "model": 0.176, "bayes": 0.171, "unigram": 0.685}]
    assert C.check_longer_contexts(rows, 0.228).passed
    lost = [dict(rows[0]), dict(rows[1], model=0.6)]
    assert not C.check_longer_contexts(lost, 0.228).passed
    rises = [dict(rows[0], model=0.26, bayes=0.2, unigram=0.7)]
    assert not C.check_longer_contexts(rises, 0.228).passed
    assert not C.check_longer_contexts([], 0.228).passed
    pri = [{"alpha": 1.0, "model": 0.945, "bayes": 0.897, "unigram": 1.06, "gih_a_end": 0.95}]
    assert C.check_other_prior(pri).passed
    assert not C.check_other_prior([dict(pri[0], model=1.05)]).passed
    assert not C.check_other_prior([dict(pri[0], gih_a_end=0.9)]).passed
    assert C.gain_fraction(0.5, 0.5, 1.0) == 1.0 and math.isnan(C.gain_fraction(0.5, 1.0, 1.0))


def test_fit_log_growth_window():
    tau = np.r_[0.0, np.geomspace(0.1, 1e4, 400)]
    a = 1 + np.log1p(tau)
    f = C.fit_log_growth(tau, a)
    assert f["r2"] > 0.99 and f["slope"] == pytest.approx(1.0, abs=0.05)
    assert a[f["window"][0]] >= 1 + 0.1 * (a[-1] - 1) and a[f["window"][-1]] < 1 + 0.91 * (a[-1] - 1)
    assert math.isnan(C.fit_log_growth(tau, 0 * tau + 1)["r2"])


# ----------------------------------------------------------------- the suite, plots and verbs

TINY_BASE = {"L": 30}
TINY = {"n_train": 300, "n_test": 200, "phase_steps": (60, 40, 300), "phase_etas": (2.0, 10.0, 0.5),
        "record_every": 10, "record_log3": 40, "n_kernels": 200, "L_sat": (20, 30), "L_mult": (2,),
        "alphas": (1.0,), "clean_w_plus": 8.0, "grad_batches": 3, "grad_batch": 300, "exponents": (1.0, 2.0),
        "exponent_pas": ((1, 2), (1,)), "k_grid": (0.5, 3.5, 0.5), "exp_batches": 3, "exp_batch": 200, "exponent_a": 0.01,
        "boot_B": 10}


@pytest.fixture(scope="module")
def tiny_check(tmp_path_factory):
    from meanfield.models.induction import run as R

    def refuse(*a, **k):
        raise AssertionError("the suite trained with run.run, not through the description (description_run)")

    out = tmp_path_factory.mktemp("check")
    with pytest.MonkeyPatch.context() as mp:  # its training runs are the description's (description_run)
        mp.setattr(R, "run", refuse)
        claims, report = CS.check_suite(out, quick=True, log=lambda *a: None, base=TINY_BASE, settings=TINY)
    return out, claims


def test_suite_writes_the_report_schema(tiny_check):
    out, claims = tiny_check
    rep = json.loads((out / "report.json").read_text())
    names = [c["name"] for c in rep["claims"]]
    assert names == ["phase1_selects_S_star", "chi2_exponent", "chi2_exponent_default_init", "phase2_copier",
                     "phase3_a_log_t", "a_saturates_finite_L", "model_approaches_gih", "generalises_longer_L",
                     "generalises_other_prior"]
    sources = {c["name"]: c["source"] for c in rep["claims"]}
    assert sources["chi2_exponent"] == "proved" and sources["generalises_other_prior"] == "expected"
    assert rep["gating_pass"] == all(c["status"] == "PASS" for c in rep["claims"] if c["source"] != "expected")
    for c in rep["claims"]:
        assert set(c) == {"name", "status", "statement", "setting", "numbers", "figure", "source"}
        assert c["status"] in ("PASS", "FAIL")
        if c["figure"]:
            assert (out / c["figure"]).exists()
    assert rep["all_pass"] == all(c["status"] == "PASS" for c in rep["claims"])
    s = rep["summary"]
    assert s["S_star"] == [1, 2] and 0 <= s["c_mass_on_S_star"] <= 1 and "r2" in s
    assert rep["claims"][0]["numbers"]["S_star"] == [1, 2]
    assert "r2" in rep["claims"][4]["numbers"] and "slope_se" in rep["claims"][4]["numbers"]
    assert (out / "report.md").read_text().startswith("# meanfield induction check")
    from meanfield.core.io import read_run

    run = read_run(out / "run.h5")
    assert run.attrs["system"] == "induction"
    # log-spaced records in phase 3 (from its start), every 10 steps before
    st = run["step"][run["stage"] == 3] - 100
    assert st[0] == 1 and len(st) >= 20 and np.all(np.diff(run["step"]) > 0)


def test_plot_run_and_verbs(tiny_check, tmp_path, capsys, monkeypatch):
    out, _ = tiny_check
    files = P.plot_run(out / "run.h5", tmp_path / "figs")
    assert [f.name for f in files] == list(P.FIGURES) and all(f.stat().st_size > 0 for f in files)
    assert main(["induction", "plot", str(out / "run.h5"), "--out", str(tmp_path / "f2")]) == 0
    assert (tmp_path / "f2" / "a_log_t.png").exists()
    assert main(["induction", "plot", str(tmp_path / "missing.h5")]) == 2
    assert main(["induction", "chi2", "--alpha", "0.1", "--n-kernels", "300", "--exponent", "1,2",
                 "--json", str(tmp_path / "chi.json")]) == 0
    text = capsys.readouterr().out
    assert "S* = {1,2}" in text and "exponent k = 1" in text
    js = json.loads((tmp_path / "chi.json").read_text())
    assert js["exponents"]["2.0"]["S_star"] == [1, 2] and js["lags"] == [1, 2, 3]
    assert main(["induction", "chi2", "--lags", "1,4", "--D", "1", "--n-kernels", "50"]) == 0
    assert "{4}" in capsys.readouterr().out
    assert main(["induction", "chi2", "--n-kernels", "1"]) == 2
    # check: exit code is 0 iff every claim passes (tiny settings through the verb)
    monkeypatch.setitem(CS.SETTINGS, "quick", TINY)
    monkeypatch.setattr(CS, "BASE", dict(CS.BASE, **TINY_BASE))
    rc = main(["induction", "check", "--quick", "--quiet", "--out", str(tmp_path / "chk")])
    rep = json.loads((tmp_path / "chk" / "report.json").read_text())
    assert rc == (0 if rep["gating_pass"] else 1)


def test_exponent_study_on_a_real_simulation():
    """The phase-1 velocity of the actual model (clean copiers, 4000 trigram
    sequences, alpha = 0.1) is best predicted by I~ with exponent 2."""
    from meanfield.models.induction import theory as T
    from meanfield.models.induction.config import make_config

    cfg = make_config({"alpha": 0.1, "n_train": 10, "n_test": 0})
    vel = CS.phase1_velocity(cfg, 8.0, 4, 1000)
    chi = T.chi2_table(3, (1, 2), 0.1, (1, 2, 3), 2, n_kernels=1500, seed=1, exponents=(1, 2, 3))
    th = {k: {S: chi.values[k][:, i] for i, S in enumerate(chi.subsets)} for k in chi.exponents}
    c = C.check_exponent(th, vel)
    assert c.passed and c.numbers["best_exponent"] == 2.0
    assert c.numbers["r2"]["2.0"] > c.numbers["r2"]["1.0"] + 0.05 > c.numbers["r2"]["3.0"]


def test_the_suites_runs_come_from_the_description_and_equal_the_numpy_oracle():
    """check_suite trains through the induction description (the engine's generic two-layer path):
    description_run on the suite's record grid (three phases with their own step sizes) against the induction
    model's plain-numpy oracle running the same GD by hand, every record to 1e-12."""
    from meanfield.models.induction import run as R
    from meanfield.models.induction.config import make_config
    from meanfield.models.induction.model import loss_and_grad

    vals = dict(CS.BASE, L=12, n_train=20, n_test=10, stage_steps=(6, 5, 9), stage_etas=(2.0, 10.0, 0.5))
    cfg = make_config(vals)
    grid = R.phase_log_grid(cfg, 2, 5)
    gen = CS.description_run(vals, saveat=grid)
    pb = R.Problem.build(cfg)
    arch = cfg.arch()
    th, states = pb.theta0.copy(), {0: pb.theta0.copy()}
    groups = [slice(0, arch.nS), slice(arch.nS, arch.nS + arch.H * arch.M), slice(arch.n_params - 1, None)]
    step = 0
    for k, (n, eta) in enumerate(zip(cfg.stage_steps, cfg.stage_etas)):
        mask = np.zeros(arch.n_params)
        mask[groups[k]] = 1.0
        for _ in range(n):
            th = th - eta * mask * loss_and_grad(th, pb.train.tokens, arch)[1]
            step += 1
            states[step] = th.copy()
    assert gen.status == "complete" and gen.step[-1] == sum(cfg.stage_steps)
    ref = np.array([states[s] for s in gen.step])
    assert np.max(np.abs(np.asarray(gen.y) - ref)) <= 1e-12 * max(1.0, np.abs(ref).max())
    assert np.abs(ref[-1] - ref[0]).max() > 1e-3  # the phases moved every block


def test_the_claims_measure_on_the_generic_network():
    """meanfield.models.induction.generic (the engine's two-layer network) against the induction model's own
    plain-numpy oracle (meanfield.models.induction.model): loss and gradient to 1e-12 on sequences with and
    without the target in the context (the log(0) guard), per-sequence losses, and the claims' measurements
    (model_losses, best_a) built on them."""
    from meanfield.models.induction import claims as C
    from meanfield.models.induction import generic as G
    from meanfield.models.induction import model

    arch = model.Arch(d=3, H=3, M=3, D=2)
    rng = np.random.default_rng(4)
    tok = rng.integers(0, 3, size=(300, 9))  # L = 8: some targets never occur in the context (clipped)
    th = model.init_params(arch, 2.0, 0.0, 1.0, 3.0) + rng.normal(0, 0.3, arch.n_params)
    lm, gm = model.loss_and_grad(th, tok, arch)
    lg, gg = G.loss_and_grad(th, tok, arch)
    assert abs(lm - lg) <= 1e-12 * max(1, abs(lm)) and np.abs(gm - gg).max() <= 1e-12
    seen = (tok[:, :8] == tok[:, 8:9]).any(axis=1)
    assert (~seen).any()  # the guard is exercised
    per = G.losses_by_sequence(th, tok, arch)
    assert abs(per.mean() - lm) <= 1e-12 * max(1, abs(lm))
    m = C.model_losses(th, tok, arch)
    a = C.best_a(th, tok, arch)
    assert m["loss"] == pytest.approx(lm, rel=1e-12) and m["n_seen"] == int(seen.sum())
    assert m["loss_seen"] == pytest.approx(model.loss_and_grad(th, tok[seen], arch)[0], rel=1e-12)
    th_a = th.copy()

    def at(aa):  # the generic loss, equal to the oracle's (asserted above)
        th_a[-1] = aa
        return G.loss(th_a, tok, arch)

    # best_a: no worse than a grid, up to its a-tolerance (xatol 1e-5) times the slope there
    grid = min(at(aa) for aa in np.linspace(0.0, 50.0, 501))
    lo, hi = max(0.0, a - 1e-4), a + 1e-4
    slope = abs(at(hi) - at(lo)) / (hi - lo)
    assert 0.0 <= a <= 50.0 and at(a) <= grid + 1e-5 * slope + 1e-12
