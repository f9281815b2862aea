"""The induction system's copier-selector-classifier is a generic two-layer network: the generic
loss and gradient (meanfield.engine.twolayer_net) equal the induction system's plain-numpy model
(meanfield.models.induction.model, its own oracle), including clipped
sequences (the log(0) guard), per-head first lags and D = 1, 2; and GD through a three-phase
plan moves the same blocks the same way."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from meanfield.engine.twolayer_net import Head, Net, gd, loss_grad
from meanfield.models.induction import model


def _nets(d, L, H, M, D, first):
    arch = model.Arch(d=d, H=H, M=M, D=D, first=first)
    heads = tuple(Head("rpe", (f, f + M - 1), softmax=True, normalise=True, value="token") for f in arch.first)
    return arch, Net(d, L, (heads,), selector=D, readout="attention")


def _generic(theta_ind, arch):
    c, w, a = model.unpack(theta_ind, arch)
    return np.concatenate([np.ravel(w), c, [a]])


@pytest.mark.parametrize("d,L,H,M,D,first", [(3, 12, 2, 2, 2, None), (2, 9, 3, 2, 1, (1, 2, 3)), (3, 8, 1, 3, 1, None)])
def test_generic_equals_the_induction_model(d, L, H, M, D, first):
    arch, net = _nets(d, L, H, M, D, first)
    rng = np.random.default_rng(d * 10 + H)
    tokens = rng.integers(0, d, size=(60, L + 1))
    theta_ind = model.init_params(arch, 1.5, 0.0, 1.0, 2.0) + rng.normal(0, 0.2, arch.n_params)
    lm, gm = model.loss_and_grad(theta_ind, tokens, arch)
    y, p = np.eye(d)[tokens[:, L]], np.full(len(tokens), 1 / len(tokens))
    lg, gg = loss_grad(_generic(theta_ind, arch), net, tokens, y, p)
    assert abs(lg - lm) <= 1e-12 * max(1, abs(lm)) and np.abs(gg - _generic(gm, arch)).max() <= 1e-12
    if d == 3 and L == 8:  # the guard was exercised: some target never occurs in its context
        assert not (tokens[:, :L] == tokens[:, L:]).any(axis=1).all()


def test_three_phases_of_gd_equal_the_induction_model():
    d, L, H, M, D = 3, 10, 2, 2, 2
    arch, net = _nets(d, L, H, M, D, None)
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, d, size=(40, L + 1))
    theta_ind = model.init_params(arch, 1.0, 0.0, 0.5, 1.0)
    theta = _generic(theta_ind, arch)
    y, p = np.eye(d)[tokens[:, L]], np.full(40, 1 / 40)
    nS = arch.nS
    phases = [("c", slice(0, nS)), ("w", slice(nS, nS + H * M)), ("a", slice(nS + H * M, nS + H * M + 1))]
    blocks = {"c": slice(H * M, H * M + nS), "w": slice(0, H * M), "a": slice(H * M + nS, H * M + nS + 1)}
    eta = 0.5
    for name, sl in phases:
        for _ in range(10):
            _, g = model.loss_and_grad(theta_ind, tokens, arch)
            mask = np.zeros_like(g)
            mask[sl] = 1
            theta_ind = theta_ind - eta * mask * g
        train = np.zeros(net.size)
        train[blocks[name]] = 1
        theta, _ = gd(theta, net, tokens, y, p, eta, 10, train)
    assert np.abs(theta - _generic(theta_ind, arch)).max() <= 1e-12


GOLDEN = Path(__file__).resolve().parent / "golden" / "twolayer"


def induction_toml(path: Path) -> str:
    """The two-layer description of an induction run file's model, data set, init and three phases."""
    import h5py

    with h5py.File(path, "r") as f:
        cfg = json.loads(f.attrs["config"])
        tokens = f["training_set/tokens"][()]
        theta0 = f["theta"][0]
        first = [int(v) for v in f.attrs["first_lags"]]
    arch = model.Arch(d=cfg["d"], H=cfg["H"], M=cfg["M"], D=cfg["D"], first=first)
    c, w, a = model.unpack(theta0, arch)
    out = ['name = "induction"', "[model]", 'class = "twolayer"', 'loss = "nll"', "[data]", 'family = "tokens"',
           f"d = {cfg['d']}", "tokens = [" + ", ".join("[" + ", ".join(str(int(v)) for v in r) + "]" for r in tokens) + "]"]
    out.append("[[layers]]")
    for h in range(arch.H):
        out += ["[[layers.heads]]", 'score = "rpe"', f"lags = [{first[h]}, {first[h] + arch.M - 1}]",
                "normalise = true", 'value = "token"', "w = [" + ", ".join(repr(float(v)) for v in w[h]) + "]"]
    out += ["[selector]", f"D = {arch.D}", "c = [" + ", ".join(repr(float(v)) for v in c) + "]",
            "[readout]", 'kind = "attention"', f"a = {float(a)!r}", "[training]", 'method = "gd"']
    blocks = {"c": ["selector.c"], "w": [f"layer1.head{h + 1}.w" for h in range(arch.H)], "a": ["readout.a"]}
    for name, steps, eta in zip(json.loads(f_attr(path, "stage_names")), cfg["stage_steps"], cfg["stage_etas"]):
        out += ["[[training.stages]]", f'name = "{name}"', "train = [" + ", ".join(f'"{b}"' for b in blocks[name]) + "]",
                f"steps = {steps}", f"eta = {float(eta)!r}"]
    return "\n".join(out) + "\n", arch


