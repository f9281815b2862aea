"""`meanfield warm`: compiles the kernels of `mixture run` (which are also all that
`mixture particles` compiles) into numba's cache, so that a later run or particles
run does not compile (README, "First use")."""

import os
import subprocess
import sys

import pytest

import meanfield.cli
from meanfield import warm

NOTICE = "compiling kernels, about"


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


def _cache_files(path):
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file()) if path.exists() else []


@pytest.mark.slow
def test_warm_fills_an_empty_cache(tmp_path):
    """With an empty cache a run compiles (the notice is shown) and a particles run
    compiles too (it writes cache files: the observables' kernels); after `meanfield
    warm` into another empty cache, run and particles at other sizes compile nothing
    (no notice, no new cache file) and write nothing into the working folder."""
    base = dict(os.environ)
    cold = tmp_path / "cold"
    hot = tmp_path / "hot"
    work = tmp_path / "work"
    work.mkdir()
    particles = ["mixture", "particles", "--width", "8", "--steps", "3", "--quiet", "--out", "p.h5"]
    run = ["mixture", "run", "--steps", "7", "--quiet", "--out", "a.h5"]
    r = _cli(particles, env=dict(base, NUMBA_CACHE_DIR=str(cold)), cwd=work)
    assert r.returncode == 0, r.stderr
    assert _cache_files(cold)  # control: an empty cache gets compiled kernels from particles
    r = _cli(run, env=dict(base, NUMBA_CACHE_DIR=str(tmp_path / "cold2")), cwd=work)
    assert r.returncode == 0, r.stderr
    assert NOTICE in r.stderr  # control: an empty cache compiles
    for f in ("p.h5", "a.h5"):
        (work / f).unlink()
    env = dict(base, NUMBA_CACHE_DIR=str(hot))
    r = _cli(["warm"], env=env, cwd=work)
    assert r.returncode == 0, r.stderr
    assert "compiled into numba's cache" in r.stdout
    assert list(work.iterdir()) == []
    before = _cache_files(hot)
    assert before
    for args in (particles, run):
        r = _cli(args, env=env, cwd=work)
        assert r.returncode == 0, r.stderr
        assert NOTICE not in r.stderr, args
        assert _cache_files(hot) == before, args


def test_warm_covers_every_kernel_family():
    names = " ".join(warm.FAMILIES)
    for family in ("mixture", "engine", "induction", "batched"):
        assert family in names, family
    verbs = {tuple(argv[:2]) for _, argv in warm.COMMANDS}
    assert {("mixture", "run"), ("model", "run"), ("induction", "run"), ("mixture", "sweep"),
            ("model", "sweep")} <= verbs


@pytest.mark.slow
def test_after_warm_engine_and_induction_compile_nothing(tmp_path):
    """After `meanfield warm` into an empty cache, an engine run and an induction run at other sizes in new
    processes print no compile notice and add no cache file (control: the same engine run with another empty
    cache prints the notice)."""
    base = dict(os.environ)
    hot = tmp_path / "hot"
    r = _cli(["model", "run", "incontext", "--K", "3", "--N", "4", "--steps", "5", "--out", str(tmp_path / "c.h5")],
             env=dict(base, NUMBA_CACHE_DIR=str(tmp_path / "cold")), cwd=tmp_path)
    assert r.returncode == 0 and NOTICE in r.stderr, r.stderr  # control
    assert _cli(["warm"], env=dict(base, NUMBA_CACHE_DIR=str(hot)), cwd=tmp_path).returncode == 0
    before = _cache_files(hot)
    for args in (["model", "run", "incontext", "--K", "3", "--N", "4", "--steps", "5", "--out", "e.h5"],
                 ["induction", "run", "--n-train", "30", "--n-test", "0", "--L", "9", "--stage-steps", "2,2,2",
                  "--out", "i.h5"]):
        r = _cli(args, env=dict(base, NUMBA_CACHE_DIR=str(hot)), cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert NOTICE not in r.stderr, (args, r.stderr)
    assert _cache_files(hot) == before
