"""The finite-width particle sampler (explicit GD on W_K, W_Q, w in R^d) against
the reduced GD map, and its plumbing (init streams, records, run files).

The particle sampler is the engine's explicit network (``meanfield.engine.oracle``)
on the mixture description; it never calls the reduced dynamics; agreement to
~1e-15 over hundreds of steps is the check that the reduced GD map (with its
eta^2 terms) IS explicit finite-width GD, at the widths and ambient dimensions here.
"""

from __future__ import annotations

import numpy as np
import pytest

from meanfield.core import integrate
from meanfield.core.config import ConfigError
from meanfield.core.io import read_run
from meanfield.engine.oracle import embedding
from meanfield.models.mixture import init, kernels, particles, run
from meanfield.models.mixture import observables as obs_mod
from meanfield.models.mixture.config import make_config
from meanfield.models.mixture.data import sample_set

RTOL = 1e-10
BLOCKS = ("S", "A", "B", "w")


def _cfg(K, L, m, schedule, **kw):
    base = dict(K=K, L=L, width=m, seed=3, omega=0.5, eta=0.5, steps=240, stage_steps="80,80,80",
                schedule=schedule, record_every=7)
    base.update(kw)
    return make_config({}, **base)


def _rel_errors(Yp, Yr):
    """Per block (S, A, B, w): max |particles - reduced| / max |reduced| over the trajectory."""
    out = {}
    for name, a, b in zip(BLOCKS, kernels.unpack(Yp), kernels.unpack(Yr)):
        out[name] = float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))
    return out


def _compare(cfg, d):
    tp = particles.run_particles(cfg, d=d)
    tr = run.run(cfg)
    ap, ar = tp.arrays(), tr.arrays()
    # the same record grid, stages, stage ends and status
    np.testing.assert_array_equal(ap["step"], ar["step"])
    np.testing.assert_array_equal(ap["t"], ar["t"])
    np.testing.assert_array_equal(ap["stage"], ar["stage"])
    assert tp.stage_ends == tr.stage_ends
    assert (tp.status, tp.message) == (tr.status, tr.message)
    err = _rel_errors(ap["y"], ar["y"])
    assert max(err.values()) < RTOL, err
    # recorded quantities (through the shared observable function) agree too
    s = sample_set(cfg.K, cfg.L, cfg.p)
    op, orr = obs_mod.observables(s, ap["y"]), obs_mod.observables(s, ar["y"])
    for key in ("loss", "margin", "u"):
        assert np.max(np.abs(op[key] - orr[key])) <= RTOL * max(1.0, np.max(np.abs(orr[key]))), key
    return ap, ar, err


@pytest.mark.parametrize("schedule", ["simultaneous", "three-stage"])
@pytest.mark.parametrize("K,L", [(2, 3), (3, 3)])
@pytest.mark.parametrize("m", [2, 17])
@pytest.mark.parametrize("extra_d", [0, 5])
def test_particles_equal_reduced_gd_map(K, L, m, extra_d, schedule):
    cfg = _cfg(K, L, m, schedule)
    ap, ar, err = _compare(cfg, 2 * K + extra_d)
    assert ap["step"][-1] == 240
    S, A, B, w = kernels.unpack(ar["y"])
    # the comparison is not vacuous: neurons and scores moved by O(1) of their scale
    assert np.max(np.abs(w[-1])) > 0.1
    assert np.max(np.abs(S[-1] - S[0])) > 0.05 * np.max(np.abs(S[0]))


@pytest.mark.parametrize("schedule", ["simultaneous", "three-stage"])
@pytest.mark.parametrize("K", [2, 3])
def test_particles_equal_reduced_gaussian_neurons(K, schedule):
    cfg = _cfg(K, 3, 17, schedule, neuron_init="gaussian:0.3", stage3="both")
    _compare(cfg, 2 * K + 3)


