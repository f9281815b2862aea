"""Batched engine runs (meanfield.engine.batched).

* the generic CPU batch == one ``meanfield.engine.run`` per trajectory, bit for bit
  (np.array_equal: records, final state, loss, stage ends, status, message),
  for the mixture description (infinite and finite width, per-trajectory eta,
  three-stage schedule with a stop criterion, a diverging trajectory; ``fast=False``:
  its registered fast path is held to rounding in tests/test_engine_mixture_batch.py)
  and for the shipped maxmargin description (merged W, last query, linear value);
* the CUDA kernel, run in numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1, in a
  subprocess) on a tiny batch, equals the CPU backend to 1e-12;
* bad input is refused with a one-line ConfigError naming the field.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import meanfield.engine as me
from meanfield.core.config import ConfigError
from meanfield.engine import batched, runs

ROOT = Path(__file__).resolve().parents[1]
MIXTURE = str(ROOT / "meanfield" / "models" / "mixture.toml")
MAXMARGIN = str(ROOT / "meanfield" / "models" / "maxmargin.toml")


def _single(desc, y0, h, every):
    """The reference: the unbatched engine run (integrate.GDMap / RK4 over EngineSystem) with step size h
    (gd: eta; rk4: dt) on the batch's record grid."""
    step = {"eta": float(h)} if desc.training.method == "gd" else {"dt": float(h)}
    tr = dataclasses.replace(desc.training, record_every=every, record_log=None, record_dt=None, **step)
    return runs.run(dataclasses.replace(desc, training=tr), y0=y0)


def _assert_equal_to_single(desc, br, Y0, every):
    for b in range(br.B):
        r = _single(desc, Y0[b], br.eta[b], every)
        a, t = r.trajectory.arrays(), br.trajectory(b).arrays()
        for k in ("t", "step", "stage", "y"):
            assert np.array_equal(a[k], t[k]), (b, k)
        assert np.array_equal(r.y[-1], br.y[b]), b
        assert r.loss[-1] == br.loss[b] or (np.isnan(r.loss[-1]) and np.isnan(br.loss[b])), b
        tb = br.trajectory(b)
        assert (tb.status, tb.message, tb.stage_ends) == (r.status, r.message, r.stage_ends), b
        assert br.status[b] == r.status and br.steps[b] == r.step[-1]


def test_cpu_batch_equals_single_runs_mixture():
    desc = me.load(MIXTURE, K=2, L=3, schedule="three-stage", stage_steps=(10, 15, 8),
                   stage_criteria=("consistent_margin>=0.01", None, None), eta=0.5)
    Y0 = batched.initial_states(desc, seeds=[0, 1, 2, 3], widths=[None, 5, 8, None])
    br = me.run_batch(desc, y0s=Y0, eta=[0.5, 0.3, 0.5, 1e8], record_every=4, fast=False)
    _assert_equal_to_single(desc, br, Y0, 4)
    assert br.status == ["complete", "complete", "complete", "diverged"]
    assert br.end_reason[0, 0] == 1  # the stage-1 criterion stopped it (a run of the criterion path)
    # summary only: initial state and stage ends; the same final state
    bs = me.run_batch(desc, y0s=Y0[:2], eta=[0.5, 0.3], fast=False)
    assert np.array_equal(bs.y, br.y[:2]) and np.array_equal(bs.loss, br.loss[:2])
    assert list(bs.n_records) == [4, 4]


def test_cpu_batch_equals_single_runs_maxmargin():
    d0 = me.load(MAXMARGIN)
    tr = d0.training
    desc = dataclasses.replace(d0, training=dataclasses.replace(
        tr, stages=tuple(dataclasses.replace(s, length=30) for s in tr.stages)))
    y = batched.initial_states(desc)[0]
    rng = np.random.default_rng(0)
    Y0 = np.stack([y, y + 0.1 * rng.standard_normal(y.size), y + 0.3 * rng.standard_normal(y.size)])
    br = me.run_batch(desc, y0s=Y0, eta=[1.0, 0.5, 2.0], record_every=5)
    _assert_equal_to_single(desc, br, Y0, 5)
    r = br.run(1)  # named arrays of the batch trajectory
    assert r.loss.shape == (br.n_records[1],)


