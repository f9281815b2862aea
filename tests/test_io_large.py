"""write_h5_atomic's two ways: an in-memory HDF5 image for files whose arrays
total at most IN_MEMORY_MAX bytes, HDF5 writing the tmp file itself above that
(after a free-space check). Same content either way; too little space is one
OSError naming the path and no tmp file; signals are held only around the
write/rename, not while HDF5 builds (compresses) the file."""

from __future__ import annotations

import contextlib
import shutil
from collections import namedtuple

import h5py
import numpy as np
import pytest

from meanfield.core import guard, io


def _data():
    rng = np.random.default_rng(0)
    return {"t": np.linspace(0, 1, 7), "big": rng.normal(size=(50, 200)),  # > 4096 entries: gzip
            "step": np.arange(7, dtype=np.int64), "names": np.array(["a", "bb", "c"], dtype=object),
            "grp": {"x": rng.integers(0, 9, size=(5000,)), "sub": {"y": np.ones(3)}}}


ATTRS = {"format": "meanfield-run", "status": "complete", "message": "m", "cfg": {"a": 1}, "n": 3,
         "ends": [1.0, 2.0], "none": None}


def _content(path):
    out = {}
    with h5py.File(path, "r") as f:
        out["/"] = {k: np.asarray(f.attrs[k]).tolist() for k in f.attrs}

        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                out[name] = (obj.dtype.str if obj.dtype.kind != "O" else "O", obj.shape, obj.compression,
                             obj[()].tolist())
            else:
                out[name] = "group"
        f.visititems(visit)
    return out


def test_large_path_writes_the_same_content(tmp_path, monkeypatch):
    small = io.write_h5_atomic(tmp_path / "small.h5", ATTRS, _data())
    monkeypatch.setattr(io, "IN_MEMORY_MAX", 0)
    big = io.write_h5_atomic(tmp_path / "big.h5", ATTRS, _data())
    a, b = _content(small), _content(big)
    assert a == b
    assert a["big"][2] == "gzip" and "grp/sub/y" in a
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.h5", "small.h5"]


def test_large_path_refuses_when_the_disk_is_too_full(tmp_path, monkeypatch):
    out = tmp_path / "r.h5"
    out.write_bytes(b"an earlier file\n")
    monkeypatch.setattr(io, "IN_MEMORY_MAX", 0)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10 ** 9, 10 ** 9 - 1000, 1000))
    with pytest.raises(OSError) as e:
        io.write_h5_atomic(out, ATTRS, _data())
    assert e.value.filename == str(out) and "No space left" in str(e.value), str(e.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.h5"]  # no r.h5.tmp-PID
    assert out.read_bytes() == b"an earlier file\n"


@pytest.mark.parametrize("threshold", [None, 0], ids=["in-memory", "large"])
def test_signals_are_held_only_around_the_write(tmp_path, monkeypatch, threshold):
    held = []
    inside = []

    @contextlib.contextmanager
    def spy():
        held.append(True)
        try:
            yield
        finally:
            held.pop()

    fill = io._fill

    def spy_fill(*a):
        inside.append(bool(held))
        return fill(*a)

    monkeypatch.setattr(guard, "deferred_signals", spy)
    monkeypatch.setattr(io, "_fill", spy_fill)
    replaces = []
    real_replace = io.os.replace

    def spy_replace(a, b):
        replaces.append(bool(held))
        return real_replace(a, b)

    monkeypatch.setattr(io.os, "replace", spy_replace)
    if threshold is not None:
        monkeypatch.setattr(io, "IN_MEMORY_MAX", threshold)
    io.write_h5_atomic(tmp_path / "r.h5", ATTRS, _data())
    assert inside == [False]  # HDF5 builds / compresses with signals not held
    assert replaces == [True]  # the rename with signals held
