"""The trajectory-vectorised CPU batch of method rk4 (``meanfield.models.mixture.vectorised_rk4``).

* lanes with the C library's exp (vector_exp=False) equal the per-trajectory rk4 batch (``lanes=False``,
  ``mix_rk4_batch_cpu`` over ``kernels.flow_rhs_into``) bit for bit, every output array, over batches of
  1, 3, 17 and 40 trajectories (one partial block, full blocks and a partial last one) that differ in dt,
  omega, width, seed, ReLU'(0), schedule, stage times (last steps shortened, an empty stage), records and
  max_abs, with trajectories that diverge (an entry above max_abs; a huge dt) while the others go on;
* the default (vectorised exp) to rounding (<= 1e-13 of each trajectory's largest entry), with the same
  steps, statuses and stage ends;
* the comparison is not vacuous: one dt changed by an ulp gives other bits;
* a lane's bits (the default build) do not depend on the block width or the batch.
"""

from __future__ import annotations

import numpy as np
import pytest

from meanfield.models.mixture import batched, vectorised
from meanfield.models.mixture.config import make_config
from meanfield.models.mixture.init import initial_state

FIELDS = ("t", "step", "stage", "y", "n_records", "code", "stop_stage", "end_step", "end_t", "end_reason",
          "loss", "y_final")

RK4_MIXED = [
    dict(method="rk4", steps=12, eta=0.5, dt=0.25, record_every=5),
    dict(method="rk4", schedule="three-stage", stage_times=(1.0, 2.0, 0.5), dt=0.3, width=20, seed=5,
         omega=0.2, record_every=4),  # stage ends between steps: the last step of each is shortened
    dict(method="rk4", steps=10, eta=0.5, dt=0.5, width=8, seed=6, max_abs=0.02, record_every=1),  # code 3
    dict(method="rk4", steps=8, eta=0.7, dt=0.7, omega=0.05, relu_prime_at_zero=0.5, record_every=3),
    dict(method="rk4", schedule="three-stage", stage_times=(0.0, 1.5, 0.0), dt=0.4, record_every=2,
         stage3="both"),  # empty stages
    dict(method="rk4", steps=6, eta=1e4, dt=1e4, record_every=1),  # a huge dt: diverges (code 3, step 2)
    dict(method="rk4", schedule="three-stage", stage_times=(0.9, 0.6, 1.2), dt=0.2, width=12, seed=2,
         neuron_init="gaussian:0.1", omega=0.3, record_every=7),
]


def _group(B):
    """B configs cycling through RK4_MIXED (seeds shifted so that rows differ)."""
    out = []
    for b in range(B):
        d = dict(RK4_MIXED[b % len(RK4_MIXED)])
        if "seed" in d:
            d["seed"] += 100 * (b // len(RK4_MIXED))
        out.append(make_config(d))
    return out


def _lanes(cfgs, y0s, width, **kw):
    """batched.advance in lanes with the block width ``width`` forced (whatever B)."""
    old = vectorised.WIDTHS
    vectorised.WIDTHS = ((1, width),)
    try:
        return batched.advance(cfgs, y0s, **kw)
    finally:
        vectorised.WIDTHS = old


@pytest.mark.parametrize("B, width", [(1, 4), (3, 4), (17, 4), (40, 16)])
def test_rk4_lanes_equal_the_per_trajectory_batch_bit_for_bit(B, width):
    cfgs = _group(B)
    y0s = [initial_state(c) for c in cfgs]
    ref = batched.advance(cfgs, y0s, lanes=False)
    new = _lanes(cfgs, y0s, width, vector_exp=False)
    if B >= len(RK4_MIXED):  # both divergences, each stopping its trajectory alone
        assert set(ref.code.tolist()) >= {0, 3} and (ref.code != 0).sum() >= 2
        assert ref.code[5] in (2, 3) and ref.step[5, ref.n_records[5] - 1] == 1
    for f in FIELDS:
        a, b = getattr(ref, f), getattr(new, f)
        assert a.shape == b.shape and np.array_equal(a, b, equal_nan=True), f
    for b in range(min(B, 3)):  # the public trajectories too
        ta, tb = batched.trajectory(ref, b, cfgs[b]), batched.trajectory(new, b, cfgs[b])
        assert np.array_equal(ta.arrays()["y"], tb.arrays()["y"]) and ta.message == tb.message
        assert ta.stage_ends == tb.stage_ends


def test_rk4_lanes_with_the_vector_exp_to_rounding():
    cfgs = _group(17)
    y0s = [initial_state(c) for c in cfgs]
    ref = batched.advance(cfgs, y0s, lanes=False)
    new = _lanes(cfgs, y0s, 16)  # the default: vector_exp=True
    for f in ("step", "stage", "n_records", "code", "stop_stage", "end_step", "end_reason"):
        assert np.array_equal(getattr(ref, f), getattr(new, f)), f
    np.testing.assert_allclose(new.t, ref.t, rtol=1e-15, atol=0)
    for b in np.flatnonzero(ref.code == 0):
        n = ref.n_records[b]
        x, z = ref.y[b, :n], new.y[b, :n]
        assert np.max(np.abs(x - z)) <= 1e-13 * np.max(np.abs(x)), b
    assert not np.array_equal(ref.y, new.y)  # another exp: not the same bits (the tolerance is what is tested)


def test_the_rk4_comparison_can_fail():
    """One dt changed by an ulp: another state (the bit-for-bit test is not vacuous)."""
    cfgs = _group(3)
    y0s = [initial_state(c) for c in cfgs]
    ref = batched.advance(cfgs, y0s, lanes=False)
    cfgs[1] = make_config(dict(RK4_MIXED[1], dt=0.3 * (1 + 2.2e-16)))
    new = _lanes(cfgs, y0s, 4, vector_exp=False)
    assert not np.array_equal(ref.y[1], new.y[1])
    assert np.array_equal(ref.y[0], new.y[0])  # the other lanes are untouched


def test_an_rk4_lanes_bits_do_not_depend_on_the_block_width_or_the_batch():
    """The default build (vectorised exp) at widths 4 and 16, and a trajectory alone or among 17: the same bits."""
    cfgs = _group(17)
    y0s = [initial_state(c) for c in cfgs]
    a, b = _lanes(cfgs, y0s, 16), _lanes(cfgs, y0s, 4)
    alone = _lanes(cfgs[8:9], y0s[8:9], 4)
    for f in FIELDS:
        assert np.array_equal(getattr(a, f), getattr(b, f), equal_nan=True), f
        x, z = getattr(a, f)[8:9], getattr(alone, f)
        assert np.array_equal(x[:, : z.shape[1]] if x.ndim > 1 else x, z, equal_nan=True), f
