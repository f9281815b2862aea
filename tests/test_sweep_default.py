"""``mixture sweep`` / ``model sweep`` run as chunks of batched trajectories by default when the points
share a shape (issue 27 item 4), one run file per point with ``--per-point`` or when they do not (a note
says so); the chunked default keeps the interrupted-sweep guarantees (a signal: exit 130 within 2 s, a
valid sweep.h5, finished chunks kept and not run again)."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from lanes_tolerance import close
from meanfield.cli import main
from proc_signals import wait_until_catches

ROOT = Path(__file__).resolve().parents[1]
MEANFIELD = [sys.executable, "-m", "meanfield"]


def test_default_is_chunked_and_equals_the_per_point_sweep(tmp_path, capsys):
    grid = ["mixture", "sweep", "--param", "omega=0.02:0.3:log:5", "--param", "eta=0.5,1", "--steps", "300",
            "--record-every", "10", "--quiet"]
    assert main(grid + ["--out", str(tmp_path / "c")]) == 0
    assert (tmp_path / "c" / "sweep.h5").exists() and not (tmp_path / "c" / "sweep.json").exists()
    assert main(grid + ["--per-point", "--workers", "1", "--out", str(tmp_path / "p")]) == 0
    assert not (tmp_path / "p" / "sweep.h5").exists()
    idx = json.loads((tmp_path / "p" / "sweep.json").read_text())
    with h5py.File(tmp_path / "c" / "sweep.h5") as f:
        d = {k: f[k][()].reshape(-1) for k in ("status", "loss_end", "T1", "T2", "T_loss", "min_margin_end")}
    assert len(idx["points"]) == 10 and (d["status"] == 0).all()
    for e in idx["points"]:  # one run per point (its own code path) against the chunk's outputs, to rounding
        i, r = e["index"], e["result"]  # (the chunk's lanes against run.run's scalar kernels: tests/lanes_tolerance)
        for k in ("loss_end", "T1", "T2", "T_loss", "min_margin_end"):
            assert close(r[k], float(d[k][i])), (i, k, r[k], d[k][i])
    capsys.readouterr()
    # a rerun of the chunked sweep runs nothing and says so
    assert main(grid[:-1] + ["--out", str(tmp_path / "c")]) == 0
    assert "0 run now" in capsys.readouterr().out


def test_points_of_different_shapes_run_per_point_with_a_note(tmp_path, capsys):
    out = tmp_path / "k"
    assert main(["mixture", "sweep", "--param", "K=2,3", "--steps", "5", "--workers", "1", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "note: one run file per point" in err and "differ in K" in err
    assert (out / "sweep.json").exists() and not (out / "sweep.h5").exists()
    # a folder holding a per-point sweep is continued point by point (never two layouts mixed)
    assert main(["mixture", "sweep", "--param", "K=2,3", "--steps", "5", "--workers", "1", "--out", str(out)]) == 0
    assert "continued point by point" in capsys.readouterr().err
    assert not (out / "sweep.h5").exists()
    # the chunks' own flags with --per-point: one line, exit 2, nothing written
    bad = tmp_path / "bad"
    assert main(["mixture", "sweep", "--param", "omega=0.1,0.2", "--per-point", "--chunk-size", "4", "--out",
                 str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "per_point" in err and not bad.exists()


def test_model_sweep_default_is_chunked(tmp_path):
    r = subprocess.run(MEANFIELD + ["model", "sweep", "mixture", "--param", "omega=0.05,0.1", "--steps", "20",
                                    "--quiet", "--out", str(tmp_path / "m")], capture_output=True, text=True,
                       cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "m" / "sweep.h5").exists() and not (tmp_path / "m" / "sweep.json").exists()


def test_the_probe_of_long_points_is_short():
    """The chunk-size probe runs each probe point shortened (``probe_point``): points of 3e7 GD steps (minutes
    each) are timed in well under a second, so a signal during the probe is seen within 2 s."""
    from meanfield.core.ensemble import EnsembleProblem, probe_seconds

    prob = EnsembleProblem({"steps": 30_000_000, "record_every": 30_000_000}, axes={"omega": [0.1, 0.2, 0.3]})
    probe_seconds(prob)  # kernels loaded
    t0 = time.perf_counter()
    per = probe_seconds(prob)
    assert time.perf_counter() - t0 < 2.0
    assert per > 10.0  # a point of 3e7 steps at >= 0.3 us a step: the estimate is of the whole point


def _interrupt(cmd, out: Path, ready, tmp_path):
    """Start ``cmd``, wait for ``ready()``, SIGINT it; (seconds from the signal to the exit, stderr)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        wait_until_catches(p, signal.SIGINT)
        deadline = time.time() + 120
        while time.time() < deadline and not ready() and p.poll() is None:
            time.sleep(0.05)
        assert p.poll() is None, p.communicate()[1]
        t0 = time.time()
        p.send_signal(signal.SIGINT)
        so, se = p.communicate(timeout=60)
        return time.time() - t0, p.returncode, se
    finally:
        if p.poll() is None:
            p.kill()


