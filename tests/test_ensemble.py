"""Chunked ensembles (meanfield.core.ensemble): outputs against independent single
runs (to rounding: the chunks' lanes against run.run's scalar kernels), a dask
LocalCluster against the local run bit for bit, a killed worker and lost /
stale chunks (nothing lost, nothing counted twice), interrupts, diverging
points, the CLI and sweep-plot, bad input."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from lanes_tolerance import assert_close, close
from meanfield.cli import main
from meanfield.core.ensemble import EnsembleProblem, load, solve
from meanfield.core.ensemble_store import _slabs
from meanfield.models.mixture.config import make_config
from meanfield.models.mixture.run import recorded, run

ROOT = Path(__file__).resolve().parents[1]
BASE = {"steps": 300, "stage_steps": "100,100,100", "record_every": 3}
AXES = {"omega": [0.02, 0.3], "eta": [2.0, 3e4], "schedule": ["simultaneous", "three-stage"], "width": ["inf", 8]}


def n_records(cfg, traj):  # an output_func: module level, so workers can import it
    return {"n_records": len(traj.t)}


def count_complete(acc, part):  # a reduction
    return (acc or 0) + int(np.count_nonzero(part["status"] == 0))


def _independent(cfg):
    """Outputs of one point from the unbatched run and numpy observables (run.recorded)."""
    tr = run(cfg)
    samples, arr, obs, st = recorded(cfg, tr)
    m = obs["margin"][-1]
    c = samples.consistent.astype(bool)
    return {"status": 0 if tr.status == "complete" else None, "t_end": arr["t"][-1], "steps_end": arr["step"][-1],
            "loss_end": obs["loss"][-1], "min_margin_end": m.min(), "min_margin_consistent_end": m[c].min(),
            "min_margin_inconsistent_end": m[~c].min(), "T1": st["T1"], "T2": st["T2"], "T_loss": st["T_loss"],
            "margin_end": m, "traj_status": tr.status, "n_records": len(tr.t)}


def test_outputs_equal_independent_runs_and_diverging_points_finish(tmp_path):
    outputs = ("loss_end", "min_margin_end", "min_margin_consistent_end", "min_margin_inconsistent_end",
               "T1", "T2", "T_loss", "t_end", "steps_end", "margin_end")
    prob = EnsembleProblem(BASE, axes=AXES, outputs=outputs, output_func=n_records, reduction=count_complete,
                           keep_records=[5])
    res = solve(prob, tmp_path / "e", workers=1, chunk_size=5, progress=False)
    assert res.status == "complete" and res.n_done == 16 and res.n_chunks == 4
    d = load(res.path)
    assert list(d["axes"]) == list(AXES) and d["T1"].shape == (2, 2, 2, 2) and d["margin_end"].shape == (2, 2, 2, 2, 8)
    diverged = 0
    for i in range(prob.size):
        at = np.unravel_index(i, prob.shape)
        ref = _independent(make_config(BASE, **prob.point(i)))
        if ref["traj_status"] == "diverged":
            assert d["status"][at] in (2, 3) and prob.point(i)["eta"] == 3e4
            diverged += 1
        else:
            assert d["status"][at] == 0
        for k in outputs:  # the chunk's lanes against run.run's scalar kernels: to rounding (lanes_tolerance)
            if k == "margin_end":
                assert_close(d[k][at], ref[k], err_msg=k)
            elif k == "steps_end":
                assert d[k][at] == ref[k], (i, k)
            else:
                assert close(float(d[k][at]), float(ref[k])), (i, k, d[k][at], ref[k])
        assert d["x_n_records"][at] == ref["n_records"]
    # the huge step diverges (at least every simultaneous point), the rest completes; times were reached somewhere
    assert diverged >= 4 and np.isfinite(d["T1"]).sum() >= 8 and np.isfinite(d["T2"]).sum() >= 4
    assert res.reduced == 16 - diverged == res.counts["complete"]
    # the kept point is an ordinary run file equal to a run made on its own
    with h5py.File(tmp_path / "e" / "sweep.h5") as f, h5py.File(tmp_path / "e" / "records" / "0000005.h5") as g:
        np.testing.assert_array_equal(f["records/5/S"][()], g["S"][()])
        ref = recorded(make_config(BASE, **prob.point(5)), run(make_config(BASE, **prob.point(5))))[2]
        assert_close(g["S"][()], ref["S"])


def _grid_problem():
    return EnsembleProblem({"steps": 200, "record_every": 4},
                           axes={"omega": list(np.geomspace(0.01, 0.3, 5)), "eta": [0.5, 3e4], "width": [8],
                                 "seed": [0, 1, 2]})


def _assert_same_sweep(a, b):
    da, db = load(a), load(b)
    keys = [k for k in da if k not in ("attrs", "axes")]
    assert keys == [k for k in db if k not in ("attrs", "axes")] and "T1" in keys
    for k in keys:
        assert da[k].dtype == db[k].dtype
        np.testing.assert_array_equal(da[k], db[k], err_msg=k)  # NaN == NaN here, every bit else
    assert da["attrs"]["counts"] == db["attrs"]["counts"]


def test_local_cluster_equals_local_run_bit_for_bit(tmp_path):
    pytest.importorskip("distributed")
    prob = _grid_problem()
    loc = solve(prob, tmp_path / "loc", workers=1, chunk_size=4, progress=False)
    cl = solve(prob, tmp_path / "cl", scheduler="local:2", chunk_size=4, progress=False)
    assert loc.status == cl.status == "complete" and cl.n_chunks == 8 and cl.n_chunks_run == 8
    _assert_same_sweep(loc.path, cl.path)
    hosts = set()
    for p in (tmp_path / "cl" / "chunks").glob("*.h5"):
        with h5py.File(p) as f:
            hosts.add(int(f.attrs["pid"]))
    assert hosts and os.getpid() not in hosts  # the cluster's worker processes ran the chunks, not this one


class _KillOnce:
    """A progress stream that SIGKILLs a worker process once points are done."""

    def __init__(self, pid):
        self.pid, self.killed = pid, False

    def isatty(self):
        return True

    def write(self, text):
        if not self.killed and "/" in text and not text.split("]")[1].strip().startswith("0/"):
            os.kill(self.pid, signal.SIGKILL)
            self.killed = True

    def flush(self):
        pass


def test_killed_worker_loses_and_duplicates_nothing(tmp_path):
    distributed = pytest.importorskip("distributed")
    import logging

    prob = _grid_problem()
    ref = solve(prob, tmp_path / "ref", workers=1, chunk_size=3, progress=False)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0",
                                  silence_logs=logging.CRITICAL) as cluster, distributed.Client(cluster) as client:
        pids = client.run(os.getpid)
        stream = _KillOnce(sorted(pids.values())[0])
        res = solve(prob, tmp_path / "cl", scheduler=cluster.scheduler_address, chunk_size=3, stream=stream)
        assert stream.killed
    if res.status != "complete":  # the scheduler gave the chunk up (KilledWorker): the rerun does it
        res = solve(prob, tmp_path / "cl", workers=1, chunk_size=3, progress=False)
    assert res.status == "complete" and res.n_done == prob.size
    _assert_same_sweep(ref.path, res.path)
    assert len(list((tmp_path / "cl" / "chunks").glob("*.h5"))) == res.n_chunks == 10
    assert not list((tmp_path / "cl" / "chunks").glob("*tmp*"))


class _KillLocalWorker(_KillOnce):
    """Kills one of this process's local pool workers once points are done."""

    def __init__(self):
        super().__init__(None)

    def write(self, text):
        import multiprocessing

        if not self.killed and "/" in text and not text.split("]")[1].strip().startswith("0/"):
            kids = multiprocessing.active_children()
            if kids:
                os.kill(kids[0].pid, signal.SIGKILL)
                self.killed = True