@pytest.mark.parametrize("r0", [0.0, 0.5])
def test_particles_equal_reduced_relu_prime_at_zero(r0):
    # zero neurons: every pre-activation starts exactly at the kink, in both paths
    _compare(_cfg(2, 3, 5, "three-stage", relu_prime_at_zero=r0), 7)


def test_particles_equal_reduced_with_criteria():
    cfg = _cfg(2, 3, 17, "three-stage", stage_steps="150,150,150",
               stage_criteria="consistent_margin>=0.2,none,loss<=0.3")
    ap, ar, _ = _compare(cfg, 9)
    tp_ends = particles.run_particles(cfg, d=9).stage_ends
    assert tp_ends[0]["reason"] == "criterion" and tp_ends[0]["step"] < 150
    for crit in ("loss<=0.5", "grad_w<=0.05"):
        tp, _, _ = _compare(_cfg(2, 3, 17, "simultaneous", steps=400, criterion=crit), 6)
        assert tp["step"][-1] < 400


def test_particles_divergence_matches_reduced():
    cfg = _cfg(2, 3, 5, "simultaneous", eta=1e3, steps=50, seed=1)
    tp = particles.run_particles(cfg)
    tr = run.run(cfg)
    assert tp.status == tr.status == "diverged"
    assert tp.step == tr.step and tp.message == tr.message
    err = _rel_errors(tp.arrays()["y"], tr.arrays()["y"])
    assert max(err.values()) < RTOL


# ------------------------------------------------------------ the two ways of stepping (engine.finite)


def _both_ways(monkeypatch, cfg, d):
    """run_particles with the wide weights stepped in place and with two buffer sets."""
    from meanfield.engine.finite import ParticleSystem

    out = {}
    for way, ratio in (("in place", 0), ("buffered", 10 ** 9)):
        monkeypatch.setattr(ParticleSystem, "IN_PLACE_D_OVER_P", ratio)
        out[way] = particles.run_particles(cfg, d=d)
    return out


@pytest.mark.parametrize("schedule", ["simultaneous", "three-stage"])
def test_in_place_and_buffered_steps_equal_reduced(monkeypatch, schedule):
    """d = 4P + 1 (the in-place way by default): both ways equal the reduced run and each other."""
    cfg = _cfg(2, 3, 17, schedule, neuron_init="gaussian:0.3")
    t = _both_ways(monkeypatch, cfg, 17)
    monkeypatch.undo()
    _compare(cfg, 17)
    red = run.run(cfg).arrays()["y"]
    for way, tp in t.items():
        assert tp.status == "complete" and tp.step[-1] == 240, way
        assert max(_rel_errors(tp.arrays()["y"], red).values()) < RTOL, way
    a, b = (t[w].arrays()["y"] for w in ("in place", "buffered"))
    assert np.max(np.abs(a - b)) <= 1e-12 * np.max(np.abs(b))


def test_in_place_refused_step_writes_nothing(monkeypatch):
    """max_abs exceeded / divergence: the in-place step is refused on the predicted
    projection, the held weights are bitwise those of the last accepted step, and the
    run ends where the buffered way (which decides on the projection of the result) ends."""
    from meanfield.engine.finite import ParticleSystem

    for kw in (dict(eta=1e3, steps=50, seed=1), dict(eta=0.5, omega=1.7, steps=200, max_abs=3.0)):
        cfg = _cfg(2, 3, 5, "simultaneous", **kw)
        t = _both_ways(monkeypatch, cfg, 9)
        assert t["in place"].status == t["buffered"].status == run.run(cfg).status != "complete", kw
        assert t["in place"].step == t["buffered"].step and t["in place"].message == t["buffered"].message
        monkeypatch.setattr(ParticleSystem, "IN_PLACE_D_OVER_P", 0)
        system = particles.make_particles(cfg, 9)
        y = system.projection()
        n = t["in place"].step[-1]
        assert system.gd_advance(y, n + 5, cfg.eta, (True, True), None)[0] == n
        held = [{k: v.copy() for k, v in p.items()} for p in system.psys._params]
        proj = system.psys.projection()
        assert system.gd_advance(y, 1, cfg.eta, (True, True), None)[0] == 0
        for p, q in zip(system.psys._params, held):
            for k in p:
                np.testing.assert_array_equal(p[k], q[k])
        np.testing.assert_array_equal(system.psys.projection(), proj)