@pytest.mark.parametrize("where", ["this process", "worker process"])
def test_signal_stops_the_chunked_default_within_2_s_and_keeps_finished_chunks(tmp_path, where):
    """``this process``: 120 points of 20000 steps, ``--workers 1``: chunks of a few seconds, run in the
    command's own process in launches of at most about 0.5 s; the signal lands after the first chunk file.
    ``worker process``: 2 points of 3e7 steps (a trajectory over a second: a worker process runs it, and an
    interrupt terminates it). Both: exit 130 within 2 s, sweep.h5 says interrupted and holds the finished
    chunks; a rerun of the same command finds them (the same chunk size) and runs only the rest."""
    out = tmp_path / "sw"
    subprocess.run(MEANFIELD + ["mixture", "sweep", "--param", "omega=0.1,0.2", "--steps", "2", "--quiet", "--out",
                                str(tmp_path / "warm")], check=True, capture_output=True, cwd=ROOT, timeout=600)
    if where == "this process":
        args = ["--param", "omega=0.01:0.3:log:120", "--steps", "20000", "--record-every", "1000"]

        def ready():
            return (out / "chunks").exists() and any((out / "chunks").glob("*.h5"))
    else:
        args = ["--param", "omega=0.1,0.2", "--steps", "30000000", "--record-every", "1000000", "--force"]

        seen: list = []

        def ready():  # a second after the plan is written: the worker process is running the chunk
            if not seen and (out / "ensemble.json").exists():
                seen.append(time.time())
            return bool(seen) and time.time() > seen[0] + 1.0
    cmd = MEANFIELD + ["mixture", "sweep", *args, "--workers", "1", "--quiet", "--out", str(out)]
    dt, rc, se = _interrupt(cmd, out, ready, tmp_path)
    assert rc == 130, se
    assert dt < 2.0, f"{dt:.2f} s from the signal to the exit"
    assert "Traceback" not in se
    with h5py.File(out / "sweep.h5") as f:
        status, n_done = f.attrs["status"], int(f.attrs["n_done"])
        codes = f["status"][()].reshape(-1)
    plan = json.loads((out / "ensemble.json").read_text())
    assert status == "interrupted"
    assert n_done == int(np.count_nonzero(codes != -1))
    if where == "this process":
        assert 0 < n_done < 120 and len(plan["chunks"]) > 1
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
        assert r.returncode == 0, r.stderr
        done_chunks = n_done // plan["chunk_size"]
        assert f"{len(plan['chunks']) - done_chunks} run now" in r.stdout, (r.stdout, plan["chunk_size"])
        assert json.loads((out / "ensemble.json").read_text())["chunk_size"] == plan["chunk_size"]
        with h5py.File(out / "sweep.h5") as f:
            assert f.attrs["status"] == "complete" and int(f.attrs["n_done"]) == 120
    else:
        assert n_done == 0


def test_points_of_very_different_lengths_finish_apart_and_survive_a_signal(tmp_path):
    """Chunked by default, points of 20 and 3e8 steps: the probe's estimate makes chunks of one point in a
    process per worker, so the quick points finish (their chunk files) while the long ones run; SIGINT: exit 130
    within 2 s, sweep.h5 interrupted with the quick points done."""
    out = tmp_path / "sw"
    cmd = MEANFIELD + ["mixture", "sweep", "--param", "steps=20,30,200000000,300000000", "--force", "--workers",
                       "2", "--quiet", "--out", str(out)]
    dt, rc, se = _interrupt(cmd, out, lambda: len(list((out / "chunks").glob("*.h5"))) >= 2
                            if (out / "chunks").exists() else False, tmp_path)
    assert rc == 130 and dt < 2.0 and "Traceback" not in se, (rc, dt, se[-2000:])
    with h5py.File(out / "sweep.h5") as f:
        assert f.attrs["status"] == "interrupted"
        assert list(f["status"][()]) == [0, 0, -1, -1]


