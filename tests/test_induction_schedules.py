"""Schedules of any grouping and order (``c,w,a`` / ``w,c,a`` / ``cw,a`` /
``cwa``), mini-batch SGD (``sampling = minibatch``) and the two held-out
losses (all sequences; sequences whose target occurs in the context)."""

import numpy as np
import pytest

from meanfield.core.config import ConfigError
from meanfield.models.induction import model as Mo
from meanfield.models.induction import run as R
from meanfield.models.induction.config import make_config, parse_schedule
from meanfield.models.induction.theory import seen_mask

SMALL = dict(d=3, L=20, n_train=40, n_test=30, record_every=1, alpha=0.5)


@pytest.mark.parametrize("text,phases", [
    ("three-phase", ("c", "w", "a")), ("c,w,a", ("c", "w", "a")), ("w,c,a", ("w", "c", "a")),
    ("cw,a", ("cw", "a")), ("WC,a", ("cw", "a")), ("cwa", ("cwa",)), ("a,c", ("a", "c")),
])
def test_parse_schedule(text, phases):
    assert parse_schedule(text) == phases


@pytest.mark.parametrize("bad", ["c,c", "cx", "c,,a", "cw,wa", "", "c;w"])
def test_bad_schedules_name_the_field(bad):
    with pytest.raises(ConfigError, match="^schedule: "):
        make_config(schedule=bad)


def test_phase_lists_follow_the_number_of_phases():
    cfg = make_config(schedule="cw,a")
    assert cfg.stage_etas == (2.0, 1.0) and cfg.stage_steps == (300, 300) and cfg.stage_criteria == (None, None)
    assert make_config(schedule="w,c,a").stage_etas == (10.0, 2.0, 1.0)
    with pytest.raises(ConfigError, match="^stage_etas: needs 2"):
        make_config(schedule="cw,a", stage_etas=(1.0, 2.0, 3.0))


def _oracle_gd(cfg, pb, subset_of_step=None):
    """Plain GD with the numpy oracle: per phase, theta[group] -= eta * grad[group]."""
    arch = pb.arch
    th = pb.theta0.copy()
    out = [th.copy()]
    sl = {"c": slice(0, arch.nS), "w": slice(arch.nS, arch.nS + arch.H * arch.M), "a": slice(arch.n_params - 1, None)}
    step = 0
    for group, eta, n in zip(cfg.phases, cfg.stage_etas, cfg.stage_steps):
        for _ in range(n):
            tok = pb.train.tokens if subset_of_step is None else pb.train.tokens[subset_of_step(step)]
            _, g = Mo.loss_and_grad(th, tok, arch, cfg.yhat_floor, cfg.loss)
            new = th.copy()
            for ch in group:
                new[sl[ch]] -= eta * g[sl[ch]]
            th = new
            out.append(th.copy())
            step += 1
    return np.array(out)


@pytest.mark.parametrize("schedule,etas,steps", [("w,c,a", (8.0, 2.0, 1.0), (2, 2, 2)), ("cw,a", (3.0, 1.0), (3, 2)),
                                                 ("cwa", (2.0,), (4,))])
def test_any_schedule_is_gd_with_per_phase_masks_and_step_sizes(schedule, etas, steps):
    cfg = make_config(SMALL, schedule=schedule, stage_etas=etas, stage_steps=steps)
    pb = R.Problem.build(cfg)
    traj = R.run(cfg, pb)
    arr = traj.arrays()
    np.testing.assert_allclose(arr["y"], _oracle_gd(cfg, pb), rtol=1e-11, atol=1e-13)
    # time is the sum of the step sizes taken; stages are numbered by phase
    assert arr["t"][-1] == pytest.approx(sum(e * n for e, n in zip(etas, steps)))
    assert sorted(set(arr["stage"][1:].tolist())) == list(range(1, len(steps) + 1))


