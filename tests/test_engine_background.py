"""``specialise="auto"`` in a long run (meanfield.engine.background): after ``AFTER_S`` seconds in the generic
loop, the description's specialised loop is compiled by a child process and the run continues in it.

What is held: the switch happens for real (a child process, numba's disk cache, the parent's probe) and
the state after a run that switched part way equals the generic loop's alone bit for bit (the two loops
are the same kernels: tests/test_engine_specialise.py holds them equal; here the switch itself, mid-run, is
held); a child that fails, a marker of another process's child, the switch turned off, and a bad value of
the variable that turns it off change nothing or are refused in one line. The real switch compiles (or
loads from the cache) the mixture's K = 2, L = 3 loop that tests/test_engine_specialise.py compiles too,
so a CI run pays for that compile once."""

import os
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import meanfield.engine as me
from meanfield.core.config import ConfigError
from meanfield.engine import background
from meanfield.engine.reduce import initial_state
from meanfield.engine.system import system_of
from meanfield.models.mixture.config import make_config
from meanfield.models.mixture.family import mixture_description

ROOT = Path(__file__).resolve().parents[1]


def _run_until(system, y, done, limit_s, chunk=200):
    """Chunks of ``chunk`` steps until ``done(system)`` or ``limit_s`` seconds; returns the steps taken."""
    n, t0 = 0, time.monotonic()
    while not done(system) and time.monotonic() - t0 < limit_s:
        d, code = system.gd_advance(y, chunk, 0.5, 3, None)
        assert code == 0
        n += d
        time.sleep(0.02)
    return n


def test_a_long_run_switches_to_the_loop_compiled_in_the_background(monkeypatch):
    monkeypatch.setattr(background, "AFTER_S", 0.0)
    monkeypatch.delenv(background.ENV, raising=False)
    desc = mixture_description(make_config({}, K=2, L=3))
    auto = system_of(desc)
    assert auto.specialise == "auto"
    auto._loops[0] = False  # as on a description's first run: no loop was ready when the run began
    y0 = initial_state(desc)
    a, b = y0.copy(), y0.copy()
    n = _run_until(auto, a, lambda s: s.switched_at is not None, 300)
    watch = auto._loops[("watch", 0)]
    assert auto.switched_at is not None, (watch.state, watch.child)
    assert 0 < auto.switched_at < n and auto._loops[0] is not False  # generic first, then the compiled loop
    d, _ = auto.gd_advance(a, 700, 0.5, 3, None)
    assert auto.steps_done == n + d == n + 700
    gen = system_of(desc, specialise=False)
    gen.gd_advance(b, n + 700, 0.5, 3, None)
    assert np.array_equal(a, b)
    if watch.child is not None:  # this process's child (not another's): it ends, and cleans up its marker
        assert watch.child.wait(timeout=120) == 0
        assert not os.path.exists(background._marker(watch.tag))
    fresh = system_of(desc)  # a later run: the loop is ready from its first step
    fresh.gd_advance(y0.copy(), 3, 0.5, 3, None)
    assert fresh._loops[0] is not False and fresh.switched_at is None


def _unique_majority():
    """A description no process has compiled a loop for (its Gram matrix, frozen into the loop, is new)."""
    return me.load(ROOT / "docs/examples/majority.toml", overlap=0.3 + random.random() * 1e-3, steps=10)


def test_a_child_that_fails_leaves_the_run_in_the_generic_loop(monkeypatch):
    monkeypatch.setattr(background, "AFTER_S", 0.0)
    monkeypatch.setattr(background, "POLL_S", 0.0)
    monkeypatch.delenv(background.ENV, raising=False)
    started = []

    def failing(tag, pk, Gr, hf, args):
        started.append(tag)
        return subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"])

    monkeypatch.setattr(background, "start", failing)
    desc = _unique_majority()
    auto = system_of(desc)
    y0 = initial_state(desc)
    a, b = y0.copy(), y0.copy()
    n = _run_until(auto, a, lambda s: s._loops.get(("watch", 0)) is not None
                   and s._loops[("watch", 0)].state == "off", 60)
    assert len(started) == 1 and auto.switched_at is None and auto._loops[0] is False
    n += auto.gd_advance(a, 100, 0.5, 3, None)[0]  # still the generic loop; no second child
    assert len(started) == 1
    system_of(desc, specialise=False).gd_advance(b, n, 0.5, 3, None)
    assert np.array_equal(a, b)


def test_off_below_the_threshold_and_by_the_variable(monkeypatch):
    started = []
    monkeypatch.setattr(background, "start", lambda *a: started.append(a) or None)
    desc = _unique_majority()
    y = initial_state(desc)
    monkeypatch.setattr(background, "AFTER_S", 1e9)  # a short run: never
    auto = system_of(desc)
    auto.gd_advance(y, 50, 0.5, 3, None)
    assert auto._loops[("watch", 0)].state == "generic"
    monkeypatch.setattr(background, "AFTER_S", 0.0)
    monkeypatch.setenv(background.ENV, "0")  # off
    auto = system_of(desc)
    auto.gd_advance(y, 50, 0.5, 3, None)
    auto.gd_advance(y, 50, 0.5, 3, None)
    assert started == [] and auto._loops[("watch", 0)].state == "off"


@pytest.mark.parametrize("value", ["yes", "2", "", "on"])
def test_a_bad_value_is_refused_in_one_line(monkeypatch, tmp_path, value):
    monkeypatch.setenv(background.ENV, value)
    desc = _unique_majority()
    with pytest.raises(ConfigError, match=r"^MEANFIELD_BACKGROUND_COMPILE: 0 \(off\) or 1 \(on, the default\); got "):
        system_of(desc)
    assert system_of(desc, specialise=False).specialise is False  # only the default (auto) reads it
    out = tmp_path / "r.h5"
    env = dict(os.environ, **{background.ENV: value})
    p = subprocess.run([sys.executable, "-m", "meanfield", "model", "run", "mixture", "--steps", "5",
                        "--out", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=300, env=env)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("meanfield: error: MEANFIELD_BACKGROUND_COMPILE: "), p.stderr
    assert not out.exists()


def test_one_child_per_description_and_a_stale_marker(monkeypatch):
    tag = f"test-{os.getpid()}-{random.randrange(1 << 30)}"
    mark = background._marker(tag)
    with open(mark, "w"):
        pass
    try:
        assert background.start(tag, None, None, None, (np.zeros(1),)) is None  # another's child is at work
        old = time.time() - background.STALE_S - 5
        os.utime(mark, (old, old))  # ... that died long ago: a new child starts (this job is bad: it fails)
        child = background.start(tag, None, None, None, (np.zeros(1),))
        assert child is not None and child.wait(timeout=120) == 1
        assert not os.path.exists(mark)  # the child removes its marker, whatever happened
    finally:
        if os.path.exists(mark):
            os.unlink(mark)


def test_the_child_answers_a_bad_job_quietly(tmp_path):
    bad = tmp_path / "job"
    bad.write_bytes(b"not a pickle")
    for argv, rc in (([str(bad)], 1), ([str(tmp_path / "missing")], 1), ([], 2)):
        p = subprocess.run([sys.executable, "-m", "meanfield.engine.background", *argv], capture_output=True,
                           text=True, cwd=ROOT, timeout=120)
        assert p.returncode == rc and p.stdout == "" and p.stderr == "", (argv, p)
    assert not bad.exists()
