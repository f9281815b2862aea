"""The trajectory-vectorised CPU batch (``meanfield.models.mixture.vectorised``).

* lanes (structure of arrays, the default of ``batched.advance`` on the CPU
  for method gd) equal the per-trajectory batch (``lanes=False``, the scalar
  kernels) bit for bit: every output array, on a batch mixing everything the
  batch allows (widths, seeds, neuron inits, ReLU'(0), eta, both schedules,
  stage criteria, empty stages, log-spaced records, divergence by max_abs and
  by a non-finite state), with a batch size that is not a multiple of the
  block and one smaller than a block; the per-trajectory batch itself is held
  equal to ``run.run`` by tests/test_mixture_batched.py;
* the ``vector_exp`` batch against the exact one to 1e-13 of each trajectory's largest entry (the exp
  itself: tests/test_lane_exp.py).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from meanfield.models.mixture import batched, vectorised
from meanfield.models.mixture.config import make_config
from meanfield.models.mixture.init import initial_state

FIELDS = ("t", "step", "stage", "y", "n_records", "code", "stop_stage", "end_step", "end_t", "end_reason")

GD_MIXED = [
    dict(steps=300, omega=0.1, eta=0.5),
    dict(steps=250, omega=0.03, eta=0.3, width=16, seed=1, record_every=7),
    dict(steps=200, omega=0.3, eta=0.5, width=64, seed=2, neuron_init="gaussian:0.1", relu_prime_at_zero=0.5),
    dict(schedule="three-stage", stage_steps=(60, 150, 40), omega=0.1, eta=0.5, record_every=9),
    dict(schedule="three-stage", stage_steps=(100, 400, 50), omega=0.05, eta=0.5, width=32, seed=3,
         stage_criteria=("consistent_margin>=0.5", "inconsistent_margin>=0.05", None), stage3="both"),
    dict(schedule="three-stage", stage_steps=(0, 20, 0), eta=0.4, record_every=5),  # empty stages
    dict(steps=40, eta=1e3),  # blows up (max_abs) while the others go on
    dict(steps=60, eta=1e3, max_abs=1e300, record_every=3),  # from a non-finite / huge state (_states)
    dict(steps=2000, criterion="loss<=0.3", omega=0.2, eta=0.5, record_log=25),
    dict(steps=500, criterion="grad_w<=1e-3", width=8, seed=9, relu_prime_at_zero=0.0, record_log=10),
    dict(steps=120, criterion="min_margin>=0.0", omega=0.2, eta=0.25, width=12, seed=8, record_every=11),
]


def _group(B):
    """B configs cycling through GD_MIXED (seeds shifted so that rows differ)."""
    out = []
    for b in range(B):
        d = dict(GD_MIXED[b % len(GD_MIXED)])
        if "seed" in d:
            d["seed"] += 100 * (b // len(GD_MIXED))
        out.append(make_config(d))
    return out


def _advance_with(cfgs, y0s, lanes, **kw):
    """batched.advance with the block width ``lanes`` forced (whatever B)."""
    old = vectorised.WIDTHS
    vectorised.WIDTHS = ((1, lanes),)
    try:
        return batched.advance(cfgs, y0s, **kw)
    finally:
        vectorised.WIDTHS = old


def _states(cfgs):
    """Initial states; the rows of GD_MIXED[7] start from a NaN (non-finite loss at step 0) or from a huge
    score (1e200: the eta^2 terms overflow, a non-finite new state) in turn."""
    y0s = [initial_state(c) for c in cfgs]
    for b in range(7, len(cfgs), len(GD_MIXED)):
        y0s[b] = y0s[b].copy()
        if (b // len(GD_MIXED)) % 2 == 0:
            y0s[b][3] = np.nan
        else:
            y0s[b][0] = 1e200
    return y0s


@pytest.mark.parametrize("B, lanes", [(13, 4), (69, 64), (5, 64)])
def test_lanes_equal_the_per_trajectory_batch_bit_for_bit(B, lanes):
    """Blocks of 4 and 64 lanes with the C library's exp (vector_exp=False); full, partial and mostly empty blocks."""
    cfgs = _group(B)
    y0s = _states(cfgs)
    ref = batched.advance(cfgs, y0s, lanes=False)
    new = _advance_with(cfgs, y0s, lanes, vector_exp=False)
    if B >= len(GD_MIXED):  # both divergences are exercised
        assert set(ref.code.tolist()) >= {0, 2, 3}
    for f in FIELDS:
        a, b = getattr(ref, f), getattr(new, f)
        assert a.shape == b.shape and np.array_equal(a, b, equal_nan=True), f
    # and the public trajectories are the same
    for b in range(3):
        ta, tb = batched.trajectory(ref, b, cfgs[b]), batched.trajectory(new, b, cfgs[b])
        assert np.array_equal(ta.arrays()["y"], tb.arrays()["y"]) and ta.message == tb.message


