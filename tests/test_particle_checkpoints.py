"""Particle runs (mixture particles, engine particles) write their checkpoints
through the shared harness (meanfield.core.harness.run_to_file), as every other
system: a checkpoint that fails (full disk, out of memory) is a logged warning
and the run goes on to a complete file; a checkpoint's message names the step
really reached, not the step of the last record."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import numpy as np
import pytest

from meanfield.core import integrate, io
from meanfield.engine import finite

ROOT = Path(__file__).resolve().parents[1]
MSG = re.compile(r"checkpoint at step (\d+) \(last record at step (\d+)\)")


@pytest.fixture
def failing_checkpoints(monkeypatch):
    """A checkpoint at every progress update, GD advanced in chunks of at most 7
    steps (so the run is often between records), and every checkpoint write
    failing with OSError ENOSPC; returns the list of (message, step reached)."""
    init = integrate.Monitor.__init__
    dones = []

    def every_update(self, *a, **k):
        init(self, *a, **k)
        self.checkpoint_s = 0.0

    update = integrate.Monitor.update

    def spy_update(self, done, *a, **k):
        dones.append(done)
        return update(self, done, *a, **k)

    advance = finite.ParticleSystem.gd_advance

    def short_advance(self, y, nsteps, *a, **k):
        return advance(self, y, min(nsteps, 7), *a, **k)

    real = io.write_h5_atomic
    seen = []

    def writer(path, attrs, data):
        if attrs.get("status") == "interrupted":  # a checkpoint
            seen.append((attrs["message"], dones[-1]))
            raise OSError(28, "No space left on device", str(path))
        return real(path, attrs, data)

    monkeypatch.setattr(integrate.Monitor, "__init__", every_update)
    monkeypatch.setattr(integrate.Monitor, "update", spy_update)
    monkeypatch.setattr(finite.ParticleSystem, "gd_advance", short_advance)
    monkeypatch.setattr(io, "write_h5_atomic", writer)
    return seen


def _check(seen, caplog, path, steps):
    assert len(seen) >= 2, "no checkpoint was attempted"
    between = 0
    for message, done in seen:
        m = MSG.search(message)
        assert m, message
        reached, last = int(m.group(1)), int(m.group(2))
        assert reached == done, (message, done)  # the step reached, not the last record
        between += reached > last
    assert between, [s[0] for s in seen]  # some checkpoint fell between records
    warns = [r.getMessage() for r in caplog.records if "checkpoint" in r.getMessage()]
    assert len(warns) == len(seen), warns
    assert all("OSError" in w and "the run goes on" in w for w in warns), warns
    run = io.read_run(path)
    assert run.attrs["status"] == "complete" and int(run["step"][-1]) == steps
    assert np.all(np.isfinite(run["loss"]))
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_mixture_particles_checkpoint_fails_run_goes_on(tmp_path, failing_checkpoints, caplog):
    from meanfield.models.mixture import particles
    from meanfield.models.mixture.config import make_config

    cfg = make_config({}, K=2, L=3, width=5, seed=3, omega=0.5, eta=0.5, steps=60, record_every=25)
    with caplog.at_level(logging.WARNING, logger="meanfield"):
        traj, path = particles.particles_to_file(cfg, tmp_path / "p.h5", d=6, progress=False)
    assert traj.status == "complete"
    _check(failing_checkpoints, caplog, Path(path), 60)


def test_engine_particles_checkpoint_fails_run_goes_on(tmp_path, failing_checkpoints, caplog):
    import meanfield.engine as me

    desc = me.load(str(ROOT / "docs" / "examples" / "majority.toml"), width=4, steps=60, record_every=25)
    with caplog.at_level(logging.WARNING, logger="meanfield"):
        r, path = me.particles_to_file(desc, tmp_path / "p.h5", progress=False)
    assert r.status == "complete"
    _check(failing_checkpoints, caplog, Path(path), 60)
