"""Two-layer descriptions ([model] class = "twolayer", meanfield.engine.twolayer_desc / twolayer_run):
every field parsed or refused with one line naming it (Python: ConfigError; command line: exit 2,
nothing written, no traceback), and a three-stage run from a TOML file equal, through the run file,
to the explicit torch network (meanfield.engine.twolayer_oracle) stepped stage by stage."""

from __future__ import annotations

import copy
import re
import doctest
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from meanfield.core.errors import ConfigError
from meanfield.engine import twolayer_desc, twolayer_run
from meanfield.engine.description import description_from_dict
from meanfield.engine.twolayer_desc import twolayer_from_dict

ROOT = Path(__file__).resolve().parents[1]

TOML = """name = "copier"
[model]
class = "twolayer"
loss = "nll"
[data]
family = "markov"
d = 2
L = 4
pa = [1]
alpha = 0.5
[[layers]]
[[layers.heads]]
score = "rpe"
lags = [1, 2]
normalise = true
value = "token"
[[layers.heads]]
score = "rpe+bilinear"
lags = [1, 3]
normalise = true
value = "token"
[selector]
D = 2
c = 1.0
[readout]
kind = "attention"
a = 1.0
[init]
std = 0.2
seed = 3
[training]
eta = 0.4
[[training.stages]]
name = "phase1"
train = ["selector.c"]
steps = 30
[[training.stages]]
name = "phase2"
train = ["layer1.head1.w", "layer1.head2.w", "layer1.head2.A"]
steps = 30
eta = 0.2
[[training.stages]]
name = "phase3"
train = ["readout.a"]
steps = 30
"""


def base() -> dict:
    import tomllib

    return tomllib.loads(TOML)


