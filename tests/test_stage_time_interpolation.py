"""Stage times (T1, T2, T_loss) are interpolated between the two records around the crossing, not tied to the
record grid: against a closed-form series (exact crossing known), and a coarse-grid run against the same run
recorded at every step (the exact first step, an independent measurement)."""

import math

import numpy as np
import pytest

from meanfield.core.stagetimes import first_crossing, stage_times_of


def test_linear_series_crossing_is_exact():
    t = np.array([0.0, 40.0, 80.0, 120.0])
    v = 1.0 - t / 100.0  # crosses 0.5 at t = 50; the first record below is t = 80
    assert first_crossing([(v, "<=", 0.5)], t) == pytest.approx(50.0, abs=1e-12)
    # rounded up to the GD step
    step = np.round(t / 0.4).astype(int)  # eta 0.4: records at steps 0, 100, 200, 300; crossing at step 125
    assert first_crossing([(v, "<=", 0.5)], t, step=step) == pytest.approx(50.0)
    assert first_crossing([(v, "<=", 0.47)], t, step=step) == pytest.approx(53.2)  # step 132.5 -> 133 -> t 53.2
    assert first_crossing([(v, "<=", 1.0)], t) == 0.0  # holds at the first record
    assert math.isnan(first_crossing([(v, "<=", -1.0)], t))
    # two conditions: the later crossing
    w = t / 100.0  # crosses 0.6 at t = 60
    assert first_crossing([(v, "<=", 0.5), (w, ">=", 0.6)], t) == pytest.approx(60.0)


def test_stage_times_of_interpolates_t_loss_and_t2():
    t = np.linspace(0.0, 100.0, 6)  # records every 20
    loss = 1.0 - t / 100.0
    margin = np.stack([t / 10.0, t / 50.0 - 1.0], axis=1)  # sample 0 consistent, sample 1 not
    st = stage_times_of(t, loss, margin, np.array([True, False]), np.zeros(6), "three-stage",
                        [{"stage": 1, "t": 30.0, "step": 30}], loss_level=0.05)
    assert st["T_loss"] == pytest.approx(95.0)  # grid: 100
    assert st["T1"] == 30.0
    assert st["T2"] == pytest.approx(55.0)  # inconsistent margin t/50 - 1 >= 0.1 at t = 55 (grid: 60)


def test_coarse_grid_run_agrees_with_every_step():
    import meanfield

    kw = dict(K=2, N=3, steps=400, progress=False)
    fine = meanfield.run("incontext", record_every=1, **kw)
    coarse = meanfield.run("incontext", record_every=40, **kw)
    loss = fine.loss
    level = float(loss[0] + 0.9 * (loss[-1] - loss[0]))  # a level inside the run
    j = int(np.argmax(loss <= level))
    exact = float(fine.t[j])
    got = first_crossing([(coarse.loss, "<=", level)], coarse.t, step=coarse.step)
    grid = float(coarse.t[np.argmax(coarse.loss <= level)])
    spacing = float(coarse.t[1] - coarse.t[0])
    assert abs(got - exact) < 0.25 * spacing  # interpolation: well inside one record interval
    assert abs(got - exact) < abs(grid - exact) or grid == exact  # and closer than the record grid
