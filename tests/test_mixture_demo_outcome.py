"""The demo explains each run's outcome, the finite-width one included."""

from meanfield.models.mixture import claims as C
from meanfield.models.mixture.config import make_config
from meanfield.models.mixture.demo import outcome


def test_outcome_infinite_width_three_stage():
    cfg = make_config({}, schedule="three-stage", record_every=20)
    text = " ".join(outcome(C.simulate(cfg), cfg))
    assert "every sample ends with margin >= 0.1" in text and "exactly symmetric" in text
    assert "u+ = u- on every inconsistent sample" in text


def test_outcome_finite_width_explains_margin_zero():
    cfg = make_config({}, steps=4000, width=256, seed=0, record_every=40)
    run = C.simulate(cfg)
    text = " ".join(outcome(run, cfg))
    assert "2 sample(s) never solved" in text and "BOTH heads" in text and "no gradient" in text
    assert "study robustness" in text
    # independently: two inconsistent samples end at margin 0 with u <= 0 on both heads
    cons = run["samples"]["consistent"].astype(bool)
    stuck = [i for i in range(8) if run["margin"][-1, i] < 0.1]
    assert len(stuck) == 2 and not cons[stuck].any()
    assert (run["u"][-1, stuck] < 0).all()