def test_killed_local_worker_is_replaced_and_its_chunks_rerun(tmp_path):
    """(two pools of spawned worker processes: 3 s on a quiet machine, up to 40 s on 2 busy cores)"""
    prob = _grid_problem()
    ref = solve(prob, tmp_path / "ref", workers=1, chunk_size=2, progress=False)
    stream = _KillLocalWorker()
    res = solve(prob, tmp_path / "e", workers=2, chunk_size=2, stream=stream)
    assert stream.killed and res.status == "complete" and not res.errors and res.n_chunks_run == 15
    _assert_same_sweep(ref.path, res.path)
    assert len(list((tmp_path / "e" / "chunks").glob("*.h5"))) == res.n_chunks == 15


class _InterruptOnce:
    def __init__(self):
        self.fired = False

    def isatty(self):
        return True

    def write(self, text):
        if not self.fired and "/" in text and not text.split("]")[1].strip().startswith("0/"):
            self.fired = True
            raise KeyboardInterrupt

    def flush(self):
        pass


def test_interrupt_lost_and_stale_chunks_rerun_exactly_once(tmp_path):
    prob = _grid_problem()
    ref = solve(prob, tmp_path / "ref", workers=1, chunk_size=6, progress=False)
    out = tmp_path / "e"
    st = _InterruptOnce()
    r1 = solve(prob, out, workers=1, chunk_size=6, stream=st)
    assert st.fired and r1.status == "interrupted" and 0 < r1.n_done < prob.size
    d = load(r1.path)  # a valid file: done points, the rest status -1 and NaN
    assert d["attrs"]["status"] == "interrupted" and (d["status"] == -1).sum() == prob.size - r1.n_done
    assert np.isnan(d["T1"][d["status"] == -1]).all()
    r2 = solve(prob, out, workers=1, chunk_size=6, progress=False)
    assert r2.status == "complete" and r2.n_chunks_run == r2.n_chunks - 1
    _assert_same_sweep(ref.path, r2.path)
    # a lost chunk file and a damaged one (wrong key) are rerun, nothing else
    chunks = sorted((out / "chunks").glob("*.h5"))
    chunks[0].unlink()
    with h5py.File(chunks[1], "a") as f:
        f.attrs["key"] = "not-this-one"
    mt = {p: p.stat().st_mtime_ns for p in chunks[2:]}
    r3 = solve(prob, out, workers=1, chunk_size=6, progress=False)
    assert r3.n_chunks_run == 2 and all(p.stat().st_mtime_ns == t for p, t in mt.items())
    _assert_same_sweep(ref.path, r3.path)
    # a stale chunk of another plan in the folder is not counted
    (out / "chunks" / "0123456789abcdef01234567.h5").write_bytes(chunks[2].read_bytes())
    r4 = solve(prob, out, workers=1, chunk_size=6, progress=False)
    assert r4.n_chunks_run == 0 and r4.n_done == prob.size
    _assert_same_sweep(ref.path, r4.path)
    # another chunk size is another plan: everything reruns, same numbers
    r5 = solve(prob, tmp_path / "e5", workers=1, chunk_size=7, progress=False)
    _assert_same_sweep(ref.path, r5.path)


