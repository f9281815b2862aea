"""Declared parameters of a general description: ``[parameters]`` name = default,
referenced elsewhere as a whole value "$name", overridden by CLI flags and by
``meanfield.engine.load(path, **overrides)``; stage lengths by ``--steps`` where a
stage says ``steps = "$steps"``. The expected values are written out by hand
(the description as it would be with the value in place), never computed by
the code under test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import meanfield.engine as me
from meanfield.core.config import ConfigError
from meanfield.engine.description import description_from_dict

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "meanfield" / "models"

TOY = """
name = "toy"
[dictionary]
features = ["a", "b", "c"]
gram = [[1.0, "$rho", 0.0], ["$rho", 1.0, 0.0], [0.0, 0.0, 1.0]]
[data]
rows = [ { tokens = ["a", "-b"], target = 1 }, { tokens = ["c", "b"], target = -1, weight = "$w2" } ]
[[heads]]
attention = "$attention"
value = "linear"
outputs = 1
[parameters]
rho = 0.2
w2 = 1
attention = "softmax"
eta = 0.3
[[training.stages]]
name = "keys"
train = ["attention"]
steps = "$keys_steps"
[[training.stages]]
name = "rest"
steps = "$steps"
"""


@pytest.fixture
def toy(tmp_path):
    p = tmp_path / "toy.toml"
    p.write_text(TOY)
    return p


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "meanfield", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def test_defaults_and_python_overrides(toy):
    with pytest.raises(ConfigError, match=r"^training.stages\[0\].steps: \"\$keys_steps\" is not a declared"):
        me.load(toy)  # keys_steps is referenced but not declared
    text = toy.read_text().replace("rho = 0.2", "rho = 0.2\nkeys_steps = 7")
    toy.write_text(text)
    d = me.load(toy)
    assert np.allclose(d.dictionary.gram, [[1, 0.2, 0], [0.2, 1, 0], [0, 0, 1]])
    assert d.model.heads[0].attention == "softmax"
    assert [s.length for s in d.training.stages] == [7, 1000]  # $steps: the run knob's default
    assert np.allclose(d.data.weight, [0.5, 0.5])
    d = me.load(toy, rho=0.5, w2=3, attention="linear", keys_steps=2, steps=5, eta=None)  # None: not given
    assert np.allclose(d.dictionary.gram, [[1, 0.5, 0], [0.5, 1, 0], [0, 0, 1]])
    assert d.model.heads[0].attention == "linear"
    assert [s.length for s in d.training.stages] == [2, 5]
    assert np.allclose(d.data.weight, [0.25, 0.75])
    assert d.training.eta == 0.3


@pytest.mark.parametrize("over, field", [
    ({"w2": "two"}, "w2: must be an integer"),
    ({"w2": 1.5}, "w2: must be an integer"),
    ({"rho": "x"}, "rho: must be a number"),
    ({"attention": "sparsemax"}, "heads[0].attention: must be one of"),
    ({"rho": 1.5}, "dictionary.gram: must be symmetric positive definite"),
    ({"colour": 1}, "parameters: unknown key 'colour'"),
])
def test_bad_override_is_one_line(toy, over, field):
    toy.write_text(toy.read_text().replace("rho = 0.2", "rho = 0.2\nkeys_steps = 7"))
    with pytest.raises(ConfigError) as e:
        me.load(toy, **over)
    assert "\n" not in str(e.value) and str(e.value).startswith(field), str(e.value)


BASE = {"name": "b", "dictionary": {"features": ["a", "b"]},
        "data": {"rows": [{"tokens": ["a"], "target": 1}, {"tokens": ["b"], "target": -1}]},
        "heads": [{"value": "linear"}], "model": {"loss": "logistic"}}


@pytest.mark.parametrize("patch, field", [
    ({"heads": [{"value": "$v"}]}, "heads[0].value: \"$v\" is not a declared parameter"),
    ({"heads": [{"value": "$v + 1"}]}, "heads[0].value: '$v + 1' is not a parameter reference"),
    ({"heads": [{"value": "$__import__"}]}, "heads[0].value: \"$__import__\" is not a declared parameter"),
    ({"parameters": {"v": "linear"}}, "parameters.v: not a run knob and never referenced"),
    ({"parameters": {"v": {"x": 1}}}, "parameters.v: a declared parameter's default"),
    ({"parameters": {"v": "$steps"}}, "parameters.v: a default must be a value"),
    ({"parameters": {"out": "x.h5"}, "heads": [{"value": "$out"}]}, "parameters.out: reserved"),
    ({"parameters": {"fn": "os:getcwd"}, "data": {"function": "$fn"}}, "data.function: the function to import is named in the file"),
    ({"training": {"stages": [{"steps": 3}]}, "parameters": {"steps": 5}}, None),  # the table's own steps: allowed
])
def test_references_refused(patch, field):
    raw = {**BASE, **patch}
    if field is None:
        assert description_from_dict(raw).training.stages[0].length == 3
        return
    with pytest.raises(ConfigError) as e:
        description_from_dict(raw)
    assert "\n" not in str(e.value) and str(e.value).startswith(field.split(":")[0]) and field in str(e.value), \
        str(e.value)


def test_steps_override_refused_where_the_stages_do_not_take_it():
    raw = {**BASE, "training": {"stages": [{"steps": 3}]}}
    with pytest.raises(ConfigError, match=r"^steps: this description's \[\[training.stages\]\] have their own lengths"):
        description_from_dict(raw, {"steps": 10})
    raw = {**BASE, "training": {"stages": [{"steps": "$steps"}]}}
    assert description_from_dict(raw, {"steps": 10}).training.stages[0].length == 10
    raw = {**BASE, "training": {"stages": [{"steps": 3, "train": ["attention"]}, {"steps": 4}]}}
    assert [s.length for s in description_from_dict(raw, {"stage_steps": "5,0"}).training.stages] == [5, 0]
    for over, field in [({"stage_steps": "5"}, "stage_steps: 2 lengths needed"),
                        ({"stage_steps": "5,x"}, "stage_steps: must be an integer"),
                        ({"stage_steps": "5,-1"}, "stage_steps: must be an integer >= 0"),
                        ({"stage_times": "1,2"}, "stage_times: only for method flow or rk4")]:
        with pytest.raises(ConfigError) as e:
            description_from_dict(raw, over)
        assert str(e.value).startswith(field), str(e.value)
    with pytest.raises(ConfigError, match="^stage_steps: this description has no"):
        description_from_dict(BASE, {"stage_steps": "5"})


def test_shipped_descriptions_declare_their_parameters():
    d = me.load(MODELS / "incontext.toml", K=3, N=2, p1=0.5)
    assert d.dictionary.features == ("v1", "v2", "v3")
    # N = 2 context tokens over 3 features: 6 count vectors x 3 query features; hand-computed weights:
    # c = (2, 0, 0) has multinomial 1 * 0.5^2, query v1 has 0.5 -> 0.125
    assert d.data.n == 18
    names = list(d.data.names)
    w = dict(zip(names, d.data.weight))
    assert sum(w.values()) == pytest.approx(1.0)
    i = next(s for s in range(18) if np.allclose(d.data.counts[s, :3], [2, 0, 0]) and d.data.tokens[s, 3, 0] == 1)
    assert d.data.weight[i] == pytest.approx(0.5 ** 2 * 0.5)
    d0 = me.load(MODELS / "incontext.toml")
    assert d0.dictionary.features == ("v1", "v2", "v3", "v4") and np.allclose(d0.data.weight.sum(), 1)
    d = me.load(MODELS / "mixture_multiclass.toml", K=2, C=4, L=2)
    assert d.dictionary.features == ("c1", "c2", "v1_1", "v1_2", "v1_3", "v2_1", "v2_2", "v2_3")
    assert all(h.outputs == 4 for h in d.model.heads) and d.data.L == 2
    d = me.load(MODELS / "maxmargin.toml", n=6, T=2, data_seed=3, steps=50)
    assert d.data.n == 6 and d.data.L == 2 and d.training.stages[0].length == 50
    d1 = me.load(MODELS / "maxmargin.toml", n=6, T=2, data_seed=4)
    assert not np.allclose(d.data.tokens, d1.data.tokens)  # the data seed reaches the data function
    d = me.load(ROOT / "docs" / "examples" / "majority.toml", overlap=0.0, attention="linear")
    assert np.allclose(d.dictionary.gram, np.eye(3)) and d.model.heads[0].attention == "linear"


def test_cli_flags_override_and_refuse(tmp_path):
    out = tmp_path / "m.h5"
    r = _cli("model", "run", "maxmargin", "--n", "6", "--T", "2", "--data-seed=3", "--steps", "4", "--quiet",
             "--out", out, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    import h5py

    with h5py.File(out, "r") as f:
        assert f["margin"].shape[1] == 6 and int(f["step"][-1]) == 4
    from meanfield.core.io import read_run

    assert read_run(out).config["declared"] == {"n": 6, "T": 2, "data_seed": 3, "kq": "merged"}  # recorded
    for args, field in [(["--n", "many"], "n: must be an integer"),
                        (["--colour", "3"], "--colour: not a parameter of model maxmargin.toml"),
                        (["--K", "3"], "--K: not a parameter of model maxmargin.toml"),
                        (["--n"], "argument --n: expected one argument")]:
        bad = tmp_path / "bad.h5"
        r = _cli("model", "run", "maxmargin", *args, "--out", bad, cwd=tmp_path)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and field in lines[0] and "Traceback" not in r.stderr, r.stderr
        assert not bad.exists()
    r = _cli("model", "derive", "incontext", "--K", "3", "--N", "2", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert '"v3"' in r.stdout and '"v4"' not in r.stdout
    import json

    assert json.loads(r.stdout)["parameters"] == {"K": 3, "N": 2, "p1": 0.0}


def test_sweep_over_a_declared_parameter(tmp_path):
    import json

    r = _cli("model", "sweep", "maxmargin", "--param", "n=4,6", "--steps", "2", "--workers", "1", "--quiet", "--out",
             tmp_path / "sw", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    idx = json.loads((tmp_path / "sw" / "sweep.json").read_text())
    files = sorted(Path(e["file"]) if Path(e["file"]).is_absolute() else tmp_path / "sw" / e["file"]
                   for e in idx["points"]) if all("file" in e for e in idx["points"]) else None
    import h5py

    shapes = sorted(h5py.File(f, "r")["margin"].shape[1] for f in (files or sorted((tmp_path / "sw").rglob("*.h5"))))
    assert shapes == [4, 6]
    r = _cli("model", "sweep", "maxmargin", "--param", "q=1,2", "--out", tmp_path / "sw2", cwd=tmp_path)
    assert r.returncode == 2 and "q" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_record_flag_replaces_the_descriptions_grid():
    """maxmargin.toml records on a log grid (record_log = 200): a --record-every override replaces that grid
    (one grid per run) instead of clashing with it; two record flags at once are still one error."""
    d = me.load(MODELS / "maxmargin.toml", record_every=4, steps=20)
    assert (d.training.record_every, d.training.record_log) == (4, None)
    assert me.load(MODELS / "maxmargin.toml", steps=20).training.record_log == 200
    with pytest.raises(ConfigError, match="give one of record_every, record_log, record_dt"):
        me.load(MODELS / "maxmargin.toml", record_every=4, record_log=3)
