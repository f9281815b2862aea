"""Every setting of ``meanfield induction run`` trains on the engine's generic two-layer network (issue 24:
the hand kernels are retired), held against the induction model's plain-numpy oracle
(meanfield.models.induction.model: per-sequence loops, shares no code with the engine) running its own GD
loop on the same batches: fresh and minibatch sampling, the official cross-entropy, another log(0) floor,
a held-out set of another length, the induction stop criteria, a given start, and the flow."""

from __future__ import annotations

import numpy as np
import pytest

from meanfield.models.induction import run as R
from meanfield.models.induction.config import make_config
from meanfield.models.induction.data import generate
from meanfield.models.induction.model import loss_and_grad, rpe_softmax, unpack
from meanfield.models.induction import setup as _setup
from meanfield.models.induction.setup import fresh_seed, minibatch_indices, stage_specs, train_data

BASE = dict(d=3, L=8, n_train=16, n_test=6, H=2, M=2, D=2, stage_steps=(4, 4, 4), stage_etas=(2.0, 5.0, 1.0),
            record_every=1)
GROUPS = {"c": lambda a: slice(0, a.nS), "w": lambda a: slice(a.nS, a.nS + a.H * a.M),
          "a": lambda a: slice(a.nS + a.H * a.M, a.n_params)}


def _criterion(theta, loss, g, name, arch):
    c, w, a = unpack(theta, arch)
    if name == "loss":
        return loss
    if name == "a":
        return float(a)
    if name == "c_top":
        return float((c ** 2).max() / (c ** 2).sum())
    if name == "rpe_top":
        return float(rpe_softmax(w).max(axis=1).min())
    sl = {"grad_norm": slice(None), "grad_c": GROUPS["c"](arch), "grad_w": GROUPS["w"](arch),
          "grad_a": GROUPS["a"](arch)}[name]
    return float(np.linalg.norm(g[sl]))


def oracle_gd(cfg, theta0=None):
    """The schedule by hand: per stage, per step, the batch of setup's seeds, model.loss_and_grad, the mask."""
    from meanfield.models.induction.model import init_params

    arch = cfg.arch()
    train = train_data(cfg).tokens
    theta = init_params(arch, cfg.w_plus, cfg.w_minus, cfg.c_init, cfg.a_init, cfg.start_lags) \
        if theta0 is None else np.array(theta0, dtype=float)
    step, states = 0, [theta.copy()]
    for spec in stage_specs(cfg):
        mask = np.zeros(arch.n_params)
        for ch in spec.train:
            mask[GROUPS[ch](arch)] = 1.0
        for _ in range(int(spec.length)):
            if cfg.sampling == "fresh":
                batch = generate(cfg.batch, cfg.d, cfg.L, cfg.pa, cfg.alpha, fresh_seed(cfg, step)).tokens
            elif cfg.sampling == "minibatch":
                batch = train[minibatch_indices(cfg, len(train), step)]
            else:
                batch = train
            loss, g = loss_and_grad(theta, batch, arch, cfg.yhat_floor, cfg.loss)
            if spec.criterion is not None:
                name, op, thr = spec.criterion
                v = _criterion(theta, loss, g, name, arch)
                if (v >= thr) if op == ">=" else (v <= thr):
                    break
            theta = theta - spec.eta * mask * g
            step += 1
            states.append(theta.copy())
    return np.array(states)


CASES = {"fresh": dict(sampling="fresh", batch=7), "minibatch": dict(sampling="minibatch", batch=5),
         "official-ce": dict(loss="official-ce"), "floor": dict(yhat_floor=1e-2), "L_test": dict(L_test=14)}


@pytest.mark.parametrize("case", list(CASES))
def test_settings_equal_the_numpy_oracle(case, tmp_path):
    cfg = make_config({**BASE, **CASES[case]})
    traj = R.run(cfg)
    assert traj.path == "generic"
    ref = oracle_gd(cfg)
    Y = np.array(traj.y)
    assert Y.shape == ref.shape and np.abs(Y - ref).max() <= 1e-12, case
    # the run file's losses are the oracle's on the last state (train, held-out of its own length)
    run = __import__("meanfield").core.io.read_run(R.save(tmp_path / "r.h5", cfg, traj))
    arch = cfg.arch()
    assert abs(run["loss_train"][-1] - loss_and_grad(ref[-1], train_data(cfg).tokens, arch, cfg.yhat_floor,
                                                     cfg.loss)[0]) <= 1e-12
    te = _setup.test_data(cfg).tokens
    assert te.shape[1] == cfg.L_test + 1
    assert abs(run["loss_test_all"][-1] - loss_and_grad(ref[-1], te, arch, cfg.yhat_floor, cfg.loss)[0]) <= 1e-12


@pytest.mark.parametrize("name", ["c_top", "rpe_top", "a", "grad_norm", "grad_c", "grad_w", "grad_a", "loss"])
def test_each_criterion_ends_its_stage_where_the_oracle_does(name):
    # the threshold: halfway between the criterion's values at steps 2 and 3 of its stage in the criterion-free
    # run, so that it first holds at step 3 (mid-stage) on both paths, with no tie to break
    cfg0 = make_config({**BASE, "stage_steps": (6, 6, 6)})
    ref0 = oracle_gd(cfg0)
    arch = cfg0.arch()
    tok = train_data(cfg0).tokens
    k = {"c_top": 0, "grad_c": 0, "loss": 0, "rpe_top": 1, "grad_w": 1, "grad_norm": 1, "a": 2, "grad_a": 2}[name]

    def value(i):
        loss, g = loss_and_grad(ref0[i], tok, arch)
        return _criterion(ref0[i], loss, g, name, arch)

    i = 6 * k + 3
    v_prev, v_at, v_start = value(i - 1), value(i), value(6 * k)
    assert (v_at - v_prev) * (v_prev - v_start) > 0, "the quantity moves monotonically over the stage's first steps"
    v_now = 0.5 * (v_prev + v_at)
    op = ">=" if v_now > v_start else "<="
    crit = ["none"] * 3
    crit[k] = f"{name}{op}{v_now!r}"
    cfg = make_config({**BASE, "stage_steps": (6, 6, 6), "stage_criteria": ",".join(crit)})
    traj = R.run(cfg)
    ref = oracle_gd(cfg)
    assert traj.stage_ends[k]["reason"] == "criterion" and traj.stage_ends[k]["step"] == 6 * k + 3, traj.stage_ends
    assert np.abs(np.array(traj.y) - ref).max() <= 1e-12


def test_a_given_start_and_the_flow():
    cfg = make_config(BASE)
    th = oracle_gd(cfg)[5]
    assert np.abs(np.array(R.run(cfg, theta0=th).y) - oracle_gd(cfg, th)).max() <= 1e-12
    # the flow (rk4, small step) against GD with the same small step: the same map to O(dt^2) per step
    rk = R.run(make_config({**BASE, "method": "rk4", "stage_times": (0.2, 0.2, 0.2), "dt": 0.01,
                            "record_every": None}))
    gd = oracle_gd(make_config({**BASE, "stage_steps": (20, 20, 20), "stage_etas": (0.01, 0.01, 0.01)}))
    assert rk.path == "generic" and np.abs(rk.y[-1] - gd[-1]).max() <= 1e-2 * np.abs(gd[-1] - gd[0]).max()
