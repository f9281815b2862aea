"""``specialise="auto"`` in a long single run (meanfield.engine.background): after ``AFTER_S`` seconds in the
generic loop, the description's specialised loop is compiled by a child process and the run continues in it.

What is held: a run that finds the loop compiled after it began switches to it and its state equals the
generic loop's alone bit for bit (the two loops are the same kernels: tests/test_engine_specialise.py holds
them equal; here the switch mid-run is held); the child compiles a job and exits 0, removes its marker, and
holds the tag locked while it lives (a killed child frees it at once; a live one is never doubled); a child
that fails, the switch turned off, and a bad value of the variable change nothing or are refused in one
line. The cold case (a description no process has compiled: the child compiles it while the run goes on)
is the slow test. The suite turns the feature off (tests/conftest.py); these tests turn it on."""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import meanfield.engine as me
from meanfield.core.config import ConfigError
from meanfield.engine import background, specialise
from meanfield.engine.reduce import initial_state
from meanfield.engine.system import system_of
from meanfield.models.mixture.config import make_config
from meanfield.models.mixture.family import mixture_description

ROOT = Path(__file__).resolve().parents[1]
fcntl = pytest.importorskip("fcntl")


@pytest.fixture
def on(monkeypatch):
    monkeypatch.setenv(background.ENV, "1")
    monkeypatch.setattr(background, "AFTER_S", 1e-9)  # after the first call in the generic loop
    monkeypatch.setattr(background, "POLL_S", 0.0)


@pytest.fixture(scope="module")
def mixture():
    """The mixture K = 2, L = 3 description with its specialised loop compiled (in this process: the
    loop tests/test_engine_specialise.py compiles too, so a CI run pays for it once)."""
    desc = mixture_description(make_config({}, K=2, L=3))
    system_of(desc, specialise=True).gd_advance(initial_state(desc), 1, 0.5, 3, None)
    return desc


def _job(system, y):
    """The loop's arguments as ``EngineSystem.gd_advance`` builds them (stage 0, mode 3, no criterion)."""
    pk = system.pk
    return (y, 1, 0.5, 3, 0, 0, 0.0, float(system.max_abs)) + specialise.scratch_of(pk, y.shape[0])


def _run_until(system, y, done, limit_s, chunk=200):
    """Chunks of ``chunk`` steps until ``done(system)`` or ``limit_s`` seconds; returns the steps taken."""
    n, t0 = 0, time.monotonic()
    while not done(system) and time.monotonic() - t0 < limit_s:
        d, code = system.gd_advance(y, chunk, 0.5, 3, None)
        assert code == 0
        n += d
        time.sleep(0.02)
    return n


def test_a_run_switches_to_a_loop_that_became_ready_after_it_began(on, mixture):
    desc = mixture
    auto = system_of(desc, background=True)
    assert auto.specialise == "auto" and auto.background
    auto._loops[0] = False  # as on a first run: no loop was ready when the run began (one is now: the fixture's)
    y0 = initial_state(desc)
    a, b = y0.copy(), y0.copy()
    n = auto.gd_advance(a, 300, 0.5, 3, None)[0]  # the generic loop; then AFTER_S = 0 has passed
    n += _run_until(auto, a, lambda s: s.switched_at is not None, 60)
    assert auto.switched_at == 300 and auto._loops[0] is not False
    assert auto._loops[("watch", 0)].child is None  # the loop was in the cache: no child needed
    d, _ = auto.gd_advance(a, 700, 0.5, 3, None)
    assert auto.steps_done == n + d == n + 700
    system_of(desc, specialise=False).gd_advance(b, n + 700, 0.5, 3, None)
    assert np.array_equal(a, b)
    plain = system_of(desc)  # system_of's default (batches, observables): never a background compile
    plain._loops[0] = False
    plain.gd_advance(y0.copy(), 300, 0.5, 3, None)
    plain.gd_advance(y0.copy(), 300, 0.5, 3, None)
    assert not plain.background and ("watch", 0) not in plain._loops and plain._loops[0] is False


def test_a_run_waits_for_the_child_and_switches_when_its_loop_is_ready(on, mixture, monkeypatch):
    """The waiting branch: a child at work (a stand-in that sleeps), the loop not in the cache for the first
    looks (``cached`` answers None), then there: the run switches on a later call, after the first look."""
    dummy = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        monkeypatch.setattr(background, "start", lambda *a: dummy)
        looks = []
        real = specialise.cached

        def cached(*a):
            looks.append(1)
            return None if len(looks) <= 3 else real(*a)

        monkeypatch.setattr(specialise, "cached", cached)
        desc = mixture
        auto = system_of(desc, background=True)
        auto._loops[0] = False
        y0 = initial_state(desc)
        a, b = y0.copy(), y0.copy()
        n = auto.gd_advance(a, 300, 0.5, 3, None)[0]
        n += auto.gd_advance(a, 300, 0.5, 3, None)[0]  # starts the child (the first look: None)
        watch = auto._loops[("watch", 0)]
        assert watch.state == "waiting" and watch.child is dummy and auto.switched_at is None
        n += _run_until(auto, a, lambda s: s.switched_at is not None, 60)
        assert auto.switched_at >= 900 and len(looks) == 4 and watch.state == "off"
        system_of(desc, specialise=False).gd_advance(b, n, 0.5, 3, None)
        assert np.array_equal(a, b)
    finally:
        dummy.kill()
        dummy.wait()


