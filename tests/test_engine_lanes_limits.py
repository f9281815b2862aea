"""The engine's lanes at their limits: an unwritable cache folder, a lane scratch too large for a block,
the ``lanes`` argument's type (tests/test_engine_lanes.py holds the lanes equal to the per-trajectory path)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

import meanfield.engine as me
from meanfield.core.config import ConfigError
from meanfield.engine import batched, lanes, lanes_batch
from meanfield.engine.packed import pack

ROOT = Path(__file__).resolve().parents[1]


def test_an_unwritable_cache_folder_falls_back_to_a_folder_of_the_process(monkeypatch, caplog, tmp_path):
    """A lane cache folder that cannot be written (a read-only home) costs one warning, not the batch: the
    generated module is written to a folder of this process instead (control: that folder is new)."""
    ro = tmp_path / "file"
    ro.write_text("not a folder")
    monkeypatch.setattr(lanes, "cache_dir", lambda: ro / "sub")
    lanes.module.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="meanfield"):
            mod = lanes.module()
    finally:
        lanes.module.cache_clear()
    assert mod.TAG and hasattr(mod, "eng_loss_grads_lanes")
    msg = [r.getMessage() for r in caplog.records if "lane kernels: cannot write" in r.getMessage()]
    assert len(msg) == 1 and str(ro / "sub") in msg[0] and "MEANFIELD_LANES_DIR" in msg[0], caplog.text
    fallback = Path(msg[0].split("using ")[1].split(" for this process")[0])
    assert fallback.is_dir() and fallback != ro / "sub" and any(fallback.glob("engine_lanes_*.py"))


def test_a_lane_scratch_too_large_for_a_block_narrows_the_block_or_takes_the_per_trajectory_path():
    """width_for keeps a thread's block within LANE_SCRATCH_BYTES: the widest width that fits, 0 when none."""
    cap = lanes_batch.LANE_SCRATCH_BYTES
    assert lanes_batch.width_for(10**4, 1, cap // 64) == 64
    assert lanes_batch.width_for(10**4, 1, cap // 64 + 1) == 32
    assert lanes_batch.width_for(10**4, 1, cap // 8 + 1) == 0
    # the estimate covers the per-sequence outputs u (n, H, R) a lane holds: a large population data set
    desc = me.load(ROOT / "meanfield/models/incontext.toml", K=6, N=3, steps=2)
    pk = pack(desc)
    n, L = pk.nzn.shape
    lay = pk.lay
    per = lanes_batch.lane_bytes(n, L, lay.P, lay.hi.shape[0], pk.R, pk.C, lay.Nmax, lay.size)
    assert per >= 8 * n * lay.hi.shape[0] * pk.R
    assert per >= 8 * lay.hi.shape[0] * L * L


@pytest.mark.parametrize("bad", ["no", None, 0, 1.0, "True"])
def test_lanes_must_be_a_bool(bad):
    desc = me.load(ROOT / "docs/examples/majority.toml", steps=2)
    with pytest.raises(ConfigError, match="lanes: must be True or False"):
        batched.run_batch(desc, seeds=[0, 1], fast=False, lanes=bad)


def test_the_default_width_on_a_description_takes_its_scratch_into_account(monkeypatch):
    """run_batch passes the description's lane scratch to width_for: with a budget below one lane's scratch
    the per-trajectory drivers run (the same results as lanes=False)."""
    desc = me.load(ROOT / "docs/examples/majority.toml", steps=4)
    seeds = list(range(64))
    ref = batched.run_batch(desc, seeds=seeds, fast=False, lanes=False)
    monkeypatch.setattr(lanes_batch, "LANE_SCRATCH_BYTES", 1)
    monkeypatch.setattr(lanes_batch, "batch_kernel", lambda w, *m: (_ for _ in ()).throw(AssertionError("lanes ran")))
    got = batched.run_batch(desc, seeds=seeds, fast=False)
    assert np.array_equal(ref.y, got.y) and np.array_equal(ref.loss, got.loss)


def test_a_transform_refusal_at_run_time_turns_the_lanes_off_with_a_warning(monkeypatch, caplog):
    """Should the transform refuse (kernels.py edited without a rule; its own tests fail then), a batch still
    runs, one trajectory after another, with one warning naming the refusal (control: the same results)."""
    desc = me.load(ROOT / "docs/examples/majority.toml", steps=4)
    seeds = list(range(64))
    ref = batched.run_batch(desc, seeds=seeds, fast=False, lanes=False)

    def refuse(w, *more):
        raise lanes.LaneTransformError("kernels.py line 1: a construct without a rule")

    monkeypatch.setattr(lanes_batch, "batch_kernel", refuse)
    with caplog.at_level(logging.WARNING, logger="meanfield"):
        got = batched.run_batch(desc, seeds=seeds, fast=False)
    assert np.array_equal(ref.y, got.y) and np.array_equal(ref.loss, got.loss)
    assert "lanes off: kernels.py line 1" in caplog.text


def test_old_lane_module_versions_are_pruned_when_a_new_one_is_written(tmp_path):
    """A new version written into the lane folder removes the versions beyond the KEEP most recently used
    that were unused for MAX_IDLE_S (module, use marker, numba cache files); recent ones, the KEEP newest
    however old, and the version being written stay; an existing version written again prunes nothing."""
    import os
    import time

    from meanfield.engine import lanes_files

    now = time.time()
    n_old = lanes_files.KEEP + 3
    for i in range(n_old + 2):  # n_old idle for two days (ages distinct), then 2 used an hour ago
        tag = f"{i:016x}"
        age = 2 * 86400 + i * 60 if i < n_old else 3600
        (tmp_path / f"engine_lanes_{tag}.py").write_text("# old\n")
        (tmp_path / "__pycache__").mkdir(exist_ok=True)
        (tmp_path / "__pycache__" / f"engine_lanes_{tag}.eng_update-1.py311.nbi").write_text("")
        (tmp_path / "__pycache__" / f"lanes_batch.lane_gd_batch_w8_{tag}_0123456789-300.py311.nbi").write_text("")
        used = tmp_path / f"engine_lanes_{tag}.used"
        used.touch()
        os.utime(used, (now - age, now - age))
    lanes_files._written(tmp_path, "f" * 16, "# new\n")
    left = sorted(p.stem[len("engine_lanes_"):] for p in tmp_path.glob("engine_lanes_*.py"))
    # kept: the new one, the 2 recent ones, and the KEEP - 3 most recent of the idle ones (the youngest ages)
    idle_kept = [f"{i:016x}" for i in range(lanes_files.KEEP - 3)]
    assert left == sorted(["f" * 16] + [f"{i:016x}" for i in (n_old, n_old + 1)] + idle_kept)
    caches = sorted(p.name for p in (tmp_path / "__pycache__").iterdir())
    assert len(caches) == 2 * (len(left) - 1)  # the module's and a width driver's, of each version left
    assert all(any(t in c for t in left if t != "f" * 16) for c in caches)
    assert sorted(p.stem[len("engine_lanes_"):] for p in tmp_path.glob("*.used")) == left
    lanes_files._written(tmp_path, left[0], "# rewritten\n")  # an existing version: nothing pruned
    assert len(list(tmp_path.glob("engine_lanes_*.py"))) == len(left)


@pytest.mark.parametrize("dep", ["lane_driver", "lane_exp", "batched", "lanes_batch"])
def test_lane_builds_are_named_by_every_file_they_inline(monkeypatch, dep, tmp_path):
    """numba's disk cache checks only a function's own file: each lane build's generated names carry a
    checksum of the files its code inlines, so an edited dependency (here: its bytes as read changed)
    renames the build (a stale cached kernel is never loaded). The mixture's gd/rk4 build, the engine's gd
    and rk4 drivers."""
    import meanfield.core.batched as core_batched
    import meanfield.core.lane_driver as lane_driver
    import meanfield.core.lane_exp as lane_exp
    from meanfield.engine import lanes_rk4
    from meanfield.models.mixture import vectorised

    target = Path({"lane_driver": lane_driver, "lane_exp": lane_exp, "batched": core_batched,
                   "lanes_batch": lanes_batch}[dep].__file__).resolve()
    key = np.zeros(8 * 3 * 2, np.int64).tobytes()

    monkeypatch.setenv("MEANFIELD_LANES_DIR", str(tmp_path))  # module()'s new version goes here

    def names():
        lanes.module.cache_clear()
        vectorised.build.cache_clear()
        lanes_batch.batch_kernel.cache_clear()
        lanes_rk4.rk4_kernel.cache_clear()
        return (vectorised.build(4, True, key, 4, 8, 3)["TAG"], lanes_batch.batch_kernel(8).py_func.__qualname__,
                lanes_rk4.rk4_kernel(8).py_func.__qualname__)

    try:
        before = names()
        real = Path.read_bytes
        monkeypatch.setattr(Path, "read_bytes", lambda p: real(p) + (b"#" if Path(p).resolve() == target else b""))
        after = names()
    finally:
        monkeypatch.undo()
        lanes.module.cache_clear()
        vectorised.build.cache_clear()
        lanes_batch.batch_kernel.cache_clear()
        lanes_rk4.rk4_kernel.cache_clear()
    changed = [a != b for a, b in zip(before, after)]
    if dep == "lanes_batch":  # the engine's rk4 driver calls lanes_batch.lane_scratch (the gd driver is that file)
        assert changed[1:] == [True, True]
    else:  # lane_exp: the mixture's build inlines exp_lane; the engine's drivers name module()'s TAG
        assert changed == [True, True, True]


def test_a_read_only_lane_folder_still_serves_its_module(tmp_path, monkeypatch):
    """The use marker is housekeeping: where it cannot be written (a folder shared read-only) the module
    already there is returned as it is (not rewritten elsewhere: that would cost a cold compile)."""
    from meanfield.engine import lanes_files

    (tmp_path / "engine_lanes_abc.py").write_text("# src\n")

    def denied(self, *a, **k):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "touch", denied)
    assert lanes_files._written(tmp_path, "abc", "# src\n") == tmp_path / "engine_lanes_abc.py"


def test_a_lane_module_pruned_before_its_import_is_written_again(tmp_path, monkeypatch):
    """Another process's prune may remove a version between its writing and its import: the module is written
    again and imported (control: the file was gone when the import was first tried)."""
    from meanfield.engine import lanes_files

    monkeypatch.setenv("MEANFIELD_LANES_DIR", str(tmp_path))
    real = lanes_files._written
    gone = []

    def written_then_pruned(d, tag, src):
        path = real(d, tag, src)
        if not gone:
            path.unlink()
            gone.append(path)
        return path

    monkeypatch.setattr(lanes, "_written", written_then_pruned)
    lanes.module.cache_clear()
    for k in [k for k in __import__("sys").modules if k.startswith("_meanfield_engine_lanes_")]:
        monkeypatch.delitem(__import__("sys").modules, k)
    try:
        mod = lanes.module()
    finally:
        lanes.module.cache_clear()
    assert gone and gone[0].exists() and hasattr(mod, "eng_loss_grads_lanes")
