"""Escape times from the linearisation at a saddle (meanfield.core.escape and the
mixture adapter meanfield.models.mixture.escape)."""

import math

import numpy as np
import pytest

from meanfield.core import escape
from meanfield.models.mixture import escape as mesc
from meanfield.models.mixture import kernels
from meanfield.models.mixture.config import make_config
from meanfield.models.mixture.run import MixtureSystem, samples_of


def _samples(K, L=3):
    return samples_of(make_config({"K": K, "L": L}))


def _random_state(rng, P, scale=0.6):
    return rng.normal(size=kernels.state_size(P)) * scale


def _numba_rhs(samples, train_w, train_att):
    sysm = MixtureSystem(samples, 1.0)
    return lambda y: sysm.rhs(np.ascontiguousarray(y, dtype=np.float64), (train_w, train_att))


def _numba_gd(samples, eta, train_w, train_att):
    s = samples

    def step(y):
        z = np.array(y, dtype=np.float64)
        done, code, _ = kernels.gd_advance(z, 1, eta, s.P, s.idx, s.sgn, s.y, s.weight, s.consistent, 1.0,
                                           train_w, train_att, 0, 1, 0.0, math.inf)
        assert done == 1 and code == 0
        return z

    return step


@pytest.mark.parametrize("K", [2, 3])
def test_complex_step_target_equals_numba_kernels(K):
    """The kernels' source on the complex-step target, at real states given
    as complex (one state, and a stack of 3 as Lanes), against the compiled
    numba kernels; the imaginary part stays 0."""
    s = _samples(K)
    rng = np.random.default_rng(K)
    for _ in range(3):
        y = _random_state(rng, s.P)
        Y = np.stack([y, y, y], axis=1).astype(complex)
        for tw, ta in ((True, True), (False, True), (True, False)):
            for f, ref in ((lambda z: mesc.flow_rhs(z, s, 1.0, tw, ta), _numba_rhs(s, tw, ta)(y)),
                           (lambda z: mesc.gd_map(z, s, 0.3, 1.0, tw, ta), _numba_gd(s, 0.3, tw, ta)(y))):
                one, many = f(y.astype(complex)), f(Y)
                assert np.abs(one - ref).max() < 1e-13
                assert np.abs(many - ref[:, None]).max() < 1e-13
                assert np.abs(ref).max() > 1e-3  # not a vacuous comparison


@pytest.mark.parametrize("K,train_w,train_att", [(2, True, True), (2, False, True), (3, True, True)])
def test_complex_step_jacobian_equals_finite_differences_of_the_kernels(K, train_w, train_att):
    """At random (smooth) saddles: the exact Jacobian of the flow rhs and of
    the GD map (complex step through the kernels' own source) against finite
    differences (central, Richardson, h = 1e-3: error ~h^4 + 1e-16/h) of the
    numba kernels, to 1e-8; every direction in one pass (Lanes) equal to one
    pass per direction."""
    s = _samples(K)
    rng = np.random.default_rng(10 + K)
    eta = 0.4
    for _ in range(2):
        y = _random_state(rng, s.P)
        sad = mesc.saddle(y, s, train_w, train_att, eta=eta)
        assert sad.kinks(y) == []
        mask = sad.trained
        J = escape.jacobian(sad.rhs, y, mask, lanes=True)
        if K == 2:
            assert np.abs(J - escape.jacobian(sad.rhs, y, mask)).max() <= 1e-15 * np.abs(J).max()
        Jfd = escape.jacobian_fd(_numba_rhs(s, train_w, train_att), y, mask, h=1e-3)
        assert np.abs(J - Jfd).max() <= 1e-8 * max(1.0, np.abs(J).max())
        M = escape.jacobian(sad.gd_map, y, mask, lanes=True)
        Mfd = escape.jacobian_fd(_numba_gd(s, eta, train_w, train_att), y, mask, h=1e-3)
        assert np.abs(M - Mfd).max() <= 1e-8 * max(1.0, np.abs(M).max())
        # a genuine dependence was tested: the Jacobian is not just the identity pattern
        assert np.abs(M - np.eye(M.shape[0])).max() > 1e-3


