"""Learning rates per group, per stage, and schedules (``meanfield.engine.rates``).

The engine against an independent computation: the per-group GD map against explicit
weights stepped with per-group rates (one step, written out here in numpy), a schedule
run against the same run stepped by hand with step sizes from the formulas written in
this file, the explicit network through the CLI's ``particles`` path; the description
keys, flags, run file and one-line refusals (exit 2, nothing written).
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from meanfield.core.config import ConfigError
from meanfield.engine import rates
from meanfield.engine.description import description_from_dict

TOY = """
name = "toy"
[dictionary]
features = ["a", "b", "c"]
gram = [[1.0, 0.2, 0.0], [0.2, 1.0, 0.0], [0.0, 0.0, 1.0]]
[data]
rows = [ { tokens = ["a", "-b", "c"], target = 1 }, { tokens = ["c", "b"], target = -1, weight = 2 },
         { tokens = ["-a", "c"], target = 1 } ]
[[heads]]
name = "h"
value = "matrix"
[parameters]
eta = 0.1
steps = 60
width = 4
omega = 0.5
omega_v = 0.5
record_every = 1
group_eta = "keys=0.05,queries=0.2,readout=0.3"
eta_schedule = "warmup:10+cosine:0.1"
"""


def _toy(**params):
    import tomllib

    raw = tomllib.loads(TOY)
    raw["parameters"].update(params)
    raw["parameters"] = {k: v for k, v in raw["parameters"].items() if v is not None}
    return raw


# ------------------------------------------------------------------ the map with a rate per group, one step


def test_per_group_map_is_the_explicit_step():
    """U' = U (I - Ghat Gamma_r H), Q' = (I - H Gamma_r Ghat) Q (I - Ghat Gamma_r H) against explicit
    weights M_a' = M_a - eta_a dL/dM_a for the linearised loss tr(G^T Q(M)) (dL/dM = U Ghat E_r^T),
    m in {1, 3, 50}, d = 6 > P = 3, random SPD Gamma, three wide objects and a read-out vector at four
    different rates (one 0: frozen); and what the engine's kernel computes from Gamma_r H / eta."""
    from meanfield.engine import kernels

    rng = np.random.default_rng(0)
    P, d = 3, 6
    A = rng.normal(size=(P, P))
    Gamma = A @ A.T + P * np.eye(P)
    E = np.linalg.qr(rng.normal(size=(d, P)))[0] @ np.linalg.cholesky(Gamma).T
    widths = [P, P, P, 1]
    N = sum(widths)
    etas = [0.07, 0.02, 0.0, 0.11]
    for m in (1, 3, 50):
        Ms = [rng.normal(size=(m, d)) for _ in range(3)] + [rng.normal(size=(m, 1))]
        Er = [E, E, E, np.ones((1, 1))]
        U = np.concatenate([M @ e for M, e in zip(Ms, Er)], axis=1)
        G = rng.normal(size=(N, N))
        Gh = G + G.T
        # explicit: dL/dM_a = (U Ghat)[:, block a] E_a^T
        cols = np.cumsum([0] + widths)
        new = [M - eta * (U @ Gh)[:, cols[a]:cols[a + 1]] @ Er[a].T for a, (M, eta) in enumerate(zip(Ms, etas))]
        U1 = np.concatenate([M @ e for M, e in zip(new, Er)], axis=1)
        Gr = np.zeros((N, N))
        H = np.zeros((N, N))
        for a in range(4):
            sl = slice(cols[a], cols[a + 1])
            Gr[sl, sl] = Gamma if widths[a] == P else 1.0
            H[sl, sl] = etas[a] * np.eye(widths[a])
        I = np.eye(N)
        assert np.allclose(U @ (I - Gh @ Gr @ H), U1, rtol=1e-13, atol=1e-13)
        Q = U.T @ U
        Q1 = (I - H @ Gr @ Gh) @ Q @ (I - Gh @ Gr @ H)
        assert np.abs(Q1 - U1.T @ U1).max() <= 1e-12 * np.abs(Q1).max()
        # the kernel's update with Gr replaced by Gr H / eta and step eta
        eta = 0.05
        hi = np.full((1, 19), -1, np.int64)  # the layout's head table (reduce.H_*)
        hi[0, 7], hi[0, 8] = N, 0
        from meanfield.engine.tables import F_RIDGE

        hf = np.ones((1, F_RIDGE + 1))  # every column the kernel reads (it reads hf[k, F_RIDGE]: no bounds check)
        hf[0, F_RIDGE] = 0.0  # no ridge
        grp = np.array([[0, 0, 0, 0, 0, 0, 1, 1, 1, 2]], np.int64)
        out = np.empty(N * N)
        kernels.eng_update(Q.ravel().copy(), out, hi, hf, (Gr @ H / eta)[None], grp, Gamma, G[None], np.zeros(N * N),
                           eta, 7, True, np.empty((N, N)), np.empty((N, N)), np.empty((P, P)))
        assert np.abs(out.reshape(N, N) - Q1).max() <= 1e-12 * np.abs(Q1).max()


