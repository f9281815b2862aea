"""A write that fails (issue 14, items 9 and 15): a checkpoint that itself runs
out of memory or disk must not lose the run (warning, the previous file stays
valid, the run goes on); the final write's failure on a full disk / file-size
limit (EFBIG, ENOSPC) is one line, exit 2, no tmp file left, an earlier file
at the path kept, and no crash at interpreter shutdown (HDF5 used to segfault)."""

from __future__ import annotations

import resource
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

MEANFIELD = [sys.executable, "-m", "meanfield"]


def test_failing_checkpoints_do_not_lose_the_run(tmp_path, monkeypatch, capsys):
    """Every checkpoint fails (MemoryError, then OSError ENOSPC): each is a logged
    warning, the run goes on to the end and its final file is written whole."""
    from meanfield.cli import main
    from meanfield.core import integrate, io

    init = integrate.Monitor.__init__

    def every_update(self, *a, **k):  # a checkpoint at every progress update
        init(self, *a, **k)
        self.checkpoint_s = 0.0

    real = io.write_h5_atomic
    failures = []

    def writer(path, attrs, data):
        if attrs.get("status") == "interrupted":  # a checkpoint
            failures.append(path)
            raise MemoryError() if len(failures) % 2 else OSError(28, "No space left on device", str(path))
        return real(path, attrs, data)

    monkeypatch.setattr(integrate.Monitor, "__init__", every_update)
    monkeypatch.setattr(io, "write_h5_atomic", writer)
    out = tmp_path / "r.h5"
    (tmp_path / "r.h5").write_bytes(b"")  # no earlier valid file needed; overwritten at the end
    rc = main(["mixture", "run", "--steps", "3000", "--record-every", "10", "--quiet", "--out", str(out)])
    cap = capsys.readouterr()
    so = cap.out
    assert rc == 0 and "outcome: complete" in so, so
    assert len(failures) >= 2, "no checkpoint was attempted"
    msgs = [ln for ln in cap.err.splitlines() if "checkpoint" in ln]  # logger meanfield (-v/-q), on stderr
    assert any("MemoryError" in m for m in msgs) and any("OSError" in m for m in msgs), msgs
    assert all("previous file stays valid and the run goes on" in m for m in msgs), msgs
    run = io.read_run(out)
    assert run.attrs["status"] == "complete" and int(run["step"][-1]) == 3000
    assert np.all(np.isfinite(run["loss"]))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.h5"]


def _fsize_limit(nbytes):
    def pre():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))
    return pre


RUN = ["--steps", "3000", "--record-every", "1", "--quiet"]


@pytest.mark.parametrize("argv", [["mixture", "run", *RUN],
                                  ["model", "run", "incontext", "--K", "2", "--N", "4", *RUN],
                                  ["induction", "data", "--n", "20000"]], ids=["mixture", "model", "induction-data"])
def test_final_write_on_a_full_disk_is_one_line(tmp_path, argv):
    old = tmp_path / "r.h5"
    old.write_bytes(b"an earlier file\n")
    r = subprocess.run(MEANFIELD + argv + ["--out", "r.h5"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300, preexec_fn=_fsize_limit(100_000))
    assert r.returncode == 2, (r.returncode, r.stderr[-3000:])  # not -11 (a crash at shutdown), not 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("meanfield: error: 'r.h5': File too large"), r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.h5"]  # no r.h5.tmp-PID
    assert old.read_bytes() == b"an earlier file\n"


class _FullDiskOS:
    """``os`` as meanfield.core.io sees it, except that every ``write`` fails with ENOSPC."""

    def __init__(self, real):
        self._real = real

    def write(self, fd, data):
        import errno

        raise OSError(errno.ENOSPC, "No space left on device")

    def __getattr__(self, name):
        return getattr(self._real, name)


@pytest.fixture
def full_disk(monkeypatch):
    from meanfield.core import io

    monkeypatch.setattr(io, "os", _FullDiskOS(io.os))


def _one_line_naming(err, path):
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "No space left on device" in lines[0] and str(path) in lines[0], err[-2000:]
    assert "Traceback" not in err


@pytest.mark.parametrize("fmt", ["json", "all"])
def test_derive_all_on_a_full_disk_is_one_line_and_leaves_no_file(tmp_path, full_disk, capsys, fmt):
    """issue 26: derive --format all wrote its files in place; a full disk left a partial one, unnamed."""
    from meanfield.cli import main

    out = tmp_path / "derived"
    rc = main(["mixture", "derive", "--format", fmt, "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2
    _one_line_naming(err, out / "mixture_K2_L3." if fmt == "all" else out / "mixture_K2_L3.json")
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]  # no partial file, no tmp file


def test_plot_on_a_full_disk_is_one_line_and_leaves_no_file(tmp_path, capsys, monkeypatch):
    """issue 26: plot wrote figures in place; a full disk left partial files and did not name the path."""
    from meanfield.cli import main
    from meanfield.core import io

    run = tmp_path / "r.h5"
    assert main(["mixture", "run", "--steps", "20", "--quiet", "--out", str(run)]) == 0
    capsys.readouterr()
    monkeypatch.setattr(io, "os", _FullDiskOS(io.os))
    figs = tmp_path / "figs"
    for argv in (["mixture", "plot", str(run), "--out", str(figs)], ["model", "plot", str(run), "--out", str(figs)]):
        rc = main(argv)
        err = capsys.readouterr().err
        assert rc == 2, err
        _one_line_naming(err, figs)
        assert not [p for p in figs.rglob("*") if p.is_file()]