def test_finite_differences_alone_are_not_exact():
    """The reason for complex step: on the same map, finite differences with
    a small step carry rounding error far above complex step's."""
    s = _samples(2)
    y = _random_state(np.random.default_rng(5), s.P)
    sad = mesc.saddle(y, s, True, True)
    J = escape.jacobian(sad.rhs, y, sad.trained, lanes=True)
    J2 = escape.jacobian(sad.rhs, y, sad.trained, h=1e-30, lanes=True)  # step size does not matter for complex step
    assert np.abs(J - J2).max() <= 1e-14 * np.abs(J).max()
    Jfd = escape.jacobian_fd(sad.rhs, y, sad.trained, h=1e-9)
    assert np.abs(J - Jfd).max() > 1e-9


def _linear_system(lams, seed=0):
    rng = np.random.default_rng(seed)
    n = len(lams)
    Q = np.linalg.qr(rng.normal(size=(n, n)))[0] + 0.3 * rng.normal(size=(n, n))  # not orthogonal
    J = Q @ np.diag(lams) @ np.linalg.inv(Q)
    return J, Q


def test_constructed_linear_system_gives_the_known_escape_time():
    """dy/dt = J y with known eigenvalues (0.5, 0.2, -1, -0.3): lambda = 0.5,
    slope p/lambda, and the time at which |y| first reaches theta from
    y(0) = omega^2 delta equals the prediction T = (2/lambda) log(1/omega) +
    (1/lambda) log(theta / a), up to the second mode's exp(-(lambda1 -
    lambda2) T) (checked at omega = 1e-6)."""
    lams = np.array([0.5, 0.2, -1.0, -0.3])
    J, Q = _linear_system(lams)
    Qi = np.linalg.inv(Q)
    rhs = lambda y: J @ y
    gd = lambda y, eta=0.1: y + eta * (J @ y)
    delta = np.array([1.0, -0.5, 0.3, 2.0])
    sad = escape.Saddle(np.zeros(4), np.ones(4, bool), rhs=rhs, gd_map=gd, eta=0.1,
                        names=["y1", "y2", "y3", "y4"])
    rep = escape.linearise(sad, delta=delta, power=2.0)
    assert rep.valid and rep.multiplicity == 1
    assert abs(rep.lam - 0.5) < 1e-13 and abs(rep.slope_flow - 4.0) < 1e-12
    assert abs(rep.mu - 1.05) < 1e-13 and abs(rep.slope_gd - 2 * 0.1 / math.log(1.05)) < 1e-10
    # the GD map here is exactly I + eta J: the first-order formula is exact
    assert abs(rep.slope_gd - rep.slope_gd_first_order) < 1e-10
    a_true = np.linalg.norm(Q[:, 0] * (Qi[0] @ delta))
    assert abs(rep.projection - a_true) < 1e-12
    assert abs(rep.lam2 - 0.2) < 1e-12

    theta, omega = 1.0, 1e-6

    def y_at(t):
        return Q @ (np.exp(lams * t) * (Qi @ (omega**2 * delta)))

    lo, hi = 0.0, 200.0  # |y(t)| is increasing past the transient here: bisection on the first crossing
    ts = np.linspace(lo, hi, 20001)
    k = int(np.argmax([np.linalg.norm(y_at(t)) >= theta for t in ts]))
    lo, hi = ts[k - 1], ts[k]
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if np.linalg.norm(y_at(mid)) < theta else (lo, mid)
    T_true = 0.5 * (lo + hi)
    T_pred = escape.predicted_time(rep, "flow", omega, math.log(theta / rep.projection) / rep.lam)
    # next order: the lam2 mode's relative size at T, rho exp(-(lam1-lam2) T) / lam1
    bound = (rep.projection2 / rep.projection) * math.exp(-(0.5 - 0.2) * T_true) / 0.5
    assert abs(T_true - T_pred) <= bound, (T_true, T_pred, bound)
    assert bound < 1e-3 * T_true
    # the intercept along the unstable manifold reproduces log(theta / a) / lambda
    def run_until(eps):  # exact: started on the top eigenspace, |y| = eps exp(lam t)
        return math.log(theta / eps) / 0.5

    mi = escape.manifold_intercept(rep, "flow", run_until, eps=1e-6)
    assert abs(mi["intercept"] - math.log(theta / rep.projection) / rep.lam) < 1e-10


