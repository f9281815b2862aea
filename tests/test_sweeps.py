"""General sweeps (grid parsing, resume, parallel = serial, interrupt) and the
width sweep (errors against independent runs, exponent, kink detection)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from meanfield.cli import main
from meanfield.core.config import ConfigError
from meanfield.models.mixture import claims as C
from meanfield.models.mixture.config import make_config
from meanfield.models.mixture.widths import fit_exponent, kink_events, width_sweep
from meanfield.core.sweep import SweepSpec, grid, parse_params, parse_values, run_sweep

ROOT = Path(__file__).resolve().parents[1]
FIELDS = ["omega", "eta", "steps", "K"]


def test_parse_values():
    assert parse_values("omega", "1e-3:0.1:log:3") == pytest.approx([1e-3, 1e-2, 1e-1])
    assert parse_values("eta", "0:1:lin:5") == pytest.approx([0, 0.25, 0.5, 0.75, 1])
    # one type per parameter (issue 14): numbers are floats like ranges, integers ints, the rest strings
    assert parse_values("eta", "0.1,0.5") == [0.1, 0.5] and all(type(v) is float for v in parse_values("eta", "1,0.5"))
    assert parse_values("width", "16,64") == [16, 64] and parse_values("width", "16,inf") == ["16", "inf"]
    for bad in ["-1:2:log:3", "", "1,,2", "a:b:log:3", "1:2:lin:0"]:
        with pytest.raises(ConfigError):
            parse_values("omega", bad)
    with pytest.raises(ConfigError, match="unknown config field 'omg'"):
        parse_params(["omg=1,2"], FIELDS)
    with pytest.raises(ConfigError, match="given twice"):
        parse_params(["omega=1", "omega=2"], FIELDS)
    with pytest.raises(ConfigError, match="NAME=VALUES"):
        parse_params(["omega"], FIELDS)
    g = grid(parse_params(["omega=1,2", "eta=3,4,5"], FIELDS))
    assert len(g) == 6 and g[0] == {"omega": 1, "eta": 3} and g[-1] == {"omega": 2, "eta": 5}


def test_sweep_runs_resumes_and_matches_single_runs(tmp_path):
    spec = SweepSpec({"steps": 200, "record_every": 50}, {"omega": [0.05, 0.2], "eta": ["0.25", "0.5"]}, tmp_path / "sw")
    idx = run_sweep(spec, workers=2, progress=False)
    assert idx["status"] == "complete" and idx["n_done"] == 4
    index = json.loads((tmp_path / "sw" / "sweep.json").read_text())
    assert [e["params"] for e in index["points"]] == [{"omega": 0.05, "eta": "0.25"}, {"omega": 0.05, "eta": "0.5"},
                                                      {"omega": 0.2, "eta": "0.25"}, {"omega": 0.2, "eta": "0.5"}]
    # each point equals the same run made on its own (independently of the sweep machinery)
    for e in index["points"]:
        cfg = make_config({"steps": 200, "record_every": 50}, **e["params"])
        ref = C.simulate(cfg)
        with h5py.File(tmp_path / "sw" / e["path"]) as f:
            np.testing.assert_array_equal(f["S"][:], ref["S"])
        assert e["result"]["loss_end"] == pytest.approx(float(ref["loss"][-1]), rel=1e-15)
    # resume: nothing is rerun; a damaged point is rerun
    mt = {e["path"]: os.path.getmtime(tmp_path / "sw" / e["path"]) for e in index["points"]}
    victim = tmp_path / "sw" / index["points"][2]["path"]
    with h5py.File(victim, "a") as f:
        f.attrs["status"] = "interrupted"
    idx2 = run_sweep(spec, workers=1, progress=False)
    assert sum(bool(e.get("skipped")) for e in idx2["points"]) == 3
    for e in idx2["points"]:
        changed = os.path.getmtime(tmp_path / "sw" / e["path"]) != mt[e["path"]]
        assert changed == (e["index"] == 2)
    # a changed base config in the same folder is refused (never mixed with the stale points), nothing rewritten
    mt2 = {e["path"]: os.path.getmtime(tmp_path / "sw" / e["path"]) for e in idx2["points"]}
    with pytest.raises(ConfigError, match="another grid or base config"):
        run_sweep(SweepSpec({"steps": 100, "record_every": 50}, spec.params, spec.out), workers=1, progress=False)
    assert mt2 == {e["path"]: os.path.getmtime(tmp_path / "sw" / e["path"]) for e in idx2["points"]}


def test_sweep_cli_errors_write_nothing(tmp_path, capsys):
    out = tmp_path / "sw"
    for argv in (["--param", "omega=-1,1"], ["--param", "nope=1"], ["--param", "omega=1:2:log"], [],
                 ["--param", "omega=1", "--eta", "0"]):
        assert main(["mixture", "sweep", *argv, "--out", str(out), "--quiet"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "error" in err
        assert not out.exists()


def test_sweep_interrupt_leaves_index(tmp_path):
    out = tmp_path / "sw"
    cmd = [sys.executable, "-m", "meanfield", "mixture", "sweep", "--per-point", "--param", "omega=0.01:0.3:log:6",
           "--steps", "30000000", "--out", str(out), "--workers", "1", "--force"]
    # the kernels compiled first (numba's cache), and the signal well after the point's first chunk: a signal
    # while the point still compiles or loads its kernels stops it before its first record (issue 26: within
    # 2 s, nothing written), and this test is about the point's file
    subprocess.run([sys.executable, "-m", "meanfield", "mixture", "run", "--steps", "2", "--quiet", "--out",
                    str(tmp_path / "warm.h5")], check=True, capture_output=True, cwd=ROOT, timeout=600)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    deadline = time.time() + 60
    while time.time() < deadline and not (out / "sweep.json").exists():
        time.sleep(0.2)
    time.sleep(8.0)
    p.send_signal(signal.SIGINT)
    stdout, stderr = p.communicate(timeout=60)
    assert p.returncode == 130, stderr.decode()
    idx = json.loads((out / "sweep.json").read_text())
    assert idx["status"] == "interrupted"
    first = idx["points"][0]["result"]
    assert first is not None and first["status"] == "interrupted"
    with h5py.File(out / idx["points"][0]["path"]) as f:
        assert f.attrs["status"] == "interrupted" and len(f["t"]) > 1


def test_kink_events():
    t = np.arange(6.0)
    u = np.ones((6, 2, 2))
    u[1:3, 0, 1] = 0.0
    u[4, 1, 0] = 1e-13
    ev = kink_events(t, u)
    assert [(e["sample"], e["head"], e["t_start"], e["t_end"]) for e in ev] == [(0, "-", 1.0, 2.0), (1, "+", 4.0, 4.0)]


def test_fit_exponent_recovers_a_power_law():
    rng = np.random.default_rng(1)
    ms = [64, 256, 1024, 4096]
    errs = [list(3.0 * m**-0.5 * np.exp(rng.normal(0, 0.05, 4))) for m in ms]
    f = fit_exponent(ms, errs)
    assert abs(f["exponent"] + 0.5) < 0.05 and f["exponent_ci"][0] < -0.5 < f["exponent_ci"][1]


def test_width_sweep_tie_breaking_init(tmp_path):
    base = {"steps": 600, "neuron_init": "const:0.01,0.01,0,0"}
    s = width_sweep(base, [64, 1024, 16384], 2, tmp_path / "ws.h5", workers=1, progress=False, log=lambda *a: None)
    assert not s["kinks"] and s["exponent"] is not None and -0.8 < s["exponent"] < -0.3
    # the errors are those of independent runs compared by hand
    inf = C.simulate(make_config(dict(base, record_every=1)))
    fin = C.simulate(make_config(dict(base, record_every=1), width=1024, seed=1))
    e = np.abs(fin["S"] - inf["S"]).max()
    with h5py.File(tmp_path / "ws.h5") as f:
        assert f["sup_error/S"][1, 1] == pytest.approx(e, rel=1e-12)
        assert f.attrs["kink_split"] == 0
    js = json.loads((tmp_path / "ws.json").read_text())
    assert set(js) >= {"widths", "errors", "exponent", "exponent_ci", "kinks"}
    assert (tmp_path / "ws.png").exists()


def test_width_sweep_zero_init_reports_kinks_and_no_exponent(tmp_path, capsys):
    out = tmp_path / "ws.h5"
    assert main(["mixture", "width-sweep", "--widths", "64,1024", "--seeds", "2", "--steps", "300", "--out", str(out),
                 "--workers", "1", "--quiet"]) == 0
    js = json.loads((tmp_path / "ws.json").read_text())
    assert js["exponent"] is None and js["exponent_ci"] is None
    split = [k for k in js["kinks"] if k["split"]]
    assert split and all(k["t_start"] == 0.0 for k in split)
    # the inconsistent samples are the ones at the kink
    inc = {i for i, d in enumerate(C.simulate(make_config({}, steps=1))["samples"]["description"])}
    assert {k["sample"] for k in split} <= inc
    text = capsys.readouterr().out
    assert "tie-breaking neuron init" in text and "no convergence exponent" in text


def test_width_sweep_bad_input(tmp_path, capsys):
    for argv in (["--widths", "0,64"], ["--seeds", "0"], ["--widths", "64", "--width", "8"],
                 ["--kink-tol", "-1"]):
        assert main(["mixture", "width-sweep", *argv, "--out", str(tmp_path / "w.h5"), "--quiet"]) == 2
        assert not (tmp_path / "w.h5").exists()


def test_width_sweep_particle_cross_check(tmp_path):
    s = width_sweep({"steps": 200, "neuron_init": "const:0.01,0.01,0,0"}, [8, 64], 1, tmp_path / "w.h5", workers=1,
                    progress=False, log=lambda *a: None, particles_up_to=8)
    assert list(s["particles_max_rel_diff"]) == ["8"] and s["particles_max_rel_diff"]["8"] < 1e-10


def test_particles_cli(tmp_path, capsys):
    out = tmp_path / "p.h5"
    assert main(["mixture", "particles", "--width", "5", "--steps", "50", "--out", str(out), "--quiet"]) == 0
    with h5py.File(out) as f:
        assert f.attrs["particles"] == 1 and f.attrs["width"] == 5 and f["S"].shape[1:] == (2, 4, 4)
    assert main(["mixture", "particles", "--steps", "50", "--out", str(tmp_path / "q.h5")]) == 2
    assert main(["mixture", "particles", "--width", "5", "--d", "3", "--out", str(tmp_path / "q.h5")]) == 2
    assert not (tmp_path / "q.h5").exists()