def test_a_three_stage_run_file_equals_the_explicit_network(tmp_path):
    torch = pytest.importorskip("torch")
    del torch
    from meanfield.core.run import read_file
    from meanfield.engine.twolayer_oracle import Oracle

    src = tmp_path / "copier.toml"
    src.write_text(TOML, encoding="utf-8")
    out = tmp_path / "run.h5"
    r = subprocess.run([sys.executable, "-m", "meanfield", "model", "run", str(src), "--out", str(out), "--quiet"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    run = read_file(out)
    assert run.system == "twolayer" and run.status == "complete"
    assert [e["step"] for e in run.stage_ends] == [30, 60, 90] and run.attrs["stage_names"] == ["phase1", "phase2",
                                                                                                   "phase3"]
    desc = twolayer_from_dict(base(), source=str(src))
    net = desc.net
    spec = {"S": net.S, "L": net.L, "readout": net.readout, "selector": net.selector,
            "layers": [[dict(score=h.score, lags=h.lags, softmax=h.softmax, normalise=h.normalise, value=h.value)
                        for h in hs] for hs in net.layers]}
    o = Oracle(spec)
    # the initial state from the file's own tables: c = 1, a = 1, the rest N(0, 0.2^2)
    theta = desc.theta0.copy()
    assert (theta[net.offset("selector.c"):net.offset("readout.a")] == 1.0).all() and theta[-1] == 1.0
    for st in desc.stages:
        mask = twolayer_run.TwoLayerSystem(desc).mask(st.train)
        theta, _ = o.gd(theta, desc.x, desc.y, desc.p, st.eta or desc.training.eta, int(st.length), mask)
    assert np.abs(np.asarray(run["theta"])[-1] - theta).max() <= 1e-10
    assert np.asarray(run["variables"]["selector"]["c"]).shape == (len(run.t), len(net.subsets))
    # the loss recorded is the exact population loss of the state recorded (the oracle's)
    ps = o.from_flat(np.asarray(run["theta"])[-1])
    assert abs(float(o.loss(ps, desc.x, desc.y, desc.p).detach()) - run.loss[-1]) <= 1e-12 * max(1, run.loss[-1])


def test_python_api_loads_and_runs(tmp_path):
    import meanfield as mf

    src = tmp_path / "copier.toml"
    src.write_text(TOML, encoding="utf-8")
    desc = mf.load(src, steps=None, eta=0.3)
    assert desc.training.eta == 0.3 and desc.net.size == 2 + 3 + 7 * 7 + 4 + 1  # w, w, A over S + T = 2 + 5, c (4 subsets), a
    r = mf.run(desc, progress=False)
    assert r.status == "complete" and len(r.t) > 3 and r.entries[0].startswith("w[layer1.head1")
    r2 = mf.run(desc, out=tmp_path / "a.h5", progress=False)
    assert np.array_equal(np.asarray(r2["theta"]), np.asarray(r["theta"]))
    with pytest.raises(ConfigError, match="^width: no head of this two-layer description is wide"):
        mf.load(src, width=3)  # --width sets the wide heads' width; this model has none
    with pytest.raises(ConfigError, match="^--omega: not a parameter"):
        mf.load(src, omega=3)


def test_soft_loss_and_sampled_data_and_linear_readout():
    raw = base()
    raw["model"]["loss"] = "soft"
    raw["training"] = {"eta": 0.4, "steps": 5}
    d = twolayer_from_dict(raw)
    assert d.x.shape == (16, 4) and np.allclose(d.y.sum(axis=1), 1) and d.exact
    raw = base()
    raw["data"].update(exact=False, samples=50, seed=2)
    d = twolayer_from_dict(raw)
    assert d.x.shape == (50, 5) and not d.exact and d.data["sampled"]
    assert np.array_equal(d.x, twolayer_from_dict(raw).x)  # the seed fixes the set
    raw = base()
    raw["training"] = {"eta": 0.4, "steps": 5}
    del raw["selector"]
    raw["readout"] = {"kind": "linear", "W": 0.0}
    d = twolayer_from_dict(raw)
    assert d.net.readout == "linear" and (d.theta0[d.net.offset("readout.W"):] == 0).all()


def _set(raw, path, value):
    t = raw
    for k in path[:-1]:
        t = t[k]
    if value is KeyError:
        del t[path[-1]]
    else:
        t[path[-1]] = value


REFUSALS = [
    (("layers", 0, "heads", 0, "width"), 16, "layers[0].heads[0].width: only a bilinear score"),  # an rpe head
    (("layers", 0, "heads", 0, "reads"), "layer1.h1", "layers[0].heads[0].reads: a wide matrix"),
    (("layers", 0, "mlp"), "relu", "layers[0].mlp: a nonlinearity"),
    (("embedding",), "trainable", "embedding: trainable embeddings"),
    (("layers", 0, "heads", 0, "hidden_activation"), "relu", "layers[0].heads[0].hidden_activation:"),
    (("layers", 0, "stream"), "sum", "layers[0].stream: only 'concat'"),
    (("layers", 0, "heads", 0, "query"), "layer1.h1", "layers[0].heads[0].query: only a bilinear score"),
    (("layers", 0, "heads", 0, "key"), ["position", 3], "layers[0].heads[0].key: 'stream' or a list"),
    (("layers", 0, "heads", 0, "score"), "conv", "layers[0].heads[0].score:"),
    (("layers", 0, "heads", 0, "lags"), [3, 1], "layers[0].heads[0].lags:"),
    (("layers", 0, "heads", 0, "lags"), "1", "layers[0].heads[0].lags:"),
    (("layers", 0, "heads", 0, "lags"), KeyError, "layers[0].heads[0].lags: an rpe score"),
    (("layers", 0, "heads", 0, "value"), "hidden", "layers[0].heads[0].value:"),
    (("layers", 0, "heads", 0, "softmax"), "maybe", "layers[0].heads[0].softmax:"),
    (("layers", 0, "heads", 0, "normalise"), 2, "layers[0].heads[0].normalise:"),
    (("layers", 0, "heads", 0, "w"), [1.0, 2.0, 3.0], "layers[0].heads[0].w: 2 numbers"),
    (("layers", 0, "heads", 0, "A"), 1.0, "layers[0].heads[0].A: this head has no such block"),
    (("layers", 0, "heads", 0, "colour"), 1, "layers[0].heads[0]: unknown key 'colour'"),
    (("layers", 0, "heads"), [], "layers[0].heads: required"),
    (("layers",), [], "layers: required"),
    (("layers", 0, "heads", 0, "lags"), [9, 9], "layers[0].heads[0].lags: first lag 9"),
    (("data", "family"), "dag", "data.family: one of markov"),
    (("data", "d"), 1, "data.d:"),
    (("data", "L"), 0, "data.L:"),
    (("data", "L"), 30, "data.L: the exact law enumerates"),
    (("data", "pa"), [0], "data.pa:"),
    (("data", "pa"), [6], "data.L: an integer >= max(pa)"),
    (("data", "alpha"), -1, "data.alpha:"),
    (("data", "start"), "stationary", "data.start: 'uniform'"),
    (("data",), {"d": 2, "L": 4, "exact": True, "samples": 10}, "data.samples: not with exact = true"),
    (("data", "exact"), False, "data.samples: a positive integer"),
    (("data", "colour"), 1, "data: unknown key 'colour'"),
    (("model", "loss"), "mse", "model.loss:"),
    (("model", "colour"), 1, "model: unknown key 'colour'"),
    (("selector", "D"), -1, "selector.D:"),
    (("selector",), KeyError, "selector: the attention read-out needs"),
    (("readout", "kind"), "mlp", "readout.kind:"),
    (("readout", "W"), 0.0, "readout.W: the linear read-out's parameter"),
    (("init", "std"), -1, "init.std:"),
    (("training", "method"), "adam", "training.method:"),
    (("training", "eta"), 0, "training.eta:"),
    (("training", "stages", 0, "train"), ["nope"], "training.stages[0].train:"),
    (("training", "stages", 0, "steps"), -1, "training.stages[0].steps:"),
    (("training", "stages", 0, "until"), "margin>=1", "training.stages[0].until:"),
    (("training", "stages", 0, "steps"), KeyError, "training.stages[0].steps: required"),
    (("training", "stages"), [], "training.stages: a non-empty list"),
    (("parameters",), {"N": 2}, "parameters: a two-layer description declares no parameters"),
    (("colour",), 1, "model: unknown key 'colour'"),
    (("data",), {"family": "tokens", "d": 2, "tokens": [[0, 1, 1]], "test_tokens": [[0, 1]]}, "data.test_tokens:"),
    (("data",), {"family": "tokens", "d": 2, "tokens": [[0, 1, 2]]}, "data.tokens: integers 0..1"),
    (("data",), {"family": "tokens", "d": 2, "tokens": [[0, 1], [1]]}, "data.tokens: every sequence"),
    (("data",), {"family": "tokens", "d": 2}, "data.tokens: a non-empty list"),
]


@pytest.mark.parametrize("path,value,start", REFUSALS, ids=[r[2].split(":")[0] + "-" + str(i)
                                                            for i, r in enumerate(REFUSALS)])
def test_every_field_is_refused_in_one_line(path, value, start):
    raw = copy.deepcopy(base())
    _set(raw, path, value)
    with pytest.raises(ConfigError) as e:
        description_from_dict(raw)
    msg = str(e.value)
    assert msg.startswith(start) and "\n" not in msg, msg


def _toml(raw) -> str:
    lines = []

    def val(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return '"' + v + '"'
        if isinstance(v, list):
            return "[" + ", ".join(val(x) for x in v) + "]"
        return repr(v)

    def table(prefix, t, array=False):
        lines.append(("[[" + prefix + "]]") if array else ("[" + prefix + "]"))
        subs = []
        for k, v in t.items():
            if isinstance(v, dict):
                subs.append((k, v, False))
            elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
                subs.append((k, v, True))
            else:
                lines.append(f"{k} = {val(v)}")
        for k, v, arr in subs:
            for item in (v if arr else [v]):
                table(prefix + "." + k, item, arr)

    for k, v in raw.items():
        if not isinstance(v, (dict, list)) or (isinstance(v, list) and not all(isinstance(x, dict) for x in v)):
            lines.insert(0, f"{k} = {val(v)}")
    for k, v in raw.items():
        if isinstance(v, dict):
            table(k, v)
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            for item in v:
                table(k, item, True)
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("i", [0, 2, 5, 8, 24, 28, 41])
def test_refusals_on_the_command_line_exit_2_and_write_nothing(tmp_path, i):
    path, value, start = REFUSALS[i]
    raw = copy.deepcopy(base())
    _set(raw, path, value)
    src = tmp_path / "m.toml"
    src.write_text(_toml(raw), encoding="utf-8")
    out = tmp_path / "run.h5"
    r = subprocess.run([sys.executable, "-m", "meanfield", "model", "run", str(src), "--out", str(out)],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and start.split(":")[0] in lines[0], r.stderr
    assert "Traceback" not in r.stderr and not out.exists() and not list(tmp_path.glob("run.h5*"))


def test_a_flag_that_is_not_a_knob_is_refused_on_the_command_line(tmp_path):
    src = tmp_path / "m.toml"
    src.write_text(TOML, encoding="utf-8")
    out = tmp_path / "run.h5"
    r = subprocess.run([sys.executable, "-m", "meanfield", "model", "run", str(src), "--out", str(out), "--omega", "3"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2 and "--omega: not a parameter" in r.stderr and len(r.stderr.strip().splitlines()) == 1, \
        r.stderr
    assert not out.exists()


def test_doctests():
    for mod in (twolayer_desc, twolayer_run):
        res = doctest.testmod(mod)
        assert res.failed == 0 and res.attempted > 0


def test_the_sampled_set_follows_the_exact_law():
    # samples = n draws the chain the exact law integrates: every sequence's frequency within 5 binomial errors
    from meanfield.engine.twolayer import markov_law

    n = 40_000
    for pa in ((1,), (1, 2)):
        x = twolayer_desc._sample_chain(2, 3, pa, 0.7, n, seed=4)
        law = markov_law(2, 3, pa, 0.7)
        codes = x @ (2 ** np.arange(3, -1, -1))
        freq = np.bincount(codes, minlength=16) / n
        lc = law.tokens @ (2 ** np.arange(3, -1, -1))
        pr = law.prob[np.argsort(lc)]
        assert (np.abs(freq - pr) <= 5 * np.sqrt(pr * (1 - pr) / n) + 1e-12).all()


def test_flow_runs_and_a_diverging_run_keeps_a_valid_file(tmp_path):
    from meanfield.core.run import read_file

    raw = base()
    raw["training"] = {"method": "flow", "t_end": 5.0}
    r = twolayer_run.run(twolayer_from_dict(raw))
    assert r.status == "complete" and r.loss[-1] < r.loss[0] and abs(r.t[-1] - 5.0) < 1e-9
    # the flow and small-step GD agree to first order in eta
    raw["training"] = {"method": "gd", "eta": 0.005, "steps": 1000, "record_every": 1000}
    g = twolayer_run.run(twolayer_from_dict(raw))
    assert np.abs(np.asarray(g["theta"])[-1] - np.asarray(r["theta"])[-1]).max() < 1e-2
    raw["training"] = {"eta": 1e7, "steps": 50}
    raw["layers"][0]["heads"][1]["score"] = "bilinear"
    raw["layers"][0]["heads"][1].pop("lags")
    src = tmp_path / "div.toml"
    import tomllib  # noqa: F401

    desc = twolayer_from_dict(raw)
    traj, path = twolayer_run.run_to_file(desc, tmp_path / "div.h5", progress=False)
    run = read_file(path)
    assert traj.status == "diverged" and run.status == "diverged" and np.isfinite(np.asarray(run["theta"])).all()
    assert "try a smaller eta" in run.message
    del src


def test_a_forward_pass_that_would_not_fit_is_refused_before_allocating():
    raw = base()
    raw["data"] = {"family": "markov", "d": 3, "L": 12, "exact": True}
    raw["layers"][0]["heads"] = [{"score": "bilinear"}] * 2
    with pytest.raises(ConfigError, match="^data.L: the exact law enumerates|^data: one loss and gradient needs"):
        twolayer_from_dict(raw)


@pytest.mark.parametrize("verb, says", [(["derive"], "a two-layer description takes `model run` (and, with a wide"),
                                         (["width-sweep", "--widths", "2,4"], "width: no head of this two-layer")])
def test_the_verbs_not_built_for_two_layer_descriptions_are_one_line_refusals(tmp_path, verb, says):
    src = tmp_path / "m.toml"
    src.write_text(TOML, encoding="utf-8")
    out = tmp_path / "o.h5"
    r = subprocess.run([sys.executable, "-m", "meanfield", "model", verb[0], str(src), *verb[1:], "--out", str(out)]
                       if verb[0] != "derive" else [sys.executable, "-m", "meanfield", "model", "derive", str(src)],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and says in lines[0], r.stderr
    assert not out.exists()


def test_the_size_guard_passes_the_induction_default_and_refuses_beyond():
    from meanfield.engine.twolayer_net import memory_bytes

    net = twolayer_from_dict(base()).net
    big = twolayer_desc.MAX_FORWARD_BYTES
    # the induction default (10^4 sequences of length 100, 3 rpe heads) fits; 10^6 of them do not
    import meanfield as mf

    ind = mf.load("induction", n_train=5).net
    assert memory_bytes(ind, 10_000) < big < memory_bytes(ind, 1_000_000)
    assert memory_bytes(net, 10) > 0


def test_sigint_ends_a_long_run_within_2_s_with_a_valid_file(tmp_path):
    import signal
    import time

    from meanfield.core.run import read_file

    src = tmp_path / "long.toml"
    src.write_text(TOML.replace("steps = 30", "steps = 300000"), encoding="utf-8")
    out = tmp_path / "long.h5"
    p = subprocess.Popen([sys.executable, "-m", "meanfield", "model", "run", str(src), "--out", str(out), "--quiet", "--force"],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(12)  # imports and the first steps
    t0 = time.perf_counter()
    p.send_signal(signal.SIGINT)
    p.communicate(timeout=60)
    waited = time.perf_counter() - t0
    print("exit after SIGINT:", round(waited, 2), "s")
    assert p.returncode == 130 and waited < 2.0, waited
    run = read_file(out)
    assert run.status == "interrupted" and len(run.t) >= 1


def test_a_run_knob_the_run_would_ignore_is_refused():
    for ov, start in [({"steps": 5}, "--steps: this description has 3 stages"),
                      ({"t_end": 5}, "--t-end: this description has 3 stages")]:
        with pytest.raises(ConfigError, match="^" + start):
            twolayer_from_dict(base(), ov)
    raw = base()
    raw["training"] = {"eta": 0.1, "steps": 3}
    assert twolayer_from_dict(raw, {"steps": 7}).stages[0].length == 7
    with pytest.raises(ConfigError, match="^--t-end: for method flow or rk4 only"):
        twolayer_from_dict(raw, {"t_end": 2})
    raw["training"] = {"method": "flow", "t_end": 1.0}
    assert twolayer_from_dict(raw, {"t_end": 2}).stages[0].length == 2.0
    raw["training"] = {"stages": [{"train": "all", "steps": 2, "eta": 0.1}]}
    with pytest.raises(ConfigError, match="^--eta: every stage"):
        twolayer_from_dict(raw, {"eta": 0.3})


def test_a_large_fixed_data_set_writes_its_run_file(tmp_path):
    # the sequences are datasets, not a JSON attribute (an HDF5 attribute holds 64 kB)
    import meanfield as mf
    from meanfield.core.run import read_file

    desc = mf.load("induction", n_train=3000, n_test=100, L=30, stage_steps="1,1,1")
    r = mf.run(desc, out=tmp_path / "big.h5", progress=False)
    back = read_file(tmp_path / "big.h5")
    assert r.status == "complete" and np.asarray(back["tokens"]).shape == (3000, 31)
    assert np.asarray(back["test_tokens"]).shape == (100, 31) and len(back["loss_test"]) == len(back.t)
    assert back.attrs["description"]["data"]["tokens"] == "(the tokens dataset)"


def test_a_latent_causal_graph_law_its_soft_target_and_refusals():
    # the soft-target loss over the law of x_1..x_L equals the next-token loss over the law of x_1..x_(L+1)
    # (the posterior mean is E[x_(L+1) | context]); both from the description's own [data] tables
    from meanfield.engine.twolayer_net import loss_grad

    parents = [[], [1], [1], [2, 3], [4]]
    raw = base()
    raw["training"] = {"eta": 0.1, "steps": 2}
    raw["data"] = {"family": "graph", "d": 2, "parents": parents, "alpha": 0.7}
    hard = twolayer_from_dict(raw)
    raw["model"]["loss"] = "soft"
    soft = twolayer_from_dict(raw)
    assert hard.x.shape == (32, 5) and soft.x.shape == (16, 4) and hard.net.L == soft.net.L == 4
    theta = np.random.default_rng(0).normal(0, 0.4, hard.net.size)
    raw["readout"] = {"kind": "linear"}
    del raw["selector"]
    lin_soft = twolayer_from_dict(raw)
    raw["model"]["loss"] = "nll"
    lin_hard = twolayer_from_dict(raw)
    th = np.random.default_rng(1).normal(0, 0.4, lin_hard.net.size)
    ls = loss_grad(th, lin_soft.net, lin_soft.x, lin_soft.y, lin_soft.p)[0]
    lh = loss_grad(th, lin_hard.net, lin_hard.x, lin_hard.y, lin_hard.p)[0]
    assert abs(ls - lh) <= 1e-12
    assert np.isfinite(loss_grad(theta, hard.net, hard.x, hard.y, hard.p)[0])
    for data, start in [({"family": "graph", "d": 2, "parents": [[]]}, "data.parents: one list per position"),
                        ({"family": "graph", "d": 2, "parents": [[], [2]]}, "data.parents:"),
                        ({"family": "graph", "d": 2, "parents": [[], [1]], "pa": [1]}, "data: unknown key 'pa'")]:
        raw2 = base()
        raw2["data"] = data
        with pytest.raises(ConfigError, match="^" + re.escape(start)):
            twolayer_from_dict(raw2)


def test_loss_floor_and_a_held_out_set_of_another_length():
    # [model] loss = official-ce and yhat_floor reach the network; data.test_tokens may have another length
    # (its loss is that of the same blocks on the longer contexts: the explicit numpy loss below)
    from meanfield.engine.twolayer_desc import twolayer_from_dict
    from meanfield.engine.twolayer_net import loss_only
    from meanfield.engine.twolayer_run import run

    rng = np.random.default_rng(3)
    tok = rng.integers(0, 2, size=(12, 6)).tolist()
    test = rng.integers(0, 2, size=(5, 9)).tolist()
    raw = {"model": {"class": "twolayer", "loss": "official-ce"},
           "data": {"family": "tokens", "d": 2, "tokens": tok, "test_tokens": test},
           "layers": [{"heads": [{"score": "rpe", "lags": [1, 2], "normalise": True, "value": "token"}]}],
           "selector": {"D": 1}, "readout": {"kind": "attention", "a": 1.0}, "training": {"steps": 3, "eta": 0.2}}
    desc = twolayer_from_dict(raw)
    assert desc.net.ce == "softmax" and desc.test_net.L == 8 and desc.net.L == 5
    r = run(desc)
    xt = np.asarray(test)
    lt = loss_only(r["theta"][-1], desc.test_net, xt, np.eye(2)[xt[:, 8]], np.full(5, 0.2))
    assert abs(r["loss_test"][-1] - lt) <= 1e-14
    floor = twolayer_from_dict({**raw, "model": {"class": "twolayer", "yhat_floor": 1e-4}})
    assert floor.net.ce == "log" and abs(floor.net.log_cap - np.log(1e4)) <= 1e-12
    for bad, field in [({"yhat_floor": 1.5}, "model.yhat_floor"), ({"yhat_floor": 0}, "model.yhat_floor"),
                       ({"loss": "hinge"}, "model.loss")]:
        with pytest.raises(ConfigError) as e:
            twolayer_from_dict({**raw, "model": {"class": "twolayer", **bad}})
        assert str(e.value).startswith(field) and "\n" not in str(e.value)
    # a network whose blocks depend on L (a bilinear head over every causal lag) refuses another test length
    stream = {**raw, "layers": [{"heads": [{"score": "bilinear"}]}]}
    with pytest.raises(ConfigError, match="^data.test_tokens: sequences of the training length"):
        twolayer_from_dict(stream)