def test_in_place_never_writes_the_callers_arrays(monkeypatch):
    from meanfield.engine.finite import ParticleSystem

    monkeypatch.setattr(ParticleSystem, "IN_PLACE_D_OVER_P", 0)
    cfg = _cfg(2, 3, 5, "simultaneous")
    ref = particles.make_particles(cfg, 9)
    given = ref.psys.params                       # read: now the caller's
    copies = [{k: v.copy() for k, v in p.items()} for p in given]
    y = ref.projection()
    assert ref.gd_advance(y, 5, cfg.eta, (True, True), None) == (5, 0)
    for p, q in zip(given, copies):
        for k in p:
            np.testing.assert_array_equal(p[k], q[k])
    assert not np.array_equal(ref.psys.params[0]["WK"], given[0]["WK"])


# ------------------------------------------------------------ init and weights


@pytest.mark.parametrize("K,m,extra_d,neurons", [(2, 2, 0, "zero"), (3, 17, 5, "gaussian:0.2"),
                                                  (2, 40, 3, "const:0.1,0.1,0,0")])
def test_initial_projection_is_initial_state(K, m, extra_d, neurons):
    cfg = _cfg(K, 3, m, "simultaneous", neuron_init=neurons)
    d = 2 * K + extra_d
    E, WK, WQ, w = particles.initial_particles(cfg, d)
    assert WK.shape == WQ.shape == (2, m, d) and w.shape == (2, d)
    np.testing.assert_allclose(E.T @ E, np.eye(2 * K), atol=1e-14)
    y = particles.projected_state(E, WK, WQ, w)
    y0 = init.initial_state(cfg)
    assert np.max(np.abs(y - y0)) <= 1e-14 * np.max(np.abs(y0))
    # the same through the system run_particles uses (and at t = 0 of its trajectory; the engine's
    # projection sums in another order: to rounding)
    np.testing.assert_allclose(particles.make_particles(cfg, d).projection(), y, rtol=0, atol=1e-15)
    # neurons have no orthogonal part; the attention weights do (when d > 2K)
    Pperp = np.eye(d) - E @ E.T
    assert np.max(np.abs(w @ Pperp)) < 1e-15
    assert (np.max(np.abs(WK @ Pperp)) > 1e-3) == (extra_d > 0)
    # the neuron init does not touch the attention weights
    E2, WK2, WQ2, _ = particles.initial_particles(make_config(cfg.to_dict() | {"neuron_init": "zero"}), d)
    np.testing.assert_array_equal(WK2, WK)
    np.testing.assert_array_equal(E2, E)


def test_initial_weights_law_and_embed_seed():
    cfg = _cfg(2, 3, 3000, "simultaneous", omega=0.7)
    E, WK, WQ, _ = particles.initial_particles(cfg, 12)
    for W in (WK[0], WQ[1]):
        assert abs(np.var(W) * 3000 / 0.49 - 1) < 0.03       # iid N(0, omega^2/m) entries
        assert abs(np.mean(W)) < 3 * 0.7 / 3000 / np.sqrt(12)
    Eb = particles.initial_particles(cfg, 12, embed_seed=5)[0]
    np.testing.assert_array_equal(Eb, embedding(np.eye(4), 12, 5))
    assert not np.allclose(Eb, E)


