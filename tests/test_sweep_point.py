"""The one per-point worker and resume check of sweeps (meanfield.core.sweep.run_point / finished_point),
shared by the mixture's and the engine's sweeps (issue 21: one ensemble path)."""

from __future__ import annotations

import json

import numpy as np

from meanfield.core.io import write_run
from meanfield.core.sweep import finished_point, run_point


def _write(path, status="complete", point=None):
    margin = np.array([[0.0, 0.0], [0.5, -0.25]])
    write_run(path, system="toy", config={"omega": 0.1}, status=status, message="done",
              data={"t": np.array([0.0, 1.0]), "loss": np.array([0.7, 0.4]), "margin": margin,
                    "samples": {"consistent": np.array([1, 0])}},
              attrs={"sweep_point": json.dumps(point or {"omega": 0.1}, sort_keys=True)})


def test_run_point_summary_and_failure(tmp_path):
    s = run_point(lambda p: _write(p), tmp_path / "a.h5")
    assert s["status"] == "complete" and s["loss_end"] == 0.4 and s["t_end"] == 1.0
    assert s["min_margin_consistent_end"] == 0.5 and s["min_margin_inconsistent_end"] == -0.25
    assert s["elapsed_s"] >= 0.0

    def bad(p):
        raise ValueError("omega: must be > 0\n  (second line)")

    f = run_point(bad, tmp_path / "b.h5")
    assert f["status"] == "failed" and f["message"] == "ValueError: omega: must be > 0 (second line)"
    assert not (tmp_path / "b.h5").exists()


def test_finished_point_resumes_only_finished_matching_files(tmp_path):
    p = tmp_path / "a.h5"
    assert finished_point(p, lambda a: True) is None  # missing
    _write(p, status="interrupted")
    assert finished_point(p, lambda a: True) is None  # not finished
    _write(p)
    assert finished_point(p, lambda a: a.get("sweep_point") == '{"omega": 0.2}') is None  # another point
    s = finished_point(p, lambda a: json.loads(a["config"]) == {"omega": 0.1})
    assert s is not None and s["loss_end"] == 0.4
    p.write_bytes(b"not an hdf5 file")
    assert finished_point(p, lambda a: True) is None  # unreadable: the point runs again
