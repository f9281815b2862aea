"""Chunked ensembles of any described model (meanfield.core.ensemble with the
engine's adapter, meanfield.engine.sweep.ModelEnsemble): `meanfield model
sweep MODEL --chunked` against the same points run one by one through
`meanfield model run` (an independent path: the unbatched integrator and the
run file's writer), for the mixture description and the multi-class one.

Tolerance principle: none. On the CPU the engine's batch advances each
trajectory with the same compiled arithmetic in the same order as the
unbatched run (tests/test_engine_batched.py holds them bit-equal), and the
sweep's outputs come from those records by the code that writes the run
file; so every number is asserted equal bit for bit (a GPU would agree to
rounding only: libdevice exp/log)."""

import itertools
import math

import h5py
import numpy as np
import pytest

from meanfield.cli import main
from meanfield.core.ensemble import EnsembleProblem, load, solve
from meanfield.engine.sweep import ModelEnsemble

CASES = {
    # model, base flags, grid (both schedules, both widths, a diverging step)
    "mixture": (["--steps", "150", "--record-every", "5"],
                {"omega": ["0.05", "0.3"], "width": ["inf", "6"], "eta": ["1", "3e4"]}),
    "mixture-3stage": (["--schedule", "three-stage", "--stage-steps", "50,50,50", "--record-every", "5"],
                       {"omega": ["0.05", "0.3"], "K": ["2", "3"], "seed": ["0", "1"], "width": ["5"]}),
    "mixture_multiclass": (["--steps", "120", "--record-every", "4", "--K", "2", "--C", "2", "--symmetry", "allow"],
                           {"omega": ["0.05", "0.3"], "width": ["inf", "4"], "eta": ["0.5", "2"]}),
}


def _same(a, b):
    return (math.isnan(a) and math.isnan(b)) or a == b


@pytest.mark.parametrize("case", list(CASES))
def test_model_sweep_chunked_equals_model_run_point_by_point(tmp_path, case, capsys):
    model = case.split("-")[0]
    flags, grid = CASES[case]
    out = tmp_path / "sw"
    argv = ["model", "sweep", model, *flags, "--chunked", "--chunk-size", "3", "--keep-records", "2",
            "--out", str(out), "--workers", "1", "--quiet"]
    for k, v in grid.items():
        argv += ["--param", f"{k}={','.join(v)}"]
    assert main(argv) == 0
    assert "points done" in capsys.readouterr().out
    d = load(out / "sweep.h5")
    assert d["attrs"]["system"] == "model" and list(d["axes"]) == list(grid)
    names = list(grid)
    n_div = 0
    for i, vals in enumerate(itertools.product(*grid.values())):
        at = np.unravel_index(i, d["status"].shape)
        ref = tmp_path / f"r{i}.h5"
        pflags = [x for k, v in zip(names, vals) for x in (f"--{k.replace('_', '-')}", v)]
        rc = main(["model", "run", model, *flags, *pflags, "--out", str(ref), "--quiet"])
        with h5py.File(ref) as f:
            assert (rc == 0) == (f.attrs["status"] == "complete")
            assert d["status"][at] == (0 if f.attrs["status"] == "complete" else 3 if "max_abs" in f.attrs["message"]
                                       else 2), (i, f.attrs["message"])
            n_div += d["status"][at] != 0
            m = f["margin"][-1]
            c = f["samples/consistent"][()].astype(bool) if "consistent" in f["samples"] else np.ones(m.size, bool)
            want = {"loss_end": f["loss"][-1], "t_end": f["t"][-1], "steps_end": f["step"][-1],
                    "min_margin_end": m.min(), "T1": f.attrs["T1"], "T2": f.attrs["T2"], "T_loss": f.attrs["T_loss"],
                    "min_margin_consistent_end": m[c].min() if c.any() else np.nan,
                    "min_margin_inconsistent_end": m[~c].min() if (~c).any() else np.nan}
            for k, v in want.items():
                assert _same(float(d[k][at]), float(v)), (case, i, k, d[k][at], v)
            if i == 2:  # the kept point: the ordinary run file, the same numbers as the run made on its own
                with h5py.File(out / "records" / "0000002.h5") as g:
                    for k in ("t", "step", "loss", "margin", "S", "A", "B", "w") if model == "mixture" else \
                            ("t", "step", "loss", "margin", "u"):
                        np.testing.assert_array_equal(g[k][()], f[k][()], err_msg=k)
    if case == "mixture":
        assert n_div == 2  # the huge step diverges at finite width (at infinite width it stays bounded)
    # a rerun skips every chunk and rewrites the same sweep.h5
    assert main(argv) == 0
    assert "0 run now" in capsys.readouterr().out
    d2 = load(out / "sweep.h5")
    for k in ("status", "T1", "loss_end"):
        np.testing.assert_array_equal(d[k], d2[k])


