"""`meanfield warm`: compiles the kernels of `mixture run` and `mixture particles`
into numba's cache, so that a later run does not compile (README, "First use")."""

import os
import subprocess
import sys

import pytest

import meanfield.cli
from meanfield import warm

NOTICE = "compiling kernels (first use only"


def _cli(args, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "meanfield"] + args, capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=600)


def test_warm_failing_command_is_named(monkeypatch, capsys):
    # a warm-up command that fails (here: bad input, exit 2) is reported by name, not skipped silently
    monkeypatch.setattr(warm, "COMMANDS", (("bad run", ["mixture", "run", "--steps", "-1", "--quiet"]),))
    with pytest.raises(RuntimeError, match="warm-up of 'bad run' failed \\(exit 2\\)"):
        warm.warm(meanfield.cli.main)


def test_warm_names_selects_commands(monkeypatch):
    ran = []
    monkeypatch.setattr(warm, "COMMANDS", (("a", ["x"]), ("b", ["y"])))
    warm.warm(lambda argv: ran.append(argv[1]) or 0, names={"b"})
    assert ran == ["y"]


@pytest.mark.slow
def test_warm_fills_an_empty_cache(tmp_path):
    """With an empty cache a particles run compiles (the notice is shown); after
    `meanfield warm` into another empty cache, run and particles at other sizes
    compile nothing (no notice) and write nothing into the working folder."""
    base = dict(os.environ)
    cold = dict(base, NUMBA_CACHE_DIR=str(tmp_path / "cold"))
    hot = dict(base, NUMBA_CACHE_DIR=str(tmp_path / "hot"))
    work = tmp_path / "work"
    work.mkdir()
    particles = ["mixture", "particles", "--width", "8", "--steps", "3", "--quiet", "--out", "p.h5"]
    r = _cli(particles, env=cold, cwd=work)
    assert r.returncode == 0, r.stderr
    assert NOTICE in r.stderr  # control: an empty cache compiles
    (work / "p.h5").unlink()
    r = _cli(["warm"], env=hot, cwd=work)
    assert r.returncode == 0, r.stderr
    assert "compiled into numba's cache" in r.stdout
    assert list(work.iterdir()) == []
    for args in (particles, ["mixture", "run", "--steps", "7", "--quiet", "--out", "a.h5"]):
        r = _cli(args, env=hot, cwd=work)
        assert r.returncode == 0, r.stderr
        assert NOTICE not in r.stderr, args
