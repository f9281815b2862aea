"""Batched trajectories (``meanfield.models.mixture.batched``).

* the CPU backend (threads over trajectories) equals the single
  trajectory runner ``meanfield.models.mixture.run.run`` bit for bit one
  trajectory at a time (``lanes=False``), to rounding in its default lanes, for a batch of
  mixed omega / eta / width / seed / neuron init / ReLU'(0), both schedules,
  criteria, log-spaced records, RK4, and a trajectory that diverges while the
  others carry on;
* the CUDA kernels, run in numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1, in
  a subprocess) on tiny batches, equal the CPU backend to 1e-12;
* backend resolution, refusals with one-line errors, and importing meanfield
  without touching CUDA.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from meanfield.core.config import ConfigError
from meanfield.models.mixture import batched, kernels
from meanfield.models.mixture.config import make_config
from meanfield.models.mixture.run import run

ROOT = Path(__file__).resolve().parents[1]

MIXED = [
    dict(steps=300, omega=0.1, eta=0.5),
    dict(steps=250, omega=0.03, eta=0.3, width=16, seed=1, record_every=7),
    dict(steps=200, omega=0.3, eta=0.5, width=64, seed=2, neuron_init="gaussian:0.1", relu_prime_at_zero=0.5),
    dict(schedule="three-stage", stage_steps=(60, 150, 40), omega=0.1, eta=0.5, record_every=9),
    dict(schedule="three-stage", stage_steps=(100, 400, 50), omega=0.05, eta=0.5, width=32, seed=3,
         stage_criteria=("consistent_margin>=0.5", "inconsistent_margin>=0.05", None), stage3="both"),
    dict(schedule="three-stage", stage_steps=(0, 20, 0), eta=0.4, record_every=5),  # empty stages
    dict(steps=40, eta=1e3),  # blows up: diverged (max_abs) while the others go on
    dict(steps=2000, criterion="loss<=0.3", omega=0.2, eta=0.5, record_log=25),
    dict(K=3, L=4, steps=60, width=9, seed=4, relu_prime_at_zero=0.0, record_every=4),
    dict(method="rk4", steps=60, eta=0.5, dt=0.25, record_every=5),
    dict(method="rk4", schedule="three-stage", stage_steps=(20, 30, 10), eta=0.5, dt=0.3, record_every=4,
         width=20, seed=5),
    dict(method="rk4", steps=30, eta=0.5, dt=0.5, width=8, seed=6, max_abs=0.02, record_every=1),  # diverges
    dict(steps=150, label_prob=0.7, width=10, seed=7, record_every=10),  # other sample sets: their own launches
    dict(steps=150, label_noise=0.1, record_every=10),
]


def _assert_same(ref, tr, exact=True, tol=0.0):
    a, b = ref.arrays(), tr.arrays()
    for k in ("t", "step", "stage", "y"):
        assert a[k].shape == b[k].shape, (k, a[k].shape, b[k].shape)
        if exact:
            assert np.array_equal(a[k], b[k]), k
        else:
            np.testing.assert_allclose(b[k], a[k], rtol=0, atol=tol, err_msg=k)
    assert (ref.status, ref.message) == (tr.status, tr.message)
    assert ref.stage_ends == tr.stage_ends


def _assert_rounding(ref, tr):
    """The lanes' standard (tests/test_mixture_vectorised.py): the same records, steps, statuses and stage ends,
    states within 1e-13 of the trajectory's largest entry (an exp within one ulp of libm's and one reciprocal a
    softmax, over a few hundred contracting steps)."""
    _assert_same(ref, tr, exact=False, tol=1e-13 * float(np.max(np.abs(ref.arrays()["y"]))))


def test_cpu_batch_equals_single_runs_bit_for_bit():
    """One trajectory at a time (lanes=False): run.run's bits; the default lanes: to rounding, and not the same
    bits for methods gd and rk4 (the tolerance is what is tested there)."""
    cfgs = [make_config(d) for d in MIXED]
    out = batched.run_batch(cfgs, "cpu", lanes=False)
    fast = batched.run_batch(cfgs, "cpu")
    assert len(out) == len(fast) == len(cfgs)
    statuses = []
    for cfg, tr, tf in zip(cfgs, out, fast):
        ref = run(cfg)
        _assert_same(ref, tr)
        _assert_rounding(ref, tf)
        statuses.append(tr.status)
    assert not np.array_equal(out[0].arrays()["y"], fast[0].arrays()["y"])
    assert not np.array_equal(out[9].arrays()["y"], fast[9].arrays()["y"])  # rk4 in lanes too (to rounding)
    assert statuses.count("diverged") == 2 and statuses[6] == statuses[11] == "diverged"
    assert "max_abs" in out[6].message and "step" in out[6].message
    assert any(e["reason"] == "criterion" for e in out[4].stage_ends)
    assert out[7].stage_ends[0]["reason"] == "criterion"


def test_cpu_batch_same_with_one_thread_and_given_initial_states():
    import numba

    cfgs = [make_config(steps=80, omega=w, eta=e, width=m, seed=s, record_every=10)
            for w, e, m, s in [(0.1, 0.5, None, 0), (0.2, 0.25, 12, 1), (0.05, 0.4, 30, 2), (0.1, 0.1, 5, 3)]]
    rng = np.random.default_rng(0)
    A = np.broadcast_to(0.01 * np.eye(4), (2, 4, 4))
    y0s = [kernels.pack(0.01 * rng.standard_normal((2, 4, 4)), A, A, 0.1 * rng.standard_normal((2, 4))) for _ in cfgs]
    many = batched.run_batch(cfgs, "cpu", y0s=y0s)
    seen = []
    chunked = batched.run_batch(cfgs, "cpu", y0s=y0s, chunk_size=3, on_result=lambda i, tr: seen.append(i))
    assert sorted(seen) == [0, 1, 2, 3]
    for a, b in zip(many, chunked):
        _assert_same(a, b)
    n = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        one = batched.run_batch(cfgs, "cpu", y0s=y0s)
        one_loop = batched.run_batch(cfgs, "cpu", y0s=y0s, lanes=False)
    finally:
        numba.set_num_threads(n)
    for cfg, y0, a, b, c in zip(cfgs, y0s, many, one, one_loop):
        _assert_same(a, b)
        _assert_same(run(cfg, y0=y0), c)
        _assert_rounding(run(cfg, y0=y0), a)


def test_raw_batch_arrays():
    cfgs = [make_config(steps=30, eta=e, record_every=10) for e in (0.1, 0.2, 1e3)]
    res = batched.advance(cfgs)
    assert res.y.shape[0] == 3 and res.y.shape[2] == kernels.state_size(4)
    assert list(res.n_records[:2]) == [4, 4]
    np.testing.assert_array_equal(res.step[0, :4], [0, 10, 20, 30])
    np.testing.assert_array_equal(res.t[1, :4], [0, 2.0, 4.0, 6.0])
    assert list(res.code) == [batched.COMPLETE, batched.COMPLETE, batched.MAXABS]
    assert res.stop_stage[2] == 1 and res.step[2, res.n_records[2] - 1] < 30


def test_backend_resolution_and_refusals():
    assert batched.resolve_backend("cpu") == "cpu"
    assert batched.resolve_backend("auto") == ("cuda" if batched.cuda_available() else "cpu")
    with pytest.raises(ConfigError, match="backend: must be one of cpu, cuda, auto"):
        batched.resolve_backend("gpu")
    if not batched.cuda_available() and not batched.simulator():
        with pytest.raises(ConfigError, match="backend cuda: no usable CUDA GPU"):
            batched.resolve_backend("cuda")
    bad = {
        "method flow": make_config(method="flow", steps=10),
        "with method rk4 are not batched": make_config(method="rk4", steps=10, criterion="loss<=0.1", record_every=1),
        "record_every only": make_config(method="rk4", steps=10),
        "dense path .* is not batched here; dense configs run on the engine, which batches them: "
        "meanfield model sweep meanfield/models/mixture.toml --chunked": make_config(steps=10, n_neurons=2),
    }
    for msg, cfg in bad.items():
        assert batched.batchable(cfg) is not None
        with pytest.raises(ConfigError, match=msg) as e:
            batched.run_batch([make_config(steps=5), cfg], "cpu")
        assert "\n" not in str(e.value) and str(e.value).startswith("backend cpu: ")
    assert batched.batchable(make_config(steps=5)) is None
    with pytest.raises(ConfigError, match="record less often"):
        batched.run_batch([make_config(steps=1000, record_every=1)], "cpu", max_bytes=1e5)


def test_chunked_mixture_sweep_of_a_dense_config_names_the_engine_sweep(tmp_path, capsys):
    """A dense config in ``meanfield mixture sweep --chunked`` is one line, exit 2, naming the
    engine's sweep command (which batches dense configs), nothing written."""
    from meanfield.cli import main

    out = tmp_path / "s"
    rc = main(["mixture", "sweep", "--chunked", "--feature-gram", "cc:0.2", "--param", "omega=0.3,0.5",
               "--steps", "10", "--quiet", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert "meanfield model sweep meanfield/models/mixture.toml --chunked" in err, err
    assert not out.exists() or not any(out.iterdir())


def test_portable_functions_rebuild_for_another_target():
    # "compiling" with the identity gives the plain Python mathematics, calling itself (not the CPU code)
    from meanfield.core.activations import compile_portable

    ns = compile_portable(lambda f: f)
    assert ns.gd_advance_into.__globals__["forward_into"] is ns.forward_into
    # the shared driver (meanfield.core.batched), instantiated for the mixture, calls the mixture's hooks
    assert ns.mix_gd_trajectory.__globals__["gd_stage"] is ns.mix_gd_stage
    assert ns.mix_gd_stage.__globals__["gd_advance_into"] is ns.gd_advance_into
    assert ns.mix_gd_trajectory.__globals__["record_into"] is ns.mix_record_into
    assert not hasattr(ns.forward_into, "py_func")
    from meanfield.models.mixture.data import sample_set

    s = sample_set(2, 3)
    y = batched.initial_state(make_config(width=7, seed=1, neuron_init="gaussian:0.3"))
    u, m = np.empty((s.n, 2)), np.empty(s.n)
    loss_py = ns.forward_into(y, s.P, s.idx, s.sgn, s.y, s.weight, u, m, np.empty(3))
    loss_cpu = kernels.forward(y, s.P, s.idx, s.sgn, s.y, s.weight, np.empty((s.n, 2)), np.empty(s.n))
    assert abs(loss_py - loss_cpu) <= 1e-15


def test_one_driver_instantiated_per_system():
    # meanfield.core.batched's loop, rebuilt over each system's module globals (its hooks), not a copy
    import zlib

    from meanfield.engine import batched as eb

    mix, eng = batched.mix_gd_trajectory.py_func, eb.eng_gd_trajectory.py_func
    assert batched.gd_trajectory is batched.mix_gd_trajectory and eb.rk4_trajectory is eb.eng_rk4_trajectory
    assert mix.__code__ is eng.__code__ and mix.__globals__ is vars(batched) and eng.__globals__ is vars(eb)
    assert mix.__globals__["gd_stage"] is batched.mix_gd_stage and eng.__globals__["gd_stage"] is eb.eng_gd_stage
    # numba's cache key carries the system module's checksum (a hook edited there compiles anew)
    assert mix.__qualname__ == f"mix_gd_trajectory_{zlib.crc32(Path(batched.__file__).read_bytes()):08x}"


def test_import_does_not_touch_cuda():
    # (the engine's batch too: both instantiate meanfield.core.batched's driver at import)
    code = ("import sys, meanfield, meanfield.cli, meanfield.models.mixture.batched, meanfield.engine.batched, "
            "meanfield.core.sweep, meanfield.models.mixture.widths; "
            "print(sorted(m for m in sys.modules if m.startswith('numba.cuda')))")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


SIM_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    from meanfield.models.mixture import batched
    from meanfield.models.mixture.config import make_config
    cfgs = [make_config(d) for d in json.loads(sys.argv[1])]
    assert batched.resolve_backend("cuda") == "cuda" and not batched.cuda_available()
    out = batched.run_batch(cfgs, "cuda")
    arr = {}
    for i, tr in enumerate(out):
        for k, v in tr.arrays().items():
            arr[f"{i}_{k}"] = v
        arr[f"{i}_meta"] = np.array(json.dumps([tr.status, tr.message, tr.stage_ends]))
    np.savez(sys.argv[2], **arr)
""")

SIM = [  # tiny batches: B = 3 per kernel (GD with K=2 L=3; RK4 with K=2 L=2)
    dict(steps=12, eta=0.5, record_every=5),
    dict(schedule="three-stage", stage_steps=(4, 6, 3), eta=0.3, width=16, seed=1, neuron_init="gaussian:0.1",
         stage_criteria=("consistent_margin>=0.01", None, None), record_every=3),
    dict(steps=12, eta=1e3),
    dict(method="rk4", L=2, steps=6, eta=0.5, dt=0.5, width=8, seed=2, record_every=2),
    dict(method="rk4", L=2, schedule="three-stage", stage_steps=(2, 3, 2), eta=0.4, dt=0.3, record_every=2),
    dict(method="rk4", L=2, steps=6, eta=0.5, dt=0.5, max_abs=0.02, record_every=1),
]


def test_cuda_kernels_in_simulator_equal_cpu(tmp_path):
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=str(ROOT))
    out = tmp_path / "sim.npz"
    r = subprocess.run([sys.executable, "-c", SIM_SCRIPT, json.dumps(SIM), str(out)], capture_output=True,
                       text=True, cwd=ROOT, env=env, timeout=300)
    if r.returncode != 0 and "simulator" in r.stderr.lower() and "import" in r.stderr.lower():
        pytest.skip(f"CUDA simulator not importable: {r.stderr.strip().splitlines()[-1]}")
    assert r.returncode == 0, r.stderr[-3000:]
    sim = np.load(out)
    cfgs = [make_config(d) for d in SIM]
    cpu = batched.run_batch(cfgs, "cpu")
    statuses = []
    for i, tr in enumerate(cpu):
        a = tr.arrays()
        for k in ("t", "step", "stage", "y"):
            b = sim[f"{i}_{k}"]
            assert a[k].shape == b.shape, (i, k)
            np.testing.assert_allclose(b, a[k], rtol=0, atol=1e-12, err_msg=f"config {i} {k}")
        status, message, ends = json.loads(str(sim[f"{i}_meta"]))
        assert (status, message) == (tr.status, tr.message)
        assert ends == json.loads(json.dumps(tr.stage_ends))
        statuses.append(status)
    assert statuses == ["complete", "complete", "diverged", "complete", "complete", "diverged"]