def test_a_chunked_sweep_terminated_early_can_be_continued(tmp_path):
    out = tmp_path / "sw"
    argv = MEANFIELD + ["mixture", "sweep", "--param", "omega=0.1,0.2", "--steps", "50", "--workers", "1", "--quiet",
                        "--out", str(out)]
    for delay in (0.5, 1.0, 1.5, 2.5):
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        time.sleep(delay)
        p.send_signal(signal.SIGTERM)
        so, se = p.communicate(timeout=60)
        assert p.returncode in (0, 130), se[-2000:]
        assert "Traceback" not in se
        if out.exists():  # a folder is never left without its manifest
            assert (out / "ensemble.json").is_file(), sorted(x.name for x in out.iterdir())
    r = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    with h5py.File(out / "sweep.h5") as f:
        assert f.attrs["status"] == "complete" and int(f.attrs["n_done"]) == 2


def test_a_large_grid_is_judged_by_the_base_and_each_axis_value():
    """Beyond MEMO_MAX points the shape check builds the base and each axis value alone (sum of the axis
    lengths), not every combination (their product): 2 x 3000 points, 3003 configs at most."""
    from meanfield.core import ensemble
    from meanfield.core.ensemble import EnsembleProblem, shared_shape

    ensemble._MEMO.clear()
    built = []

    class Counting:
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def config(self, base, over):
            built.append(over)
            return self.inner.config(base, over)

    from meanfield.models.mixture.ensemble import MIXTURE

    sys_ = Counting(MIXTURE)
    assert shared_shape(EnsembleProblem({"steps": 5}, axes={"omega": [0.1, 0.2], "seed": list(range(3000))},
                                        system=sys_)) is None
    assert 0 < len(built) <= 1 + 2 + 3000
    why = shared_shape(EnsembleProblem({"steps": 5}, axes={"K": [2, 3], "seed": list(range(3000))}, system=sys_))
    assert "K=3" in why


def test_a_tiny_grid_is_planned_from_the_estimate_a_long_one_is_probed(tmp_path, monkeypatch):
    """seconds_per_trajectory: a grid estimated (at ESTIMATE_SAFETY x the system's estimate) under
    ESTIMATE_SKIP_S runs no probe; a longer one, a system without an estimate and an unknown (NaN) estimate
    are probed. The plan file says which."""
    import json

    from meanfield.core import ensemble, ensemble_plan
    from meanfield.core.ensemble import EnsembleProblem, seconds_per_trajectory
    from meanfield.models.mixture.ensemble import MIXTURE

    probed = []
    real = ensemble.probe_seconds
    monkeypatch.setattr(ensemble, "probe_seconds", lambda p, k=8: probed.append(1) or real(p, k))
    tiny = EnsembleProblem({"steps": 200, "record_every": 200}, axes={"omega": [0.01, 0.1, 0.3]})
    per, how = seconds_per_trajectory(tiny)
    assert how == "estimate" and not probed
    est = max(MIXTURE.estimate_seconds(MIXTURE.config(tiny.base, tiny.point(i))) for i in range(3))
    assert per == pytest.approx(ensemble_plan.ESTIMATE_SAFETY * est) and per > 0
    r = ensemble.solve(tiny, tmp_path / "s", progress=False)
    assert r.status == "complete" and not probed
    assert json.loads((tmp_path / "s" / "ensemble.json").read_text())["seconds_per_trajectory_from"] == "estimate"
    # a long grid (estimated over the limit): probed
    long = EnsembleProblem({"steps": 3_000_000, "record_every": 3_000_000}, axes={"omega": [0.1, 0.2]})
    assert seconds_per_trajectory(long)[1] == "probe" and probed
    # an invalid point (no estimate: probed, as before)
    configs = (MIXTURE.config({"steps": 5}, {"K": k}) for k in (2, 1))  # the second raises its ConfigError
    assert ensemble_plan.from_estimate(MIXTURE.estimate_seconds, configs) is None
    # no estimate (a system without estimate_seconds) or an unknown one: probed
    for est_fn in (None, lambda cfg: math.nan):
        class Sys:  # the mixture's system, with no estimate or an unknown one
            estimate_seconds = None if est_fn is None else staticmethod(est_fn)

            def __getattr__(self, name):
                return getattr(MIXTURE, name)

        p = EnsembleProblem({"steps": 20}, axes={"omega": [0.1]}, system=Sys())
        probed.clear()
        assert seconds_per_trajectory(p)[1] == "probe" and probed
