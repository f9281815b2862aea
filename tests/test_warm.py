"""`meanfield warm`: compiles the kernels of `mixture run` (which are also all that
`mixture particles` compiles) into numba's cache, so that a later run or particles
run does not compile (README, "First use")."""

import os
import subprocess
import sys

import pytest

import meanfield.cli
from meanfield import warm
from meanfield.core.config import ConfigError

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
    for family in ("mixture", "engine", "induction", "batched", "icl", "twolayer", "rk4", "flow"):
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
    # the engine's lanes at every block width, with the C library's exp and with the vectorised one
    r = subprocess.run([sys.executable, "-c", LANES_EVERY_WIDTH], capture_output=True, text=True, cwd=tmp_path,
                       env=dict(base, NUMBA_CACHE_DIR=str(hot)), timeout=600)
    assert r.returncode == 0 and "widths 64 32 16 8" in r.stdout, r.stderr[-2000:]
    assert _cache_files(hot) == before


#: runs the engine's batch in lanes at every block width (a description other than warm's own)
LANES_EVERY_WIDTH = r'''
from numba import get_num_threads
from meanfield.engine.batched import run_batch
from meanfield.engine.description import description_from_dict
from meanfield.engine.lanes_batch import WIDTHS, width_for
d = {"name": "w", "dictionary": {"features": ["a", "b", "c"]},
     "data": {"rows": [{"tokens": ["a", "b", "c"], "target": 1}, {"tokens": ["c", "-a"], "target": -1}]},
     "heads": [{"name": "h", "value": "neuron"}], "parameters": {"eta": 0.1, "steps": 3}}
desc = description_from_dict(d)
seen = []
for lo, _ in WIDTHS:
    B = lo * max(1, get_num_threads())
    seen.append(width_for(B, get_num_threads()))
    for vx in (False, True):
        run_batch(desc, seeds=list(range(B)), fast=False, vector_exp=vx)
print("widths", *seen)
'''


#: kernels `meanfield warm` leaves out, and why: the CPU copies of the portable helpers that the CPU path inlines
#: (``_hot``: never compiled on their own) or that run only on the GPU / in the batched RK4 driver's inlined tree,
#: the mixture's symmetry-reduced kernels (``meanfield.models.mixture.symmetry``: studies and tests, no command
#: runs them), the dense mixture's attention update (``system.py``: the dense path runs on the engine), and
#: ``induction.data.sample_chain`` (no command samples a chain with it); the module-level templates of the
#: mixture's lanes (``vectorised``, ``vectorised_rk4``: never run themselves, each block width runs and caches
#: its own copy, which warm compiles) and the mixture's per-trajectory batch drivers (``lanes=False`` only)
WARM_EXEMPT = ("portable:eng_", "portable:mix_", "meanfield.models.mixture.symmetry_kernels.",
               "meanfield.models.mixture.kernels._attention_update", "meanfield.models.induction.data._chain",
               "meanfield.models.mixture.vectorised.", "meanfield.models.mixture.vectorised_rk4.",
               "meanfield.models.mixture.batched.mix_gd_batch_cpu_", "meanfield.models.mixture.batched.mix_rk4_batch_cpu_",
               "meanfield.models.mixture.batched.new_scratch")

#: prints every cached CPU kernel of the package (module.qualname; ``portable:NAME`` for the CPU copies of the
#: portable helpers) whose cache index is not on disk
CHECK = r'''
import importlib, pkgutil, sys
from pathlib import Path
import meanfield
from numba.core.registry import CPUDispatcher
PKG = Path(meanfield.__file__).resolve().parent
for mod in pkgutil.walk_packages([str(PKG)], "meanfield."):
    if not mod.name.endswith("__main__"):
        try:
            importlib.import_module(mod.name)
        except ImportError:
            pass
from meanfield.core import activations
objs = {id(o): (f"portable:{n}", o) for n, o in activations._CPU.items()}
for name, m in list(sys.modules.items()):
    if name.startswith("meanfield"):
        for o in list(vars(m).values()):
            if isinstance(o, CPUDispatcher):
                objs.setdefault(id(o), (f"{o.py_func.__module__}.{o.py_func.__qualname__}", o))
for n, d in sorted(objs.values(), key=lambda x: x[0]):
    if d.targetoptions.get("inline") != "always" and not Path(d._cache._cache_file._index_path).exists():
        print(n)
'''


