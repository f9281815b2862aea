"""The induction paper's ``check`` suite: runs the settings, applies the checkers of :mod:`.claims`, writes the reports.

:func:`check_suite` (``meanfield induction check``) trains the settings of
:data:`SETTINGS` (``quick`` or ``full``, on top of :data:`BASE`), measures
what each claim needs and calls the checkers of
:mod:`meanfield.models.induction.claims` (the claims and their sources are
listed there); it writes ``report.json`` (the schema of
``meanfield.core.report``), ``report.md`` and the figures, and returns
(claims, path of report.md).

Example
-------
>>> from meanfield.models.induction.suite import SETTINGS
>>> sorted(SETTINGS)
['full', 'quick']
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from ...core.report import Claim
from ...core.report import jfloat as _f
from .claims import (baseline_losses, best_a, check_copier, check_exponent_ci, check_gih, check_log_growth,
                     check_longer_contexts, check_other_prior, check_parent_selection, check_saturation,
                     log_slope_bootstrap, model_losses, ranking_agreement)
from .measure import fit_log_growth, lag_weights, phase3_series, phase_start_index
from .model import subset_label


BASE = {"d": 3, "pa": (1, 2), "H": 3, "M": 3, "D": 2, "L": 100, "alpha": 0.1, "seed": 0}

SETTINGS = {
    # phase 3 at eta 0.5 from a_init = 1 for t = 600: the growth window is tau ~ 3 .. 170
    "quick": {"n_train": 3000, "n_test": 2000, "phase_steps": (200, 200, 1200), "phase_etas": (2.0, 10.0, 0.5),
              "record_every": 10, "record_log3": 150, "n_kernels": 4000, "L_sat": (50, 100, 200),
              "L_mult": (2, 4), "alphas": (1.0,), "clean_w_plus": 8.0, "grad_batches": 10, "grad_batch": 2000,
              "exponents": (1.0, 1.5, 2.0, 2.5, 3.0), "exponent_pas": ((1, 2), (1, 3), (2, 3), (1,), (2,), (3,)),
              "exponent_a": 0.01, "k_grid": (0.5, 4.0, 0.1), "exp_batches": 10, "exp_batch": 1000, "boot_B": 200},
    "full": {"n_train": 10000, "n_test": 5000, "phase_steps": (300, 300, 4000), "phase_etas": (2.0, 10.0, 0.25),
             "record_every": 10, "record_log3": 300, "n_kernels": 20000, "L_sat": (25, 50, 100, 200, 400),
             "L_mult": (2, 4, 8), "alphas": (0.03, 0.3, 1.0), "clean_w_plus": 8.0, "grad_batches": 20,
             "grad_batch": 5000, "exponents": (1.0, 1.5, 2.0, 2.5, 3.0),
             "exponent_pas": ((1, 2), (1, 3), (2, 3), (1,), (2,), (3,)), "exponent_a": 0.01,
             "k_grid": (0.5, 4.0, 0.05), "exp_batches": 20, "exp_batch": 5000, "boot_B": 400},
}


def _seq_seed(cfg, *tail) -> tuple[int, ...]:
    return (int(cfg.seed),) + tuple(int(v) for v in tail)


def check_suite(out: Path, quick: bool = False, log=print, base: dict | None = None,
                settings: dict | None = None) -> tuple[list[Claim], Path]:
    """Run every claim and write ``run.h5`` (the main run), ``report.md``,
    ``report.json`` and figures into ``out``. ``base`` / ``settings`` override
    :data:`BASE` / :data:`SETTINGS` entries (tests use small ones)."""
    from ...core.io import read_run
    from . import plot as P
    from . import run as R
    from . import theory as T
    from .config import make_config
    from .data import generate

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    S = dict(SETTINGS["quick" if quick else "full"], **(settings or {}))
    B = dict(BASE, **(base or {}))
    t0 = time.perf_counter()
    claims: list[Claim] = []

    def tick(msg):
        log(f"[check {time.perf_counter() - t0:6.1f} s] {msg}")

    cfg = make_config(B, n_train=S["n_train"], n_test=S["n_test"], stage_steps=S["phase_steps"],
                      stage_etas=S["phase_etas"])
    arch = cfg.arch()
    setting = {k: (list(v) if isinstance(v, tuple) else v) for k, v in B.items()}
    setting.update(n_train=cfg.n_train, n_test=cfg.n_test, phase_steps=list(cfg.phase_steps),
                   phase_etas=list(cfg.phase_etas), w_plus=cfg.w_plus, c_init=cfg.c_init, a_init=cfg.a_init,
                   method=cfg.method, sampling=cfg.sampling,
                   trained_by="the induction description (meanfield model run induction, generic two-layer path)")

    # theory: chi-square MI ranking over the lags the heads can copy
    lags = T.candidate_lags(cfg.M, cfg.first_lags)
    tick(f"chi-square MI over {S['n_kernels']} kernels, lags {list(lags)}, |S| <= {cfg.D} ...")
    chi = T.chi2_table(cfg.d, cfg.pa, cfg.alpha, lags, cfg.D, S["n_kernels"], _seq_seed(cfg, 6), S["exponents"])
    S_star = chi.S_star(2.0)
    ranking = chi.ranking(2.0)

    # the main run
    tick("main run (three phases, GD) ...")
    pb = R.Problem.build(cfg)
    grid = R.phase_log_grid(cfg, S["record_every"], S["record_log3"])
    traj = description_run(dict(B, n_train=S["n_train"], n_test=S["n_test"], stage_steps=S["phase_steps"],
                                stage_etas=S["phase_etas"]), saveat=grid)
    run_path = R.save(out / "run.h5", cfg, traj, pb)
    run = read_run(run_path)
    if traj.status != "complete":
        tick(f"main run ended {traj.status}: {traj.message}")

    c = check_parent_selection(run, S_star, ranking)
    c.numbers["chi2"] = {"I2": {subset_label_lags(Sx): _f(v) for Sx, v in zip(chi.subsets, chi.mean[2.0])},
                         "se": {subset_label_lags(Sx): _f(v) for Sx, v in zip(chi.subsets, chi.se[2.0])},
                         "gap_in_se": _f(chi.gap_in_se(2.0)), "n_kernels": chi.n_kernels,
                         "n_reducible": chi.n_reducible, "candidate_lags": list(lags)}
    c.setting = dict(setting)
    c.figure = P.plot_c_mass(run, out)
    claims.append(c)

    # the exponent study: the phase-1 velocity at init against I~_k, pooled over parent sets, k with a CI
    pas = [tuple(p) for p in S["exponent_pas"]]
    kgrid = np.round(np.arange(S["k_grid"][0], S["k_grid"][1] + 1e-9, S["k_grid"][2]), 6)
    tick(f"exponent study: I~_k for {len(kgrid)} exponents and parent sets {pas}; phase-1 velocities at "
         f"a = {S['exponent_a']:g} and a = {cfg.a_init:g}, RPE init w_plus = {S['clean_w_plus']:g} (clean) and "
         f"{cfg.w_plus:g} (default), {S['exp_batches']} x {S['exp_batch']} sequences each ...")
    th_by_pa, vel = {}, {}
    for j, pa in enumerate(pas):
        ct = T.chi2_table(cfg.d, pa, cfg.alpha, lags, cfg.D, S["n_kernels"], _seq_seed(cfg, 6, j), tuple(kgrid))
        th_by_pa[pa] = {float(k): {Sx: ct.values[k][:, i] for i, Sx in enumerate(ct.subsets)} for k in ct.exponents}
        pcfg = make_config(B, pa=pa, n_train=1, n_test=0)
        for wp in (S["clean_w_plus"], cfg.w_plus):
            for a0 in (S["exponent_a"], cfg.a_init):
                vel[(wp, a0, pa)] = phase1_velocity(pcfg, wp, S["exp_batches"], S["exp_batch"], a_init=a0)

    def _exp_claim(wp, name, source):
        obs = {pa: vel[(wp, S["exponent_a"], pa)] for pa in pas}
        at_a = check_exponent_ci(th_by_pa, {pa: vel[(wp, cfg.a_init, pa)] for pa in pas})
        c = check_exponent_ci(th_by_pa, obs, 2.0, name=name, source=source,
                              extra={"w_plus": wp, "a": S["exponent_a"],
                                     f"k_hat_at_a_{cfg.a_init:g}": at_a.numbers["k_hat"],
                                     f"ci_at_a_{cfg.a_init:g}": at_a.numbers["ci"],
                                     "parent_sets": [list(p) for p in pas],
                                     "note": "velocity -dL/dc_S at initialisation (every c_S equal), by lag set, "
                                             f"at a = {S['exponent_a']:g}: I~ is the coefficient of the term of "
                                             "first order in a; the fit at the run's a_init is reported next to it"})
        c.setting = dict(setting, w_plus=wp, a_init=S["exponent_a"], parent_sets=[list(p) for p in pas],
                         velocity_sequences=S["exp_batches"] * S["exp_batch"], n_kernels=S["n_kernels"],
                         k_grid=list(S["k_grid"]))
        return c

    c_clean = _exp_claim(S["clean_w_plus"], "chi2_exponent", "proved")
    c_dflt = _exp_claim(cfg.w_plus, "chi2_exponent_default_init", "expected")
    cvals = dict(B, n_train=S["n_train"], n_test=0, w_plus=S["clean_w_plus"],
                 stage_steps=(cfg.stage_steps[0], 0, 0), stage_etas=cfg.stage_etas)
    ccfg = make_config(cvals)
    crun = run_like(description_run(cvals), ccfg)
    end_w = lag_weights(crun, len(crun["t"]) - 1)
    theory_map = {k: {Sx: chi.values[k][:, i] for i, Sx in enumerate(chi.subsets)} for k in chi.exponents}
    c_clean.numbers.update({
        "phase1_end_kendall_tau_resolved": {str(k): _f(ranking_agreement(theory_map[k], end_w)["tau"])
                                            for k in chi.exponents},
        "phase1_end_ranking": [list(Sx) for Sx in sorted(end_w, key=lambda Sx: -end_w[Sx])]})
    fig = P.plot_exponent_profile({f"clean (w_plus {S['clean_w_plus']:g})": c_clean.numbers,
                                   f"default (w_plus {cfg.w_plus:g})": c_dflt.numbers}, out)
    c_clean.figure = c_dflt.figure = fig
    c_clean.numbers["figure_ranking"] = P.plot_chi2(chi, vel[(S["clean_w_plus"], S["exponent_a"], tuple(cfg.pa))],
                                                    out, end_w)
    claims += [c_clean, c_dflt]

    c = check_copier(run, S_star, parents=cfg.pa)
    c.setting = dict(setting)
    c.figure = P.plot_rpe(run, out)
    claims.append(c)

    tick(f"phase 3: growth-window slope, bootstrap over the training set ({S['boot_B']} resamples) ...")
    ser = phase3_series(run)
    boot = None
    if ser is not None:
        i3 = phase_start_index(run, 3)
        fw = fit_log_growth(ser[0], ser[1])
        aw = (ser[1][fw["window"][0]], ser[1][fw["window"][-1]]) if fw["n_points"] else (ser[1][0], ser[1][-1])
        boot = log_slope_bootstrap(np.asarray(run["theta"])[i3], pb.train.tokens, arch, ser[0], aw, B=S["boot_B"],
                                   seed=_seq_seed(cfg, 8))
    c = check_log_growth(run, beta_se=None if boot is None else boot["beta_se"], extra=None if boot is None else {
        "beta_flow": _f(boot["beta_flow"]), "beta_bootstrap_percentiles": boot["beta_percentiles"],
        "slope_flow": _f(boot["slope_flow"]), "slope_se": _f(boot["slope_se"]),
        "slope_bootstrap_percentiles": boot["slope_percentiles"], "bootstrap_B": boot["B"],
        "max_abs_a_flow_minus_gd": _f(float(np.max(np.abs(boot["a_flow"] - ser[1])))),
        "note": "beta: da/dt ~ e^{-beta a} over the growth window (theory 1: a = log t + const); beta_se and "
                "slope_se: standard deviations over bootstrap resamples of the training sequences, phase 3 "
                "re-integrated as the gradient flow in a (c, w fixed)"})
    c.setting = dict(setting, records_phase3=f"{S['record_log3']} log-spaced GD steps")
    claims.append(c)
    logfit = c.numbers

    # saturation: the minimiser of the training loss in a, per L
    theta_end = np.asarray(run["theta"])[-1]
    a_end = float(theta_end[-1])
    tick(f"saturation: a*(L) for L in {list(S['L_sat'])} ...")
    a_star_train = best_a(theta_end, pb.train.tokens, arch, yhat_floor=cfg.yhat_floor)
    a_star, a_gih = {}, {}
    for L in S["L_sat"]:
        tok = pb.train.tokens if L == cfg.L else generate(cfg.n_train, cfg.d, L, cfg.pa, cfg.alpha,
                                                          _seq_seed(cfg, 4, L)).tokens
        a_star[int(L)] = best_a(theta_end, tok, arch, yhat_floor=cfg.yhat_floor)
        a_gih[int(L)] = T.gih_best_a(tok, cfg.d, S_star, yhat_floor=cfg.yhat_floor)
    c = check_saturation(a_end, a_star_train, a_star, extra={"gih_best_a": {str(k): v for k, v in a_gih.items()},
                                                             "note": "a*(L) on n_train sequences of length L "
                                                                     "(the training set itself at the training L)"})
    c.setting = dict(setting)
    c.figure = P.plot_a(run, out, fit=logfit, a_star=a_star)
    claims[-1].figure = c.figure
    claims.append(c)

    # the model against the baselines on the held-out set
    tick("baselines: GIH, Bayes, unigram on held-out sequences ...")
    test_tok = pb.test.tokens
    a_gih_train = T.gih_best_a(pb.train.tokens, cfg.d, S_star, yhat_floor=cfg.yhat_floor)
    base_l = baseline_losses(test_tok, cfg.d, S_star, cfg.pa, cfg.alpha, a_end, a_gih_train, cfg.yhat_floor)
    m_end = model_losses(theta_end, test_tok, arch, cfg.yhat_floor)
    m_0 = model_losses(pb.theta0, test_tok, arch, cfg.yhat_floor)
    c = check_gih(m_end["loss_seen"], m_0["loss_seen"], base_l,
                  extra={"a_end": a_end, "a_gih_best": a_gih_train, "n_test": m_end["N"], "n_seen": m_end["n_seen"],
                         "model_loss_all_guarded": m_end["loss"], "n_clipped": m_end["n_clipped"],
                         "note": "losses on held-out sequences whose target occurs in the context; gih_best uses "
                                 "the a minimising the GIH's training loss; gih_inf is the a -> infinity limit"})
    c.setting = dict(setting)
    c.figure = P.plot_losses(run, out, baselines={"GIH (best a)": base_l["gih_best"], "Bayes": base_l["bayes"],
                                                   "unigram": base_l["unigram"]})
    claims.append(c)

    # generalisation: longer contexts, other priors
    tick(f"generalisation: L in {[m * cfg.L for m in S['L_mult']]}, alpha in {list(S['alphas'])} ...")
    rows = []
    for m in S["L_mult"]:
        Lg = int(m * cfg.L)
        # the held-out seed: these sequences extend the held-out ones (same kernels), a paired comparison
        tok = generate(cfg.n_test, cfg.d, Lg, cfg.pa, cfg.alpha, R.test_seed(cfg)).tokens
        bl = baseline_losses(tok, cfg.d, S_star, cfg.pa, cfg.alpha, a_end, None, cfg.yhat_floor)
        ml = model_losses(theta_end, tok, arch, cfg.yhat_floor)
        rows.append({"L": Lg, "model": ml["loss_seen"], "bayes": bl["bayes"], "unigram": bl["unigram"],
                     "gih_a_end": bl["gih_a_end"], "n_seen": ml["n_seen"]})
    c = check_longer_contexts(rows, m_end["loss_seen"])
    c.numbers["L_train"] = cfg.L
    c.setting = dict(setting)
    rows_a = []
    for k, al in enumerate(S["alphas"]):
        tok = generate(cfg.n_test, cfg.d, cfg.L, cfg.pa, al, _seq_seed(cfg, 5, k)).tokens
        bl = baseline_losses(tok, cfg.d, S_star, cfg.pa, al, a_end, None, cfg.yhat_floor)
        ml = model_losses(theta_end, tok, arch, cfg.yhat_floor)
        rows_a.append({"alpha": float(al), "model": ml["loss_seen"], "bayes": bl["bayes"], "unigram": bl["unigram"],
                       "gih_a_end": bl["gih_a_end"], "n_seen": ml["n_seen"]})
    c2 = check_other_prior(rows_a)
    c2.numbers["alpha_train"] = cfg.alpha
    c2.setting = dict(setting)
    fig = P.plot_generalisation(rows, rows_a, cfg.L, cfg.alpha, m_end["loss_seen"], base_l, out)
    c.figure = c2.figure = fig
    claims += [c, c2]

    elapsed = time.perf_counter() - t0
    summary = {"S_star": list(S_star), "c_mass_on_S_star": claims[0].numbers["c_mass_on_S_star"],
               "r2": logfit.get("r2"), "slope": logfit.get("slope"), "a_end": a_end, "a_star_train": a_star_train,
               "a_star_by_L": {str(k): v for k, v in a_star.items()},
               "test_loss_seen": {"model": m_end["loss_seen"], **base_l}}
    from ...core.report import gating

    report = {"claims": [asdict(c) for c in claims], "quick": quick, "elapsed_s": elapsed,
              "all_pass": all(c.passed for c in claims), "gating_pass": all(c.passed for c in gating(claims)),
              "summary": summary, "run_file": run_path.name}
    (out / "report.json").write_text(json.dumps(report, indent=2, default=_json_default))
    (out / "report.md").write_text(_markdown(claims, quick, elapsed, summary))
    tick(f"{sum(c.passed for c in claims)}/{len(claims)} claims pass; report: {out / 'report.md'}")
    return claims, out / "report.md"


def phase1_velocity(cfg, w_plus: float, batches: int, batch: int, a_init: float | None = None) -> dict:
    """{lag set: (batches,) array} of the phase-1 velocity -dL/dc_S at the
    initial state of ``cfg`` with RPE init ``w_plus`` (every c_S equal, a =
    ``a_init``, default cfg.a_init), one value per batch of ``batch`` fresh
    sequences (seed (seed, 7, b)); head subsets are mapped to lag sets by the
    start lags."""
    from .data import generate
    from .generic import loss_and_grad
    from .model import init_params

    arch = cfg.arch()
    th0 = init_params(arch, w_plus, cfg.w_minus, cfg.c_init, cfg.a_init if a_init is None else a_init,
                      cfg.start_lags)
    V = np.empty((batches, arch.nS))
    for b in range(batches):
        tok = generate(batch, cfg.d, cfg.L, cfg.pa, cfg.alpha, _seq_seed(cfg, 7, b)).tokens
        V[b] = -loss_and_grad(th0, tok, arch, cfg.yhat_floor)[1][: arch.nS]  # the engine's generic network
    out: dict = {}
    for i, S in enumerate(arch.subsets):
        key = tuple(sorted({cfg.start_lags[h] for h in S}))
        out[key] = out[key] + V[:, i] if key in out else V[:, i].copy()
    return out


def subset_label_lags(S) -> str:
    """Display name of a lag set: (1, 2) -> "{1,2}"."""
    return "{" + ",".join(str(int(s)) for s in S) + "}"


def description_run(values: dict, saveat=None):
    """Train the induction system as its two-layer description: :func:`meanfield.models.induction.run.generic_run`
    (the engine's generic two-layer path) on the config of ``values`` (the fields of ``InductionConfig``).

    Example
    -------
    >>> tr = description_run({"d": 2, "L": 6, "n_train": 5, "n_test": 0, "H": 1, "M": 1, "D": 1,
    ...                       "stage_steps": "2,2,2"})
    >>> tr.status, tr.step[-1], len(tr.y[-1])     # c (2 subsets), w (1 x 1), a
    ('complete', 6, 4)
    """
    from .config import make_config
    from .run import generic_run

    return generic_run(make_config(dict(values)), saveat)


def run_like(traj, cfg) -> dict:
    """A run-like dict (the checkers' datasets) from a trajectory, without losses."""
    from .model import rpe_softmax, unpack

    arch = cfg.arch()
    arr = traj.arrays()
    c, w, a = unpack(arr["y"], arch)
    c2 = c * c
    return {"t": arr["t"], "stage": arr["stage"], "theta": arr["y"], "c_weight": c2 / c2.sum(axis=-1, keepdims=True),
            "rpe": rpe_softmax(w), "a": a, "subsets": [subset_label(S) for S in arch.subsets],
            "subset_members": arch.members, "lags": arch.lags, "attrs": {"stage_ends": traj.stage_ends}}


def _json_default(o):
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, tuple):
        return list(o)
    return str(o)


def _fmt(v):
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_fmt(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)) and len(v) > 8:
        return "[" + ", ".join(_fmt(x) for x in v[:8]) + ", ...]"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return str(v)