@pytest.mark.parametrize("kw, field", [
    (dict(y0s=np.zeros((2, 3))), "y0s"),
    (dict(y0s=[[np.nan] * 136]), "y0s"),
    (dict(eta=-1.0), "eta"),
    (dict(eta=[0.5, 0.5]), "eta"),
    (dict(record_every=0), "record_every"),
    (dict(backend="gpu"), "backend"),
    (dict(widths=[0]), "widths"),
])
def test_refuses_bad_input_with_one_line(kw, field):
    desc = me.load(MIXTURE, K=2, L=3, steps=5)
    with pytest.raises(ConfigError) as e:
        me.run_batch(desc, **kw)
    msg = str(e.value)
    assert msg.startswith(field) and "\n" not in msg


def test_cpu_batch_equals_single_runs_rk4():
    desc = me.load(MIXTURE, K=2, L=3, schedule="three-stage", stage_steps=(2, 3, 2), eta=0.5)
    desc = dataclasses.replace(desc, training=dataclasses.replace(desc.training, method="rk4", dt=0.3,
                                                                  max_abs=0.17))
    Y0 = batched.initial_states(desc, seeds=[0, 1, 0], widths=[None, 5, None])
    br = me.run_batch(desc, y0s=Y0, eta=[0.3, 0.25, 2.0], record_every=2, fast=False)  # the last passes |y| = 0.17
    _assert_equal_to_single(desc, br, Y0, 2)
    assert br.status[0] == "complete" and br.status[2] == "diverged"  # both paths exercised


def test_refuses_unbatched_methods():
    desc = me.load(MIXTURE, K=2, L=3, steps=5)
    flow = dataclasses.replace(desc, training=dataclasses.replace(desc.training, method="flow"))
    with pytest.raises(ConfigError, match=r"^training\.method: .*rk4"):
        me.run_batch(flow)
    desc = me.load(MIXTURE, K=2, L=3, schedule="three-stage", stage_steps=(2, 3, 2),
                   stage_criteria=("consistent_margin>=0.01", None, None))
    rk4 = dataclasses.replace(desc, training=dataclasses.replace(desc.training, method="rk4", dt=0.3))
    with pytest.raises(ConfigError, match=r"^training\.stages: stop criteria"):
        me.run_batch(rk4)


SIM_SCRIPT = textwrap.dedent("""
    import dataclasses, sys, numpy as np
    import meanfield.engine as me
    from meanfield.engine import batched
    desc = me.load(sys.argv[1], K=2, L=3, schedule="three-stage", stage_steps=(3, 3, 2),
                   stage_criteria=("consistent_margin>=0.01", None, None), eta=0.5)
    Y0 = batched.initial_states(desc, seeds=[0, 1, 2], widths=[None, 5, None])
    br = me.run_batch(desc, y0s=Y0, eta=[0.5, 0.3, 1e8], record_every=2, backend="cuda", fast=False)
    assert br.backend == "cuda" and batched._cuda_kernel.cache_info().currsize == 1
    np.savez(sys.argv[2], Y0=Y0, y=br.y, loss=br.loss, rec_y=br.rec_y, rec_t=br.rec_t, rec_step=br.rec_step,
             n=br.n_records, code=br.code, end_step=br.end_step)
    rk4 = dataclasses.replace(desc, training=dataclasses.replace(desc.training, method="rk4", dt=0.3,
                                                                 max_abs=0.205, stages=tuple(
        dataclasses.replace(s, criterion=None) for s in desc.training.stages)))
    br = me.run_batch(rk4, y0s=Y0, eta=[0.3, 0.25, 2.0], record_every=1, backend="cuda", fast=False)
    np.savez(sys.argv[3], y=br.y, loss=br.loss, rec_y=br.rec_y, rec_t=br.rec_t, rec_step=br.rec_step,
             n=br.n_records, code=br.code, end_step=br.end_step, end_t=br.end_t)
""")