def test_the_child_loads_or_compiles_a_job_and_cleans_up(on, mixture):
    """The child end to end on a loop the fixture compiled (it loads it; the cold compile: the slow test)."""
    desc = mixture
    sy = system_of(desc, background=True)
    args = _job(sy, initial_state(desc))
    tag = specialise._key(sy.pk, sy.pk.lay.Gr, sy.pk.lay.hf)[0]
    child = background.start(tag, sy.pk, sy.pk.lay.Gr, sy.pk.lay.hf, args)
    assert child is not None
    assert child.wait(timeout=300) == 0
    assert not os.path.exists(background._marker(tag)) and not background.at_work(tag)


@pytest.mark.slow
def test_a_long_first_run_switches_to_the_loop_the_child_compiles(on):
    """The cold case: a description never compiled; the child compiles its loop while the run goes on."""
    desc = _unique_majority()
    auto = system_of(desc, background=True)
    y0 = initial_state(desc)
    assert specialise.cached(auto.pk, auto.pk.lay.Gr, auto.pk.lay.hf, _job(auto, y0)) is None
    a, b = y0.copy(), y0.copy()
    n = _run_until(auto, a, lambda s: s.switched_at is not None, 600)
    watch = auto._loops[("watch", 0)]
    assert auto.switched_at is not None and 0 < auto.switched_at < n, (watch.state, watch.child)
    assert watch.child is not None and watch.child.wait(timeout=120) == 0
    n += auto.gd_advance(a, 1000, 0.5, 3, None)[0]
    system_of(desc, specialise=False).gd_advance(b, n, 0.5, 3, None)
    assert np.array_equal(a, b)


def _unique_majority():
    """A description no process has compiled a loop for (its Gram matrix, frozen into the loop, is new)."""
    return me.load(ROOT / "docs/examples/majority.toml", overlap=0.3 + random.random() * 1e-3, steps=10)


def test_a_child_that_fails_leaves_the_run_in_the_generic_loop(on, monkeypatch):
    started = []

    def failing(tag, pk, Gr, hf, args):
        started.append(tag)
        return subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"])

    monkeypatch.setattr(background, "start", failing)
    desc = _unique_majority()
    auto = system_of(desc, background=True)
    y0 = initial_state(desc)
    a, b = y0.copy(), y0.copy()
    t0 = time.monotonic()
    n = _run_until(auto, a, lambda s: s._loops.get(("watch", 0)) is not None
                   and s._loops[("watch", 0)].state == "off", 60)
    assert auto._loops[("watch", 0)].state == "off" and time.monotonic() - t0 < 30  # it saw the child exit
    assert len(started) == 1 and auto.switched_at is None and auto._loops[0] is False
    n += auto.gd_advance(a, 100, 0.5, 3, None)[0]  # still the generic loop; no second child
    assert len(started) == 1
    system_of(desc, specialise=False).gd_advance(b, n, 0.5, 3, None)
    assert np.array_equal(a, b)


def test_off_below_the_threshold_and_by_the_variable(on, monkeypatch):
    started = []
    monkeypatch.setattr(background, "start", lambda *a: started.append(a) or None)
    desc = _unique_majority()
    y = initial_state(desc)
    monkeypatch.setattr(background, "AFTER_S", 1e9)  # a short run: never
    auto = system_of(desc, background=True)
    for _ in range(3):
        auto.gd_advance(y, 50, 0.5, 3, None)
    assert auto._loops[("watch", 0)].state == "generic" and auto._loops[("watch", 0)].generic_s > 0
    monkeypatch.setattr(background, "AFTER_S", 0.0)
    monkeypatch.setenv(background.ENV, "0")  # off
    auto = system_of(desc, background=True)
    assert not auto.background
    for _ in range(3):
        auto.gd_advance(y, 50, 0.5, 3, None)
    assert started == [] and ("watch", 0) not in auto._loops
    monkeypatch.setenv(background.ENV, "1")
    monkeypatch.setattr(background, "AFTER_S", 1e-9)
    auto = system_of(desc, background=True)
    auto.gd_advance(y, 50, 0.5, 3, None)
    monkeypatch.setenv(background.ENV, "maybe")  # changed during the run: off, never an error mid-run
    auto.gd_advance(y, 50, 0.5, 3, None)
    assert started == [] and auto._loops[("watch", 0)].state == "off"