def _markdown(claims, quick, elapsed, summary) -> str:
    n = sum(c.passed for c in claims)
    gate = [c for c in claims if c.source != "expected"]
    lines = [f"# meanfield induction check{' (quick)' if quick else ''}", "",
             f"{n} of {len(claims)} claims pass ({elapsed:.1f} s); the paper's (proved / shown, the exit code "
             f"depends on these): {sum(c.passed for c in gate)} of {len(gate)}; beyond the paper (expected, "
             f"reported): {sum(c.passed for c in claims if c.source == 'expected')} of "
             f"{sum(c.source == 'expected' for c in claims)}. Claims as in `docs/conventions.md` (seed 002); "
             "checkers in `meanfield/models/induction/claims.py`.", "",
             f"S* = {summary['S_star']}, c-mass on S* = {summary['c_mass_on_S_star']:.4f}, "
             f"a(t) ~ log t fit: slope {_fmt(summary['slope'])}, R^2 {_fmt(summary['r2'])}; "
             f"a_end = {summary['a_end']:.4g}, a*(L) = {_fmt(summary['a_star_by_L'])}.", "",
             "Held-out loss (targets seen in the context): "
             + ", ".join(f"{k} {v:.4f}" for k, v in summary["test_loss_seen"].items() if v is not None) + ".", "",
             "| claim | source | status |", "|---|---|---|"]
    lines += [f"| {c.statement} | {c.source} | **{c.status}** |" for c in gate]
    lines += [f"| {c.statement} | {c.source} | **{c.status}** |" for c in claims if c.source == "expected"]
    for c in claims:
        lines += ["", f"## {c.name}: {c.status} ({c.source})", "", c.statement + ".", "",
                  "Setting: " + ", ".join(f"{k}={_fmt(v)}" for k, v in c.setting.items()), "",
                  "| number | value |", "|---|---|"]
        for k, v in c.numbers.items():
            if k == "rows":
                for r in v:
                    lines.append(f"| row | {_fmt(r)} |")
            else:
                lines.append(f"| {k} | {_fmt(v)} |")
        if c.figure:
            lines += ["", f"![{c.name}]({c.figure})"]
    return "\n".join(lines) + "\n"