def test_orthogonal_part_stays_frozen():
    """GD moves W only inside span(E); the criterion values are the network's own
    (independent of kernels)."""
    cfg = _cfg(3, 3, 4, "three-stage", stage_steps="30,30,30", record_every=10, stage3="both")
    d = 11
    system = particles.make_particles(cfg, d)
    Pperp = np.eye(d) - system.E @ system.E.T
    WK0, WQ0, _ = system.weights
    traj = integrate.GDMap(cfg.eta).solve(system, system.projection(), run.stages(cfg), run.save_at(cfg))
    assert traj.status == "complete" and traj.step[-1] == 90
    WK, WQ, _ = system.weights
    assert np.max(np.abs(WK @ Pperp - WK0 @ Pperp)) < 1e-14
    assert np.max(np.abs(WQ @ Pperp - WQ0 @ Pperp)) < 1e-14
    assert np.max(np.abs((WK - WK0) @ system.E)) > 1e-3     # and the weights did move inside
    o = obs_mod.observables(sample_set(3, 3), traj.y[-1])
    assert system.criterion_value(traj.y[-1], "loss") == pytest.approx(o["loss"][0], rel=1e-12)
    assert system.criterion_value(traj.y[-1], "min_margin") == pytest.approx(np.min(o["margin"][0]), rel=1e-10)


# ------------------------------------------------------------ records and files


def test_records_come_from_the_shared_observable_function(tmp_path, monkeypatch):
    cfg = _cfg(2, 3, 3, "simultaneous", steps=20, record_every=5)
    real = obs_mod.observables
    calls = []

    def marked(samples, Y):
        calls.append(np.asarray(Y).shape)
        out = real(samples, Y)
        out["loss"] = out["loss"] + 1000.0
        return out

    monkeypatch.setattr(obs_mod, "observables", marked)
    monkeypatch.setattr(run, "observables", marked)
    _, pf = particles.particles_to_file(cfg, tmp_path / "p.h5", progress=False)
    rf = run.save(tmp_path / "r.h5", cfg, run.run(cfg))
    assert len(calls) == 2
    P, R = read_run(pf), read_run(rf)
    assert np.all(P["loss"] > 1000) and np.all(R["loss"] > 1000)
    np.testing.assert_allclose(P["loss"], R["loss"], rtol=1e-12)


def test_particles_to_file(tmp_path):
    cfg = _cfg(2, 3, 17, "three-stage", stage_steps="40,40,40", record_every=9)
    traj, path = particles.particles_to_file(cfg, tmp_path / "p.h5", d=10, progress=False)
    rpath = run.save(tmp_path / "r.h5", cfg, run.run(cfg))
    P, R = read_run(path), read_run(rpath)
    assert P.attrs["system"] == "mixture" and P.attrs["status"] == "complete"
    assert P.attrs["particles"] == 1 and P.attrs["d"] == 10 and P.attrs["width"] == 17 and P.attrs["seed"] == 3
    assert P.attrs["embed_seed"] == -1
    assert P.attrs["stage_ends"] == R.attrs["stage_ends"]
    assert set(P) == set(R)
    for key in ("t", "step", "stage"):
        np.testing.assert_array_equal(P[key], R[key])
    for key in ("loss", "margin", "u", "S", "A", "B", "w"):
        assert np.max(np.abs(P[key] - R[key])) <= RTOL * np.max(np.abs(R[key])), key
    # the file holds exactly what the shared observable function makes of the trajectory
    o = obs_mod.observables(sample_set(2, 3), traj.arrays()["y"])
    np.testing.assert_array_equal(P["loss"], o["loss"])
    np.testing.assert_array_equal(P["S"], o["S"])


def test_bad_configs_are_one_line_errors():
    with pytest.raises(ConfigError, match="width"):
        particles.run_particles(make_config({}, steps=3))
    with pytest.raises(ConfigError, match="method"):
        particles.run_particles(make_config({}, width=3, method="flow", steps=3))
    with pytest.raises(ConfigError, match="d: "):
        particles.run_particles(make_config({}, width=3, steps=3), d=3)
    system = particles.make_particles(make_config({}, width=3, steps=3))
    with pytest.raises(NotImplementedError):
        system.rhs(system.projection(), (True, True))
