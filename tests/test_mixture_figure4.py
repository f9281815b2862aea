"""Figure 4 as a claim per key kind: PASS / FAIL on the paper's run and on
constructed runs; the gradient-coherence measure against a direct sum."""

import numpy as np
import pytest

from meanfield.models.mixture import claims as C
from meanfield.models.mixture import figure4 as F
from meanfield.models.mixture.config import make_config

BASE = {"K": 2, "L": 3, "omega": 0.1, "eta": 0.5}


@pytest.fixture(scope="module")
def sim():
    return C.simulate(make_config(BASE, steps=4000, record_every=10))


def test_c_keys_pass_v_keys_fail(sim):
    c = F.check_figure4(sim, "c")
    assert c.passed and c.source == "shown" and c.numbers["ratio_c1_over_v1"] < 0.5
    v = F.check_figure4(sim, "v", F.gradient_coherence(sim, make_config(BASE)))
    assert not v.passed and v.source == "expected" and v.numbers["ratio_c1_over_v1"] > 1
    assert "cancel" in v.numbers["mechanism"]
    # independent: the numbers straight from the recorded S (head +, query c1 = column 0, v1 = column 2)
    S = sim["S"][:, 0]
    assert v.numbers["max_abs_query_c1"] == pytest.approx(np.abs(S[:, 2:, 0]).max())
    assert v.numbers["max_abs_query_v1"] == pytest.approx(np.abs(S[:, 2:, 2]).max())


def test_fails_when_query_c_is_larger(sim):
    S = sim["S"].copy()
    S[:, :, :, 0] *= 10.0  # query c1 scores ten times larger
    assert not F.check_figure4(dict(sim, S=S), "c").passed
    S = sim["S"].copy()
    S[:, 0, 0, 0] = -S[:, 0, 0, 0]  # opposite shape for key c1
    S[:, 0, 1, 0] = -S[:, 0, 1, 0]
    assert not F.check_figure4(dict(sim, S=S), "c").passed


def test_gradient_coherence_bounds_and_total(sim):
    from meanfield.models.mixture import kernels
    from meanfield.models.mixture.run import samples_of

    cfg = make_config(BASE)
    coh = F.gradient_coherence(sim, cfg, times=(500.0,))
    vals = list(coh.values())[0]
    assert all(0 <= x <= 1 + 1e-12 for x in vals.values())
    assert vals["S+[v1,v1]"] < 0.1 < 0.9 < vals["S+[v1,c1]"]
    # per-sample contributions sum to the full gradient (the loss is a weighted sum over samples)
    smp = samples_of(cfg)
    j = int(np.argmin(np.abs(sim["t"] - 500.0)))
    y = kernels.pack(sim["S"][j], sim["A"][j], sim["B"][j], sim["w"][j])
    full = kernels.loss_and_grads(y, smp.P, smp.idx, smp.sgn, smp.y, smp.weight, 1.0)[1]
    parts = sum(kernels.loss_and_grads(y, smp.P, smp.idx, smp.sgn, smp.y,
                                       np.where(np.arange(smp.n) == i, smp.weight, 0.0), 1.0)[1]
                for i in range(smp.n))
    assert np.allclose(parts, full, rtol=1e-12, atol=1e-15)
