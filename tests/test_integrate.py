"""The shared steppers of ``meanfield.core.integrate`` against independent solutions.

References used here never come from ``meanfield.core.integrate`` itself:
``scipy.integrate.solve_ivp`` (DOP853, tight tolerances) on the same
right-hand side, ``scipy.linalg.expm`` for linear ODEs, closed forms for toy
systems, and ``scipy.optimize.brentq`` on scipy's dense output for events.
"""

from __future__ import annotations

import math
import os
import re
import signal

import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.linalg import expm
from scipy.optimize import brentq

from meanfield.core.integrate import RK4, Dopri5, GDMap, Monitor, SaveAt, Stage
from meanfield.models.mixture import kernels
from meanfield.models.mixture.config import make_config
from meanfield.models.mixture.data import sample_set
from meanfield.models.mixture.init import attention_init
from meanfield.models.mixture.run import MixtureSystem
from meanfield.models.mixture.run import run as mixture_run

BOTH = (True, True)


# ------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def mix():
    """The K=2, L=3 mixture system and a smooth starting point: finite-width
    attention (m=8) and neurons near c1+c2 +- (v1+v2), so that no pre-activation
    gets near the ReLU kink on t in [0, 20] (checked below)."""
    system = MixtureSystem(sample_set(2, 3, None))
    rng = np.random.default_rng(0)
    w = np.array([[1.0, 1, 1, 1], [1, 1, -1, -1]]) + 0.1 * rng.standard_normal((2, 4))
    S, A, B = attention_init(2, 0.5, 8, 0)
    y0 = kernels.pack(S, A, B, w)
    ref = solve_ivp(lambda t, y: system.rhs(y, BOTH), (0.0, 20.0), y0, method="DOP853",
                    rtol=1e-10, atol=1e-12, dense_output=True)
    assert ref.status == 0
    return system, y0, ref


def _u(system, y):
    s = system.samples
    return kernels.loss_and_grads(np.ascontiguousarray(y), s.P, s.idx, s.sgn, s.y, s.weight, 1.0)[4]


def test_reference_start_is_smooth(mix):
    """Precondition of the comparisons: no pre-activation crosses or touches 0."""
    system, y0, ref = mix
    us = np.array([_u(system, ref.sol(t)) for t in np.linspace(0, 20, 201)])
    assert np.abs(us).min() > 0.1
    assert np.all(np.sign(us) == np.sign(us[0]))
    # and the state actually moves (this is no trivial comparison)
    assert np.abs(ref.y[:, -1] - y0).max() > 0.1


class Linear:
    """y' = mode * M y; GD map: explicit Euler y <- y + eta * mode * M y.
    ``criterion_value(y, "y0")`` is y[0]."""

    max_abs = math.inf

    def __init__(self, M):
        self.M = np.asarray(M, dtype=float)
        self.nrhs = 0

    def rhs(self, y, mode):
        self.nrhs += 1
        return float(mode) * (self.M @ y)

    def criterion_value(self, y, name):
        assert name == "y0"
        return float(y[0])

    def gd_advance(self, y, nsteps, eta, mode, criterion):
        k = 0
        while True:
            if criterion is not None:
                v = self.criterion_value(y, criterion[0])
                if (v >= criterion[2]) if criterion[1] == ">=" else (v <= criterion[2]):
                    return k, 1
            if k == nsteps:
                return k, 0
            y += eta * float(mode) * (self.M @ y)
            k += 1


def _M(n=4, seed=3):
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    # decaying and rotating, eigenvalues of modest size
    D = np.diag(-np.linspace(0.3, 1.5, n))
    R = np.zeros((n, n))
    R[0, 1], R[1, 0] = 1.0, -1.0
    return Q @ (D + R) @ Q.T


# ------------------------------------------------------------ Dopri5 accuracy