def test_minibatch_epochs_cover_the_training_set_once_and_are_seeded():
    cfg = make_config(SMALL, sampling="minibatch", batch=16)
    n = cfg.n_train
    nb = 3  # ceil(40 / 16)
    for e in range(2):
        idx = np.concatenate([R.minibatch_indices(cfg, n, e * nb + k) for k in range(nb)])
        assert sorted(idx.tolist()) == list(range(n))
        assert [len(R.minibatch_indices(cfg, n, e * nb + k)) for k in range(nb)] == [16, 16, 8]
    assert not np.array_equal(R.minibatch_indices(cfg, n, 0), R.minibatch_indices(cfg, n, nb))  # reshuffled
    np.testing.assert_array_equal(R.minibatch_indices(cfg, n, 4), R.minibatch_indices(cfg, n, 4))
    other = make_config(SMALL, sampling="minibatch", batch=16, seed=1)
    assert not np.array_equal(R.minibatch_indices(cfg, n, 0), R.minibatch_indices(other, n, 0))


def test_minibatch_run_is_sgd_on_the_scheduled_batches():
    cfg = make_config(SMALL, sampling="minibatch", batch=16, schedule="cw,a", stage_etas=(3.0, 1.0),
                      stage_steps=(4, 3), loss="official-ce")
    pb = R.Problem.build(cfg)
    arr = R.run(cfg, pb).arrays()
    ref = _oracle_gd(cfg, pb, lambda k: R.minibatch_indices(cfg, pb.train.N, k))
    np.testing.assert_allclose(arr["y"], ref, rtol=1e-11, atol=1e-13)
    # chunking does not matter: records every 3 steps end at the same state
    cfg3 = make_config(SMALL, sampling="minibatch", batch=16, schedule="cw,a", stage_etas=(3.0, 1.0),
                       stage_steps=(4, 3), loss="official-ce", record_every=3)
    np.testing.assert_array_equal(R.run(cfg3, pb).arrays()["y"][-1], arr["y"][-1])


def test_minibatch_with_one_batch_is_full_batch_gd():
    full = make_config(SMALL, stage_steps=(3, 3, 3))
    mb = make_config(SMALL, stage_steps=(3, 3, 3), sampling="minibatch", batch=1000)
    pb = R.Problem.build(full)
    np.testing.assert_allclose(R.run(mb, pb).arrays()["y"], R.run(full, pb).arrays()["y"], rtol=1e-13, atol=1e-15)


def test_minibatch_needs_gd():
    with pytest.raises(ConfigError, match="^sampling: "):
        make_config(sampling="minibatch", method="flow")


def test_held_out_losses_all_and_seen(tmp_path):
    """loss_test_all counts a sequence whose target is absent from its context at
    -log(yhat_floor); loss_test_seen averages the other sequences only."""
    from meanfield.core.io import read_run

    cfg = make_config(SMALL, d=6, L=8, n_test=200, stage_steps=(1, 1, 1))
    pb = R.Problem.build(cfg)
    seen = seen_mask(pb.test.tokens)
    assert 0 < seen.sum() < len(seen)  # short contexts, 6 tokens: some targets are unseen
    traj = R.run(cfg, pb)
    run = read_run(R.save(tmp_path / "r.h5", cfg, traj, pb))
    th = np.asarray(run["theta"])[-1]
    want_seen = Mo.loss(th, pb.test.tokens[seen], pb.arch)
    want_all = (want_seen * seen.sum() + (-np.log(cfg.yhat_floor)) * (~seen).sum()) / len(seen)
    assert run["loss_test_seen"][-1] == pytest.approx(want_seen, rel=1e-10)
    assert run["loss_test_all"][-1] == pytest.approx(want_all, rel=1e-10)
    assert run["loss_test_all"][-1] > 10 * run["loss_test_seen"][-1]
    assert run.attrs["n_test_seen"] == int(seen.sum()) and run.attrs["loss"] == "nll"
    assert list(run.attrs["stage_names"]) == ["c", "w", "a"]
