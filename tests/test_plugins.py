"""A family from outside the package, plugged in through ``meanfield.engine.registry`` (docs/engine.md,
"Add your own family").

The family module (``docs/examples/ring_family.py``) is copied into a
temporary folder and found three ways: a description's ``plugins`` key, an
entry point of an installed distribution (a ``*.dist-info`` on the path) and
an explicit import in Python. Its runs are checked against an independent
path: the same model written out as a general description (rows, head, run
knobs) and run without any plug-in; the two run files hold the same numbers
bit for bit. The failure paths (unknown family, a plug-in that cannot be
imported, a bad ``plugins`` value) are one line, exit 2, nothing written.
Everything runs in subprocesses, so this session's registry stays as shipped.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "docs" / "examples" / "ring_family.py"

RING = """name = "ring"
{plugins}family = "ring"

[parameters]
P = 4
steps = 30
eta = 0.5
"""

# the same model, written out by hand as a general description (no plug-in): P = 5, 20 steps
GENERAL = """name = "ring"

[dictionary]
features = ["e1", "e2", "e3", "e4", "e5"]

[data]
rows = [
  {tokens = ["e1", "e2"], target = 1}, {tokens = ["e2", "e3"], target = -1}, {tokens = ["e3", "e4"], target = 1},
  {tokens = ["e4", "e5"], target = -1}, {tokens = ["e5", "e1"], target = 1},
]

[[heads]]
name = "h"
attention = "softmax"
kq = "separate"
query = "mean"
value = "neuron"

[parameters]
steps = 20
eta = 0.5
"""


def _env(*paths) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [str(p) for p in paths])
    return env


def _mf(args, cwd, *paths):
    return subprocess.run([sys.executable, "-m", "meanfield", *args], capture_output=True, text=True, cwd=cwd,
                          env=_env(*paths), timeout=600)


def _arrays(path) -> dict:
    out = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset) and obj.dtype.kind == "f":
                out[name] = obj[()]
        f.visititems(visit)
    return out


@pytest.fixture
def plug(tmp_path):
    pkgs = tmp_path / "pkgs"
    pkgs.mkdir()
    shutil.copy(EXAMPLE, pkgs / "ring_family.py")
    return pkgs


def _general_run(tmp_path) -> dict:
    (tmp_path / "general.toml").write_text(GENERAL)
    r = _mf(["model", "run", "general.toml", "--out", "general.h5", "--quiet"], tmp_path)
    assert r.returncode == 0, r.stderr
    return _arrays(tmp_path / "general.h5")


def test_outside_family_from_the_plugins_key_runs_through_the_cli(tmp_path, plug):
    (tmp_path / "ring.toml").write_text(RING.format(plugins='plugins = ["ring_family"]\n'))
    r = _mf(["model", "run", "ring.toml", "--P", "5", "--steps", "20", "--out", "ring.h5", "--quiet"], tmp_path, plug)
    assert r.returncode == 0, r.stderr
    assert "complete" in r.stdout
    with h5py.File(tmp_path / "ring.h5", "r") as f:
        assert [x.decode() if isinstance(x, bytes) else x for x in f["features"][()]] == [f"e{i}" for i in range(1, 6)]
        assert f["loss"].shape[0] >= 2
    mine, ref = _arrays(tmp_path / "ring.h5"), _general_run(tmp_path)
    assert set(ref) <= set(mine)
    for k in ref:
        assert np.array_equal(mine[k], ref[k], equal_nan=True), k
    assert mine["loss"][-1] < mine["loss"][0]  # it trained


def test_outside_family_from_an_entry_point_and_from_python(tmp_path, plug):
    dist = plug / "ring_family-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ring-family\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[meanfield.plugins]\nring = ring_family\n")
    (tmp_path / "ring.toml").write_text(RING.format(plugins=""))  # no plugins key: found by its entry point
    r = _mf(["model", "run", "ring.toml", "--P", "5", "--steps", "20", "--out", "ring.h5", "--quiet"], tmp_path, plug)
    assert r.returncode == 0, r.stderr
    ref = _general_run(tmp_path)
    mine = _arrays(tmp_path / "ring.h5")
    assert all(np.array_equal(mine[k], ref[k], equal_nan=True) for k in ref)
    # Python: an explicit import registers it; meanfield.engine.load / run as for any description
    code = ("import sys, numpy as np\n"
            "import ring_family\n"
            "import meanfield.engine as me\n"
            "from meanfield.engine import registry\n"
            "desc = me.load('ring.toml', P=5, steps=20)\n"
            "r = me.run(desc)\n"
            "assert desc.family == 'ring' and 'ring' in registry.families(), desc.family\n"
            "np.save('py_loss.npy', np.asarray(r.loss))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                       env=_env(plug), timeout=600)
    assert p.returncode == 0, p.stderr
    assert np.array_equal(np.load(tmp_path / "py_loss.npy"), ref["loss"])


@pytest.mark.parametrize("head,needle", [
    ('plugins = ["ring_family"]\n', None),
    ('plugins = ["no_such_plugin_module"]\n', "plugins: cannot import plug-in module 'no_such_plugin_module'"),
    ('plugins = "ring_family"\n', "plugins: must be a list of module names"),
    ('plugins = ["bad name!"]\n', "plugins: a plug-in is a module name"),
    ("", "family: must be one of"),  # ring is not registered without its plug-in
])
def test_plugin_failures_are_one_line_exit_2_nothing_written(tmp_path, plug, head, needle):
    (tmp_path / "ring.toml").write_text(RING.format(plugins=head))
    paths = (plug,) if needle is None else ()  # the failing cases: the module is not on the path
    if needle is None:  # the control: the same file runs; an unknown parameter of the family is refused
        r = _mf(["model", "run", "ring.toml", "--Q", "3", "--out", "x.h5"], tmp_path, *paths)
        needle = "--Q: not a parameter of model ring.toml"
    else:
        r = _mf(["model", "run", "ring.toml", "--out", "x.h5"], tmp_path, *paths)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "x.h5").exists()


def test_registry_refuses_a_second_registration_and_a_fast_path_without_its_test():
    from meanfield.engine import registry

    registry.register_claims("test_plugins_dup", "math:fsum", replace=True)
    with pytest.raises(ValueError, match="registered already"):
        registry.register_claims("test_plugins_dup", "math:prod")
    with pytest.raises(ValueError, match="names the test"):
        registry.register_fast_path("mixture", name="test_plugins_fp", run="math:fsum", verified_by="")
    assert registry.family("mixture").params_class().__name__ == "MixtureConfig"
    assert [fp.verified_by for fp in registry.fast_paths("mixture")] == [
        "tests/test_engine_mixture.py::test_engine_equals_fast_path"]
