"""Model descriptions: TOML loading, one-line refusals (exit 2), the model CLI,
the Python API, and the engine's general kernel against the explicit network
(``meanfield.engine.oracle``: plain numpy weights, its own forward and
backward; an independent code path) for every head/value/loss construct."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from meanfield.core.config import ConfigError
from meanfield.engine.description import description_from_dict, load_description
from proc_signals import wait_until_catches

ROOT = Path(__file__).resolve().parents[1]
MIXTURE = ROOT / "meanfield" / "models" / "mixture.toml"

BASE = {
    "dictionary": {"features": ["a", "b", "c"], "gram": [[1, 0.3, 0], [0.3, 1, 0.1], [0, 0.1, 1]]},
    "data": {"rows": [
        {"tokens": ["a", "-b", "c"], "target": 1, "weight": 1},
        {"tokens": [[0.5, 1, 0], "b"], "target": -1, "weight": 2, "counts": [2, 1]},
        {"tokens": ["c", "a", [0.2, 0.1, -1]], "target": 1, "weight": 1},
        {"tokens": ["-a", "b"], "target": -1, "weight": 1.5}]},
    "parameters": {"width": 4, "seed": 3, "eta": 0.3, "steps": 25, "record_every": 1,
                   "neuron_init": "gaussian:0.5", "omega": 0.7, "omega_v": 0.6, "sigma_r": 0.8},
}

CASES = {
    "neuron_softmax_two_heads": ([{"name": "h1"}, {"name": "h2", "sign": -1}], "logistic", None),
    "linear_merged_last_no_self_trainable_sign": (
        [{"attention": "linear", "kq": "merged", "query": "last", "query_self": False, "value": "linear",
          "train_sign": True}], "logistic", None),
    "matrix_fixed_query_scaled": ([{"query": "fixed", "query_vector": [0.3, -1, 0.5], "value": "matrix",
                                    "scale": 1.5}], "squared", [0.5, -1, 2, 0.1]),
    "token_squared": ([{"value": "token", "query": "last"}], "squared",
                      [[1, 0, 0], [0, 1, 0], [0, 0, 1], [0.5, 0.5, 0]]),
    "cross_entropy_3_classes": ([{"value": "neuron", "outputs": 3, "n_neurons": 2},
                                 {"name": "g", "value": "matrix", "outputs": 3, "attention": "linear"}],
                                "cross_entropy", [0, 1, 2, 1]),
}


def _desc(name, **params):
    heads, loss, targets = CASES[name]
    raw = {k: (dict(v) if isinstance(v, dict) else v) for k, v in BASE.items()}
    raw["parameters"] = {k: v for k, v in {**BASE["parameters"], **params}.items() if v is not None}
    raw["heads"] = heads
    raw["model"] = {"loss": loss}
    if targets is not None:
        raw["data"] = {"rows": [dict(r, target=t) for r, t in zip(BASE["data"]["rows"], targets)]}
    return description_from_dict(raw)


@pytest.mark.parametrize("name", list(CASES))
def test_engine_gd_equals_explicit_network(name):
    """200-free short version of the oracle check (E2's random descriptions do
    the long one): 25 exact GD steps, width 4, d = 6 > P = 3, non-identity Gram,
    counts, every construct; relative 1e-10 (round-off differences are ~1e-15)."""
    from meanfield.engine import oracle as O
    from meanfield.engine.reduce import initial_state
    from meanfield.engine.system import integrate_description

    desc = _desc(name)
    E = O.embedding(desc.dictionary.Gamma, 6, 1)
    p0 = O.weights_from_engine_init(desc, E, seed_orth=5)
    np.testing.assert_allclose(O.pack(desc, E, p0), initial_state(desc), atol=1e-12)
    res = O.Oracle(desc, E).run(p0, record_every=1, project=lambda p: O.pack(desc, E, p))
    _, traj = integrate_description(desc)
    Y, Yo = np.array(traj.y), np.array(res["states"])
    assert Y.shape == Yo.shape
    assert res["loss"][-1] < res["loss"][0]  # it trains
    err = np.max(np.abs(Y - Yo)) / max(1.0, np.max(np.abs(Yo)))
    assert err <= 1e-10, err


@pytest.mark.parametrize("name", ["matrix_fixed_query_scaled", "linear_merged_last_no_self_trainable_sign"])
def test_general_flow_against_scipy_dop853(name):
    from scipy.integrate import solve_ivp

    from meanfield.engine.reduce import initial_state
    from meanfield.engine.system import integrate_description, system_of

    desc = _desc(name, method="flow", t_end=5.0, rtol=1e-11, atol=1e-13, record_dt=0.5, record_every=None, width="inf")
    system = system_of(desc)
    _, traj = integrate_description(desc, system=system)
    assert not traj.warnings
    arr = traj.arrays()
    sol = solve_ivp(lambda t, y: system.rhs(y, 15), (0.0, 5.0), initial_state(desc), method="DOP853", rtol=1e-12,
                    atol=1e-14, t_eval=arr["t"])
    err = np.max(np.abs(sol.y.T - arr["y"])) / max(1.0, np.max(np.abs(arr["y"])))
    assert err <= 1e-7, err


# ------------------------------------------------------------------ refusals


@pytest.mark.parametrize("patch, field", [
    ({"heads": [{"hidden_activation": "relu"}]}, "heads[0].hidden_activation: outside the Gram-closure class"),
    ({"heads": [{"key_activation": "tanh"}]}, "heads[0].key_activation: outside the Gram-closure class"),
    ({"heads": [{"kq": "outer"}]}, "heads[0].kq: 'outer' is outside the Gram-closure class"),
    ({"heads": [{"value": "mlp"}]}, "heads[0].value: 'mlp' is outside the Gram-closure class"),
    ({"heads": [{"attention": "sparsemax"}]}, "heads[0].attention: must be one of softmax, linear"),
    ({"heads": [{"query": "fixed"}]}, "heads[0].query_vector: required"),
    ({"heads": [{"n_neurons": 2, "value": "linear"}]}, "heads[0].n_neurons"),
    ({"heads": [{"colour": 1}]}, "heads[0]: unknown key 'colour'"),
    ({"model": {"loss": "hinge"}}, "model.loss: must be one of"),
    ({"model": {"loss": "cross_entropy"}}, "model.loss: cross_entropy needs"),
    ({"model": {"l1_penalty": 0.1}}, "model.l1_penalty: outside the Gram-closure class"),
    ({"dictionary": {"features": ["a", "b", "c"], "gram": [[1, 2, 0], [2, 1, 0], [0, 0, 1]]}},
     "dictionary.gram: must be symmetric positive definite"),
    ({"data": {"rows": [{"tokens": ["z"], "target": 1}]}}, "data.rows[0].tokens[0]: unknown feature 'z'"),
    ({"data": {"rows": [{"tokens": [4], "target": 1}]}}, "data.rows[0].tokens[0]: feature index must be"),
    ({"data": {"function": "os:system"}}, "data.function"),
    ({"data": {"function": "__import__('os')"}}, "data.function: must be \"package.module:function\""),
    ({"parameters": {"eta": -1}}, "eta: must be > 0"),
    ({"parameters": {"K": 3}}, "parameters.K: not a run knob and never referenced as \"$K\""),  # a typo is not a silent knob
    ({"training": {"stages": [{"train": ["attention", "everything"], "steps": 3}]}},
     "training.stages[0].train: must be one of"),
])
def test_refusals_are_one_line_naming_the_field(patch, field):
    raw = {**BASE, "heads": [{}], "model": {"loss": "logistic"}}
    raw.update(patch)
    with pytest.raises(ConfigError) as e:
        description_from_dict(raw)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(field.split(":")[0]) and field in msg, msg


def test_data_function_is_imported_by_name_not_evaluated(tmp_path, monkeypatch):
    mod = tmp_path / "e1_userdata.py"
    mod.write_text("import numpy as np\n"
                   "def make(features, n=3):\n"
                   "    P = len(features)\n"
                   "    X = np.zeros((n, 2, P)); X[:, 0, 0] = 1; X[:, 1, 1] = np.arange(n)\n"
                   "    return {'tokens': X, 'target': np.where(np.arange(n) % 2, 1.0, -1.0)}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    raw = {**BASE, "heads": [{}], "data": {"function": "e1_userdata:make", "args": {"n": 5}}}
    d = description_from_dict(raw)
    assert d.data.n == 5 and d.data.L == 2
    np.testing.assert_allclose(d.data.weight, 0.2)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "meanfield", "model", *args], capture_output=True, text=True,
                          cwd=ROOT)


#: a softmax head's last query (query_self = SELF) on a data set with a one-token row
ALONE = ('[dictionary]\nfeatures = ["a", "b"]\n[data]\nrows = [{tokens = ["a", "b"], target = 1}, '
         '{tokens = ["b"], target = -1}]\n[[heads]]\nattention = "softmax"\nquery = "last"\n'
         'query_self = SELF\nvalue = "linear"\n[parameters]\nsteps = 3\n')


def test_cli_refusals_exit_2_one_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[dictionary]\nfeatures = ["a", "b"]\n[data]\nrows = [{tokens = ["a"], target = 1}]\n'
                   '[[heads]]\nhidden_activation = "relu"\n')
    # a last query left out of the keys (query_self = false) has no key in a one-token row: a softmax over
    # nothing is undefined (was a division by zero inside the kernels)
    alone = tmp_path / "alone.toml"
    alone.write_text(ALONE.replace("SELF", "false"))
    for args, start in (([str(bad), "--out", str(tmp_path / "x.h5")], "heads[0].hidden_activation"),
                        (["mixture", "--K", "1", "--out", str(tmp_path / "y.h5")], "K: must be an integer >= 2"),
                        ([str(bad.with_name("nope.toml"))], "model: no such file"),
                        (["mixture", "--omega-v", "2", "--out", str(tmp_path / "z.h5")], "--omega-v: not a parameter"),
                        (["mixture", "--out", str(tmp_path / "z.txt")], "out: must be a path ending in .h5"),
                        ([str(alone), "--out", str(tmp_path / "a.h5")], "heads[0].query_self")):
        p = _cli("run", *args)
        assert p.returncode == 2, p.stderr
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and start in lines[0], p.stderr
    assert not list(tmp_path.glob("*.h5")) and not list(tmp_path.glob("*.txt"))
    p = _cli("plot", str(tmp_path / "missing.h5"))
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    p = _cli("sweep", "mixture", "--param", "omega=1,x", "--out", str(tmp_path / "sw"))
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_cli_run_mixture_flags_like_mixture_run(tmp_path):
    """``meanfield model run mixture.toml`` takes the flags of ``meanfield mixture
    run`` and writes the same datasets (equal to 1e-12)."""
    from meanfield.core.io import read_run

    flags = ["--K", "3", "--width", "5", "--seed", "1", "--steps", "60", "--record-every", "1", "--quiet"]
    a = _cli("run", str(MIXTURE), *flags, "--out", str(tmp_path / "e.h5"))
    assert a.returncode == 0, a.stderr
    b = subprocess.run([sys.executable, "-m", "meanfield", "mixture", "run", *flags, "--out", str(tmp_path / "m.h5")],
                       capture_output=True, text=True, cwd=ROOT)
    assert b.returncode == 0, b.stderr
    e, m = read_run(tmp_path / "e.h5"), read_run(tmp_path / "m.h5")
    assert e.attrs["system"] == m.attrs["system"] == "mixture"
    for k in ("t", "step", "stage", "loss", "S", "A", "B", "w", "margin", "u"):
        np.testing.assert_allclose(e[k], m[k], rtol=0, atol=1e-12 * max(1.0, float(np.max(np.abs(m[k])))))
    assert set(m["samples"]) <= set(e["samples"])
    for k in ("T1", "T2", "T_loss", "K", "L", "width", "seed"):
        assert (e.attrs[k] == m.attrs[k]) or (np.isnan(e.attrs[k]) and np.isnan(m.attrs[k]))


def test_cli_derive_json_names_and_counts():
    import json

    p = _cli("derive", "mixture", "--K", "3", "--format", "json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    names = {(v["head"], v["name"]): v["count"] for v in out["variables"]}
    P = 6
    assert names[("+", "S")] == P * P and names[("+", "A")] == P * (P + 1) // 2 and names[("-", "w")] == P
    assert out["independent"] == 2 * (P * P + P * (P + 1) + P)


def test_general_run_file_and_api(tmp_path):
    import meanfield.engine as me
    from meanfield.engine.runs import run_to_file
    from meanfield.core.io import read_run

    d = _desc("cross_entropy_3_classes", steps=10)
    r, path = run_to_file(d, tmp_path / "g.h5", progress=False)
    f = read_run(path)
    assert f.attrs["system"] == "engine" and f.attrs["status"] == "complete"
    assert f["variables"]["h1"]["w"].shape == (11, 3, 2, 3)
    assert f["variables"]["g"]["V.r1"].shape == (11, 3, 1)
    np.testing.assert_allclose(f["loss"], r.loss)
    # named access in memory
    m = me.run(me.load(MIXTURE, K=2, steps=20, record_every=5))
    assert m.S["+", "c1", "v1"].shape == (5,)
    np.testing.assert_array_equal(m.S["-", "v2", "c1"], m.var("-", "S")[:, 3, 0])
    assert m.w["-", "v1"].shape == (5,)
    info = me.derive(m.desc, latex=False)
    assert info["state_size"] == 136


def test_diverged_and_interrupted_keep_a_valid_file(tmp_path):
    from meanfield.engine.runs import run_to_file
    from meanfield.core.io import read_run

    d = load_description(MIXTURE, {"eta": 1e6, "steps": 50, "max_abs": 1e3, "neuron_init": "gaussian:1"})
    r, path = run_to_file(d, tmp_path / "div.h5", progress=False)
    f = read_run(path)
    assert r.status == f.attrs["status"] == "diverged"
    assert np.all(np.isfinite(f["S"])) and len(f["t"]) >= 1


def test_import_meanfield_is_light():
    code = "import sys, meanfield, meanfield.engine; print('sympy' in sys.modules, 'numba.cuda' in sys.modules, " \
           "'numba' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False", "False"]


def test_model_flags_cover_every_parameter_without_numba_at_parser_build():
    import dataclasses

    from meanfield.engine.cli import _param_fields
    from meanfield.engine.description import RunParams
    from meanfield.models.mixture.config import MixtureConfig

    names = set(_param_fields())
    assert {f.name for f in dataclasses.fields(MixtureConfig)} <= names
    assert {f.name for f in dataclasses.fields(RunParams)} <= names
    code = ("import sys; from meanfield.engine.cli import add_parser; import argparse; "
                        "p = argparse.ArgumentParser(); add_parser(p.add_subparsers()); "
            "print('numba' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"


def test_cli_sigint_leaves_an_interrupted_valid_file(tmp_path):
    import signal
    import time

    from meanfield.core.io import read_run

    out = tmp_path / "long.h5"
    proc = subprocess.Popen([sys.executable, "-m", "meanfield", "model", "run", str(MIXTURE), "--steps", "100000000", "--force",
                             "--record-every", "500", "--out", str(out)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until_catches(proc)  # the run's Monitor has installed its handlers: then let it step
        assert proc.poll() is None, proc.communicate()
        # the CLI's guard catches SIGTERM from the start, the run's Monitor only once the run is set up
        # (imports, description, cached kernels: about a second, more on a loaded machine)
        time.sleep(5.0)
        proc.send_signal(signal.SIGINT)
        so, se = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, (so, se)
    f = read_run(out)
    assert f.attrs["status"] == "interrupted" and f.attrs["engine"] == 1
    assert len(f["t"]) >= 2 and f["step"][-1] > 0 and np.all(np.isfinite(f["S"]))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["long.h5"]


def test_model_sweep_runs_grid_and_resumes(tmp_path):
    import json

    from meanfield.engine.sweep import model_sweep
    from meanfield.core.io import read_run

    out = tmp_path / "sw"
    idx = model_sweep(MIXTURE, {"steps": 30, "record_every": 10}, {"omega": [0.1, 0.5], "width": ["inf", 3]}, out,
                      workers=1, progress=False)
    assert idx["status"] == "complete" and idx["n_points"] == 4
    res = [e["result"] for e in idx["points"]]
    assert all(r["status"] == "complete" for r in res)
    # each point is the run of its own parameters
    p = read_run(out / idx["points"][3]["path"])
    assert p.attrs["omega"] == 0.5 and p.attrs["width"] == 3 and len(p["t"]) == 4
    again = model_sweep(MIXTURE, {"steps": 30, "record_every": 10}, {"omega": [0.1, 0.5], "width": ["inf", 3]}, out,
                        workers=1, progress=False)
    assert all(e.get("skipped") for e in again["points"])
    assert json.loads((out / "sweep.json").read_text())["system"] == "model"
    with pytest.raises(ConfigError, match="sweep point"):
        model_sweep(MIXTURE, {}, {"K": [1, 2]}, tmp_path / "bad", workers=1, progress=False)


def test_portable_source_runs_as_plain_python_and_matches_the_cpu_kernel():
    """The kernels are target-agnostic ``@portable`` source: compiled with the
    identity "jit" (plain Python, what the CUDA simulator would run) they give
    the CPU kernel's loss, gradients and GD step."""
    from meanfield.engine import kernels as K_
    from meanfield.engine.reduce import initial_state
    from meanfield.engine.system import system_of
    from meanfield.core.activations import compile_portable

    ns = compile_portable(lambda f: f)
    for name in ("cross_entropy_3_classes", "linear_merged_last_no_self_trainable_sign"):
        desc = _desc(name)
        sysm = system_of(desc)
        pk, lay = sysm.pk, sysm.pk.lay
        y = initial_state(desc)
        n, L = pk.nzn.shape
        sc = K_._scratch(y.size, n, L, lay.P, len(lay.heads), pk.R, pk.C, lay.Nmax)
        u, margin, zb, f, df, G, gflat, T, p, v, om, tk, Xm, Ym, tmp, new, pa, lka = sc
        args = (y, lay.hi, lay.hf, lay.qv, pk.nzi, pk.nzc, pk.nzn, pk.cnt, pk.last, pk.leff, pk.target, pk.weight,
                pk.kind, pk.r0, True, u, margin, zb, f, df, G, gflat, T, p, v, om, tk, pa, lka)
        loss_py = ns.eng_loss_grads(*args)
        ns.eng_update(y, new, lay.hi, lay.hf, lay.Gr, lay.grp, pk.Gam, G, gflat, 0.3, 15, True, Xm, Ym, tmp)
        loss, G2, g2, m2, u2 = sysm.loss_and_grads(y)
        y2 = y.copy()
        sysm.gd_advance(y2, 1, 0.3, 15, None)
        assert abs(loss_py - loss) <= 1e-12 * max(1.0, abs(loss))
        np.testing.assert_allclose(G, G2, rtol=0, atol=1e-12)
        np.testing.assert_allclose(gflat, g2, rtol=0, atol=1e-12)
        np.testing.assert_allclose(new, y2, rtol=0, atol=1e-12)