def test_model_ensemble_python_api_and_grouping(tmp_path):
    """The Python API: a prob_func over seeds and steps sizes; points that
    differ only in initial state and step size share one batch (one group)."""
    sysm = ModelEnsemble("meanfield/models/mixture.toml")
    base = {"steps": 60, "record_every": 6, "width": 4}
    prob = EnsembleProblem(base, prob_func=lambda i: {"seed": i, "eta": 0.5 + 0.25 * (i % 2)}, n=5, system=sysm,
                           outputs=("T1", "loss_end", "margin_end"), keep_records=[4])
    descs = [sysm.config(base, prob.point(i)) for i in range(5)]
    assert len({sysm.group_key(d) for d in descs}) == 1
    res = solve(prob, tmp_path / "e", workers=1, progress=False)
    assert res.status == "complete" and res.n_done == 5
    d = load(res.path)
    assert d["margin_end"].shape == (5, descs[0].data.n) and np.isfinite(d["loss_end"]).all()
    assert (tmp_path / "e" / "records" / "0000004.h5").exists()
    # another model file content is another chunk key: nothing of this sweep is reused for it
    from meanfield.core.ensemble import _task

    other = tmp_path / "m.toml"
    other.write_text(open("meanfield/models/mixture.toml").read() + "\n# edited\n")
    p2 = EnsembleProblem(base, prob_func=prob.prob_func, n=5, system=ModelEnsemble(other),
                         outputs=prob.outputs)
    assert _task(prob, 0, 5, "cpu", 1)["key"] != _task(p2, 0, 5, "cpu", 1)["key"]


def test_model_sweep_vector_exp_to_rounding_and_its_own_identity(tmp_path, capsys):
    """``--vector-exp`` (the lanes' exp by core.lane_exp.exp_lane): the same statuses, outputs and kept records
    to rounding (1e-12 of the larger of the value and 1), not the same bits (the lanes ran with the other exp); and the
    option is part of the sweep's identity (its chunk keys differ: a rerun with the other setting in the same
    folder reuses none of its chunks)."""
    out, out_v = tmp_path / "sw", tmp_path / "sw_v"
    argv = ["model", "sweep", "mixture", "--steps", "60", "--record-every", "5", "--chunked", "--chunk-size", "16",
            "--param", "omega=0.05:0.3:lin:4", "--param", "seed=0:7:lin:8", "--param", "width=inf",
            "--keep-records", "every:4", "--workers", "1", "--quiet"]
    assert main(argv + ["--out", str(out)]) == 0
    assert main(argv + ["--out", str(out_v), "--vector-exp"]) == 0
    capsys.readouterr()
    d, v = load(out / "sweep.h5"), load(out_v / "sweep.h5")
    np.testing.assert_array_equal(d["status"], v["status"])
    differ = False
    for k in ("loss_end", "min_margin_end", "T1", "T2", "T_loss"):
        a, b = np.asarray(d[k], float), np.asarray(v[k], float)
        assert np.array_equal(np.isnan(a), np.isnan(b)), k
        ok = ~np.isnan(a)
        assert np.all(np.abs(a[ok] - b[ok]) <= 1e-12 * np.maximum(np.abs(a[ok]), 1.0)), k
        differ |= not np.array_equal(a[ok], b[ok])
    for i in range(0, 32, 4):  # the kept points' run files: every record to rounding
        with h5py.File(out / "records" / f"{i:07d}.h5") as f, h5py.File(out_v / "records" / f"{i:07d}.h5") as g:
            for k in ("loss", "margin", "S", "A", "B", "w"):
                x, z = f[k][()], g[k][()]
                assert np.max(np.abs(x - z)) <= 1e-12 * max(np.max(np.abs(x)), 1.0), (i, k)
                differ |= not np.array_equal(x, z)
    assert differ  # the lanes ran with exp_lane: other bits (the tolerance is what is tested)
    assert ModelEnsemble("meanfield/models/mixture.toml", vector_exp=True).identity() != \
        ModelEnsemble("meanfield/models/mixture.toml").identity()
    assert main(argv + ["--out", str(out_v)]) == 0  # the folder of the --vector-exp sweep, run without it:
    assert "0 run now" not in capsys.readouterr().out  # none of its chunks reused, the plain sweep's numbers
    w = load(out_v / "sweep.h5")
    for k in ("status", "loss_end", "min_margin_end", "T1"):
        np.testing.assert_array_equal(d[k], w[k])