def test_stage2_spectrum_matches_the_closed_form():
    """Independent closed form at the stage-2 saddle: lambda = 2 sigma_1(G) and
    mu = (1 + eta sigma_1)^2, G from the numba kernels; the growing direction
    has S+[c_k, v_k] > 0 and S+[c_k', v_k] < 0 (Figure 1's order) and
    B+[v1,v1] = -B+[v1,v2] for K = 2."""
    cfg = make_config({"K": 2, "L": 3, "omega": 0.1, "eta": 0.5}, schedule="three-stage",
                      stage_steps=(300, 0, 0))
    out = mesc.stage2(cfg, intercept=False)
    s = samples_of(cfg)
    S, A, B, w = kernels.unpack(mesc.stage1_end(cfg)[0])
    y = kernels.pack(0 * S, 0 * A, 0 * B, w)
    _, G, _, _, _ = kernels.loss_and_grads(y, s.P, s.idx, s.sgn, s.y, s.weight, 1.0)
    sig = max(np.linalg.svd(G[h], compute_uv=False)[0] for h in range(2))
    assert out["valid"] and out["kinks"] == []
    assert abs(out["lambda"] - 2 * sig) <= 1e-10 * sig
    assert abs(out["mu"] - (1 + 0.5 * sig) ** 2) <= 1e-12
    assert out["multiplicity"] == 2  # the two heads (head-swap symmetry)
    Sp, Bp = np.array(out["direction_blocks"]["S+"]), np.array(out["direction_blocks"]["B+"])
    # features c1 c2 v1 v2
    assert Sp[0, 2] > 0.1 and Sp[1, 3] > 0.1 and Sp[1, 2] < -0.1 and Sp[0, 3] < -0.1
    assert abs(Bp[2, 2] + Bp[2, 3]) < 1e-3 and Bp[2, 2] > 0.1


def test_kink_at_the_saddle_is_reported_and_no_slope_given():
    """No stage 1 (zero neurons): every pre-activation sits at the ReLU kink;
    the report says so and is not valid."""
    cfg = make_config({"K": 2, "L": 3, "omega": 0.1, "eta": 0.5}, schedule="three-stage", stage_steps=(0, 0, 0))
    out = mesc.stage2(cfg)
    assert not out["valid"] and len(out["kinks"]) > 0
    assert "kink" in out["reason"] and "manifold" not in out
    assert "no slope reported" in mesc.format_report(out)


def test_not_a_fixed_point_is_not_valid():
    """Stage 3 training both, at the end of a short stage 2: the neuron
    gradient is not zero there, so this is no saddle and no slope is valid."""
    cfg = make_config({"K": 2, "L": 3, "omega": 0.1, "eta": 0.5}, schedule="three-stage",
                      stage_steps=(300, 200, 0))
    from meanfield.models.mixture.run import run

    y = run(cfg).arrays()["y"][-1]
    out = mesc.stage_saddle_report(cfg, y, True, True)
    assert not out["valid"] and "not a fixed point" in out["reason"] and out["rhs_norm"] > 1e-6


@pytest.fixture(scope="module")
def sweep_k2_300():
    return mesc.stage2_constant({"K": 2, "L": 3, "omega": 0.1, "eta": 0.5, "stage_steps": (300, 0, 0)},
                                np.geomspace(1e-3, 3e-2, 3))


@pytest.mark.parametrize("K,n1", [(2, 1000), (2, 300), (3, 300)])
def test_predicted_slope_matches_measured_sweep(K, n1):
    """The omega sweep's measured slope of T2 - T1 against log(1/omega)
    agrees with the linearisation's prediction within the tolerance of the
    neglected terms (three omegas, short runs)."""
    r = mesc.stage2_constant({"K": K, "L": 3, "omega": 0.1, "eta": 0.5, "stage_steps": (n1, 0, 0)},
                             np.geomspace(1e-3, 3e-2, 3))
    assert r["valid"] and np.all(np.isfinite(r["durations"]))
    assert r["relative_error"] <= r["tolerance"] < 0.05, r
    assert r["pass"]
    # the GD map's exact mu, not the first-order formula, is what is compared
    assert r["slope_predicted_gd"] != r["slope_first_order_gd"]


def test_tolerance_would_fail_a_wrong_prediction(sweep_k2_300):
    """The check can fail: a prediction 10% off is outside the tolerance."""
    r = sweep_k2_300
    assert abs(r["slope_measured"] - 1.1 * r["slope_predicted_gd"]) / (1.1 * r["slope_predicted_gd"]) > r["tolerance"]