@pytest.mark.slow
def test_warm_compiles_every_kernel_into_an_empty_cache(tmp_path):
    """After `meanfield warm` into an empty cache, every cached numba kernel of the package has its cache index
    on disk, except the listed exemptions (a new kernel family that warm misses fails here); control: before
    warm, the engine's kernel has none."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    before = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, env=env, timeout=600)
    assert "meanfield.engine.kernels.eng_loss_grads" in before.stdout.split(), before.stdout[-2000:]  # control
    assert _cli(["warm"], env=env, cwd=tmp_path).returncode == 0
    after = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, env=env, timeout=600)
    assert after.returncode == 0, after.stderr
    missing = [n for n in after.stdout.split() if not n.startswith(WARM_EXEMPT)]
    assert not missing, "kernels `meanfield warm` does not compile: " + ", ".join(missing)


def test_warm_only_selects_families_and_refuses_unknown_ones(monkeypatch, tmp_path, capsys):
    """`meanfield warm --only` runs the named families and their Python warm-ups only; an unknown or empty
    name list is one short line pointing to the list (--help), exit 2, and runs nothing."""
    ran = []
    monkeypatch.setattr(warm, "COMMANDS", (("a", ["x"]), ("b", ["y"])))
    monkeypatch.setattr(warm, "EXTRA", {"a": (lambda: ran.append("extra a"),), "b": (lambda: ran.append("extra b"),)})
    warm.warm(lambda argv: ran.append(argv[1]) or 0, names={"b"})
    assert ran == ["y", "extra b"]
    for bad in ({"c"}, set(), "b, c", " , "):
        with pytest.raises(ConfigError, match="names: comma-separated family names"):
            warm.warm(lambda argv: ran.append(argv[1]) or 0, names=bad)
    assert ran == ["y", "extra b"]
    assert warm.families(None) is None and warm.families(" a,b ,") == {"a", "b"}
    r = _cli(["warm", "--only", "engine,nonsense"], env=dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "c")),
             cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--only" in r.stderr and "nonsense" in r.stderr, r.stderr
    assert "meanfield warm --help" in r.stderr and len(r.stderr) < 200 and "Traceback" not in r.stderr
    assert not (tmp_path / "c").exists() or not any((tmp_path / "c").rglob("*.nbi"))


def test_warm_jobs_two_runs_the_engine_families_in_a_second_process(monkeypatch):
    """jobs=2: the families of SECOND go to a second process (`meanfield warm --only ...`, which succeeds),
    the others run here; jobs other than 1 or 2 are refused."""
    ran, spawned = [], []
    monkeypatch.setattr(warm, "COMMANDS", (("engine", ["x"]), ("a", ["y"])))
    monkeypatch.setattr(warm, "EXTRA", {})
    real = subprocess.Popen

    def spy(argv, **kw):
        spawned.append(argv)
        return real(argv, **kw)

    monkeypatch.setattr(subprocess, "Popen", spy)
    warm.warm(lambda argv: ran.append(argv[1]) or 0, jobs=2)
    assert ran == ["y"] and len(spawned) == 1 and spawned[0][-2:] == ["--only", "engine"]
    warm.warm(lambda argv: ran.append(argv[1]) or 0, names={"a"}, jobs=2)  # nothing of SECOND: no process
    assert ran == ["y", "y"] and len(spawned) == 1
    for bad in (0, 3, True):
        with pytest.raises(ConfigError, match="jobs: 1 or 2"):
            warm.warm(lambda argv: 0, jobs=bad)


def test_warm_jobs_two_stops_its_second_process_when_this_one_fails(monkeypatch):
    """A failure here (or a signal: any exception) kills the second process instead of waiting for it."""
    procs = []
    real = subprocess.Popen

    def spy(argv, **kw):
        procs.append(real([sys.executable, "-c", "import time; time.sleep(60)"], **kw))
        return procs[-1]

    monkeypatch.setattr(warm, "COMMANDS", (("engine", ["x"]), ("a", ["y"])))
    monkeypatch.setattr(subprocess, "Popen", spy)
    with pytest.raises(RuntimeError, match="warm-up of 'a' failed"):
        warm.warm(lambda argv: 2, jobs=2)
    assert len(procs) == 1 and procs[0].poll() is not None