@pytest.mark.parametrize("value", ["yes", "2", "", "on"])
def test_a_bad_value_is_refused_in_one_line(monkeypatch, tmp_path, value):
    monkeypatch.setenv(background.ENV, value)
    desc = _unique_majority()
    for call in (lambda: system_of(desc, background=True), lambda: me.run(desc),
                 lambda: me.run_to_file(desc, tmp_path / "a.h5", progress=False)):
        with pytest.raises(ConfigError, match=r"^MEANFIELD_BACKGROUND_COMPILE: 0 \(off\) or 1 \(on, the "
                                              r"default\); got "):
            call()
    assert not (tmp_path / "a.h5").exists()
    assert system_of(desc).specialise == "auto"  # batches, observables, sweeps' points: not read
    assert system_of(desc, specialise=False).specialise is False
    out = tmp_path / "r.h5"
    env = dict(os.environ, **{background.ENV: value})
    p = subprocess.run([sys.executable, "-m", "meanfield", "model", "run", "mixture", "--steps", "5",
                        "--out", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=300, env=env)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("meanfield: error: MEANFIELD_BACKGROUND_COMPILE: "), p.stderr
    assert "Traceback" not in p.stderr and not out.exists()


def test_one_child_per_tag_and_a_killed_child_frees_it(on):
    """A live child holds its tag (no second one, whichever process asks); a killed one frees it at once."""
    tag = f"test-{os.getpid()}-{random.randrange(1 << 30)}"
    mark = background._marker(tag)
    fd = os.open(mark, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # as a live child holds it
        assert background.at_work(tag)
        assert background.start(tag, None, None, None, (np.zeros(1),)) is None
        os.close(fd)  # that child is gone (however it ended): the tag is free
        fd = None
        assert not background.at_work(tag)
        desc = _unique_majority()  # a real job, never compiled: the child is still compiling when it is killed
        sy = system_of(desc, background=True)
        y = initial_state(desc)
        child = background.start(tag, sy.pk, sy.pk.lay.Gr, sy.pk.lay.hf, _job(sy, y))
        assert child is not None
        assert background.start(tag, sy.pk, sy.pk.lay.Gr, sy.pk.lay.hf, _job(sy, y)) is None  # not doubled
        t0 = time.monotonic()
        while not background.at_work(tag) and time.monotonic() - t0 < 10:
            time.sleep(0.05)
        assert background.at_work(tag)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
        assert not background.at_work(tag)  # freed at once (its marker stays, unlocked)
        bad = background.start(tag, None, None, None, (np.zeros(1),))  # a bad job: it starts, fails, cleans up
        assert bad is not None and bad.wait(timeout=120) == 1 and not os.path.exists(mark)
    finally:
        if fd is not None:
            os.close(fd)
        if os.path.exists(mark):
            os.unlink(mark)


def test_the_child_answers_a_bad_job_quietly(tmp_path):
    bad = tmp_path / "marker"
    bad.write_bytes(b"")
    fd = os.open(bad, os.O_RDONLY)
    try:
        for argv, rc, fds in (([str(bad), str(fd)], 1, (fd,)), ([str(bad), "x"], 2, ()),
                              ([str(bad), "999"], 2, ()), ([], 2, ())):
            p = subprocess.run([sys.executable, "-m", "meanfield.engine.background", *argv], capture_output=True,
                               input=b"not a pickle", cwd=ROOT, timeout=120, pass_fds=fds)
            assert p.returncode == rc and p.stdout == b"" and p.stderr == b"", (argv, p)
    finally:
        os.close(fd)
    assert not bad.exists()  # the child that held it removed it


def test_a_marker_path_that_is_not_this_users_plain_file_is_never_used(on, tmp_path):
    """A link (to a file of the user's) or a FIFO at the marker's predictable path: nothing written through
    it, nothing waits on it, no child."""
    target = tmp_path / "precious"
    target.write_text("keep me")
    for kind in ("symlink", "fifo"):
        tag = f"test-{kind}-{os.getpid()}-{random.randrange(1 << 30)}"
        mark = background._marker(tag)
        if kind == "symlink":
            os.symlink(target, mark)
        else:
            os.mkfifo(mark)
        try:
            t0 = time.monotonic()
            assert background.start(tag, None, None, None, (np.zeros(1),)) is None
            assert not background.at_work(tag)
            assert time.monotonic() - t0 < 5
        finally:
            os.unlink(mark)
    assert target.read_text() == "keep me"