def test_slabs_cover_flat_ranges_exactly():
    rng = np.random.default_rng(0)
    for _ in range(200):
        shape = tuple(int(x) for x in rng.integers(1, 5, rng.integers(1, 5)))
        n = int(np.prod(shape))
        lo = int(rng.integers(0, n))
        hi = int(rng.integers(lo + 1, n + 1))
        a = np.full(shape, -1)
        for sl, s0, s1 in _slabs(lo, hi, shape):
            blk = a[sl]
            assert blk.size == s1 - s0
            a[sl] = np.arange(s0, s1).reshape(blk.shape)
        flat = np.full(n, -1)
        flat[lo:hi] = np.arange(lo, hi)
        np.testing.assert_array_equal(a.ravel(), flat)


def test_cli_chunked_sweep_plot_and_bad_input(tmp_path, capsys):
    out = tmp_path / "sw"
    assert main(["mixture", "sweep", "--chunked", "--param", "omega=0.03:0.3:log:3", "--param", "eta=0.5,1",
                 "--steps", "150", "--record-every", "5", "--out", str(out), "--workers", "1", "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "sweep.h5: complete: 6/6 points done (6 complete)" in text
    d = load(out / "sweep.h5")
    assert d["T1"].shape == (3, 2) and list(d["axes"]["eta"]) == [0.5, 1.0]
    assert main(["mixture", "sweep-plot", str(out / "sweep.h5"), "--x", "omega", "--y", "T1", "--hue", "eta"]) == 0
    assert (out / "sweep_T1_vs_omega.png").stat().st_size > 1000
    assert main(["mixture", "sweep-plot", str(out / "sweep.h5"), "--x", "omega", "--y", "eta", "--z", "loss_end",
                 "--out", str(tmp_path / "h.png")]) == 0
    assert (tmp_path / "h.png").exists()
    assert main(["mixture", "sweep-plot", str(out / "sweep.h5"), "--x", "omega", "--y", "T1", "--select", "eta=1",
                 "--out", str(tmp_path / "s.png")]) == 0
    capsys.readouterr()
    bad_plot = (["--x", "omg", "--y", "T1"], ["--x", "omega", "--y", "T9"], ["--x", "omega", "--y", "eta"],
                ["--x", "omega", "--y", "T1", "--select", "eta=0.7"], ["--x", "omega", "--y", "T1", "--select", "et=1"],
                ["--x", "omega", "--y", "T1", "--agg", "sum"], ["--x", "omega", "--y", "T1", "--out", "f.txt"])
    for argv in bad_plot:
        assert main(["mixture", "sweep-plot", str(out / "sweep.h5"), *argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "error" in err, argv
    assert main(["mixture", "sweep-plot", str(tmp_path / "nope.h5"), "--x", "omega", "--y", "T1"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    bad = tmp_path / "bad"
    for argv in (["--scheduler", "foo"], ["--scheduler", "local:0"], ["--chunk-size", "0"], ["--chunk-size", "x"],
                 ["--param", "method=gd,flow", "--chunked"], ["--param", "omega=-1", "--chunked"],
                 ["--chunked", "--param", "omega=1", "--keep-records", "7"], ["--chunked", "--n-train", "8"],
                 ["--chunked", "--workers", "0"]):
        args = argv if any(a.startswith("--param") for a in argv) else [*argv, "--param", "omega=0.1,0.2"]
        assert main(["mixture", "sweep", *args, "--out", str(bad), "--quiet"]) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "error" in err, (argv, err)
        assert not bad.exists()


def test_nothing_imports_dask_unless_asked():
    code = ("import sys, meanfield, meanfield.cli, meanfield.core.ensemble, meanfield.core.ensemble_cli; "
            "meanfield.cli.build_parser(); print(sorted(m for m in ('dask', 'distributed') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stderr


SIM_ENSEMBLE = """
import sys
from meanfield.core.ensemble import EnsembleProblem, solve
prob = EnsembleProblem({"steps": 12, "record_every": 2, "eta": 2.0},
                       axes={"omega": [0.05, 0.3], "width": ["inf", 4], "schedule": ["simultaneous"]})
r = solve(prob, sys.argv[1], backend="cuda", progress=False)
assert r.status == "complete" and r.n_done == 4, r
"""


@pytest.mark.slow
def test_cuda_backend_in_simulator_matches_cpu(tmp_path):
    """The GPU path of the ensemble (batched CUDA kernel, chunks in this
    process) in numba's CUDA simulator equals the CPU path to rounding
    (about a minute on 2 busy cores: the simulator interprets the kernel)."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", SIM_ENSEMBLE, str(tmp_path / "gpu")], capture_output=True, text=True,
                       cwd=ROOT, env=env, timeout=300)
    if r.returncode != 0 and "simulator" in r.stderr.lower() and "import" in r.stderr.lower():
        pytest.skip(f"CUDA simulator not importable: {r.stderr.strip().splitlines()[-1]}")
    assert r.returncode == 0, r.stderr[-3000:]
    prob = EnsembleProblem({"steps": 12, "record_every": 2, "eta": 2.0},
                           axes={"omega": [0.05, 0.3], "width": ["inf", 4], "schedule": ["simultaneous"]})
    cpu = solve(prob, tmp_path / "cpu", workers=1, progress=False)
    g, c = load(tmp_path / "gpu" / "sweep.h5"), load(cpu.path)
    assert g["attrs"]["backend"] == "cuda" and c["attrs"]["backend"] == "cpu"
    np.testing.assert_array_equal(g["status"], c["status"])
    np.testing.assert_array_equal(g["steps_end"], c["steps_end"])
    for k in ("loss_end", "min_margin_end", "t_end"):
        np.testing.assert_allclose(g[k], c[k], rtol=1e-12, atol=1e-14, err_msg=k)


def test_full_disk_before_the_reduce_is_one_line_and_keeps_the_chunks(tmp_path, capsys, monkeypatch):
    """sweep.h5 is streamed through h5py, which cannot fail cleanly on a full disk: with less free space
    than the chunk files hold, the reduce refuses before writing (one line naming sweep.h5, exit 2, no
    tmp file); the chunk files stay, and the same command with room again finishes without rerunning."""
    import shutil
    from collections import namedtuple

    out = tmp_path / "sw"
    argv = ["mixture", "sweep", "--chunked", "--param", "omega=0.1,0.2", "--steps", "50", "--out", str(out),
            "--workers", "1", "--quiet"]
    real = shutil.disk_usage
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage",
                        lambda p: usage(1 << 30, 1 << 30, 100) if "sw" in str(p) else real(p))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "sweep.h5" in err and "no space left" in err, err
    assert not (out / "sweep.h5").exists() and not list(out.glob("sweep.h5.tmp-*"))
    chunks = sorted((out / "chunks").glob("*.h5"))
    assert chunks
    monkeypatch.setattr(shutil, "disk_usage", real)
    mtimes = [c.stat().st_mtime_ns for c in chunks]
    assert main(argv) == 0
    assert (out / "sweep.h5").exists()
    assert [c.stat().st_mtime_ns for c in chunks] == mtimes  # finished chunks were not run again