# ------------------------------------------------------------------ schedules


def _hand(spec, k, H):
    """The schedules of docs/engine.md, written out."""
    if spec == "cosine:0.1":
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * k / H))
    if spec == "step:7:0.5":
        return 0.5 ** (k // 7)
    if spec == "inverse:20":
        return 1 / (1 + k / 20)
    if spec == "warmup:10+cosine:0.1":
        return (k + 1) / 10 if k < 10 else _hand("cosine:0.1", k - 10, H - 10)
    if spec == "warmup:5":
        return (k + 1) / 5 if k < 5 else 1.0
    raise AssertionError(spec)


@pytest.mark.parametrize("spec", ["cosine:0.1", "step:7:0.5", "inverse:20", "warmup:10+cosine:0.1", "warmup:5"])
def test_schedule_values(spec):
    for k in range(60):
        assert rates.schedule_factor(rates.parse_schedule("s", spec), k, 60) == pytest.approx(_hand(spec, k, 60),
                                                                                             rel=1e-15)
    assert rates.parse_schedule("s", "1/t:20") == "inverse:20"
    assert rates.parse_schedule("s", "constant") is None


@pytest.mark.parametrize("spec", ["cosine:0.1", "step:7:0.5", "inverse:20", "warmup:10+cosine:0.1"])
def test_schedule_run_equals_the_run_stepped_by_hand(spec):
    """The engine's run with a schedule (the GD harness, one step at a time) against the same
    description's system stepped by hand with eta_k = eta s(k) from the formulas above; t is the
    sum of the step sizes. Bitwise: the same kernel with the same step sizes."""
    from meanfield.engine import system as esys
    from meanfield.engine.reduce import initial_state

    d = description_from_dict(_toy(eta_schedule=spec))
    _, traj = esys.integrate_description(d)
    arr = traj.arrays()
    sysm = esys.system_of(d)
    st = esys.stages(d)[0]
    y = initial_state(d, sysm.pk.lay)
    Y, t, T = [y.copy()], 0.0, [0.0]
    for k in range(60):
        eta_k = 0.1 * _hand(spec, k, 60)
        done, code = sysm.gd_advance(y, 1, eta_k, st.mode, None)
        assert (done, code) == (1, 0)
        t += eta_k
        Y.append(y.copy())
        T.append(t)
    assert np.abs(arr["y"] - np.array(Y)).max() <= 1e-14 * np.abs(arr["y"]).max()
    assert np.allclose(arr["t"], T, rtol=1e-14)
    # and the schedule matters: the constant-rate run differs
    _, tc = esys.integrate_description(description_from_dict(_toy(eta_schedule=None)))
    assert np.abs(tc.arrays()["y"][-1] - arr["y"][-1]).max() > 1e-4


def test_stage_schedule_counts_from_the_stage_start_and_particles_agree():
    """A stage's own schedule restarts at its first step (a criterion-free two-stage run by hand);
    the explicit network (``particles``, m = 4) follows the same rates to 1e-10."""
    import meanfield.engine as me
    from meanfield.engine import system as esys
    from meanfield.engine.reduce import initial_state

    raw = _toy(eta_schedule=None, steps=None)
    raw["training"] = {"stages": [{"name": "kq", "train": ["attention"], "steps": 20, "eta": 0.15},
                                  {"name": "all", "steps": 30, "eta": {"default": 0.08, "values": 0.02},
                                   "eta_schedule": "step:7:0.5"}]}
    d = description_from_dict(raw)
    assert [s.eta for s in d.training.stages] == [0.15, 0.08]
    assert dict(d.training.stages[1].group_eta) == {"values": 0.02}
    _, traj = esys.integrate_description(d)
    sysm = esys.system_of(d)
    st = esys.stages(d)
    y = initial_state(d, sysm.pk.lay)
    sysm.gd_advance(y, 20, 0.15, st[0].mode, None)
    for k in range(30):
        sysm.gd_advance(y, 1, 0.08 * 0.5 ** (k // 7), st[1].mode, None)
    assert np.abs(traj.arrays()["y"][-1] - y).max() <= 1e-14 * np.abs(y).max()
    assert traj.arrays()["t"][-1] == pytest.approx(20 * 0.15 + sum(0.08 * 0.5 ** (k // 7) for k in range(30)))
    pr = me.particles(d)
    eng = me.run(d)
    assert np.abs(pr.trajectory.arrays()["y"] - eng.trajectory.arrays()["y"]).max() <= \
        1e-10 * np.abs(eng.trajectory.arrays()["y"]).max()


# ------------------------------------------------------------------ description keys and refusals


@pytest.mark.parametrize("patch, field", [
    ({"group_eta": "keys=-1"}, "group_eta.keys: a learning rate must be a finite number >= 0"),
    ({"group_eta": "colour=1"}, "group_eta: unknown group 'colour'"),
    ({"group_eta": "keys"}, "group_eta: must be GROUP=RATE"),
    ({"group_eta": "attention=0.1,keys=0.2"}, "group_eta: two rates for keys"),
    ({"eta_schedule": "cosine:2"}, "eta_schedule: cosine takes one optional MIN in [0, 1]"),
    ({"eta_schedule": "exp"}, "eta_schedule: 'exp' is not a schedule"),
    ({"eta_schedule": "cosine+warmup:3"}, "eta_schedule: only a warmup may come before +"),
    ({"eta_schedule": "step:0:0.5"}, "eta_schedule: step needs step:EVERY:GAMMA"),
    ({"eta_schedule": "__import__('os')"}, "eta_schedule: "),
    ({"method": "flow", "t_end": 1.0}, "eta_schedule: only for method gd"),
])
def test_bad_rates_are_one_line(patch, field):
    with pytest.raises(ConfigError) as e:
        description_from_dict(_toy(**patch))
    assert field in str(e.value) and "\n" not in str(e.value)


def test_stage_eta_and_merged_heads_refused():
    raw = _toy(eta_schedule=None)
    raw["training"] = {"stages": [{"steps": 5, "eta": {"keys": "x"}}]}
    with pytest.raises(ConfigError, match=r"training.stages\[0\].eta.keys: a learning rate must be"):
        description_from_dict(raw)
    raw["training"] = {"stages": [{"steps": 5, "eta": -0.1}]}
    with pytest.raises(ConfigError, match=r"training.stages\[0\].eta: must be"):
        description_from_dict(raw)
    raw["heads"][0]["kq"] = "merged"
    raw["training"] = {"stages": [{"steps": 5}]}
    with pytest.raises(ConfigError, match="group_eta: keys rate 0.05 != queries rate 0.2, but a merged head"):
        description_from_dict(raw)
    raw["parameters"]["group_eta"] = "attention=0.05"
    description_from_dict(raw)
    flow = _toy(eta_schedule=None, method="flow", steps=None, t_end=None)
    flow["training"] = {"stages": [{"time": 1.0, "eta": 0.3}]}
    with pytest.raises(ConfigError, match=r"training.stages\[0\].eta: a stage step size is for method gd"):
        description_from_dict(flow)


def test_batched_refuses_rates():
    from meanfield.engine.batched import run_batch

    with pytest.raises(ConfigError, match="training: group rates, per-stage eta and eta schedules are not batched"):
        run_batch(description_from_dict(_toy()))


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "meanfield", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def test_cli_flags_run_file_and_refusals(tmp_path):
    """``--group-eta`` and ``--eta-schedule`` reach the run (same file as the Python run with those
    parameters), the run file records them; a bad value is one line, exit 2, nothing written."""
    import json

    import h5py

    import meanfield.engine as me
    from meanfield.core.io import read_run

    p = tmp_path / "toy.toml"
    p.write_text(TOY)
    out = tmp_path / "r.h5"
    r = _cli("model", "run", p, "--group-eta", "keys=0.02,values=0.3", "--eta-schedule", "inverse:20", "--quiet",
             "--out", out, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    ref = me.run(me.load(p, group_eta="keys=0.02,values=0.3", eta_schedule="inverse:20"))
    with h5py.File(out, "r") as f:
        assert np.array_equal(f["loss"][:], ref.loss)
        assert np.allclose(f["t"][:], ref.t)
    cfg = read_run(out).config["parameters"]
    assert cfg["group_eta"] == "keys=0.02,values=0.3" and cfg["eta_schedule"] == "inverse:20"
    with h5py.File(out, "r") as f:
        sr = f.attrs["stage_rates"]
    sr = json.loads(sr) if isinstance(sr, (str, bytes)) else sr
    assert sr[0]["eta"]["keys"] == 0.02 and sr[0]["eta"]["queries"] == 0.1 and sr[0]["eta_schedule"] == "inverse:20"
    for args, field in [(["--group-eta", "keys=abc"], "group_eta.keys: a learning rate must be"),
                        (["--eta-schedule", "cosine:x"], "eta_schedule: 'cosine:x' is not a schedule")]:
        bad = tmp_path / "bad.h5"
        r = _cli("model", "run", p, *args, "--out", bad, cwd=tmp_path)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and field in lines[0] and "Traceback" not in r.stderr, r.stderr
        assert not bad.exists()
