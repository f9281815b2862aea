"""``init_from`` / ``--init-from R.h5`` (``meanfield.engine.initfrom``): a run file's last state as
the initial state. The continued run against the uninterrupted one (the explicit network comparison
is in tests/test_engine_oracle.py); the flag, the Python keyword and the one-line refusals (exit 2,
nothing written)."""

from __future__ import annotations

import subprocess
import sys

import h5py
import numpy as np
import pytest

import meanfield.engine as me
from meanfield.core.config import ConfigError

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
[[heads]]
name = "g"
kq = "merged"
value = "neuron"
train_sign = true
[parameters]
eta = 0.1
steps = 100
omega = 0.5
omega_v = 0.5
record_every = 1
"""


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "meanfield", "model", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def toy(tmp_path):
    p = tmp_path / "toy.toml"
    p.write_text(TOY)
    return p


def test_cli_continued_run_equals_the_uninterrupted_run(toy, tmp_path):
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    assert _cli("run", toy, "--out", a, "--quiet", cwd=tmp_path).returncode == 0
    r = _cli("run", toy, "--init-from", a, "--out", b, "--quiet", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    full = me.run(me.load(toy, steps=200))
    with h5py.File(b) as f:
        assert np.abs(f["loss"][:] - full.loss[100:]).max() <= 1e-12
        for h, nm in (("h", "S"), ("h", "V.r1"), ("g", "W"), ("g", "w"), ("g", "a")):
            assert np.abs(f[f"variables/{h}/{nm}"][:] - full.var(h, nm)[100:]).max() <= 1e-12
        assert f["t"][0] == 0.0 and f["step"][0] == 0  # a fresh clock
    py = me.run(me.load(toy, init_from=str(a)))
    assert np.abs(py.loss - full.loss[100:]).max() <= 1e-12


def test_refusals_are_one_line_exit_2_nothing_written(toy, tmp_path):
    a = tmp_path / "a.h5"
    assert _cli("run", toy, "--out", a, "--quiet", "--steps", "5", cwd=tmp_path).returncode == 0
    other = tmp_path / "other.toml"
    other.write_text(toy.read_text().replace("[0.2, 1.0, 0.0]", "[0.3, 1.0, 0.0]").replace("[1.0, 0.2, 0.0]",
                                                                                          "[1.0, 0.3, 0.0]"))
    fewer = tmp_path / "fewer.toml"
    fewer.write_text(toy.read_text().split("[[heads]]\nname = \"g\"")[0] + "[parameters]\neta = 0.1\nsteps = 5\n")
    mix = tmp_path / "mix.h5"
    assert subprocess.run([sys.executable, "-m", "meanfield", "mixture", "run", "--K", "2", "--steps", "3",
                           "--out", mix], capture_output=True, cwd=tmp_path, timeout=300).returncode == 0
    cases = [(("run", other, "--init-from", a), "init_from: " + str(a) + " is a run of another description"),
             (("run", fewer, "--init-from", a), "init_from:"),
             (("run", toy, "--init-from", tmp_path / "none.h5"), "init_from: no such run file"),
             (("run", toy, "--init-from", mix), "is not an engine run file"),
             (("particles", toy, "--width", "3", "--init-from", a), "init_from: not for the explicit network"),
             (("run", "mixture", "--init-from", a), "--init-from: not a parameter of model mixture")]
    for args, msg in cases:
        out = tmp_path / "out.h5"
        r = _cli(*args, "--out", out, cwd=tmp_path)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and msg in lines[0] and "Traceback" not in r.stderr, \
            (args, r.stderr)
        assert not out.exists()


def test_a_file_without_the_structure_digest_is_checked_by_its_blocks(toy, tmp_path):
    """A file of an older writer (no ``structure`` attribute): the recorded blocks must still exist
    with this description's shapes."""
    a = tmp_path / "a.h5"
    me.run_to_file(me.load(toy, steps=3), a, progress=False)
    with h5py.File(a, "a") as f:
        del f.attrs["structure"]
        del f["variables/g/W"]
    with pytest.raises(ConfigError, match="init_from: .* is a run of another description \\(no variable W of head g"):
        me.load(toy, init_from=str(a))