def test_stage2_constant_claim_pass_fail_and_figure(tmp_path, sweep_k2_300):
    r = sweep_k2_300
    c = mesc.check_stage2_constant([r])
    assert c.status == "PASS" and c.source == "expected" and c.name == "stage2_constant"
    assert c.numbers["slopes"]["K=2, stage1=300"]["predicted"] == r["slope_predicted_gd"]
    bad = dict(r, slope_measured=1.1 * r["slope_measured"], relative_error=0.1)
    bad["pass"] = bad["relative_error"] <= bad["tolerance"]
    assert mesc.check_stage2_constant([r, bad]).status == "FAIL"
    assert mesc.check_stage2_constant([]).status == "FAIL"
    name = mesc.stage2_constant_figure(tmp_path, [r])
    assert (tmp_path / name).stat().st_size > 1000


def test_escape_cli(tmp_path, capsys):
    from meanfield.cli import main

    js = tmp_path / "e.json"
    assert main(["mixture", "escape", "--stage-steps", "300,0,0", "--json", str(js)]) == 0
    out = capsys.readouterr().out
    assert "lambda = " in out and "S+ (rows" in out and "valid: True" in out
    import json

    d = json.loads(js.read_text())
    assert d["valid"] and d["lambda"] > 0 and d["multiplicity"] == 2 and "manifold" in d
    # bad input: one line naming the field, exit 2, nothing written
    for argv, field in ((["--stage", "4"], "stage"), (["--json", str(tmp_path / "x.txt")], "json"),
                        (["--from", str(tmp_path / "none.h5")], "from"), (["--eps", "-1"], "eps")):
        assert main(["mixture", "escape", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and field in err
    assert not (tmp_path / "x.txt").exists()
    # stage 3 is no saddle
    assert main(["mixture", "escape", "--stage", "3", "--stage-steps", "300,100,0"]) == 0
    assert "not a fixed point" in capsys.readouterr().out


def test_jvp_and_tangent_growth_on_a_linear_map():
    """jvp equals J v; tangent_log_growth through n copies of y -> M y grows
    like n log(rho(M)) along the top eigenvector (independent: numpy powers)."""
    rng = np.random.default_rng(3)
    J, Q = _linear_system(np.array([0.3, 0.1, -0.2]), seed=3)
    v = rng.normal(size=3)
    f = lambda y: J @ y
    assert np.abs(escape.jvp(f, np.zeros(3), np.ones(3, bool), v) - J @ v).max() < 1e-14
    M = np.eye(3) + 0.5 * J
    g = lambda y: M @ y
    logs, logp = escape.tangent_log_growth(((g, np.zeros(3)) for _ in range(40)), v, np.ones(3, bool),
                                           norm=lambda x: abs(x[0]))
    ref = np.linalg.matrix_power(M, 40) @ v
    assert abs(logs[-1] - math.log(np.linalg.norm(ref))) < 1e-12
    assert abs(logp[-1] - math.log(abs(ref[0]))) < 1e-12


def test_simultaneous_plateau_linear_prediction():
    """The plateau before the scores move in simultaneous training: the GD
    maps linearised at the moving frozen-neuron saddles predict when max|S|
    reaches 0.1 (still in the linear regime) to within 2 GD steps; the
    measured run is the full nonlinear numba dynamics."""
    cfg = make_config({"K": 2, "L": 3, "omega": 0.1, "eta": 0.5}, steps=800)
    out = mesc.simultaneous(cfg, [1e-3, 1e-1], theta=0.1)
    for r in out["rows"]:
        assert np.isfinite(r["T_measured"]) and abs(r["offset"]) <= 2 * 0.5, r
    # the slope is not constant: lambda grows with the neurons, so the local slope falls with T
    assert out["rows"][0]["local_slope_predicted"] < out["rows"][1]["local_slope_predicted"]
    assert out["n_kink_steps"] >= 1  # zero neurons at t = 0 sit at the kink: reported


def test_stage2_run_grows_along_the_predicted_direction():
    """The full nonlinear stage-2 run (numba GD, omega = 1e-3) points along the
    linearisation's growing direction once the growing part dominates: at the
    first record with |(S, A, B)| >= 1e-2 the cosine is >= 0.999 (expected
    deviations there: non-growing part omega^2 |delta| / 1e-2 = 4e-4, second
    mode (4e-6 / 1e-2)^(1 - lambda2/lambda1) = 0.02, nonlinear O(1e-2); each
    enters 1 - cos at second order)."""
    from meanfield.models.mixture.run import run

    cfg = make_config({"K": 2, "L": 3, "omega": 1e-3, "eta": 0.5}, schedule="three-stage",
                      stage_steps=(300, 600, 0), record_every=1)
    out = mesc.stage2(cfg, intercept=False)
    d = out["_report"].direction
    n_att = 6 * cfg.P * cfg.P
    Y = run(cfg).arrays()["y"][:, :n_att]
    norms = np.linalg.norm(Y, axis=1)
    k = int(np.flatnonzero(norms >= 1e-2)[0])
    assert k > 300  # in stage 2
    assert abs(Y[k] @ d) / norms[k] >= 0.999
    assert abs(Y[300] @ d) / norms[300] < 0.5  # at the start it is the initial state, not the direction


def test_saddle_of_any_integrate_system_uses_finite_differences():
    """A saddle from a meanfield.core.integrate system (real-only numba maps, as
    the engine's systems are): Jacobians by finite differences, flagged, and
    the same spectrum as the exact complex-step one to ~1e-7."""
    cfg = make_config({"K": 2, "L": 3, "omega": 0.1, "eta": 0.5}, schedule="three-stage",
                      stage_steps=(300, 0, 0))
    s = samples_of(cfg)
    S, A, B, w = kernels.unpack(mesc.stage1_end(cfg)[0])
    y = kernels.pack(0 * S, 0 * A, 0 * B, w)
    exact = escape.linearise(mesc.saddle(y, s, False, True, eta=0.5))
    sad = escape.saddle_of_system(MixtureSystem(s, 1.0), y, (False, True), mesc.mask_of(s.P, False, True), eta=0.5)
    approx = escape.linearise(sad)
    assert exact.method == "complex-step" and approx.method == "fd" and approx.to_dict()["jacobian_method"] == "fd"
    assert abs(approx.lam - exact.lam) <= 1e-7 * exact.lam and abs(approx.mu - exact.mu) <= 1e-9


def test_stage3_both_without_stage2_is_the_moving_attention_saddle():
    """Stage 3 training both right after stage 1 (no stage 2): not a fixed
    point of the whole state (the neurons move), but the attention block is
    still at its O(omega^2) start: the report gives its rate, equal to the
    stage-2 saddle's at the same neurons."""
    cfg = make_config({"K": 2, "L": 3, "omega": 0.1, "eta": 0.5}, schedule="three-stage", stage3="both",
                      stage_steps=(300, 0, 0))
    y1, t1 = mesc.stage1_end(cfg)
    out = mesc.stage3(cfg, y1, t1)
    assert not out["valid"] and "attention_saddle" in out
    ref = mesc.stage2(cfg, y1, t1, intercept=False)
    assert abs(out["attention_saddle"]["lambda"] - ref["lambda"]) <= 1e-12
    assert "moving saddle" in mesc.format_stage3(out)


def test_predicted_flow_slope_matches_measured_flow_sweep():
    """Gradient flow (Dopri5, the criterion located by dense output): the
    measured slope agrees with 2 / lambda within the tolerance."""
    r = mesc.stage2_constant({"K": 2, "L": 3, "omega": 0.1, "eta": 0.5, "stage_steps": (300, 0, 0)},
                             np.geomspace(1e-3, 3e-2, 3), method="flow")
    assert r["method"] == "flow" and r["tolerance_parts"]["resolution"] == 0.0
    assert abs(r["slope_predicted"] - 2 / r["lambda"]) < 1e-9 * r["slope_predicted"]
    assert r["relative_error"] <= r["tolerance"] < 0.05 and r["pass"], r


def test_generic_failure_paths():
    """Stable saddle: no growing direction; a displacement without a top
    component: no prediction; a shifted fixed point: not a fixed point;
    a GD map without eta: refused."""
    J, Q = _linear_system(np.array([-0.5, -0.2, -1.0]), seed=1)
    rep = escape.linearise(escape.Saddle(np.zeros(3), np.ones(3, bool), rhs=lambda y: J @ y), delta=np.ones(3))
    assert not rep.valid and "stable" in rep.reason and rep.slope_flow is None
    J, Q = _linear_system(np.array([0.5, -0.2, -1.0]), seed=2)
    delta = Q[:, 1] + Q[:, 2]  # no component on the top eigenvector
    rep = escape.linearise(escape.Saddle(np.zeros(3), np.ones(3, bool), rhs=lambda y: J @ y), delta=delta)
    assert not rep.valid and "no component" in rep.reason
    rep = escape.linearise(escape.Saddle(np.zeros(3), np.ones(3, bool), rhs=lambda y: J @ y + 1.0))
    assert not rep.valid and "not a fixed point" in rep.reason
    with pytest.raises(ValueError, match="eta"):
        escape.Saddle(np.zeros(3), np.ones(3, bool), gd_map=lambda y: y)


@pytest.mark.slow
def test_stage2_constant_full_settings(tmp_path):
    """The full claim: K in {2, 3, 4}, eight (K, stage-1) settings, omega in
    [1e-4, 3e-2] (about 30 s of CPU)."""
    c = mesc.stage2_constant_claim(tmp_path, quick=False, log=lambda *a: None)
    assert c.status == "PASS", c.numbers
    assert len(c.numbers["slopes"]) == len(mesc.CONSTANT_SETTINGS["full"]["settings"])
    assert (tmp_path / c.figure).exists()


def test_sweep_at_large_omega_is_not_tested():
    """omega up to 1: the O(omega^2) feedback alone makes the tolerance >= 100%,
    which no slope can fail; reported as not tested, never as PASS."""
    r = mesc.stage2_constant({"K": 2, "L": 3, "omega": 0.1, "eta": 0.5, "stage_steps": (300, 0, 0)}, [0.3, 1.0])
    assert r["tolerance"] >= 1.0 and not r["testable"] and not r["pass"]
    assert "NOT TESTED" in mesc.format_sweep(r)


def test_escape_cli_from_run_file_refuses_run_flags(tmp_path, capsys):
    """--from takes the config from the run file: a run flag next to it would be
    silently ignored, so it is an error naming it (exit 2, one line)."""
    from meanfield.cli import main

    f = tmp_path / "a.h5"
    assert main(["mixture", "run", "--schedule", "three-stage", "--stage-steps", "300,0,0", "--out", str(f)]) == 0
    capsys.readouterr()
    assert main(["mixture", "escape", "--from", str(f), "--K", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "K" in err and "--from" in err
    assert main(["mixture", "escape", "--from", str(f)]) == 0
    assert "K=2" in capsys.readouterr().out


def test_generic_slope_check_passes_the_predicted_slope_and_fails_another():
    """core.escape.slope_check on durations made from a known slope: the
    predicted slope passes, a 10% steeper one fails (tolerance from the
    neglected terms only: here the O(scale^2) feedback), huge scales are not tested."""
    rep = escape.EscapeReport(n_trained=1, rhs_norm=0.0, kinks=[], valid=True, reason="", lam=1.0, slope_flow=2.0,
                              projection=1.0)
    scales = np.array([1e-4, 1e-3, 1e-2])
    ok = escape.slope_check(rep, "flow", scales, 2.0 * np.log(1 / scales) + 3.0, 3.0)
    assert ok["pass"] and abs(ok["slope_measured"] - 2.0) < 1e-12 and ok["tolerance"] < 1e-3
    assert np.allclose(ok["predicted_durations"], 2.0 * np.log(1 / scales) + 3.0)
    bad = escape.slope_check(rep, "flow", scales, 2.2 * np.log(1 / scales), 0.0)
    assert not bad["pass"] and bad["testable"] and abs(bad["relative_error"] - 0.1) < 1e-12
    assert escape.format_slope_check(bad, "t:", "omega").rstrip().endswith("FAIL")
    big = escape.slope_check(rep, "flow", [0.5, 1.0], [1.0, 0.0])
    assert not big["testable"] and not big["pass"] and "NOT TESTED" in escape.format_slope_check(big, "t:")


@pytest.mark.parametrize("over", [{"K": 3}, {"K": 2, "neuron_init": "const:0.3,0.3,0.5,0.5"}])
def test_jacobian_at_an_exact_margin_tie_equals_finite_differences(over):
    """Smooth states with a margin of exactly 0 (u+ = u- > 0 on a sample: both heads' neurons equal on the
    features it reads), where |margin| has a kink but the loss does not: the complex-step Jacobians with the
    neurons trained against finite differences of the numba kernels (a wrong branch at the tie gave errors of
    4e-2 relative here)."""
    cfg = make_config({"L": 3, **over})
    s = samples_of(cfg)
    y = mesc.stage1_end(cfg)[0] if over.get("K") == 3 else np.asarray(mesc.initial_state(cfg), float)
    _, _, _, u, m = mesc.loss_grads(y, s)
    assert np.any(m == 0.0) and np.abs(u).min() > 1e-3  # the tie is there, no ReLU kink
    for tw, ta in ((True, False), (True, True)):
        sad = mesc.saddle(y, s, tw, ta, eta=0.3)
        J = escape.jacobian(sad.rhs, y, sad.trained, lanes=True)
        Jfd = escape.jacobian_fd(_numba_rhs(s, tw, ta), y, sad.trained, h=1e-3)
        assert np.abs(J - Jfd).max() <= 1e-8 * max(1.0, np.abs(J).max())
        M = escape.jacobian(sad.gd_map, y, sad.trained, lanes=True)
        Mfd = escape.jacobian_fd(_numba_gd(s, 0.3, tw, ta), y, sad.trained, h=1e-3)
        assert np.abs(M - Mfd).max() <= 1e-8 * max(1.0, np.abs(M).max())


def test_jvp_is_linear_at_a_kink_and_agrees_with_the_lanes_jacobian():
    """At a state with ReLU pre-activations of exactly 0 (r0 = 0.5) the one-state complex step (a Lanes of one
    lane) takes the real kernel's branch whatever the step's sign: jvp(-x) = -jvp(x), and it is the Lanes
    Jacobian's product."""
    cfg = make_config({"K": 2, "L": 4, "relu_prime_at_zero": 0.5})
    s = samples_of(cfg)
    P = s.P
    w = np.array([[1.0, 0.7, 1.0, 0.7], [0.4, 0.9, 0.4, 0.9]])
    z = np.zeros((2, P, P))
    y = kernels.pack(z, z, z, w)
    sad = mesc.saddle(y, s, False, True, eta=0.5, r0=0.5)
    assert sad.kinks(y)
    x = np.random.default_rng(1).normal(size=int(sad.trained.sum()))
    j = escape.jvp(sad.gd_map, y, sad.trained, x)
    assert np.abs(j + escape.jvp(sad.gd_map, y, sad.trained, -x)).max() <= 1e-15 * np.abs(j).max()
    M = escape.jacobian(sad.gd_map, y, sad.trained, lanes=True)
    assert np.abs(j - M @ x).max() <= 1e-13 * np.abs(j).max()


def test_attention_tangent_is_the_complex_step_jvp_of_the_gd_map():
    """The simultaneous report's closed-form tangent map at the moving saddles (S = A = B = 0, G held fixed)
    against the complex step through the whole attention-only GD map (forward, backward, update)."""
    cfg = make_config({"K": 2, "L": 3, "neuron_init": "gaussian:0.3"})
    s = samples_of(cfg)
    P = s.P
    rng = np.random.default_rng(3)
    mask = mesc.mask_of(P, False, True)
    for _ in range(3):
        w = rng.normal(size=(2, P))
        z = np.zeros((2, P, P))
        y = kernels.pack(z, z, z, w)
        x = rng.normal(size=int(mask.sum()))
        ref = escape.jvp(lambda q: mesc.gd_map(q, s, 0.4, 1.0, False, True), y, mask, x)
        got = mesc.attention_tangent(y, s, 0.4, 1.0)(x)
        assert np.abs(got - ref).max() <= 1e-13 * np.abs(ref).max()
        assert np.abs(got - x).max() > 1e-3  # not the identity
    with pytest.raises(ValueError, match="S = A = B = 0"):
        mesc.attention_tangent(rng.normal(size=kernels.state_size(P)), s, 0.4)


def test_a_jacobian_of_no_trained_variables_is_empty():
    s = _samples(2)
    y = _random_state(np.random.default_rng(0), s.P)
    J = escape.jacobian(lambda q: mesc.flow_rhs(q, s), y, np.zeros(y.size, bool), lanes=True)
    assert J.shape == (0, 0)
