"""A sweep worker killed by the OS (BrokenProcessPool) is recorded as a failed
point; the other points finish (issue 14, sweeps)."""

import json
import os
import signal

import pytest

from meanfield.core.sweep import SweepSpec, map_points, run_sweep
from meanfield.models.mixture import ensemble as mixture_ensemble  # the mixture's per-point runner

_real_run_point = mixture_ensemble._run_point


def _square_or_die(x):
    if x == 3:
        os.kill(os.getpid(), signal.SIGKILL)  # what the OOM killer does
    return x * x


def _run_point_or_die(job):
    cfg, path = job
    if cfg["seed"] == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return _real_run_point(job)


def test_map_points_killed_worker_recorded_rest_finish():
    seen = []
    res = map_points(_square_or_die, list(range(8)), workers=2, on_crash=lambda item, e: ("crashed", item),
                     on_result=lambda i, r: seen.append(i))
    assert res == [0, 1, 4, ("crashed", 3), 16, 25, 36, 49]
    assert sorted(seen) == list(range(8))  # every item reported exactly once


def test_map_points_without_on_crash_raises():
    from concurrent.futures.process import BrokenProcessPool

    with pytest.raises(BrokenProcessPool):
        map_points(_square_or_die, list(range(6)), workers=2)


def test_sweep_killed_point_failed_others_complete(tmp_path, monkeypatch):
    monkeypatch.setattr(mixture_ensemble, "_run_point", _run_point_or_die)
    spec = SweepSpec(base={"steps": 5}, params={"seed": [0, 1, 2]}, out=tmp_path / "sw")
    index = run_sweep(spec, workers=2, progress=False)
    res = {p["params"]["seed"]: p["result"] for p in index["points"]}
    assert res[1]["status"] == "failed" and "died" in res[1]["message"]
    assert res[0]["status"] == "complete" and res[2]["status"] == "complete"
    assert index["status"] == "complete" and index["n_done"] == 3
    on_disk = json.loads((tmp_path / "sw" / "sweep.json").read_text())
    assert [p["result"]["status"] for p in on_disk["points"]] == ["complete", "failed", "complete"]
