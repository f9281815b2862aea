"""Batched and chunked sweeps apply the single run's symmetric-start check
(issue 26, meanfield.engine.symmetry): the multi-class mixture at infinite
width starts where GD cannot leave by symmetry. A single run refuses it; an
unbatched sweep records each point as failed with that message; a batched
sweep must do the same (it skipped the check), a chunked one refuses at its
base in one line; with --symmetry allow the points run."""

from __future__ import annotations

import json
import subprocess
import sys

MEANFIELD = [sys.executable, "-m", "meanfield"]
SWEEP = ["model", "sweep", "mixture_multiclass", "--steps", "3", "--param", "omega=0.1,0.2", "--quiet"]


def _run(args, cwd):
    return subprocess.run(MEANFIELD + args, cwd=cwd, capture_output=True, text=True, timeout=600)


def _results(folder):
    idx = json.loads((folder / "sweep.json").read_text())
    return [e["result"] for e in idx["points"]]


def test_batched_sweep_records_the_symmetric_start_as_the_unbatched_one_does(tmp_path):
    r1 = _run(SWEEP + ["--out", "plain"], tmp_path)
    r2 = _run(SWEEP + ["--batched", "--out", "batched"], tmp_path)
    assert r1.returncode == r2.returncode == 1, (r1.stderr[-2000:], r2.stderr[-2000:])  # every point failed
    for r in (r1, r2):  # said on stderr, one line, not only in sweep.json
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("meanfield: 2 of 2 points failed") and "symmetry:" in lines[0]
    plain, batched = _results(tmp_path / "plain"), _results(tmp_path / "batched")
    assert [p["status"] for p in plain] == [b["status"] for b in batched] == ["failed", "failed"]
    for p, b in zip(plain, batched):
        assert p["message"] == b["message"] and "symmetry: the infinite-width start is symmetric" in b["message"]
    assert not list((tmp_path / "batched" / "points").glob("*.h5"))


def test_chunked_sweep_refuses_the_symmetric_start_in_one_line(tmp_path):
    r = _run(SWEEP + ["--chunked", "--out", "ch"], tmp_path)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "symmetry:" in lines[0], r.stderr[-2000:]
    assert not (tmp_path / "ch").exists()


def test_batched_sweep_runs_when_the_symmetry_is_allowed(tmp_path):
    r = _run(SWEEP + ["--batched", "--symmetry", "allow", "--out", "ok"], tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert [p["status"] for p in _results(tmp_path / "ok")] == ["complete", "complete"]