def test_cuda_kernel_in_simulator_equals_cpu(tmp_path):
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=str(ROOT))
    out = tmp_path / "sim.npz"
    r = subprocess.run([sys.executable, "-c", SIM_SCRIPT, MIXTURE, str(out), str(tmp_path / "rk4.npz")],
                       capture_output=True, text=True,
                       cwd=ROOT, env=env, timeout=300)
    if r.returncode != 0 and "simulator" in r.stderr.lower() and "import" in r.stderr.lower():
        pytest.skip(f"CUDA simulator not importable: {r.stderr.strip().splitlines()[-1]}")
    assert r.returncode == 0, r.stderr[-3000:]
    sim = np.load(out)
    desc = me.load(MIXTURE, K=2, L=3, schedule="three-stage", stage_steps=(3, 3, 2),
                   stage_criteria=("consistent_margin>=0.01", None, None), eta=0.5)
    cpu = me.run_batch(desc, y0s=sim["Y0"], eta=[0.5, 0.3, 1e8], record_every=2, fast=False)
    for k, v in (("n", cpu.n_records), ("code", cpu.code), ("end_step", cpu.end_step), ("rec_step", cpu.rec_step)):
        assert np.array_equal(sim[k], v), k
    for k, v in (("y", cpu.y), ("loss", cpu.loss), ("rec_y", cpu.rec_y), ("rec_t", cpu.rec_t)):
        np.testing.assert_allclose(sim[k], v, rtol=0, atol=1e-12, err_msg=k)
    assert list(cpu.code) == [0, 0, 3]
    sim = np.load(tmp_path / "rk4.npz")
    rk4 = dataclasses.replace(desc, training=dataclasses.replace(desc.training, method="rk4", dt=0.3, max_abs=0.205,
                                                                 stages=tuple(dataclasses.replace(s, criterion=None)
                                                                              for s in desc.training.stages)))
    cpu = me.run_batch(rk4, y0s=np.load(out)["Y0"], eta=[0.3, 0.25, 2.0], record_every=1, fast=False)
    for k, v in (("n", cpu.n_records), ("code", cpu.code), ("end_step", cpu.end_step), ("rec_step", cpu.rec_step)):
        assert np.array_equal(sim[k], v), ("rk4", k)
    for k, v in (("y", cpu.y), ("loss", cpu.loss), ("rec_y", cpu.rec_y), ("rec_t", cpu.rec_t), ("end_t", cpu.end_t)):
        np.testing.assert_allclose(sim[k], v, rtol=0, atol=1e-12, err_msg=f"rk4 {k}")
    assert list(cpu.code) == [0, 3, 3], list(cpu.code)  # finite width (1) and the large step (2) pass |y| = 0.205


def _numeric(r):
    return {k: v for k, v in r.items() if isinstance(v, np.ndarray) and v.dtype.kind in "fiub"}


def test_model_sweep_batched_writes_the_unbatched_files(tmp_path):
    from meanfield.engine.sweep import model_sweep
    from meanfield.core.io import read_run

    base = dict(K=2, L=3, steps=30, record_every=4)
    params = {"omega": [0.1, 0.3], "eta": [0.5, 1e8]}
    ib = model_sweep(MIXTURE, base, params, tmp_path / "b", progress=False, batched=True)
    iu = model_sweep(MIXTURE, base, params, tmp_path / "u", workers=1, progress=False)
    assert [e["result"]["status"] for e in ib["points"]] == ["complete", "diverged"] * 2
    for eb, eu in zip(ib["points"], iu["points"]):  # the generic kernels (fast=False): bit for bit
        rb = eb["result"]
        ru = eu["result"]
        assert {k: v for k, v in rb.items() if k != "elapsed_s"} == {k: v for k, v in ru.items() if k != "elapsed_s"}
        a, b = read_run(tmp_path / "b" / eb["path"]), read_run(tmp_path / "u" / eu["path"])
        na, nb = _numeric(a), _numeric(b)
        assert na.keys() == nb.keys() and len(na) >= 8
        for k in na:
            assert np.array_equal(na[k], nb[k], equal_nan=True), (eb["index"], k)
        assert a.attrs["batched"] == "cpu" and "batched" not in b.attrs


def test_model_sweep_batched_refuses_a_log_grid_with_one_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "meanfield", "model", "sweep", MAXMARGIN, "--param", "eta=0.5,1",
                        "--out", str(tmp_path / "s"), "--batched", "--quiet"], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "batched" in lines[0] and "record" in lines[0], r.stderr
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("extra, field", [(["--per-point", "--backend", "cuda"], "backend: only with --batched"),
                                          (["--backend", "gpu"], "backend: must be one of"),
                                          (["--batched", "--backend", "gpu"], "backend: must be one of")])
def test_model_sweep_backend_flag_refusals(tmp_path, extra, field):
    r = subprocess.run([sys.executable, "-m", "meanfield", "model", "sweep", MIXTURE, "--steps", "5",
                        "--param", "eta=0.5,1", "--out", str(tmp_path / "s"), "--quiet", *extra],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0], r.stderr
    assert not (tmp_path / "s").exists()