@pytest.mark.parametrize("tol", [None, (1e-11, 1e-13)])
def test_dopri5_mixture_flow_matches_scipy_dop853(mix, tol):
    """Acceptance criterion: Dopri5 on the mixture flow agrees with scipy's
    DOP853 (rtol 1e-10, atol 1e-12) to 1e-7 on t in [0, 20]."""
    system, y0, ref = mix
    solver = Dopri5() if tol is None else Dopri5(rtol=tol[0], atol=tol[1])
    pts = np.linspace(0.5, 20.0, 40)
    traj = solver.solve(system, y0, [Stage(1, BOTH, 20.0)], SaveAt(points=pts))
    assert traj.status == "complete", traj.message
    a = traj.arrays()
    np.testing.assert_allclose(a["t"], np.concatenate([[0.0], pts]), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(a["y"][0], y0)
    err = np.abs(a["y"][1:] - ref.sol(a["t"][1:]).T).max()
    assert err < 1e-7
    if tol is not None:
        assert err < 1e-9
    assert not traj.warnings


def test_dopri5_linear_ode_against_expm():
    M = _M()
    y0 = np.array([1.0, -0.5, 0.25, 2.0])
    system = Linear(M)
    pts = np.array([0.1, 0.7, 1.3, 2.9, 4.0, 5.5])
    traj = Dopri5(rtol=1e-11, atol=1e-13).solve(system, y0, [Stage(1, 1.0, 6.0)], SaveAt(points=pts))
    assert traj.status == "complete"
    a = traj.arrays()
    assert a["t"][0] == 0.0 and a["t"][-1] == pytest.approx(6.0, abs=1e-13)
    for t, y in zip(a["t"], a["y"]):
        np.testing.assert_allclose(y, expm(M * t) @ y0, rtol=0, atol=1e-9)


def test_dopri5_dense_output_at_save_points_between_steps():
    """Save points fall between solver steps (loose tolerance: few large
    steps), so they come from the dense output; it must be accurate to the
    order of the local error, far better than linear interpolation."""
    M = _M(seed=5)
    y0 = np.array([0.3, 1.0, -1.0, 0.5])
    system = Linear(M)
    pts = np.linspace(0.05, 5.0, 100)
    traj = Dopri5(rtol=1e-6, atol=1e-8).solve(system, y0, [Stage(1, 1.0, 5.0)], SaveAt(points=pts))
    a = traj.arrays()
    nsteps = int(a["step"][-1])
    assert nsteps < 60  # far fewer solver steps than save points
    ts = a["t"][1:-1]
    np.testing.assert_allclose(ts, pts[:-1], rtol=0, atol=1e-14)
    exact = np.array([expm(M * t) @ y0 for t in ts])
    err = np.abs(a["y"][1:-1] - exact).max()
    assert err < 2e-5
    # the interpolant is smooth across step boundaries: second differences match the exact curve's
    d2 = np.diff(a["y"][1:-1], 2, axis=0)
    d2x = np.diff(exact, 2, axis=0)
    assert np.abs(d2 - d2x).max() < 1e-5


# ------------------------------------------------------------ events


def test_dopri5_event_loss_level_located_by_brentq(mix):
    system, y0, ref = mix
    L0 = system.criterion_value(y0, "loss")
    L1 = system.criterion_value(ref.sol(20.0), "loss")
    assert L1 < L0
    level = 0.5 * (L0 + L1)
    stages = [Stage(1, BOTH, 20.0, ("loss", "<=", level)), Stage(2, BOTH, 1.0)]
    traj = Dopri5(rtol=1e-10, atol=1e-12).solve(system, y0, stages, SaveAt())
    assert traj.status == "complete"
    t_star = brentq(lambda t: system.criterion_value(ref.sol(t), "loss") - level, 0.0, 20.0, xtol=1e-14)
    end1 = traj.stage_ends[0]
    assert end1["stage"] == 1 and end1["reason"] == "criterion"
    assert abs(end1["t"] - t_star) < 1e-7
    # the state recorded at the stage end is the state at t_star
    i = traj.t.index(end1["t"])
    np.testing.assert_allclose(traj.y[i], ref.sol(t_star), rtol=0, atol=1e-7)
    # the second stage then runs its full length from there
    assert traj.stage_ends[1]["reason"] == "length"
    assert traj.t[-1] == pytest.approx(end1["t"] + 1.0, abs=1e-12)


def test_flow_criterion_already_true_ends_stage_at_once(mix):
    system, y0, _ = mix
    L0 = system.criterion_value(y0, "loss")
    traj = Dopri5().solve(system, y0, [Stage(1, BOTH, 5.0, ("loss", "<=", L0 + 1.0)), Stage(2, BOTH, 0.5)],
                          SaveAt())
    assert traj.stage_ends[0] == {"stage": 1, "step": 0, "t": 0.0, "reason": "criterion"}
    assert traj.t[-1] == pytest.approx(0.5)


def test_gd_criterion_stops_at_first_step_where_it_holds():
    """y_{n} = (1 - eta)^n y0 for y' = -y with Euler steps; stop at y0 <= 0.3."""
    eta = 0.1
    system = Linear(-np.eye(2))
    stages = [Stage(1, 1.0, 1000, ("y0", "<=", 0.3)), Stage(2, 1.0, 5)]
    traj = GDMap(eta).solve(system, np.array([1.0, 2.0]), stages, SaveAt())
    n_star = next(n for n in range(1000) if (1 - eta) ** n <= 0.3)
    assert traj.stage_ends[0] == {"stage": 1, "step": n_star, "t": n_star * eta, "reason": "criterion"}
    assert traj.stage_ends[1]["step"] == n_star + 5
    assert traj.step[-1] == n_star + 5
    np.testing.assert_allclose(traj.y[-1], (1 - eta) ** (n_star + 5) * np.array([1.0, 2.0]), rtol=1e-13)


# ------------------------------------------------------------ orders


def test_rk4_fourth_order_linear():
    M = _M(seed=7)
    y0 = np.array([1.0, 0.0, -1.0, 0.5])
    system = Linear(M)
    exact = expm(M * 4.0) @ y0
    errs = []
    for dt in (0.4, 0.2, 0.1):
        traj = RK4(dt).solve(system, y0, [Stage(1, 1.0, 4.0)], SaveAt())
        assert traj.t[-1] == pytest.approx(4.0, abs=1e-12)
        errs.append(np.abs(traj.y[-1] - exact).max())
    ratios = [errs[0] / errs[1], errs[1] / errs[2]]
    assert all(13 < r < 19 for r in ratios), (errs, ratios)


def test_rk4_fourth_order_mixture(mix):
    system, y0, _ = mix
    ref = solve_ivp(lambda t, y: system.rhs(y, BOTH), (0.0, 8.0), y0, method="DOP853", rtol=1e-13, atol=1e-14)
    exact = ref.y[:, -1]
    errs = []
    for dt in (2.0, 1.0, 0.5):
        traj = RK4(dt).solve(system, y0, [Stage(1, BOTH, 8.0)], SaveAt())
        errs.append(np.abs(traj.y[-1] - exact).max())
    ratios = [errs[0] / errs[1], errs[1] / errs[2]]
    assert all(12 < r < 20 for r in ratios), (errs, ratios)


def test_rk4_last_step_shortened_to_stage_end():
    system = Linear(-np.eye(1))
    traj = RK4(0.3).solve(system, np.array([1.0]), [Stage(1, 1.0, 1.0)], SaveAt(every=1))
    np.testing.assert_allclose(traj.t, [0.0, 0.3, 0.6, 0.9, 1.0], atol=1e-14)


def test_gd_vs_flow_error_linear_in_eta(mix):
    """The exact GD map is a first-order method for the flow: the sup error at
    t = step * eta shrinks linearly in eta."""
    system, y0, ref = mix
    etas = np.array([0.2, 0.1, 0.05])
    errs = []
    for eta in etas:
        n = int(round(10.0 / eta))
        traj = GDMap(eta).solve(system, y0, [Stage(1, BOTH, n)], SaveAt(every=1))
        assert traj.status == "complete"
        a = traj.arrays()
        np.testing.assert_array_equal(a["step"], np.arange(n + 1))
        np.testing.assert_allclose(a["t"], a["step"] * eta, rtol=1e-15, atol=0)
        errs.append(np.abs(a["y"] - ref.sol(a["t"]).T).max())
    errs = np.array(errs)
    assert errs[0] / errs[1] == pytest.approx(2.0, rel=0.15)
    assert errs[1] / errs[2] == pytest.approx(2.0, rel=0.15)
    slope = np.polyfit(np.log(etas), np.log(errs), 1)[0]
    assert 0.8 <= slope <= 1.2
    assert errs[-1] < 1e-3


def test_gd_map_is_euler_on_toy():
    """Records at step s hold the state after exactly s GD steps."""
    M = _M(seed=1)
    y0 = np.array([1.0, 2.0, 3.0, 4.0])
    eta = 0.05
    traj = GDMap(eta).solve(Linear(M), y0, [Stage(1, 1.0, 40)], SaveAt(every=7))
    Euler = np.eye(4) + eta * M
    for s, t, y in zip(traj.step, traj.t, traj.y):
        assert t == pytest.approx(s * eta, rel=1e-15)
        np.testing.assert_allclose(y, np.linalg.matrix_power(Euler, s) @ y0, rtol=1e-12, atol=1e-14)


# ------------------------------------------------------------ save grids


def test_saveat_every_gd_three_stages():
    system = Linear(-0.1 * np.eye(2))
    stages = [Stage(1, 1.0, 5), Stage(2, 0.0, 7), Stage(3, 1.0, 4)]
    traj = GDMap(0.5).solve(system, np.ones(2), stages, SaveAt(every=3))
    assert traj.status == "complete"
    assert traj.step == [0, 3, 5, 6, 9, 12, 15, 16]
    assert traj.stage == [1, 1, 1, 2, 2, 2, 3, 3]
    assert [e["step"] for e in traj.stage_ends] == [5, 12, 16]
    assert [e["reason"] for e in traj.stage_ends] == ["length"] * 3
    # stage 2 had mode 0: frozen
    y = dict(zip(traj.step, traj.y))
    np.testing.assert_array_equal(y[5], y[12])
    np.testing.assert_allclose(y[16], 0.95 ** 9 * np.ones(2), rtol=1e-14)


def test_saveat_log_gd_records_exactly_the_points():
    save = SaveAt.log(12, 500, integer=True)
    pts = np.asarray(save.points)
    assert pts.dtype.kind == "i"
    expected = np.unique(np.round(np.geomspace(1, 500, 12)).astype(int))
    np.testing.assert_array_equal(pts, expected)
    traj = GDMap(0.01).solve(Linear(-np.eye(1)), np.ones(1), [Stage(1, 1.0, 500)], save)
    assert traj.step == [0] + list(expected)
    np.testing.assert_allclose(traj.y[-1], (1 - 0.01) ** 500, rtol=1e-12)


def test_saveat_points_gd_across_stage_boundaries():
    traj = GDMap(1.0).solve(Linear(-0.01 * np.eye(1)), np.ones(1),
                            [Stage(1, 1.0, 10), Stage(2, 1.0, 10)], SaveAt(points=np.array([3, 10, 11, 19, 25])))
    assert traj.step == [0, 3, 10, 11, 19, 20]
    assert traj.stage == [1, 1, 1, 2, 2, 2]


def test_saveat_log_flow_records_exactly_the_times():
    M = _M(seed=2)
    y0 = np.array([1.0, -1.0, 0.5, 0.0])
    save = SaveAt.log(15, 8.0, integer=False, t_min=1e-3)
    pts = np.asarray(save.points)
    np.testing.assert_allclose(pts, np.geomspace(1e-3, 8.0, 15), rtol=1e-15)
    for solver in (Dopri5(rtol=1e-10, atol=1e-12), RK4(0.01)):
        traj = solver.solve(Linear(M), y0, [Stage(1, 1.0, 8.0)], save)
        a = traj.arrays()
        assert a["t"][0] == 0.0
        np.testing.assert_allclose(a["t"][1:], pts, rtol=1e-14, atol=0)
        assert np.all(np.diff(a["t"]) > 0)
        exact = np.array([expm(M * t) @ y0 for t in a["t"]])
        np.testing.assert_allclose(a["y"], exact, atol=1e-8)


def test_saveat_uniform_and_flow_stage_ends():
    """Flow stages: ends recorded once, points inside later stages recorded
    with their stage index; the frozen stage keeps the state."""
    M = _M(seed=4)
    y0 = np.array([1.0, 1.0, 1.0, 1.0])
    save = SaveAt.uniform(0.25, 3.0)
    np.testing.assert_allclose(save.points, 0.25 * np.arange(1, 13), rtol=1e-15)
    stages = [Stage(1, 1.0, 1.0), Stage(2, 0.0, 0.5), Stage(3, 1.0, 1.5)]
    traj = Dopri5(rtol=1e-10, atol=1e-12).solve(Linear(M), y0, stages, save)
    a = traj.arrays()
    np.testing.assert_allclose(a["t"], 0.25 * np.arange(13), atol=1e-12)
    assert np.all(np.diff(a["t"]) > 0)
    np.testing.assert_array_equal(a["stage"], [1, 1, 1, 1, 1, 2, 2, 3, 3, 3, 3, 3, 3])
    assert [e["stage"] for e in traj.stage_ends] == [1, 2, 3]
    np.testing.assert_allclose([e["t"] for e in traj.stage_ends], [1.0, 1.5, 3.0], atol=1e-12)
    y1 = expm(M) @ y0
    for t, y in zip(a["t"], a["y"]):
        ex = expm(M * t) @ y0 if t <= 1.0 + 1e-12 else (y1 if t <= 1.5 + 1e-12 else expm(M * (t - 0.5)) @ y0)
        np.testing.assert_allclose(y, ex, atol=1e-8)


def test_saveat_every_flow():
    traj = RK4(0.1).solve(Linear(-np.eye(1)), np.ones(1), [Stage(1, 1.0, 2.0)], SaveAt(every=4))
    a = traj.arrays()
    np.testing.assert_array_equal(a["step"], [0, 4, 8, 12, 16, 20])
    np.testing.assert_allclose(a["t"], [0.0, 0.4, 0.8, 1.2, 1.6, 2.0], atol=1e-12)


# ------------------------------------------------------------ divergence


def test_gd_blow_up_stops_as_diverged_with_records():
    cfg = make_config(eta=1e3, steps=4000, record_every=1)
    traj = mixture_run(cfg)
    assert traj.status == "diverged"
    a = traj.arrays()
    assert a["t"][0] == 0.0 and a["step"][0] == 0
    assert len(a["step"]) >= 2  # the records before the blow-up are kept
    np.testing.assert_array_equal(a["step"], np.arange(len(a["step"])))
    np.testing.assert_allclose(a["t"], a["step"] * 1e3)
    assert np.all(np.isfinite(a["y"])) and np.abs(a["y"]).max() <= cfg.max_abs
    last = int(a["step"][-1])
    m = re.search(r"step (\d+)", traj.message)
    assert m and int(m.group(1)) == last + 1, traj.message
    assert "max_abs" in traj.message
    # one more exact GD step from the last record really leaves the box
    system = MixtureSystem(sample_set(2, 3, None), 1.0, math.inf)
    y = a["y"][-1].copy()
    system.gd_advance(y, 1, 1e3, BOTH, None)
    assert not np.all(np.isfinite(y)) or np.abs(y).max() > cfg.max_abs


def test_flow_tiny_max_abs_stops_as_diverged():
    cfg = make_config(method="flow", t_end=200.0, max_abs=0.5, record_dt=1.0)
    traj = mixture_run(cfg)
    assert traj.status == "diverged"
    a = traj.arrays()
    assert a["t"][0] == 0.0 and len(a["t"]) >= 3
    assert a["t"][-1] < 200.0
    assert np.abs(a["y"]).max() <= 0.5
    assert "max_abs" in traj.message
    # records are the flow (compare with scipy up to the last recorded time)
    system = MixtureSystem(sample_set(2, 3, None))
    ref = solve_ivp(lambda t, y: system.rhs(y, BOTH), (0.0, a["t"][-1]), a["y"][0], method="DOP853",
                    rtol=1e-10, atol=1e-12, dense_output=True)
    # zero init sits at kinks: compare only loosely
    np.testing.assert_allclose(a["y"][-1], ref.sol(a["t"][-1]), atol=1e-2)


class NaNAfter:
    """y' = (1, -y1); the rhs is NaN once y0 > 2 (i.e. after t = 2 from y0 = 0)."""

    max_abs = math.inf

    def rhs(self, y, mode):
        if y[0] > 2.0:
            return np.full_like(y, np.nan)
        return np.array([1.0, -y[1]])

    def criterion_value(self, y, name):
        return 0.0

    def gd_advance(self, y, nsteps, eta, mode, criterion):
        for k in range(nsteps):
            new = y + eta * self.rhs(y, mode)
            if not np.all(np.isfinite(new)):
                return k, 2
            y[:] = new
        return nsteps, 0


@pytest.mark.parametrize("solver", [Dopri5(), RK4(0.1)], ids=["dopri5", "rk4"])
def test_nan_rhs_flow_diverged_records_kept(solver):
    pts = np.array([0.5, 1.0, 1.5, 2.5, 3.0])
    traj = solver.solve(NaNAfter(), np.array([0.0, 1.0]), [Stage(1, None, 4.0)], SaveAt(points=pts))
    assert traj.status == "diverged"
    assert "non-finite" in traj.message
    a = traj.arrays()
    assert np.all(np.isfinite(a["y"]))
    for tp in (0.0, 0.5, 1.0, 1.5):
        i = int(np.argmin(np.abs(a["t"] - tp)))
        assert abs(a["t"][i] - tp) < 1e-12
        np.testing.assert_allclose(a["y"][i], [tp, math.exp(-tp)], atol=1e-5)
    assert a["t"][-1] <= 2.0 + 1e-12
    assert a["t"][-1] > 1.5
    assert not np.any(a["t"] > 2.0 + 1e-12)


def test_nan_gd_diverged_records_kept():
    traj = GDMap(0.25).solve(NaNAfter(), np.array([0.0, 1.0]), [Stage(1, None, 100)], SaveAt(every=2))
    assert traj.status == "diverged"
    assert "non-finite" in traj.message
    # y0 = 0.25 k: the step from k = 8 (y0 = 2) still sees a finite rhs, k = 9 does not... y0 = 2.25 > 2
    assert traj.step[-1] == 9
    assert re.search(r"step 10\b", traj.message)
    assert traj.step[:5] == [0, 2, 4, 6, 8]
    assert np.all(np.isfinite(np.asarray(traj.y)))


# ------------------------------------------------------------ h_min


class SignFlow:
    """y' = -sign(y): reaches 0 at t = y0 and slides there (Filippov)."""

    max_abs = math.inf

    def rhs(self, y, mode):
        return -np.sign(y)

    def criterion_value(self, y, name):
        return 0.0


def test_dopri5_h_min_forced_steps_through_sliding():
    """y' = -sign(y) from y = 1 slides at 0 for t in [1, 3]: with h_min = 0.01
    the forced steps should cover the sliding in about 200 steps of h_min."""
    h_min = 1e-2
    traj = Dopri5(h_min=h_min, max_steps=5000).solve(SignFlow(), np.array([1.0]), [Stage(1, None, 3.0)],
                                                     SaveAt(every=1))
    assert traj.status == "complete", traj.message
    a = traj.arrays()
    n_run = int(a["step"][-1])
    assert n_run < 1000
    assert a["t"][-1] == pytest.approx(3.0)
    assert abs(a["y"][-1][0]) <= 2 * h_min
    # no step below h_min except possibly the last one of the stage
    assert np.diff(a["t"])[:-1].min() >= h_min * (1 - 1e-9)
    # without h_min the adaptive method crawls: many more steps than that
    slow = Dopri5(max_steps=20 * n_run).solve(SignFlow(), np.array([1.0]), [Stage(1, None, 3.0)], SaveAt())
    assert slow.status != "complete"
    assert slow.t[-1] < 1.5
    assert "max_steps" in slow.message


def test_dopri5_h_min_forced_steps_reported():
    """Forced steps (and only they) produce a warning naming h_min and the
    time span where the flow is non-smooth; before the kink the solution is exact."""
    guard = Dopri5(h_min=1e-2, max_steps=3000)
    traj = guard.solve(SignFlow(), np.array([1.0]), [Stage(1, None, 3.0)], SaveAt(every=1))
    for t, y in zip(traj.t, traj.y):
        if t < 0.99:
            assert y[0] == pytest.approx(1.0 - t, abs=1e-8)
    assert len(traj.warnings) == 1
    w = traj.warnings[0]
    assert "h_min = 0.01" in w and "warning" in traj.message and w in traj.message
    m = re.search(r"over t in \[([-0-9.e+]+), ([-0-9.e+]+)\]", w)
    assert m and 0.95 <= float(m.group(1)) <= 1.05
    # the smooth linear problem never forces a step
    ok = Dopri5(h_min=1e-2).solve(Linear(_M()), np.ones(4), [Stage(1, 1.0, 3.0)], SaveAt())
    assert ok.status == "complete" and not ok.warnings
    # without h_min: no forced steps, the crawl is stopped by max_steps
    slow = Dopri5(max_steps=3000).solve(SignFlow(), np.array([1.0]), [Stage(1, None, 3.0)], SaveAt())
    assert slow.status == "diverged" and not slow.warnings
    assert slow.t[-1] < 1.5


# ------------------------------------------------------------ monitor / signals


class KillAfter(Linear):
    """A linear system that sends SIGINT to this process after ``n`` rhs calls."""

    def __init__(self, M, n, sig=signal.SIGINT):
        super().__init__(M)
        self.n = n
        self.sig = sig

    def rhs(self, y, mode):
        if self.nrhs == self.n:
            os.kill(os.getpid(), self.sig)
        return super().rhs(y, mode)

    def gd_advance(self, y, nsteps, eta, mode, criterion):
        self.nrhs += 1
        if self.nrhs == self.n:
            os.kill(os.getpid(), self.sig)
        return super().gd_advance(y, min(nsteps, 1), eta, mode, criterion)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("kind", ["gd", "rk4", "dopri5"])
def test_signal_interrupts_with_records_kept(kind, sig):
    old_int = signal.getsignal(signal.SIGINT)
    old_term = signal.getsignal(signal.SIGTERM)
    system = KillAfter(-0.001 * np.eye(2), 40, sig)
    solver = {"gd": GDMap(0.1), "rk4": RK4(0.01), "dopri5": Dopri5(h_min=1e-3)}[kind]
    length = 10**6 if kind == "gd" else 1e4
    save = SaveAt(every=5)
    with Monitor(total=length, quiet_s=math.inf) as mon:
        traj = solver.solve(system, np.ones(2), [Stage(1, 1.0, length)], save, monitor=mon)
    assert traj.status == "interrupted"
    assert mon.signal == sig
    assert str(int(sig)) in traj.message
    assert traj.step[0] == 0 and len(traj.step) >= 3
    assert traj.step[-1] < 100
    assert np.all(np.diff(traj.t) > 0)
    # handlers restored
    assert signal.getsignal(signal.SIGINT) is old_int
    assert signal.getsignal(signal.SIGTERM) is old_term


def test_monitor_handle_sets_stop_flag_and_checkpoint_hook():
    calls = []
    system = Linear(-np.eye(1))
    with Monitor(total=100, quiet_s=math.inf, checkpoint=lambda tr: calls.append(len(tr.t)),
                 checkpoint_s=0.0) as mon:
        assert not mon.stop_requested
        traj_full = GDMap(0.01).solve(system, np.ones(1), [Stage(1, 1.0, 100)], SaveAt(every=10), monitor=mon)
        assert traj_full.status == "complete"
        assert calls, "checkpoint hook never called with checkpoint_s=0"
        mon._handle(signal.SIGTERM, None)
        assert mon.stop_requested
        traj = GDMap(0.01).solve(system, np.ones(1), [Stage(1, 1.0, 100)], SaveAt(every=10), monitor=mon)
    assert traj.status == "interrupted"
    assert traj.step[0] == 0 and traj.step[-1] < 100
    np.testing.assert_allclose(traj.y[-1], (0.99) ** traj.step[-1], rtol=1e-13)


def test_monitor_progress_line():
    import io

    class TTY(io.StringIO):
        def isatty(self):
            return True

    buf = TTY()
    mon = Monitor(total=10, quiet_s=0.0, every_s=0.0, stream=buf, label="x ")
    with mon:
        mon.update(5, 2, "info")
    out = buf.getvalue()
    assert out.startswith("\rx step 5/10") and "50.0%" in out and "stage 2" in out
    assert out.endswith("\n") and out.count("\n") == 1
    # a log file (no tty) within its first 10 s stays quiet
    log = io.StringIO()
    with Monitor(total=10, quiet_s=0.0, every_s=0.0, stream=log) as mon2:
        mon2.update(5, 1, "")
    assert log.getvalue() == ""


# ------------------------------------------------------------ the optional hold_manifold hook

class _Circle:
    """dy/dt = (-y2, y1) on the unit circle, with a hook that normalises y (in place)."""

    max_abs = float("inf")

    def __init__(self, hold):
        self.calls = 0
        if hold:
            self.hold_manifold = self._hold

    def _hold(self, y):
        self.calls += 1
        y /= np.linalg.norm(y)
        return True

    def rhs(self, y, mode):
        return np.array([-y[1], y[0]])

    def criterion_value(self, y, name):
        return 0.0


@pytest.mark.parametrize("solver", [RK4(dt=0.7), Dopri5(rtol=1e-3, atol=1e-6)])
def test_hold_manifold_is_applied_after_every_step_and_on_records(solver):
    """Without the hook a coarse step drifts off the circle; with it every record is on it (to rounding),
    the hook ran once per accepted step at least, and the phase still follows the flow."""
    pts = np.linspace(0.5, 20.0, 9)
    free = solver.solve(_Circle(False), np.array([1.0, 0.0]), [Stage(1, None, 20.0)], SaveAt(points=pts))
    sysm = _Circle(True)
    held = solver.solve(sysm, np.array([1.0, 0.0]), [Stage(1, None, 20.0)], SaveAt(points=pts))
    yf, yh = np.asarray(free.y), np.asarray(held.y)
    assert np.abs(np.linalg.norm(yf, axis=1) - 1).max() > 1e-6  # the free run drifts
    assert np.abs(np.linalg.norm(yh, axis=1) - 1).max() <= 1e-14
    assert sysm.calls >= len(held.t) - 2
    t = np.asarray(held.t)
    np.testing.assert_allclose(np.arctan2(yh[:, 1], yh[:, 0]), np.angle(np.exp(1j * t)), atol=0.1)
