"""--backend on run / sweep / width-sweep: refusals, the batched CPU sweep equals
the process sweep (to rounding: its lanes against run.run's scalar kernels), and
the CUDA path (in the CUDA simulator) equals the CPU."""

import json
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from lanes_tolerance import assert_close, close
from meanfield.cli import main
from meanfield.models.mixture.batched import cuda_available

ROOT = Path(__file__).resolve().parents[1]


def test_bad_backend(tmp_path, capsys):
    assert main(["mixture", "run", "--backend", "tpu", "--out", str(tmp_path / "r.h5")]) == 2
    assert "backend" in capsys.readouterr().err
    assert not (tmp_path / "r.h5").exists()


@pytest.mark.skipif(cuda_available(), reason="a GPU is present")
def test_cuda_without_gpu_is_refused(tmp_path, capsys):
    for argv in (["run", "--out", str(tmp_path / "r.h5")],
                 ["sweep", "--param", "omega=0.1,0.2", "--out", str(tmp_path / "sw")],
                 ["width-sweep", "--widths", "8", "--seeds", "1", "--out", str(tmp_path / "w.h5"), "--quiet"]):
        assert main(["mixture", *argv[:1], "--backend", "cuda", *argv[1:]]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "backend cuda" in err
    assert not any(tmp_path.iterdir())
    # auto falls back to the CPU
    assert main(["mixture", "run", "--backend", "auto", "--steps", "10", "--out", str(tmp_path / "a.h5"),
                 "--quiet"]) == 0


def test_batched_sweep_equals_process_sweep(tmp_path):
    args = ["mixture", "sweep", "--param", "omega=0.02:0.3:log:3", "--param", "eta=0.25,0.5", "--steps", "300",
            "--quiet"]
    assert main(args + ["--batched", "--out", str(tmp_path / "b")]) == 0
    assert main(args + ["--per-point", "--workers", "1", "--out", str(tmp_path / "p")]) == 0
    a = json.loads((tmp_path / "b" / "sweep.json").read_text())
    b = json.loads((tmp_path / "p" / "sweep.json").read_text())
    for x, y in zip(a["points"], b["points"]):  # the batch's lanes against run.run: to rounding (lanes_tolerance)
        assert x["params"] == y["params"] and close(x["result"]["loss_end"], y["result"]["loss_end"])
        with h5py.File(tmp_path / "b" / x["path"]) as f, h5py.File(tmp_path / "p" / y["path"]) as g:
            for k in ("S", "A", "B", "w", "margin", "t"):
                assert_close(f[k][:], g[k][:], err_msg=k)
    # a flow point cannot be batched: one line, exit 2
    assert main(["mixture", "sweep", "--param", "omega=0.1", "--method", "flow", "--batched", "--quiet",
                 "--out", str(tmp_path / "f")]) == 2


def test_cuda_simulator_run_equals_cpu(tmp_path):
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    cuda_out, cpu_out = tmp_path / "cuda.h5", tmp_path / "cpu.h5"
    flags = ["--steps", "15", "--width", "6", "--seed", "2", "--neuron-init", "gaussian:0.2", "--quiet"]
    p = subprocess.run([sys.executable, "-m", "meanfield", "mixture", "run", "--backend", "cuda", *flags,
                        "--out", str(cuda_out)], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert main(["mixture", "run", *flags, "--out", str(cpu_out)]) == 0
    with h5py.File(cuda_out) as f, h5py.File(cpu_out) as g:
        for k in ("S", "A", "B", "w", "loss"):
            np.testing.assert_allclose(f[k][:], g[k][:], rtol=0, atol=1e-12)
