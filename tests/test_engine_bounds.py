"""``bound`` on a described model's run (system engine): head-named atoms
S[h,a,b], w[h,a], u[h,i], var[h,NAME,...] read the run's variables; the expected
values are read from the HDF5 file with h5py directly (an independent reader),
and bad names are one line, exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

import meanfield.engine as me
from meanfield.core.bounds import BoundError, values
from meanfield.core.io import read_run

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("eb")
    maj = d / "maj.h5"
    me.run_to_file(me.load(ROOT / "docs" / "examples" / "majority.toml", steps=6, record_every=1), maj, progress=False)
    mc = d / "mc.h5"
    me.run_to_file(me.load(ROOT / "meanfield" / "models" / "mixture_multiclass.toml", K=2, C=3, L=2, steps=4,
                           record_every=1), mc, progress=False)
    return maj, mc


def test_head_named_atoms_read_the_variables(runs):
    maj, mc = runs
    r = read_run(maj)
    with h5py.File(maj, "r") as f:  # features plus, minus, blank; one head "h"
        S = f["variables/h/S"][...]
        w = f["variables/h/w"][...]
        A = f["variables/h/A"][...]
        u = f["u"][...]
    assert np.array_equal(values("S[h,plus,blank]", r), S[:, 0, 2])
    assert np.array_equal(values("w[h,minus]", r), w[:, 0, 0, 1])
    assert np.array_equal(values("var[h,A,blank,1]", r), A[:, 2, 1])
    assert np.array_equal(values("u[h,3]", r), u[:, 3, 0, 0])
    assert not np.allclose(w[-1], w[0])  # the run moved: the atoms are not trivially equal
    r = read_run(mc)
    with h5py.File(mc, "r") as f:  # heads + and -, 3 outputs
        Sm = f["variables/-/S"][...]
        wp = f["variables/+/w"][...]
        feats = [x.decode() if isinstance(x, bytes) else str(x) for x in f["features"][...]]
    a, b = feats.index("c2"), feats.index("v1_2")
    assert np.array_equal(values("S[-,c2,v1_2]", r), Sm[:, a, b])
    assert np.array_equal(values("S-[c2,c1]", r), Sm[:, 1, 0])  # a head named - in the mixture's signed form
    assert np.array_equal(values("w[+,2,v2_1]", r), wp[:, 2, 0, feats.index("v2_1")])
    with h5py.File(mc, "r") as f:
        u = f["u"][...]  # (T, n, H, outputs)
    assert np.array_equal(values("u[-,5,1]", r), u[:, 5, 1, 1])
    with pytest.raises(BoundError, match="this head has 3 outputs"):
        values("u+[5]", r)  # the mixture's signed form: head "+", but 3 outputs need u[+,i,c]


@pytest.mark.parametrize("expr, msg", [
    ("S[g,plus,minus]", "unknown head 'g'"),
    ("S[h,plus,zz]", "unknown feature 'zz'"),
    ("S[h,plus]", "expected 3 names or indices"),
    ("w[h,2,plus]", "output index 2 out of range"),
    ("var[h,Q,plus]", "head 'h' has no variable 'Q'"),
    ("var[h,S,plus]", "give 2 indices"),
    ("S+[c1,v1]", "unknown head '+'"),
    ("u+[0]", "unknown head '+'"),
    ("S[h,__import__('os'),b]", "expected 3 names or indices"),
])
def test_bad_names_are_one_line_exit_2(runs, expr, msg):
    maj, _ = runs
    with pytest.raises(BoundError) as e:
        values(expr, read_run(maj))
    assert msg in str(e.value) and "\n" not in str(e.value), str(e.value)
    p = subprocess.run([sys.executable, "-m", "meanfield", "model", "bound", str(maj), expr + " < 1"], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and msg in p.stderr, p.stderr


def test_cli_bound_holds_and_fails(runs):
    maj, _ = runs
    with h5py.File(maj, "r") as f:
        s_max = float(np.max(f["variables/h/w"][:, 0, 0, 0]))  # w moves (checked above)
    ok = subprocess.run([sys.executable, "-m", "meanfield", "model", "bound", str(maj), f"w[h,plus] <= {s_max!r}"],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and ok.stdout.startswith("HOLDS"), ok.stdout + ok.stderr
    bad = subprocess.run([sys.executable, "-m", "meanfield", "model", "bound", str(maj),
                          f"w[h,plus] < {s_max!r}"], capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and bad.stdout.startswith("VIOLATED"), bad.stdout + bad.stderr


def test_head_named_form_refused_on_a_mixture_run(tmp_path):
    out = tmp_path / "m.h5"
    p = subprocess.run([sys.executable, "-m", "meanfield", "mixture", "run", "--steps", "3", "--record-every", "1",
                        "--out", str(out)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    with pytest.raises(BoundError, match="head-named form is for described models"):
        values("S[+,c1,v1]", read_run(out))
    assert values("S+[c1,v1]", read_run(out)).shape == (4,)


def test_loss_min_of_a_gaussian_population_run(tmp_path):
    """``loss_min`` reads the run attribute of an exact Gaussian population (the value read with h5py, an
    independent reader), and every record's loss is at least it (the class's minimum); a run without the
    attribute is one line naming it."""
    z = tmp_path / "z.h5"
    me.run_to_file(me.load(ROOT / "meanfield" / "models" / "icl_zfb.toml", steps=5, record_every=1), z, progress=False)
    with h5py.File(z, "r") as f:
        lmin = float(f.attrs["loss_min"])
        loss = f["loss"][...]
    r = read_run(z)
    assert np.all(values("loss_min", r) == lmin) and np.all(values("loss - loss_min", r) == loss - lmin)
    res = subprocess.run([sys.executable, "-m", "meanfield", "model", "bound", str(z), "loss >= loss_min"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "HOLDS" in res.stdout, res.stdout + res.stderr
    assert np.all(loss >= lmin)
    maj = tmp_path / "maj.h5"
    me.run_to_file(me.load(ROOT / "docs" / "examples" / "majority.toml", steps=2), maj, progress=False)
    with pytest.raises(BoundError, match="loss_min: the run file has no loss_min attribute"):
        values("loss_min", read_run(maj))