def test_model_sweep_no_lanes_same_bits_other_drivers(tmp_path, capsys, monkeypatch):
    """``--no-lanes`` (chunked and ``--batched``): every batch asked with lanes=False (the per-trajectory
    drivers), the default with lanes=True; outputs and kept records bit for bit the default's."""
    from meanfield.engine import batched

    seen = []
    real = batched.run_batch
    monkeypatch.setattr(batched, "run_batch", lambda *a, **k: seen.append(k.get("lanes", True)) or real(*a, **k))
    argv = ["model", "sweep", "mixture", "--steps", "40", "--record-every", "5", "--chunked", "--chunk-size", "32",
            "--param", "omega=0.05:0.3:lin:4", "--param", "seed=0:7:lin:8", "--param", "width=inf",
            "--keep-records", "every:8", "--workers", "1", "--quiet"]
    assert main(argv + ["--out", str(tmp_path / "a")]) == 0
    assert seen and all(seen)
    seen.clear()
    assert main(argv + ["--out", str(tmp_path / "b"), "--no-lanes"]) == 0
    assert seen and not any(seen)
    d, e = load(tmp_path / "a" / "sweep.h5"), load(tmp_path / "b" / "sweep.h5")
    for k in ("status", "loss_end", "min_margin_end", "T1", "T2", "T_loss"):
        np.testing.assert_array_equal(d[k], e[k], err_msg=k)
    for i in range(0, 32, 8):
        with h5py.File(tmp_path / "a" / "records" / f"{i:07d}.h5") as f, \
                h5py.File(tmp_path / "b" / "records" / f"{i:07d}.h5") as g:
            for k in ("loss", "S", "A", "B", "w"):
                np.testing.assert_array_equal(f[k][()], g[k][()], err_msg=(i, k))
    seen.clear()
    small = ["model", "sweep", "mixture", "--steps", "20", "--param", "seed=0,1", "--batched", "--quiet"]
    assert main(small + ["--out", str(tmp_path / "c"), "--no-lanes"]) == 0
    assert seen == [False]
    capsys.readouterr()


@pytest.mark.parametrize("argv,field", [
    (["--param", "omga=0.1,0.2"], "param"),
    (["--param", "omega=0.1,0.2", "--method", "flow"], "backend ensemble"),
    (["--param", "omega=0.1,0.2", "--batched"], "batched"),
    (["--param", "omega=0.1,0.2", "--scheduler", "foo"], "scheduler"),
    (["--param", "omega=0.1,0.2", "--chunk-size", "0"], "chunk_size"),
    (["--param", "omega=0.1,0.2", "--keep-records", "9"], "keep_records"),
    (["--param", "omega=0.1,-1"], "omega"),
    (["--param", "omega=0.1,0.2", "--vector-exp", "--per-point"], "vector-exp"),
    (["--param", "omega=0.1,0.2", "--vector-exp", "--specialise"], "vector-exp"),
    (["--param", "omega=0.1,0.2", "--no-lanes", "--vector-exp"], "no-lanes"),
    (["--param", "omega=0.1,0.2", "--no-lanes", "--per-point"], "no-lanes"),
    (["--param", "omega=0.1,0.2", "--no-lanes", "--backend", "cuda"], "no-lanes"),
])
def test_model_sweep_chunked_bad_input_one_line(tmp_path, capsys, argv, field):
    out = tmp_path / "bad"
    assert main(["model", "sweep", "mixture", "--chunked", "--steps", "20", "--record-every", "5", *argv,
                 "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and field in err, err
    assert not out.exists()
