"""The engine's lanes with the vectorisable exp (``run_batch(..., vector_exp=True)``: ``math.exp`` inside the
loops over lanes by ``meanfield.core.lane_exp.exp_lane``, within one ulp of the C library's).

Against ``run_batch(..., fast=False, lanes=False)`` (the per-trajectory drivers over the scalar kernels, with
the C library's exp: an independent path): the same statuses, steps, stages, stage ends and record counts, and
every record of a complete trajectory within 1e-13 of that trajectory's largest entry (final losses likewise),
on the descriptions of tests/test_engine_lanes.py (softmax heads; logistic, cross-entropy and squared
losses) and the mixture with stages, criteria and a diverging lane; method rk4 too. Not the same
bits (another exp: the tolerance is what is tested). The default (``vector_exp=False``) keeps the bits of the
scalar kernels: tests/test_engine_lanes.py (every test there runs it). And the transform's option: the
generated module calls ``exp_lane``, not ``math.exp``, in its lane loops, only with the option.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import meanfield.engine as me
from meanfield.core.config import ConfigError
from meanfield.engine import batched, lanes, lanes_batch, lanes_rk4
from tests.test_engine_lanes import CASES, MODELS, ROOT, _perturbed

EXACT = ("steps", "stop_stage", "code", "n_records", "end_step", "end_reason", "rec_step", "rec_stage")
REL = 1e-13


def _run(desc, Y0, eta, every, width, monkeypatch, vector_exp):
    """run_batch in lanes of ``width`` (the lanes asserted to have run, with this exp)."""
    monkeypatch.setattr(lanes_batch, "width_for", lambda B, threads=1, per_lane=0: width)
    calls = []
    for mod, name in ((lanes_batch, "batch_kernel"), (lanes_rk4, "rk4_kernel")):
        real = getattr(mod, name)
        monkeypatch.setattr(mod, name, lambda w, v=False, real=real: calls.append((w, v)) or real(w, v))
    got = me.run_batch(desc, y0s=Y0, eta=eta, record_every=every, fast=False, vector_exp=vector_exp)
    monkeypatch.undo()
    assert calls == [(width, vector_exp)]
    return got


def _assert_close(ref, got):
    for k in EXACT:
        assert np.array_equal(np.asarray(getattr(ref, k)), np.asarray(getattr(got, k))), k
    assert ref.status == got.status
    for b in np.flatnonzero(ref.code == 0):  # each complete trajectory, relative to its largest entry
        n = ref.n_records[b]
        x, z = ref.rec_y[b, :n], got.rec_y[b, :n]
        scale = np.max(np.abs(x))
        assert np.max(np.abs(x - z)) <= REL * scale, (b, np.max(np.abs(x - z)) / scale)
        assert np.max(np.abs(ref.y[b] - got.y[b])) <= REL * scale, b
        assert abs(ref.loss[b] - got.loss[b]) <= REL * max(abs(ref.loss[b]), 1e-300), b
        assert np.array_equal(ref.rec_t[b, :n], got.rec_t[b, :n]), b


@pytest.mark.parametrize("name", sorted(CASES))
def test_descriptions_to_rounding(name, monkeypatch):
    desc = CASES[name]()
    if name == "maxmargin_normalised":
        Y0 = batched.initial_states(desc, seeds=[0, 1, 2, 3, 4], widths=[6, 8, None, 5, 12])
    else:
        Y0 = _perturbed(desc, 5, 0.05)
    eta = [float(desc.training.eta) * f for f in (1.0, 0.5, 1.5, 0.8, 1.2)]
    ref = me.run_batch(desc, y0s=Y0, eta=eta, record_every=3, fast=False, lanes=False)
    assert ref.status.count("complete") >= 4, (name, ref.status)
    got = _run(desc, Y0, eta, 3, 8, monkeypatch, True)  # (one width: the driver warm compiles; several
    # blocks and widths: the batch-size test below and tests/test_engine_lanes.py)
    _assert_close(ref, got)  # (the exp_lane kernels ran: _run; that their bits differ: the mixture tests below,
    # whose softmax exps are many; a description with a few exps may round them as the C library does)


def test_mixture_stages_criteria_divergence(monkeypatch):
    """The mixture (softmax heads, logistic loss) with a three-stage schedule, a criterion stopping lanes at
    different steps, a diverging lane; a block of 8."""
    desc = me.load(MODELS / "mixture.toml", K=2, L=3, schedule="three-stage", stage_steps=(12, 15, 8),
                   stage_criteria=("consistent_margin>=0.1", None, None), eta=0.5)
    Y0 = batched.initial_states(desc, seeds=[0, 1, 2, 3, 4, 5, 6], widths=[None, 5, 8, None, 3, 16, None])
    eta = [0.5, 0.3, 0.5, 1e8, 0.7, 0.2, 0.9]
    ref = me.run_batch(desc, y0s=Y0, eta=eta, record_every=4, fast=False, lanes=False)
    assert "diverged" in ref.status and len(set(ref.end_step[:, 0][ref.code == 0].tolist())) > 1
    for width in (8,):
        got = _run(desc, Y0, eta, 4, width, monkeypatch, True)
        _assert_close(ref, got)
        assert not np.array_equal(ref.y[ref.code == 0], got.y[ref.code == 0])


@pytest.mark.slow  # (its own driver to compile, ~15 s: the rk4 lanes are held to the scalar kernels in
# tests/test_engine_lanes.py; the exp swap is the same transform as gd's)
def test_rk4_to_rounding(monkeypatch):
    desc = me.load(MODELS / "mixture.toml", K=2, L=3, method="rk4", schedule="three-stage",
                   stage_steps=(40, 60, 30), eta=0.5)
    Y0 = batched.initial_states(desc, seeds=[0, 1, 2, 3, 4], widths=[None, 5, 8, None, 3])
    dt = [1.0, 2.0, 0.5, 3.0, 0.7]
    ref = me.run_batch(desc, y0s=Y0, eta=dt, record_every=3, fast=False, lanes=False)
    got = _run(desc, Y0, dt, 3, 8, monkeypatch, True)
    _assert_close(ref, got)
    assert not np.array_equal(ref.y, got.y)


def test_the_option_replaces_exactly_the_lane_loops_exp():
    """With vector_exp every ``math.exp`` of the lane kernels becomes ``exp_lane`` (the C library's exp
    stays nowhere in them); without it none does (the source is otherwise the same)."""
    plain, _ = lanes.transform()
    vec, _ = lanes.transform(vector_exp=True)
    n = len(re.findall(r"math\.exp\(", plain))
    assert n >= 3 and "exp_lane(" not in plain
    assert "math.exp(" not in vec and len(re.findall(r"\bexp_lane\(", vec)) == n
    assert vec.replace("exp_lane(", "math.exp(") == plain
    assert lanes.module(True).TAG != lanes.module(False).TAG


def test_vector_exp_must_be_a_bool():
    desc = me.load(ROOT / "docs/examples/majority.toml", steps=2)
    with pytest.raises(ConfigError, match="^vector_exp: must be True or False"):
        me.run_batch(desc, seeds=[0, 1], fast=False, vector_exp="yes")


def test_a_trajectorys_bits_do_not_depend_on_the_batch_size():
    """With vector_exp the lanes run however few trajectories a thread has (padded lanes): two trajectories
    alone give the bits they get among 40 (without the padding they would run the per-trajectory drivers,
    with the C library's exp: other bits)."""
    desc = me.load(MODELS / "mixture.toml", K=2, L=3, steps=30, eta=0.5)
    Y0 = _perturbed(desc, 40, 0.05)
    many = me.run_batch(desc, y0s=Y0, record_every=5, fast=False, vector_exp=True)
    few = me.run_batch(desc, y0s=Y0[:2], record_every=5, fast=False, vector_exp=True)
    libm = me.run_batch(desc, y0s=Y0[:2], record_every=5, fast=False)
    assert np.array_equal(few.rec_y, many.rec_y[:2]) and np.array_equal(few.loss, many.loss[:2])
    assert not np.array_equal(few.rec_y, libm.rec_y)
