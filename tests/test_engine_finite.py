"""``meanfield model particles`` / ``width-sweep`` (meanfield/engine/finite.py).

The particle system is the explicit network of ``meanfield.engine.oracle``
driven by the shared GD harness; its projected states must equal the engine's
reduced run at the same finite width (closure, to rounding), its run file must
be the engine's schema (the mixture's names for the mixture description), and
the width sweep must reproduce today's ``meanfield mixture width-sweep``
numbers (whose finite-width runs are the reduced dynamics, an independent code
path) for the mixture description. Failure paths: one line, exit 2, nothing written.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import meanfield.engine as me

ROOT = Path(__file__).resolve().parents[1]
MIXTURE = str(ROOT / "meanfield" / "models" / "mixture.toml")
TIE = "const:0.01,0.01,0,0"


def _cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "meanfield", "model", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def test_particles_equal_the_engine_at_the_same_width(tmp_path):
    desc = me.load(MIXTURE, width=6, seed=2, steps=120, record_every=10, neuron_init=TIE, schedule="three-stage",
                   stage_steps=[40, 40, 40])
    r = me.particles(desc)
    red = me.run(desc)
    assert r.status == "complete" and len(r.y) == len(red.y) == 13
    assert np.abs(r.y - red.y).max() <= 1e-12 * max(1.0, np.abs(red.y).max())
    assert r.stage_ends == red.stage_ends
    # the run file: the mixture's datasets, marked as particles
    from meanfield.core.io import read_run

    _, path = me.particles_to_file(desc, tmp_path / "p.h5", progress=False)
    rr = read_run(path)
    assert rr.attrs["particles"] == 1 and rr.attrs["d"] == desc.P + 2
    for name in ("S", "A", "B", "w", "loss", "margin"):
        assert name in rr
    assert np.allclose(rr["S"][-1], red.S.values[-1], rtol=0, atol=1e-12)


def test_particles_of_a_general_description():
    sys.path.insert(0, str(Path(__file__).parent))
    from test_engine_oracle import random_raw

    from meanfield.engine.description import description_from_dict

    desc = description_from_dict(random_raw(4, m=3, steps=60))
    r = me.particles(desc, d=desc.P + 3)
    red = me.run(desc)
    assert np.abs(r.y - red.y).max() <= 1e-10 * max(1.0, np.abs(red.y).max())
    assert r.particles.E.shape == (desc.P + 3, desc.P)


@pytest.mark.parametrize("args, field", [
    ((), "width"),
    (("--width", "4", "--d", "3"), "d"),
    (("--width", "4", "--eta", "-1"), "eta"),
    (("--width", "0"), "width"),
])
def test_particles_cli_refuses_bad_input(tmp_path, args, field):
    out = tmp_path / "p.h5"
    p = _cli("particles", MIXTURE, "--steps", "5", *args, "--out", str(out), timeout=120)
    assert p.returncode == 2, p.stderr
    lines = [ln for ln in p.stderr.strip().splitlines() if ln]
    assert len(lines) == 1 and field in lines[0] and "Traceback" not in p.stderr
    assert not out.exists()


def test_particles_cli_writes_a_run(tmp_path):
    out = tmp_path / "p.h5"
    p = _cli("particles", MIXTURE, "--width", "5", "--steps", "30", "--record-every", "10", "--quiet", "--out",
             str(out))
    assert p.returncode == 0, p.stderr
    assert out.exists() and "complete" in p.stdout


def test_width_sweep_reproduces_todays_mixture_width_sweep(tmp_path):
    """Same widths, seeds and init: the explicit networks (particles) here, the reduced
    finite-width runs there; the sup errors and the exponent agree to rounding."""
    from meanfield.models.mixture.widths import width_sweep as mixture_width_sweep

    base = dict(K=2, L=3, steps=60, neuron_init=TIE, record_every=1)
    ref = mixture_width_sweep(base, [4, 16], 2, tmp_path / "m.h5", progress=False, log=lambda *a: None, workers=1)
    s = me.width_sweep(me.load(MIXTURE, **base), [4, 16], 2, tmp_path / "e.h5", progress=False, log=lambda *a: None)
    for q in ("S", "A", "B", "w", "loss"):
        assert np.allclose(s["errors"][q], ref["errors"][q], rtol=1e-9, atol=1e-14), q
    assert s["exponent"] == pytest.approx(ref["exponent"], abs=1e-9)
    assert s["kinks"] == [] and all(v < 1e-12 for v in s["reduced_max_rel_diff"].values())
    for f in s["files"]:
        assert Path(f).exists()
    js = json.loads((tmp_path / "e.json").read_text())
    # two widths: the two-point slope of the mean log-errors (by hand here), no interval (two points fix a line)
    import h5py

    with h5py.File(tmp_path / "e.h5", "r") as f:
        e = np.log(f["sup_error/S"][()])  # (widths, seeds)
    assert js["widths"] == [4, 16] and js["exponent_ci"] is None and "two points fix a line" in js["message"]
    assert js["exponent"] == pytest.approx((e[1].mean() - e[0].mean()) / np.log(16 / 4), rel=1e-12)


def test_width_sweep_reports_kinks_instead_of_an_exponent(tmp_path):
    """Zero neurons: pre-activations sit exactly at the ReLU kink at infinite width and
    finite widths leave it on either side: no exponent, the events are named."""
    s = me.width_sweep(me.load(MIXTURE, steps=40), [4, 8], 2, tmp_path / "k.h5", progress=False,
                       log=lambda *a: None)
    assert s["exponent"] is None and any(k["split"] for k in s["kinks"])
    assert "kink" in s["message"]


def test_width_sweep_without_wide_weights_reports_no_exponent(tmp_path):
    """A model whose trained weights are all narrow (merged W, fixed linear value): the width
    does not enter, the explicit networks equal the infinite-width run to rounding at every m,
    and a fitted exponent would be a fit to rounding noise: none is reported."""
    from meanfield.engine.description import _read, description_from_dict

    raw = _read(ROOT / "meanfield" / "models" / "maxmargin.toml")
    raw["training"]["stages"][0]["steps"] = 30
    raw["parameters"].pop("record_log")
    desc = description_from_dict(raw, {"record_every": 1})
    s = me.width_sweep(desc, [2, 4, 8], 2, tmp_path / "n.h5", progress=False, log=lambda *a: None)
    assert s["exponent"] is None and s["exponent_ci"] is None and "no wide weights" in s["message"]
    assert all(e <= 1e-12 for q in s["quantities"] for e in s["errors"][q])
    # the factorised version (wide W_K, W_Q) does get an exponent
    raw["heads"][0]["kq"] = "separate"
    s = me.width_sweep(description_from_dict(raw, {"record_every": 1}), [2, 8], 2, tmp_path / "s.h5",
                       progress=False, log=lambda *a: None)
    assert s["exponent"] is not None and "no wide weights" not in s["message"]


def test_width_sweep_names_a_quantity_that_does_not_converge(tmp_path):
    """The multi-class mixture's neuron stage (attention frozen, zero neurons): S keeps
    its m^-1/2 init error, but the neurons' error grows from O(m^-1/2) exponentially
    along the unstable symmetric infinite-width trajectory and is O(1) at every m by
    step 300; the lead's exponent alone would hide it, the message names w.

    It was environment-dependent: "not decreasing" meant err(m = 256) >= err(m = 16),
    and w's two errors are both O(1) (0.709, 0.690 here), a few percent apart: the
    seeds' spread and the rounding the unstable trajectory amplifies decided it. Now a
    quantity is named when its error falls by less than m^-1/4 (finite.NOT_DECREASING,
    half the mean-field rate on a log scale): w's fall (m^-0.01) is far from that, and
    S and A (frozen: their init error, m^-0.5 and m^-0.3, from the seeded draw alone)
    are far on the other side."""
    from meanfield.engine.description import _read, description_from_dict

    raw = _read(ROOT / "meanfield" / "models" / "mixture_multiclass.toml")
    raw["training"] = {"stages": [{"name": "neurons", "train": ["values"], "steps": 300}]}
    desc = description_from_dict(raw, {"record_every": 10, "symmetry": "allow"})  # the symmetric start, on purpose
    s = me.width_sweep(desc, [16, 256], 2, tmp_path / "mc.h5", progress=False, log=lambda *a: None)
    assert s["lead"] == "S" and s["exponents"]["S"]["exponent"] < 0  # S: the frozen init error decreases
    assert s["exponents"]["S"]["ci"] is None  # two widths: no interval
    assert "w" in s["not_decreasing"] and "NOT decreasing" in s["message"] and "w (m^" in s["message"]
    assert "S" not in s["not_decreasing"] and "A" not in s["not_decreasing"]
    w16, w256 = s["errors"]["w"]
    assert w16 > 0.3 and w256 > 0.3  # O(1) at every width: the trajectory is left, not approached


def test_width_sweep_cli(tmp_path):
    out = tmp_path / "w.h5"
    p = _cli("width-sweep", MIXTURE, "--widths", "4,8", "--seeds", "2", "--steps", "30", "--neuron-init", TIE,
             "--quiet", "--out", str(out))
    assert p.returncode == 0, p.stderr
    assert out.exists() and out.with_suffix(".json").exists() and out.with_suffix(".png").exists()
    bad = _cli("width-sweep", MIXTURE, "--widths", "4,,8", "--out", str(tmp_path / "x.h5"), timeout=120)
    assert bad.returncode == 2 and "widths" in bad.stderr and not (tmp_path / "x.h5").exists()


MAJORITY = str(ROOT / "docs" / "examples" / "majority.toml")


def test_particles_divergence_keeps_a_valid_file(tmp_path):
    """A blow-up: status diverged (exit 3), the file keeps every record up to the last
    accepted step, at the same step as the engine's own run."""
    from meanfield.core.io import read_run

    out = tmp_path / "d.h5"
    p = _cli("particles", MAJORITY, "--width", "4", "--eta", "1000", "--max-abs", "1e4", "--steps", "50", "--quiet",
             "--out", str(out))
    assert p.returncode == 3, p.stderr
    rr = read_run(out)
    assert rr.attrs["status"] == "diverged" and np.all(np.isfinite(rr["loss"]))
    red = me.run(me.load(MAJORITY, width=4, eta=1000, max_abs=1e4, steps=50))
    assert red.status == "diverged" and int(rr["step"][-1]) == int(red.step[-1])