def test_the_comparison_can_fail():
    """A batch with one eta changed differs: the bit-for-bit test is not vacuous."""
    cfgs = _group(8)
    y0s = [initial_state(c) for c in cfgs]
    ref = batched.advance(cfgs, y0s, lanes=False)
    cfgs[1] = make_config(dict(GD_MIXED[1], eta=0.3 * (1 + 1e-15)))
    new = _advance_with(cfgs, y0s, 4, vector_exp=False)
    assert not np.array_equal(ref.y, new.y)


@pytest.mark.parametrize("lanes", [64, 16])
def test_vector_exp_batch_to_rounding(lanes):
    """The default blocks (both widths of vectorised.WIDTHS, the vectorised exp) against the per-trajectory
    batch, to rounding."""
    cfgs = _group(19)
    y0s = _states(cfgs)
    ref = batched.advance(cfgs, y0s, lanes=False)
    new = _advance_with(cfgs, y0s, lanes, vector_exp=True)
    for f in ("step", "stage", "n_records", "code", "stop_stage", "end_step", "end_reason"):
        assert np.array_equal(getattr(ref, f), getattr(new, f)), f
    for b in np.flatnonzero(ref.code == 0):  # each trajectory's records, relative to its largest entry
        n = ref.n_records[b]
        x, z = ref.y[b, :n], new.y[b, :n]
        assert np.max(np.abs(x - z)) <= 1e-13 * np.max(np.abs(x)), b
    assert not np.array_equal(ref.y, new.y)  # another exp: not the same bits (the tolerance is what is tested)


def test_a_lanes_bits_do_not_depend_on_the_block_width_the_batch_or_the_threads():
    """The default blocks (vectorised exp) give every trajectory the same bits at every width of
    vectorised.WIDTHS, in a batch of 4 or among 19, on one thread or two (a chunked sweep's numbers do not
    depend on its chunk size or the machine's cores)."""
    import numba

    cfgs = _group(19)
    y0s = _states(cfgs)
    runs = [_advance_with(cfgs, y0s, w) for _, w in vectorised.WIDTHS]
    n = numba.get_num_threads()
    for t in {1, min(2, numba.config.NUMBA_NUM_THREADS)}:
        numba.set_num_threads(t)
        try:
            runs.append(batched.advance(cfgs, y0s))
            small = batched.advance(cfgs[3:7], y0s[3:7])
        finally:
            numba.set_num_threads(n)
        for f in FIELDS:
            a, b = getattr(runs[0], f)[3:7], getattr(small, f)
            assert np.array_equal(a[:, : b.shape[1]] if a.ndim > 1 else a, b, equal_nan=True), (t, f)
    for r in runs[1:]:
        for f in FIELDS:
            assert np.array_equal(getattr(runs[0], f), getattr(r, f), equal_nan=True), f
    assert vectorised.width_for(1, threads=8) == vectorised.WIDTHS[-1][1]  # every batch in lanes
