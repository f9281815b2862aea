"""The files of an ensemble (``meanfield.core.ensemble``): formats, the output table, chunk files, the reduce.

A solve writes into its folder (:func:`paths`): ``ensemble.json`` (the plan),
``chunks/<key>.h5`` (one per finished chunk, written atomically: a chunk
file whose ``key`` matches is done, which is how a solve resumes),
``records/`` (full run files of the kept points) and ``sweep.h5``, the
reduction of every chunk into arrays over the axes (:func:`reduce`; read
back with :func:`load`). :data:`OUTPUTS` names the per-trajectory outputs,
:data:`STATUS` their status codes.

Example
-------
>>> from meanfield.core.ensemble_store import paths
>>> sorted(paths("runs/phase"))
['chunks', 'dir', 'plan', 'records', 'sweep']
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from .config import ConfigError


def _default_system() -> str:
    """The registered default ensemble system (a plan written without a system name: older plans)."""
    from .hooks import default_ensemble_system

    return default_ensemble_system()

CHUNK_FORMAT = "meanfield-chunk"
SWEEP_FORMAT = "meanfield-ensemble"
FORMAT_VERSION = 1
#: per-point status codes in chunk files and sweep.h5

STATUS = {0: "complete", 2: "diverged (non-finite state or loss)", 3: "diverged (an entry above max_abs)",
          -1: "not run", -3: "invalid config"}
#: the built-in outputs (computed in one numba kernel per launch) and their meaning
OUTPUTS = {
    "status": "0 complete, 2 diverged (non-finite), 3 diverged (above max_abs), -1 not run, -3 invalid config",
    "t_end": "time of the last record",
    "steps_end": "(solver) step of the last record",
    "loss_end": "loss at the last record",
    "min_margin_end": "smallest margin y f(X) over all samples at the last record",
    "min_margin_consistent_end": "smallest margin over the consistent samples at the last record (NaN: none)",
    "min_margin_inconsistent_end": "smallest margin over the inconsistent samples at the last record (NaN: none)",
    "T1": "neuron stage done (meanfield.core.stagetimes; NaN: not reached)",
    "T2": "attention stage done (NaN: not reached)",
    "T_loss": "first time with loss <= 0.05, interpolated between records (GD: to the step; NaN: not reached)",
    "margin_end": "margin of every sample at the last record (points x samples, NaN-padded)",
}


def paths(out: str | Path) -> dict:
    out = Path(out)
    if out.suffix:
        raise ConfigError(f"out: a folder (sweep.h5 and chunks/ go inside), got {str(out)!r}")
    return {"dir": out, "sweep": out / "sweep.h5", "plan": out / "ensemble.json", "chunks": out / "chunks",
            "records": out / "records"}


def _fid(f):
    return getattr(f, "key", None) or id(f)  # dask futures: their key; others: the object


def _write_json(path: Path, obj) -> None:
    from .io import write_bytes_atomic

    write_bytes_atomic(path, json.dumps(obj).encode())  # a full disk: one OSError naming the path, no tmp left


def _chunk_done(path: Path, key: str) -> bool:
    if not path.exists():
        return False
    try:
        import h5py

        with h5py.File(path, "r") as f:
            return f.attrs.get("format") == CHUNK_FORMAT and f.attrs.get("key") == key
    except (OSError, ValueError):
        return False


def _write_chunk(P: dict, problem: Any, r: dict) -> None:
    from .io import write_h5_atomic

    system = problem.system
    for i, tr in r["records"].items():  # full run files of the kept points, before the chunk counts as done
        system.save(P["records"] / f"{i:07d}.h5", system.config(problem.base, problem.point(i)), tr)
    data = dict(r["arrays"])
    data["index"] = np.arange(r["lo"], r["hi"], dtype=np.int64)
    attrs = {"format": CHUNK_FORMAT, "format_version": FORMAT_VERSION, "key": r["key"], "lo": r["lo"],
             "hi": r["hi"], "elapsed_s": r["elapsed_s"], "host": r["host"], "pid": r["pid"],
             "threads": r["threads"], "invalid": {str(k + r["lo"]): v for k, v in r["invalid"].items()}}
    write_h5_atomic(P["chunks"] / f"{r['key']}.h5", attrs, data)


# ------------------------------------------------------------------ reduce


def _unravel(i, shape: tuple[int, ...]):
    """``np.unravel_index(i, shape)`` (C order): for an int in range, the same indices as Python ints
    (a grid's point is looked up 3 times a solve; numpy takes microseconds a call); anything else is
    numpy's own answer (its error for a negative or too large index, a float)."""
    idx, r = [], i
    if type(i) is int and i >= 0 and 0 not in shape:
        for n in reversed(shape):
            r, j = divmod(r, n)
            idx.append(j)
        idx.reverse()
    return np.unravel_index(i, shape) if r or not idx else tuple(idx)


def _slabs(lo: int, hi: int, shape: tuple[int, ...]):
    """The C-order flat range [lo, hi) of an array of ``shape`` as hyperslabs:
    yields (index tuple, flat start, flat stop), each index selecting a block
    whose C-order elements are exactly flat [start, stop)."""
    if lo >= hi:
        return
    if len(shape) == 1:
        yield (slice(lo, hi),), lo, hi
        return
    inner = int(np.prod(shape[1:]))
    a, ra = divmod(lo, inner)
    b, rb = divmod(hi, inner)
    if a == b:
        for sl, l2, h2 in _slabs(ra, rb, shape[1:]):
            yield (a, *sl), a * inner + l2, a * inner + h2
        return
    if ra:
        for sl, l2, h2 in _slabs(ra, inner, shape[1:]):
            yield (a, *sl), a * inner + l2, a * inner + h2
        a += 1
    if b > a:
        yield (slice(a, b), *(slice(None),) * (len(shape) - 1)), a * inner, b * inner
    if rb:
        for sl, l2, h2 in _slabs(0, rb, shape[1:]):
            yield (b, *sl), b * inner + l2, b * inner + h2


def _axis_values(vals: list) -> np.ndarray:
    try:
        return np.array([float(v) for v in vals], np.float64)
    except (TypeError, ValueError):
        return np.array([str(v) for v in vals], dtype=object)


def _room_for(path: Path, chunks: Path, plan: dict) -> None:
    """sweep.h5 is streamed through h5py (one chunk in memory at a time), which
    cannot fail cleanly on a full disk: refuse before writing when the free
    space is below the chunk files' total size (sweep.h5 holds what they hold,
    plus the axes), as one OSError naming the path."""
    import errno
    import shutil

    need = sum(f.stat().st_size for f in chunks.glob("*.h5")) + 8 * int(plan.get("n", 0)) + (1 << 20)
    try:
        free = shutil.disk_usage(path.parent).free
    except OSError:  # pragma: no cover - the folder vanished: the write below says so
        return
    if need > free:
        raise OSError(errno.ENOSPC, f"no space left for sweep.h5 (needs about {need / 2**20:.3g} MiB, "
                                    f"{free / 2**20:.3g} MiB free); the chunk files are kept: free space and "
                                    "rerun the same command (finished chunks are not run again)", str(path))


def reduce(out: str | Path, problem: Any | None = None, status: str | None = None, fresh: dict | None = None) -> dict:
    """Stream the plan's chunk files into ``out/sweep.h5`` (written atomically),
    one chunk in memory at a time. Without ``problem`` the plan
    ``out/ensemble.json`` of the last solve is used (no user reduction).
    ``fresh``: chunk key -> the result of a chunk just run and written
    (``meanfield.core.ensemble.run_chunk``): taken from memory, not read back."""
    import h5py

    from .. import __version__
    from .io import new_dataset, set_new_attrs

    P = paths(out)
    plan = json.loads(P["plan"].read_text())
    shape = tuple(plan["shape"])
    N = int(plan["n"])
    outputs = plan["outputs"]
    tmp = P["sweep"].with_name(f"sweep.h5.tmp-{os.getpid()}")
    _room_for(P["sweep"], P["chunks"], plan)  # a full disk under h5py is a crash: refuse it before writing
    counts: dict[str, int] = {}
    invalid: dict[str, str] = {}
    acc = problem.reduction_init if problem is not None else None
    n_done = 0
    try:
        with h5py.File(tmp, "w") as f:
            dsets: dict = {}

            def dset(name, dtype, tail=()):  # (low-level id, shape, dtype) of the output's dataset
                if name not in dsets:
                    fill = -1 if name == "status" else (-1 if np.dtype(dtype).kind == "i" else np.nan)
                    dims = shape + tuple(tail)
                    dsets[name] = (new_dataset(f, name, shape=dims, dtype=dtype, fillvalue=fill), dims,
                                   np.dtype(dtype))
                return dsets[name]

            dset("status", np.int8)
            for o in outputs:
                if o not in ("status", "margin_end"):
                    dset(o, np.int64 if o == "steps_end" else np.float64)
            for lo, hi, key in plan["chunks"]:
                cp = P["chunks"] / f"{key}.h5"
                if fresh and key in fresh:
                    r = fresh[key]
                    part = dict(r["arrays"], index=np.arange(r["lo"], r["hi"], dtype=np.int64))
                    invalid.update({str(k + r["lo"]): v for k, v in r["invalid"].items()})
                elif not _chunk_done(cp, key):
                    continue
                else:
                    with h5py.File(cp, "r") as c:
                        part = {k: c[k][()] for k in c.keys()}
                        invalid.update(json.loads(c.attrs.get("invalid", "{}")))
                if not np.array_equal(part["index"], np.arange(lo, hi)):  # pragma: no cover - keys hash the range
                    raise RuntimeError(f"chunk file {cp} does not hold points {lo}..{hi - 1}")
                for name, arr in part.items():
                    if name == "index":
                        continue
                    dsid, ds_shape, ds_dtype = dset(name, arr.dtype, arr.shape[1:])
                    if name == "margin_end" and arr.shape[1] > ds_shape[-1]:  # pragma: no cover - one K, L
                        arr = arr[:, : ds_shape[-1]]
                    for sl, a, b in _slabs(lo, hi, shape):
                        blk = tuple(len(range(*x.indices(n))) for x, n in zip(sl, shape) if isinstance(x, slice))
                        block = arr[a - lo:b - lo].reshape(blk + arr.shape[1:])
                        if block.shape == ds_shape and block.dtype == ds_dtype and block.flags.c_contiguous:
                            dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, block)  # all of it: ds[sl] = block, less h5py
                        else:
                            h5py.Dataset(dsid)[sl] = block
                st = part["status"]
                for code in np.unique(st):
                    nm = STATUS.get(int(code), str(int(code)))
                    counts[nm] = counts.get(nm, 0) + int(np.count_nonzero(st == code))
                n_done += int(np.count_nonzero(st != -1))
                if problem is not None and problem.reduction is not None:
                    acc = problem.reduction(acc, part)
                del part
            missing = N - n_done
            if missing:
                counts[STATUS[-1]] = counts.get(STATUS[-1], 0) + missing
            ax = f.create_group("axes")
            if plan["axes"] is not None:
                names = list(plan["axes"])
                for k, v in plan["axes"].items():
                    vals = _axis_values(v)
                    if vals.dtype == object:
                        ax.create_dataset(k, data=vals.astype(str).astype(object), dtype=h5py.string_dtype())
                    else:
                        new_dataset(ax, k, vals)
            else:
                names = ["point"]
                new_dataset(ax, "point", np.arange(N))
            if plan.get("keep_records"):
                rg = f.create_group("records")
                for i in plan["keep_records"]:
                    rp = P["records"] / f"{i:07d}.h5"
                    if rp.exists():
                        rg[str(i)] = h5py.ExternalLink(os.path.relpath(rp, P["dir"]), "/")
            if status is None:
                status = "complete" if missing == 0 else "incomplete"
            attrs = {"format": SWEEP_FORMAT, "format_version": FORMAT_VERSION, "meanfield_version": __version__,
                     "system": plan["system"] if "system" in plan else _default_system(), "axes": json.dumps(names),
                     "base": json.dumps(plan["base"]),
                     "n_points": N, "n_done": n_done, "status": status, "counts": json.dumps(counts),
                     "status_codes": json.dumps({str(k): v for k, v in STATUS.items()}),
                     "outputs": json.dumps({k: OUTPUTS.get(k, "output_func") for k in dsets}),
                     "invalid": json.dumps(invalid), "backend": plan["backend"], "chunk_size": plan["chunk_size"],
                     "n_chunks": len(plan["chunks"])}
            set_new_attrs(f, attrs)  # f.attrs[k] = v for each, at a quarter of the cost
        os.replace(tmp, P["sweep"])
    finally:
        if tmp.exists():
            tmp.unlink()
    return {"path": P["sweep"], "n_done": n_done, "counts": counts, "status": status, "reduced": acc}


def load(path: str | Path) -> dict:
    """``sweep.h5`` as a dict: every output array (over the grid axes),
    ``axes`` (name -> values, in order) and ``attrs``."""
    import h5py

    with h5py.File(path, "r") as f:
        if f.attrs.get("format") != SWEEP_FORMAT:
            raise ValueError(f"{path}: not a meanfield ensemble file (format {f.attrs.get('format')!r})")
        out = {k: f[k][()] for k in f.keys() if isinstance(f[k], h5py.Dataset)}
        names = json.loads(f.attrs["axes"])
        out["axes"] = {k: f["axes"][k][()] for k in names}
        for k, v in out["axes"].items():
            if v.dtype == object:
                out["axes"][k] = np.array([x.decode() if isinstance(x, bytes) else x for x in v], dtype=object)
        out["attrs"] = {k: (json.loads(v) if k in ("axes", "base", "counts", "status_codes", "outputs", "invalid")
                            else v) for k, v in f.attrs.items()}
    return out