def test_particles_checkpoint_is_a_valid_interrupted_file(tmp_path):
    desc = me.load(MAJORITY, width=4, steps=300, record_every=50)
    out = tmp_path / "c.h5"
    seen = []
    import meanfield.engine.runs as runs

    real_save = runs.save

    def spy(path, d, r, **kw):
        seen.append(kw.get("status"))
        return real_save(path, d, r, **kw)

    runs.save = spy
    try:
        r, path = me.particles_to_file(desc, out, progress=False, checkpoint_s=0.0)
    finally:
        runs.save = real_save
    assert "interrupted" in seen and seen[-1] is None  # checkpoints first, the final file last
    from meanfield.core.io import read_run

    assert read_run(path).attrs["status"] == "complete"


def test_particles_flow_equals_the_engines_flow():
    """method flow: the explicit weights' gradient flow (the shared adaptive solver on
    the weights) against the engine's flow on the Gram state, both at tight tolerances."""
    sys.path.insert(0, str(Path(__file__).parent))
    from test_engine_oracle import random_raw

    from meanfield.engine.description import description_from_dict

    raw = random_raw(1, m=3, staged=False)
    raw["parameters"].update(method="flow", t_end=2.0, rtol=1e-11, atol=1e-13, record_dt=0.5)
    del raw["parameters"]["steps"], raw["parameters"]["record_every"]
    desc = description_from_dict(raw)
    r = me.particles(desc)
    red = me.run(desc)
    assert r.status == red.status == "complete"
    assert np.allclose(r.t, red.t, rtol=0, atol=1e-12) and r.t[-1] == pytest.approx(2.0)
    assert np.abs(r.y - red.y).max() <= 1e-7 * max(1.0, np.abs(red.y).max())
    assert np.abs(red.y[-1] - red.y[0]).max() > 1e-2
