"""Robustness of the symmetric start: perturbations, the mechanism (dead-ReLU
set), the expected claims (PASS / FAIL on constructed grids), the study CLI."""

import json

import numpy as np
import pytest

from meanfield.cli import main
from meanfield.models.mixture import robustness as R
from meanfield.models.mixture.config import make_config
from meanfield.models.mixture.init import initial_state
from meanfield.models.mixture.kernels import unpack


def test_symmetric_factors_give_the_infinite_width_init():
    MK, MQ = R.symmetric_factors(2, 0.1)
    assert np.array_equal(MK.T @ MQ, np.zeros((4, 4)))
    assert np.allclose(MK.T @ MK, 0.01 * np.eye(4), rtol=0, atol=1e-17)
    y = R.attention_perturbed_state(make_config({}), 0.0, 0)
    assert np.allclose(y, initial_state(make_config({})), rtol=0, atol=1e-18)


def test_attention_perturbation_size_and_psd():
    cfg = make_config({})
    S, A, B, w = unpack(R.attention_perturbed_state(cfg, 1e-3, 3))
    # S = M_K^T M_Q moves at first order: eps * omega per entry (order of magnitude)
    assert 1e-5 < np.abs(S).max() < 1e-3
    for M in (A, B):
        assert np.allclose(M, np.swapaxes(M, 1, 2))
        assert np.linalg.eigvalsh(M).min() > 0
    assert np.array_equal(w, np.zeros_like(w))


def test_neuron_perturbation_keeps_the_base_init():
    cfg = make_config({}, neuron_init="const:0.01,0.01,0,0")
    y = R.neuron_perturbed_state(cfg, 1e-6, 0)
    *_, w = unpack(y)
    assert np.allclose(w, [[0.01, 0.01, 0, 0]] * 2, atol=1e-5) and not np.allclose(w, [[0.01, 0.01, 0, 0]] * 2,
                                                                                   atol=1e-12)


def test_unperturbed_solves_and_sits_at_the_kink():
    m = R.mechanism(R.perturbed_run("none", 0.0, 0, "three-stage", 40))
    assert m["solved"] and m["n_stuck"] == 0
    # zero neurons: every (sample, head) pre-activation sits exactly at the kink at t = 0
    assert m["kink_pairs_over_time"][0] == 16 and m["dead_pairs_over_time"][0] == 0
    assert max(m["dead_samples_over_time"]) == 0


@pytest.mark.parametrize("kind", ["neuron", "attention"])
def test_tiny_perturbation_leaves_dead_samples(kind):
    """1e-12 is enough: two inconsistent samples die on both heads, loss stops at 2/8 log 2."""
    run = R.perturbed_run(kind, 1e-12, 0, "simultaneous", 40)
    m = R.mechanism(run)
    assert not m["solved"] and m["n_stuck"] == 2
    assert all(not s["consistent"] for s in m["stuck"])
    assert all(s["u_plus_end"] < 0 and s["u_minus_end"] < 0 for s in m["stuck"])
    assert abs(m["loss_end"] - 2 / 8 * np.log(2)) < 5e-3
    assert m["dead_samples_over_time"][-1] == 2
    # zero neurons keep u = 0 exactly at t = 0 (alive with ReLU'(0) = 1); a neuron perturbation of 1e-12
    # already starts some samples dead on both heads
    assert (m["dead_samples_over_time"][0] == 0) == (kind == "attention")
    # independent check of "dead on both heads": the recorded u of those samples is < 0 on both heads
    u = np.asarray(run["u"])
    for s in m["stuck"]:
        i = int(np.searchsorted(run["t"], s["dead_both_heads_from_t"]))
        assert np.all(u[i:, s["sample"], :] < 0)
    assert "never solved" in R.explain(m) and "no gradient" in R.explain(m)
    if kind == "neuron":  # the perturbation put a head of each stuck sample on the dead side at t = 0
        assert all(min(s["u_plus_t0"], s["u_minus_t0"]) < 0 for s in m["stuck"])
        assert all(max(abs(s["u_plus_t0"]), abs(s["u_minus_t0"])) < 1e-10 for s in m["stuck"])


def test_finite_width_zero_init_is_stuck():
    """The paper's finite-width model with zero neurons: the sampled init alone leaves two samples dead."""
    m = R.mechanism(R.perturbed_run("width", 4096, 0, "simultaneous", 100))
    assert not m["solved"] and m["n_stuck"] == 2 and m["dead_samples_over_time"][-1] == 2


def test_embedding_identity_vs_random():
    assert R.mechanism(R.perturbed_run("embedding", -1.0, 0, "simultaneous", 100))["solved"]
    assert not R.mechanism(R.perturbed_run("embedding", 0.0, 0, "simultaneous", 100))["solved"]


def test_positive_init_and_several_neurons_restore():
    assert R.mechanism(R.perturbed_run("neuron", 1e-6, 0, "simultaneous", 100,
                                       neuron_init="const:0.01,0.01,0,0"))["solved"]
    assert R.mechanism(R.perturbed_run("neuron", 1e-6, 0, "simultaneous", 100, n_neurons=4))["solved"]


def _row(kind, eps, frac):
    return {"kind": kind, "eps": eps, "schedule": "simultaneous", "runs": 2, "solved_frac": frac,
            "loss_end_median": 0.1, "stuck_samples": [], "explanation": "x", "explanation_short": "x"}


def test_claims_pass_and_fail_on_constructed_grids():
    ok = R.robustness_claims([_row("neuron", 1e-12, 1.0), _row("neuron", 1e-2, 0.0)])
    assert [c.name for c in ok] == ["robust_neuron"] and ok[0].passed and ok[0].source == "expected"
    bad = R.robustness_claims([_row("neuron", 1e-12, 0.5), _row("neuron", 1e-2, 1.0)])
    assert not bad[0].passed  # the smallest perturbation must solve in every run
    emb = R.robustness_claims([_row("embedding", "identity embedding", 1.0), _row("embedding", "rounding", 0.0)])
    assert not emb[0].passed  # the identity control does not count
    assert R.robustness_claims([_row("width", 256, 0.0), _row("width", 4096, 1.0)])[0].passed  # largest m decides
    assert not R.robustness_claims([_row("width", 256, 1.0), _row("width", 4096, 0.5)])[0].passed
    with pytest.raises(ValueError, match="kind"):
        R.perturbed_run("bogus", 1e-6, 0)


def test_study_cli_quick(tmp_path, monkeypatch):
    monkeypatch.setitem(R.SETTINGS, "quick", {"eps": [1e-12, 1e-2], "seeds": 1, "neurons": [1, 4],
                                              "record_every": 100, "widths": [1024]})
    assert main(["mixture", "study", "robustness", "--quick", "--out", str(tmp_path)]) == 0
    rep = json.loads((tmp_path / "report.json").read_text())
    assert {c["name"] for c in rep["claims"]} == {"robust_neuron", "robust_attention", "robust_embedding",
                                                  "robust_width"}
    assert rep["phase_diagram"][0] == [0.0, 0.0] and rep["phase_diagram"][1] == [1.0, 1.0]
    assert (tmp_path / "phase_diagram.png").exists() and (tmp_path / "dead_set.png").exists()
    assert "What restores the story" in (tmp_path / "report.md").read_text()