def test_bound_on_a_described_model_run(tmp_path):
    from meanfield.engine.runs import run_to_file

    d = _desc("linear_merged_last_no_self_trainable_sign", steps=20, record_every=2)
    _, path = run_to_file(d, tmp_path / "b.h5", progress=False)
    ok = subprocess.run([sys.executable, "-m", "meanfield", "model", "bound", str(path), "loss <= log(2) + 1e-12"],
                        capture_output=True, text=True, cwd=ROOT)
    assert ok.returncode == 0 and "HOLDS" in ok.stdout, ok.stderr
    bad = subprocess.run([sys.executable, "-m", "meanfield", "model", "bound", str(path), "loss <= 0.5 * log(2)"],
                         capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 1 and "VIOLATED" in bad.stdout, (bad.stdout, bad.stderr)
    ref = subprocess.run([sys.executable, "-m", "meanfield", "model", "bound", str(path), "S+[a,b] <= 1"],
                         capture_output=True, text=True, cwd=ROOT)
    assert ref.returncode == 2 and len(ref.stderr.strip().splitlines()) == 1, ref.stderr


def test_every_description_shares_one_compiled_kernel():
    """Compile once: the mixture family (read-only sample arrays), table data
    and every head/value/loss choice hand the kernels the same array types, so
    numba keeps one specialisation (one cache entry) for all of them."""
    from meanfield.engine import kernels as K_
    from meanfield.engine.runs import run

    run(load_description(MIXTURE, {"steps": 2, "record_every": 1}))
    for name in CASES:
        run(_desc(name, steps=2))
    assert len(K_.gd_advance.signatures) == 1, K_.gd_advance.signatures
    assert len(K_.loss_and_grads.signatures) == 1


def test_a_last_query_without_keys_is_refused_from_python(tmp_path):
    """The same refusal from ``meanfield.load`` + ``run``; with ``query_self = true`` the row is its own key."""
    import meanfield as mf

    (tmp_path / "no.toml").write_text(ALONE.replace("SELF", "false"))
    with pytest.raises(ConfigError, match=r"heads\[0\]\.query_self"):
        mf.run(mf.load(tmp_path / "no.toml"))
    (tmp_path / "yes.toml").write_text(ALONE.replace("SELF", "true"))
    r = mf.run(mf.load(tmp_path / "yes.toml"))
    assert r.status == "complete" and np.isfinite(r.loss).all()
