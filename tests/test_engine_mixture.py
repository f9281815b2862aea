"""The mixture system as an engine description.

* against the golden runs (``tests/golden/``: the mixture fast and dense paths
  as they were at commit 3c452f7, before the engine; regenerate with
  ``tests/golden/make_golden.py``): every recorded quantity to 1e-12 (times
  max(1, |value|)) over 1000 GD steps, stage times and status equal;
* against today's fast path (``meanfield.models.mixture.run.run``), kept as the
  optimised special case: GD and flow states equal to 1e-12;
* flow: the engine's adaptive Dormand-Prince against scipy's DOP853 on the
  same right-hand side, 1e-7;
* compile once: a second process runs a cached description in < 1 s.

Tolerance principle: both sides compute the same exact map in a different
floating-point order; differences start at ~1e-16 and the runs here grow them
to ~3e-14 at most (measured), so 1e-12 leaves a factor ~30 and still catches
any real discrepancy (a wrong term changes values at 1e-3 or more).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from meanfield.models.mixture.family import mixture_description
from meanfield.engine.runs import run, save
from meanfield.core.io import read_run
from meanfield.models.mixture.config import MixtureConfig, make_config

GOLDEN = Path(__file__).parent / "golden"
NAMES = sorted(p.stem[len("mixture_"):] for p in GOLDEN.glob("mixture_*.npz"))
ROOT = Path(__file__).resolve().parents[1]


def _close(a, b, tol=1e-12):
    a, b = np.asarray(a, float), np.asarray(b, float)
    assert a.shape == b.shape
    scale = max(1.0, float(np.nanmax(np.abs(b))) if b.size else 1.0)
    err = float(np.nanmax(np.abs(a - b))) if a.size else 0.0
    assert np.array_equal(np.isnan(a), np.isnan(b))
    assert err <= tol * scale, f"max error {err:.3g} > {tol:g} x {scale:.3g}"


def test_golden_set_is_complete():
    # K in {2,3,4} x L in {3,4} x both schedules x (infinite, finite width) + the extensions
    assert len([n for n in NAMES if n.startswith("K")]) == 24
    for ext in ("gram", "gram_w5", "train_noise", "train_noise_w6", "neurons3", "label_noise", "label_noise_three"):
        assert ext in NAMES


@pytest.mark.parametrize("name", NAMES)
def test_engine_equals_golden(name, tmp_path):
    g = np.load(GOLDEN / f"mixture_{name}.npz")
    flags = json.loads(str(g["flags"]))
    desc = mixture_description(make_config({}, **flags))
    r = run(desc)
    f = read_run(save(tmp_path / "e.h5", desc, r))
    assert f.attrs["status"] == str(g["status"]) == "complete"
    np.testing.assert_array_equal(f["step"], g["step"])
    np.testing.assert_array_equal(f["stage"], g["stage"])
    _close(f["t"], g["t"])
    _close(f["loss"], g["loss"])
    for k in ("S", "A", "B", "w"):
        _close(f[k][g["rec_state"]], g[k])
    for k in ("margin", "u"):
        _close(f[k][g["rec_margin"]], g[k])
    for k in ("T1", "T2", "T_loss"):
        # the golden times are the first record where the criterion holds; the run's are interpolated between
        # that record and the one before it, rounded up to the step: in (previous record, golden], on the step grid
        a, b = float(f.attrs[k]), float(g[k])
        if np.isnan(b):
            assert np.isnan(a), (k, a)
            continue
        j = int(np.flatnonzero(np.asarray(f["t"]) == b)[0])
        lo = float(f["t"][j - 1]) if j > 0 else b
        assert (lo < a <= b) or a == b, (k, a, lo, b)
        if f.attrs["method"] == "gd" and f.attrs["schedule"] == "simultaneous":
            assert abs(a / f.attrs["eta"] - round(a / f.attrs["eta"])) < 1e-9, (k, a)


def _fast_state_blocks(cfg, Y):
    from meanfield.models.mixture.kernels import unpack

    S, A, B, w = unpack(np.asarray(Y))
    return {"S": S, "A": A, "B": B, "w": w}


@pytest.mark.parametrize("flags", [
    {"K": 2, "L": 3, "steps": 300, "record_every": 7, "width": 3, "seed": 2, "neuron_init": "gaussian:0.2"},
    {"K": 3, "L": 3, "schedule": "three-stage", "stage_steps": "50,80,40", "stage3": "both",
     "stage_criteria": "consistent_margin>=0.05,none,loss<=0.3", "record_every": 5},
    {"K": 2, "L": 3, "method": "flow", "t_end": 30.0, "record_dt": 3.0, "rtol": 1e-11, "atol": 1e-13,
     "neuron_init": "const:0.5,0.5,0.5,0.5,-0.5,-0.5,-0.5,-0.5", "width": 4, "seed": 1},  # no ReLU kink on the way (no forced steps)
    {"K": 2, "L": 3, "method": "rk4", "t_end": 20.0, "dt": 0.25, "record_every": 8, "relu_prime_at_zero": 0.5},
    {"K": 2, "L": 3, "width": 16, "seed": 3, "softmax_scale": "1/sqrt(m)", "steps": 400, "record_every": 20},
])
def test_engine_equals_fast_path(flags):
    from meanfield.models.mixture.run import run as fast_run

    if "softmax_scale" in flags and "softmax_scale" not in {f.name for f in dataclasses.fields(MixtureConfig)}:
        pytest.skip("this mixture config has no softmax_scale")
    cfg = make_config({}, **flags)
    ft = fast_run(cfg)
    r = run(mixture_description(cfg))
    fa = ft.arrays()
    # adaptive flow: the step-size decisions see round-off of a different summation order,
    # so the solver steps differ and the states agree to the error control (rtol 1e-10), not to round-off
    tol = 1e-7 if cfg.method == "flow" else 1e-12
    if cfg.method != "flow":
        np.testing.assert_array_equal(r.step, fa["step"])
    else:
        assert not ft.warnings and not r.trajectory.warnings  # smooth: error control held on every step
    _close(r.t, fa["t"])
    assert r.stage_ends == ft.stage_ends or all(
        a["stage"] == b["stage"] and a["reason"] == b["reason"] and abs(a["t"] - b["t"]) <= 1e-9 * max(1, abs(b["t"]))
        for a, b in zip(r.stage_ends, ft.stage_ends))
    fb = _fast_state_blocks(cfg, fa["y"])
    c = r.desc.model.heads[0].scale  # 1/sqrt(m): the fast path's state is the scaled (c S, c A, c B)
    for k in ("S", "A", "B"):
        _close(c * getattr(r, k).values, fb[k], tol)
    _close(r.w.values, fb["w"], tol)


def test_flow_rhs_against_scipy_dop853():
    from scipy.integrate import solve_ivp

    from meanfield.engine.reduce import initial_state
    from meanfield.engine.system import integrate_description, system_of

    cfg = make_config({}, K=2, L=3, method="flow", t_end=30.0, rtol=1e-11, atol=1e-13, record_dt=3.0,
                      neuron_init="const:0.5,0.5,0.5,0.5,-0.5,-0.5,-0.5,-0.5", width=4, seed=1)
    desc = mixture_description(cfg)
    system = system_of(desc)
    _, traj = integrate_description(desc, system=system)
    assert not traj.warnings  # a smooth stretch: error control held on every step
    arr = traj.arrays()
    y0 = initial_state(desc)
    sol = solve_ivp(lambda t, y: system.rhs(y, 3), (0.0, 30.0), y0, method="DOP853", rtol=1e-12, atol=1e-14,
                    t_eval=arr["t"])
    assert sol.success
    err = np.max(np.abs(sol.y.T - arr["y"])) / max(1.0, np.max(np.abs(arr["y"])))
    assert err <= 1e-7, err


def test_cached_description_second_process_compiles_nothing():
    """Compile once: after a first process compiled (and cached) the kernels, a
    second process loads and runs the description without compiling anything:
    every numba kernel of the package it dispatched came from numba's cache
    (no cache miss, at least one hit). Counted from numba's own per-dispatcher
    cache statistics, not timed (a wall-clock bound fails on a loaded machine;
    the speed itself is measured in benchmarks/bench_first_use.py)."""
    code = (
        "import sys\n"
        "import meanfield.engine as me\n"
        f"d = me.load({str(ROOT / 'meanfield/models/mixture.toml')!r}, K=2, L=3, steps=100, record_every=10)\n"
        "r = me.run(d)\n"
        "from numba.core.dispatcher import Dispatcher\n"
        "hits = misses = 0\n"
        "for name, mod in list(sys.modules.items()):\n"
        "    if not name.startswith('meanfield'):\n"
        "        continue\n"
        "    for obj in list(vars(mod).values()):\n"
        "        if isinstance(obj, Dispatcher) and obj._cache is not None and obj.signatures:\n"
        "            st = obj.stats\n"
        "            hits += sum(st.cache_hits.values())\n"
        "            misses += sum(st.cache_misses.values())\n"
        "print(hits, misses, r.status)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, cwd=tempfile.gettempdir())
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         cwd=tempfile.gettempdir())
    hits, misses, status = out.stdout.split()
    assert status == "complete"
    assert int(hits) > 0 and int(misses) == 0, f"second process: {hits} kernels from the cache, {misses} compiled"


def test_mixture_family_maps_every_config_field():
    """A new MixtureConfig field that the family does not map would make the
    engine silently differ from ``meanfield mixture run``: every field must be
    one the family reads (meanfield/models/mixture/family.py)."""
    known = {"K", "L", "p", "omega", "eta", "method", "steps", "t_end", "dt", "rtol", "atol", "h_min", "max_abs",
             "schedule", "stage_steps", "stage_times", "stage_criteria", "stage3", "criterion", "width", "seed",
             "neuron_init", "relu_prime_at_zero", "record_every", "record_log", "record_dt", "label_prob",
             "label_noise", "feature_gram", "noise_sigma", "n_train", "ambient_d", "data_seed", "n_neurons",
             "softmax_scale"}
    fields = {f.name for f in dataclasses.fields(MixtureConfig)}
    assert fields <= known, f"unmapped MixtureConfig fields: {sorted(fields - known)}"
