"""The run harness (meanfield/core/harness.py) on a toy system: stages from
specs, the training's solver and record grid, checkpoints that name the step
really reached, the final save, the result wrapper, one EXIT_CODES table."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from meanfield.core import harness, integrate


class Decay:
    """y <- y - eta * mode * y (GD on |y|^2 / 2); criterion 'loss' = |y|^2 / 2."""

    max_abs = math.inf

    def gd_advance(self, y, nsteps, eta, mode, criterion):
        for k in range(int(nsteps)):
            if criterion is not None and integrate._holds(self.criterion_value(y, criterion[0]), *criterion[1:]):
                return k, 1
            y -= eta * mode * y
        return int(nsteps), 0

    def rhs(self, y, mode):
        return -mode * y

    def criterion_value(self, y, name):
        return float(0.5 * y @ y)


@dataclass
class Training:
    method: str = "gd"
    eta: float = 0.1
    dt: float | None = None
    rtol: float = 1e-8
    atol: float = 1e-10
    record_every: int | None = None
    record_log: int | None = None
    record_dt: float | None = None
    horizon: float = 3000


def test_stages_solver_grid_and_checkpoints(tmp_path):
    tr = Training()
    specs = [harness.StageSpec(1.0, 1000, None, "one"), harness.StageSpec(0.5, 2000, ("loss", "<=", 1e-30), "two")]
    stages = harness.stages_of(specs, mode=lambda train: np.float64(train))
    assert [(s.index, s.name, s.length) for s in stages] == [(1, "one", 1000), (2, "two", 2000)]
    assert isinstance(harness.solver_of(tr), integrate.GDMap) and harness.save_at_of(tr).every == 3
    assert harness.save_at_of(tr, records=100).every == 30

    saved = []

    def save(res, status=None, message=None):
        saved.append((status, message, res["n"]))
        return tmp_path / "x"

    y0 = np.ones(3)
    res, path = harness.run_to_file(tr, lambda mon: harness.solve(tr, Decay(), y0, stages, monitor=mon), save,
                                    progress=False, checkpoint_s=0.0, result=lambda traj: {"n": len(traj.t),
                                                                                           "traj": traj})
    traj = res["traj"]
    assert path == tmp_path / "x" and saved[-1][:2] == (None, None) and traj.status == "complete"
    assert [e["reason"] for e in traj.stage_ends] == ["length", "criterion"]
    ck = [m for s, m, _ in saved if s == "interrupted"]
    assert ck and all(m.startswith("checkpoint at step ") and "(last record at step " in m for m in ck)
    assert harness.EXIT_CODES[traj.status] == 0
    # the same trajectory as the solver called directly
    direct = integrate.GDMap(0.1).solve(Decay(), y0, stages, integrate.SaveAt(every=3))
    np.testing.assert_array_equal(np.asarray(direct.y), np.asarray(traj.y))


def test_checkpoint_message_names_the_step_reached():
    m = harness.checkpoint_message("step", 1234, 1000)
    assert m.startswith("checkpoint at step 1234 (last record at step 1000): ")
    assert harness.unit_of(Training(method="flow")) == "t"
