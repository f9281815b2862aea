"""engine.run_batch is the one ensemble path: a mixture description runs on the mixture's registered batch
fast path (meanfield.models.mixture.engine_batch over mixture.batched.advance) where it applies, on the
generic kernels otherwise, and the two agree to rounding (another order of the sums; the lanes' exp is
within an ulp of the C library's)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import meanfield as mf
import meanfield.engine as me
from meanfield.engine import batched, registry
from meanfield.models.mixture import batched as mix_batched
from meanfield.models.mixture import engine_batch

TOL = 1e-12  # relative, on states, losses and record times


@pytest.fixture
def calls(monkeypatch):
    """How many times the mixture's hand kernels ran a batch."""
    n = []
    real = mix_batched.advance

    def spy(*a, **k):
        n.append(len(a[0]))
        return real(*a, **k)

    monkeypatch.setattr(mix_batched, "advance", spy)
    return n


def _same(f, g):
    assert f.status == g.status and list(f.code) == list(g.code)
    for k in ("n_records", "steps", "stop_stage", "rec_step", "rec_stage", "end_step", "end_reason"):
        assert np.array_equal(getattr(f, k), getattr(g, k)), k
    for k in ("y", "loss", "rec_y", "rec_t", "end_t"):
        a, b = getattr(f, k), getattr(g, k)
        np.testing.assert_allclose(a, b, rtol=TOL, atol=TOL * max(1.0, np.nanmax(np.abs(b))), equal_nan=True,
                                   err_msg=k)
    for b in range(f.B):
        tf, tg = f.trajectory(b), g.trajectory(b)
        assert tf.status == tg.status and tf.message == tg.message


@pytest.mark.parametrize("kw, etas, every", [
    (dict(K=2, L=3, steps=120), [0.5, 0.3, 0.5, 1e8], 4),
    (dict(K=3, L=3, schedule="three-stage", stage_steps=(10, 15, 8),
          stage_criteria=("consistent_margin>=0.01", None, None), eta=0.5), [0.5, 0.3, 0.5, 1e8], 3),
    (dict(K=2, L=3, method="rk4", t_end=6.0, dt=0.25), [0.25, 0.2, 0.3, 50.0], 2),
    (dict(K=2, L=3, steps=40), [0.5] * 4, None),  # summary only: initial state, stage ends, final
])
def test_fast_path_equals_the_generic_batch(calls, kw, etas, every):
    d = mf.load("mixture", **kw)
    Y0 = batched.initial_states(d, seeds=[0, 1, 2, 3], widths=[None, 5, 8, None])
    f = me.run_batch(d, y0s=Y0, eta=etas, record_every=every)
    assert calls == [4]  # the hand kernels ran it
    g = me.run_batch(d, y0s=Y0, eta=etas, record_every=every, fast=False)
    assert calls == [4]  # the generic kernels, not the hand ones
    _same(f, g)


def test_a_diverging_trajectory_stops_alone_on_both_paths(calls):
    d = mf.load("mixture", K=2, L=3, steps=50)
    Y0 = batched.initial_states(d, seeds=[0, 1], widths=[None, 6])
    f = me.run_batch(d, y0s=Y0, eta=[0.5, 1e8], record_every=5)
    assert f.status == ["complete", "diverged"] and calls == [2]
    _same(f, me.run_batch(d, y0s=Y0, eta=[0.5, 1e8], record_every=5, fast=False))


@pytest.mark.parametrize("change", ["softmax_scale", "training", "tokens", "dense"])
def test_where_the_fast_path_does_not_apply_the_generic_kernels_run(calls, change):
    if change == "softmax_scale":  # the lanes do not batch the 1/sqrt(m) logit scale
        d = mf.load("mixture", K=2, L=3, steps=20, softmax_scale="1/sqrt(m)", width=9)
    elif change == "training":  # a description changed after the family built it: its config no longer says it
        d = mf.load("mixture", K=2, L=3, steps=20)
        d = dataclasses.replace(d, training=dataclasses.replace(d.training, max_abs=3.0))
    elif change == "tokens":
        d = mf.load("mixture", K=2, L=3, steps=20)
        d = dataclasses.replace(d, data=dataclasses.replace(d.data, tokens=0.5 * np.asarray(d.data.tokens)))
    else:  # several neurons per head: the dense path, which has no hand kernels
        d = mf.load("mixture", K=2, L=3, steps=20, n_neurons=2)
    assert engine_batch.batch(d, batched.initial_states(d), np.array([0.5]), 0, "cpu", 1e9) is None
    f = me.run_batch(d, seeds=[0, 1], widths=4, record_every=5)
    g = me.run_batch(d, seeds=[0, 1], widths=4, record_every=5, fast=False)
    assert calls == []
    assert np.array_equal(f.y, g.y) and np.array_equal(f.rec_y, g.rec_y)  # one path: bit for bit


def test_the_state_maps_are_exact_and_match_the_mixtures_own_initial_state():
    """engine layout -> the mixture's (S, A, B, w) -> engine layout is the identity; and the engine's
    initial state mapped equals the mixture's own initial state (meanfield.models.mixture.init, its own
    construction from the config), for infinite and finite width."""
    from meanfield.engine.reduce import initial_state, layout
    from meanfield.models.mixture.init import initial_state as mixture_initial_state

    for kw in (dict(K=2, L=3), dict(K=3, L=3, width=7, seed=3), dict(K=2, L=3, width=4, omega=0.3, seed=1)):
        d = mf.load("mixture", **kw)
        lay = layout(d)
        y = initial_state(d, lay)
        yf = engine_batch.to_fast(lay, y, [1.0, 1.0])
        np.testing.assert_allclose(yf, mixture_initial_state(d.parameters), rtol=0, atol=1e-15)
        assert np.array_equal(engine_batch.to_engine(lay, yf, [1.0, 1.0]), y)
        rng = np.random.default_rng(0)
        Yf = rng.standard_normal((3, 5, yf.size))
        back = engine_batch.to_fast(lay, engine_batch.to_engine(lay, Yf, [0.5, 0.5]), [0.5, 0.5])
        S, _, _, w = mix_batched.kernels.unpack(Yf)
        Sb, _, _, wb = mix_batched.kernels.unpack(back)
        # random states: the cross block S and w come back exactly (A and B are the Gram's symmetric
        # diagonal blocks, which a random A or B is not)
        np.testing.assert_array_equal(Sb, S)
        np.testing.assert_array_equal(wb, w)


def test_the_registry_names_the_batch():
    assert registry.batch_fast_path("mixture") is engine_batch.batch
    assert registry.batch_fast_path(None) is None
    assert registry.batch_fast_path("no_such_family") is None
    fp = registry.fast_paths("mixture")[0]
    assert fp.batch == "meanfield.models.mixture.engine_batch:batch" and fp.verified_by