def f_attr(path, name):
    import h5py

    with h5py.File(path, "r") as f:
        return f.attrs[name]


@pytest.mark.parametrize("name", ["induction_phases.h5", "induction_h2.h5"])
def test_golden_induction_runs_are_reproduced_by_the_description(tmp_path, name):
    # golden files of `meanfield induction run` written before any change (tests/golden/twolayer/README.md):
    # the same model as a two-layer description run by `meanfield model run` gives every record to 1e-12
    from meanfield.core.run import read_file

    text, arch = induction_toml(GOLDEN / name)
    src = tmp_path / "induction.toml"
    src.write_text(text, encoding="utf-8")
    out = tmp_path / "run.h5"
    r = subprocess.run([sys.executable, "-m", "meanfield", "model", "run", str(src), "--out", str(out), "--quiet"],
                       capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1], timeout=300)
    assert r.returncode == 0, r.stderr
    mine, gold = read_file(out), read_file(GOLDEN / name)
    assert np.array_equal(mine.step, gold.step) and np.abs(mine.t - gold.t).max() <= 1e-12
    assert [(e["stage"], e["step"]) for e in mine.stage_ends] == [(e["stage"], e["step"]) for e in gold.stage_ends]
    ref = np.array([_generic(th, arch) for th in np.asarray(gold["theta"])])
    assert np.abs(np.asarray(mine["theta"]) - ref).max() <= 1e-12
    assert np.abs(mine.loss - np.asarray(gold["loss_train"])).max() <= 1e-12


@pytest.mark.parametrize("name,flags", [
    ("induction_phases.h5", ["--d", "3", "--L", "8", "--n-train", "20", "--n-test", "0", "--stage-steps", "10,10,10"]),
    ("induction_test.h5", ["--d", "3", "--L", "8", "--n-train", "20", "--n-test", "15", "--stage-steps", "10,10,10"]),
    ("induction_h2.h5", ["--d", "2", "--L", "10", "--n-train", "30", "--H", "2", "--M", "3", "--D", "2", "--pa", "1",
                         "--n-test", "0", "--stage-steps", "15,15,15", "--stage-etas", "0.5,3,0.8"])])
def test_meanfield_model_run_induction_equals_the_golden_induction_runs(tmp_path, name, flags):
    # `meanfield model run induction FLAGS` (the shipped description, family induction) against the golden run
    # files of `meanfield induction run FLAGS --n-test 0` written before the change: every record to 1e-12
    from meanfield.core.run import read_file

    out = tmp_path / "run.h5"
    r = subprocess.run([sys.executable, "-m", "meanfield", "model", "run", "induction", *flags, "--out", str(out),
                        "--quiet"], capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1], timeout=300)
    assert r.returncode == 0, r.stderr
    mine, gold = read_file(out), read_file(GOLDEN / name)
    _, arch = induction_toml(GOLDEN / name)
    assert np.array_equal(mine.step, gold.step) and np.abs(mine.t - gold.t).max() <= 1e-12
    assert [e["step"] for e in mine.stage_ends] == [e["step"] for e in gold.stage_ends]
    ref = np.array([_generic(th, arch) for th in np.asarray(gold["theta"])])
    assert np.abs(np.asarray(mine["theta"]) - ref).max() <= 1e-12
    assert np.abs(mine.loss - np.asarray(gold["loss_train"])).max() <= 1e-12
    if "--n-test" in flags and flags[flags.index("--n-test") + 1] != "0":  # the held-out loss of every record
        assert np.abs(np.asarray(mine["loss_test"]) - np.asarray(gold["loss_test_all"])).max() <= 1e-12


