"""Edelman et al. (NeurIPS 2024) on the engine: the reference levels against
independent computations, the claims check (quick) and a claim that can fail.

References used here are independent of ``meanfield.models.edelman.theory``:
the engine's Gamma-function law with its own posterior mean
(``meanfield.engine.twolayer``), and Monte Carlo over the Dirichlet prior with a
5-standard-error bound.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from meanfield.engine.twolayer import markov_law, posterior_mean
from meanfield.models.edelman import claims, theory

ROOT = Path(__file__).resolve().parents[1]
TOML = ROOT / "meanfield" / "models" / "edelman.toml"


@pytest.mark.parametrize("d,L,alpha", [(2, 5, 1.0), (3, 4, 0.5), (2, 6, 2.0)])
def test_urn_law_and_bigram_level_equal_the_engine_law(d, L, alpha):
    X, p = theory.urn_law(d, L, alpha)
    law = markov_law(d, L, (1,), alpha)
    assert (law.tokens == X).all()
    np.testing.assert_allclose(p, law.prob, rtol=1e-12, atol=0)
    q = theory.strategies(X, p, d, alpha)
    pm = posterior_mean(X[:, :L], d, (1,), alpha)
    np.testing.assert_allclose(q["bigram"], pm, rtol=1e-12)
    lv = theory.levels(d, L, alpha)
    assert lv["uniform"] == pytest.approx(np.log(d), rel=1e-12)
    assert lv["uniform"] > lv["unigram"] > lv["bigram"]


def test_unigram_posterior_by_monte_carlo():
    """P(x_(L+1) = e | unigram counts) against sequences drawn from the prior (5 standard errors)."""
    d, L, alpha, n = 2, 4, 1.0, 200_000
    rng = np.random.default_rng(3)
    pi = rng.dirichlet(alpha * np.ones(d), size=(n, d))
    x = np.empty((n, L + 1), dtype=np.int64)
    x[:, 0] = rng.integers(0, d, n)
    for t in range(1, L + 1):
        u = rng.random(n)
        x[:, t] = (u[:, None] > np.cumsum(pi[np.arange(n), x[:, t - 1]], 1)).sum(1)
    X, p = theory.urn_law(d, L, alpha)
    q = theory.strategies(X, p, d, alpha)["unigram"]
    c_mc = (x[:, :L] == 1).sum(1)
    c_ex = (X[:, :L] == 1).sum(1)
    for c in range(L + 1):
        m = c_mc == c
        f = float((x[m, L] == 1).mean())
        se = np.sqrt(f * (1 - f) / m.sum())
        assert abs(f - q[c_ex == c][0, 1]) < 5 * se + 1e-12, (c, f, q[c_ex == c][0, 1], se)


def test_quick_check_from_the_command_line(tmp_path):
    out = tmp_path / "chk"
    r = subprocess.run([sys.executable, "-m", "meanfield", "model", "check", "edelman", "--quick", "--out", str(out)],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    rep = json.loads((out / "report.json").read_text())
    by = {c["name"]: c for c in rep["claims"]}
    assert set(by) == {"stages_uniform_unigram_bigram", "plateau_levels", "levels_exact_and_bayes_floor",
                       "unigram_delays_bigram"}
    assert by["stages_uniform_unigram_bigram"]["numbers"]["order"] == ["uniform", "unigram", "bigram"]
    assert by["levels_exact_and_bayes_floor"]["source"] == "proved"
    assert by["unigram_delays_bigram"]["source"] == "expected"
    assert (out / "report.md").exists() and (out / "edelman_stages.png").exists()


def test_stage_claim_fails_on_a_run_too_short_to_leave_the_plateau(tmp_path):
    """The stage claim can fail: 20 GD steps never reach the bigram stage."""
    short = tmp_path / "edelman.toml"
    short.write_text(TOML.read_text().replace("steps = 2000", "steps = 20").replace("record_every = 10",
                                                                                     "record_every = 1"))
    desc, r = claims._run(short)
    s = claims.stage_series(desc, r)
    assert claims._order(s["stage"]) != list(claims.STAGES)
    assert claims._plateau(s)["unigram_plateau_steps"] is None


def test_stage_series_refuses_a_description_off_the_law(tmp_path):
    desc, r = claims._run(TOML, steps=2)
    bad = type(desc)(**{**desc.__dict__, "x": desc.x[::-1].copy()})
    with pytest.raises(ValueError, match="not \\[d\\]"):
        claims.stage_series(bad, r)


@pytest.mark.parametrize("old,new,field", [("pa = [1]", "pa = [2]", "data.pa"),
                                           ('loss = "nll"', 'loss = "soft"', "model.loss")])
def test_check_refuses_a_description_the_levels_do_not_describe(tmp_path, old, new, field):
    bad = tmp_path / "edelman.toml"
    bad.write_text(TOML.read_text().replace(old, new))
    r = subprocess.run([sys.executable, "-m", "meanfield", "model", "check", str(bad), "--quick", "--out",
                        str(tmp_path / "o")], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0] and "Traceback" not in r.stderr, r.stderr
    assert not any((tmp_path / "o").glob("*"))  # nothing written


def test_shipped_description_equals_the_explicit_torch_network():
    """edelman.toml's run (the engine's GD map on the exact law) equals the explicit network of
    meanfield.engine.twolayer_oracle (torch float64, autograd, no shared code) over 200 steps."""
    pytest.importorskip("torch")
    from meanfield.engine.twolayer_oracle import Oracle

    desc, r = claims._run(TOML, steps=200)
    net = desc.net
    spec = {"S": net.S, "L": net.L, "readout": net.readout, "selector": net.selector,
            "layers": [[dict(score=h.score, lags=h.lags, softmax=h.softmax, normalise=h.normalise, value=h.value)
                        for h in hs] for hs in net.layers]}
    ref, rls = Oracle(spec).gd(desc.theta0, desc.x, desc.y, desc.p, desc.training.eta, 200)
    th = np.asarray(r["theta"])
    assert int(r["step"][-1]) == 200
    assert np.abs(th[-1] - ref).max() <= 1e-10
    assert abs(float(r.loss[0]) - float(rls[0])) <= 1e-12
