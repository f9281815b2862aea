"""HDF5 run files: roundtrip, atomic writes, status validation.

Files written by ``meanfield.core.io.write_run`` are also opened directly with h5py
(the public schema), not only through ``read_run``.
"""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from meanfield import __version__
from meanfield.core import io


def _data():
    rng = np.random.default_rng(0)
    return {
        "t": np.linspace(0, 1, 5),
        "step": np.arange(5, dtype=np.int64),
        "S": rng.standard_normal((5, 2, 4, 4)),
        "big": rng.standard_normal((3, 2000)),  # above the compression threshold
        "features": np.array(["c1", "c2", "v1", "v2"], dtype=object),
        "heads": ["+", "-"],
        "samples": {
            "y": np.array([1.0, -1.0]),
            "consistent": np.array([1, 0], dtype=np.int8),
            "description": np.array(["k=1 y=+1 [c1, +v1, -v2]", "k=1 y=-1 [c1, -v1, +v2]"], dtype=object),
            "nested": {"x": np.arange(3)},
        },
    }


def test_roundtrip(tmp_path):
    path = tmp_path / "sub" / "run.h5"  # parent folder created
    config = {"K": 2, "p": None, "stage_steps": (1, 2, 3), "name": "gd", "nested": {"a": [1.5, None]}}
    attrs = {"K": 2, "omega": 0.1, "method": "gd", "stage_ends": [{"stage": 1, "step": 3, "t": 1.5, "reason": "length"}],
             "warnings": [], "nums": [1, 2, 3], "none": None}
    out = io.write_run(path, system="mixture", config=config, status="diverged", message="step 7 gave NaN",
                       data=_data(), attrs=attrs)
    assert out == path and path.exists()
    assert [p.name for p in path.parent.iterdir()] == ["run.h5"]
    run = io.read_run(path)
    d = _data()
    for k in ("t", "step", "S", "big"):
        np.testing.assert_array_equal(run[k], d[k])
        assert run[k].dtype == d[k].dtype
    assert list(run["features"]) == ["c1", "c2", "v1", "v2"]
    assert list(run["heads"]) == ["+", "-"]
    assert isinstance(run["samples"], dict)
    np.testing.assert_array_equal(run["samples"]["y"], [1.0, -1.0])
    np.testing.assert_array_equal(run["samples"]["consistent"], [1, 0])
    assert list(run["samples"]["description"]) == list(d["samples"]["description"])
    np.testing.assert_array_equal(run["samples"]["nested"]["x"], [0, 1, 2])
    # attributes
    a = run.attrs
    assert a["format"] == "meanfield-run" and a["format_version"] == 2
    assert a["system"] == "mixture" and a["meanfield_version"] == __version__
    assert a["status"] == "diverged" and a["message"] == "step 7 gave NaN"
    assert a["K"] == 2 and a["omega"] == 0.1 and a["method"] == "gd"
    assert a["stage_ends"] == attrs["stage_ends"]
    assert list(a["nums"]) == [1, 2, 3]
    assert a["none"] is None
    assert list(a["warnings"]) == []
    # config: JSON of the resolved config (tuples become lists)
    assert run.config == json.loads(json.dumps(config))
    # the raw file as any HDF5 reader sees it
    with h5py.File(path, "r") as f:
        assert json.loads(f.attrs["config"]) == run.config
        assert f["S"].shape == (5, 2, 4, 4)
        assert f["big"].compression == "gzip"
        assert h5py.check_string_dtype(f["features"].dtype) is not None
        assert isinstance(f["samples"], h5py.Group) and isinstance(f["samples/nested"], h5py.Group)


def test_overwrite_replaces(tmp_path):
    path = tmp_path / "run.h5"
    io.write_run(path, system="mixture", config={"a": 1}, status="complete", message="one", data={"x": np.arange(3)})
    io.write_run(path, system="mixture", config={"a": 2}, status="interrupted", message="two",
                 data={"y": np.ones(2)})
    run = io.read_run(path)
    assert run.config == {"a": 2} and run.attrs["status"] == "interrupted"
    assert set(run) == {"y"}


def test_atomic_write_failure_keeps_old_file(tmp_path, monkeypatch):
    path = tmp_path / "run.h5"
    io.write_run(path, system="mixture", config={"v": "old"}, status="complete", message="old",
                 data={"x": np.arange(3)})
    old_bytes = path.read_bytes()
    seen = {}

    def boom(g, content):
        # the HDF5 image is built in memory: no temporary file exists yet (it is written whole after)
        tmps = [p for p in tmp_path.iterdir() if p.name.startswith("run.h5.tmp-")]
        seen["tmps"] = tmps
        g.create_dataset("partial", data=np.arange(2))
        raise RuntimeError("disk full (simulated)")

    monkeypatch.setattr(io, "_write_group", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        io.write_run(path, system="mixture", config={"v": "new"}, status="complete", message="new",
                     data={"x": np.arange(5)})
    assert len(seen["tmps"]) == 0
    assert path.read_bytes() == old_bytes
    assert io.read_run(path).config == {"v": "old"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.h5"]


def test_atomic_write_failure_no_file_created(tmp_path, monkeypatch):
    path = tmp_path / "new.h5"

    def boom(g, content):
        raise KeyboardInterrupt  # even a non-Exception leaves no tmp behind

    monkeypatch.setattr(io, "_write_group", boom)
    with pytest.raises(KeyboardInterrupt):
        io.write_run(path, system="mixture", config={}, status="complete", message="", data={"x": [1]})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("status", ["done", "", "Complete", None, "running"])
def test_invalid_status_rejected(tmp_path, status):
    path = tmp_path / "run.h5"
    with pytest.raises(ValueError, match="status"):
        io.write_run(path, system="mixture", config={}, status=status, message="", data={"x": [1]})
    assert list(tmp_path.iterdir()) == []


def test_read_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        io.read_run(tmp_path / "missing.h5")
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f.attrs["format"] = "something-else"
        f["x"] = np.arange(2)
    with pytest.raises(ValueError, match="not a meanfield run file"):
        io.read_run(other)


def test_plain_string_attributes_stay_strings(tmp_path):
    from meanfield.core.io import read_run, write_run

    p = write_run(tmp_path / "r.h5", system="mixture", config={}, status="complete", message="m",
                  data={"t": np.zeros(1)}, attrs={"a": "1", "b": "true", "c": [1, "x"], "d": None})
    r = read_run(p)
    assert r.attrs["a"] == "1" and r.attrs["b"] == "true" and r.attrs["c"] == [1, "x"] and r.attrs["d"] is None