B = ["--d", "3", "--L", "8", "--n-train", "20", "--stage-steps", "10,10,10"]
#: golden run files of the settings the hand kernels alone ran until they were retired, written by
#: `meanfield induction run FLAGS` at 14de960 (the hand kernels; tests/golden/twolayer/README.md)
HAND_ONLY = {
    "induction_fresh.h5": B + ["--sampling", "fresh", "--batch", "12", "--n-test", "10"],
    "induction_minibatch.h5": B + ["--sampling", "minibatch", "--batch", "6", "--n-test", "10"],
    "induction_official_ce.h5": B + ["--loss", "official-ce", "--n-test", "10"],
    "induction_floor.h5": B + ["--yhat-floor", "1e-2", "--n-test", "10"],
    "induction_ltest.h5": B + ["--L-test", "14", "--n-test", "10"],
    "induction_criteria.h5": B + ["--stage-criteria", "c_top>=0.2,grad_w<=0.3,none", "--n-test", "0"],
    "induction_flow.h5": ["--d", "3", "--L", "8", "--n-train", "20", "--method", "flow", "--stage-times", "2,2,2",
                          "--n-test", "0"],
    "induction_rk4.h5": ["--d", "3", "--L", "8", "--n-train", "20", "--method", "rk4", "--dt", "0.1",
                         "--stage-times", "2,2,2", "--n-test", "0"],
}


@pytest.mark.parametrize("name", list(HAND_ONLY))
def test_every_setting_the_hand_kernels_ran_is_reproduced_by_the_engine(tmp_path, name):
    # `meanfield induction run` now trains on the engine's generic network for every setting: fresh and
    # minibatch sampling, the official cross-entropy, another floor, another held-out length, non-loss
    # criteria, the flow; every dataset of the run file equals the hand kernels' golden file to 1e-12
    from meanfield.cli import main
    from meanfield.core.run import read_file

    out = tmp_path / "run.h5"
    assert main(["induction", "run", *HAND_ONLY[name], "--quiet", "--out", str(out)]) == 0
    mine, gold = read_file(out), read_file(GOLDEN / name)
    assert mine.attrs["kernel_path"] == "generic" and gold.attrs["kernel_path"] == "pattern"
    assert np.array_equal(mine.step, gold.step) and np.abs(mine.t - gold.t).max() <= 1e-12
    assert [(e["stage"], e["step"], e["reason"]) for e in mine.stage_ends] == \
        [(e["stage"], e["step"], e["reason"]) for e in gold.stage_ends]
    for key in ("theta", "c", "w", "a", "rpe", "c_weight", "loss_train", "loss_test_all", "loss_test_seen",
                "clipped_train", "clipped_test"):
        g, m = np.asarray(gold[key], dtype=float), np.asarray(mine[key], dtype=float)
        assert g.shape == m.shape and np.allclose(m, g, rtol=0, atol=1e-12, equal_nan=True), key
    assert np.abs(np.asarray(gold["theta"])[-1] - np.asarray(gold["theta"])[0]).max() > 1e-3  # it trained


def test_the_shipped_induction_description_equals_the_explicit_network_over_200_steps():
    # every shipped two-layer description against the torch network (meanfield.engine.twolayer_oracle): 200 steps
    pytest.importorskip("torch")
    import meanfield as mf
    from meanfield.engine.twolayer_oracle import Oracle
    from meanfield.engine.twolayer_run import TwoLayerSystem

    desc = mf.load("induction", d=3, L=6, n_train=25, H=2, M=2, D=2, stage_steps="70,70,60", record_every=200)
    r = mf.run(desc, progress=False)
    net = desc.net
    o = Oracle({"S": net.S, "L": net.L, "readout": net.readout, "selector": net.selector,
                "layers": [[dict(score=h.score, lags=h.lags, softmax=h.softmax, normalise=h.normalise, value=h.value)
                            for h in hs] for hs in net.layers]})
    theta = desc.theta0
    for st in desc.stages:
        theta, _ = o.gd(theta, desc.x, desc.y, desc.p, st.eta, int(st.length), TwoLayerSystem(desc).mask(st.train))
    assert int(r.step[-1]) == 200 and np.abs(np.asarray(r["theta"])[-1] - theta).max() <= 1e-10
