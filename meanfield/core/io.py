"""HDF5 run files: the public schema, atomic writes, reading back.

A run file is written whole to ``PATH.tmp-<pid>`` in the target folder and
then renamed over ``PATH`` (``os.replace``), so no half-written file ever sits
at the target path. Root attributes common to every system:

    format = "meanfield-run", format_version = 1, system, meanfield_version,
    config (JSON of the fully resolved config), status ("complete" |
    "diverged" | "interrupted"), message, plus system-specific attributes.

Datasets and groups are system-specific (see the README's schema section).
"""

from __future__ import annotations

import contextlib
import math
import json
import os
from pathlib import Path
from typing import Any

import h5py
import numpy as np
from h5py import h5a, h5d, h5p, h5s, h5t

from .. import __version__
from .errors import raise_if_signalled

from .run import FORMAT  # noqa: E402  "meanfield-run"
FORMAT_VERSION = 2  # 2: width inf (was -1), initial_state, tokens and counts, description and its hash
STATUSES = ("complete", "diverged", "interrupted")


def _attr(v):
    if isinstance(v, (dict, list, tuple)) and not (isinstance(v, (list, tuple)) and v and all(isinstance(x, (int, float)) for x in v)):
        return json.dumps(v)
    if v is None:
        return "null"
    return v


def _write_group(g: h5py.Group, content: dict[str, Any]) -> None:
    for name, val in content.items():
        if isinstance(val, dict):
            _write_group(g.create_group(name), val)
            continue
        arr = np.asarray(val)
        if arr.dtype.kind in ("U", "O"):
            g.create_dataset(name, data=np.asarray([str(x) for x in np.ravel(arr)], dtype=h5py.string_dtype()).reshape(arr.shape))
        else:
            kw = {"compression": "gzip", "compression_opts": 4} if arr.size > 4096 else {}
            if arr.ndim == 0 or arr.nbytes <= BLOCK_BYTES:
                if kw:
                    g.create_dataset(name, data=arr, **kw)
                else:
                    new_dataset(g, name, arr)
                continue
            # large: written in blocks of rows, so that a signal (handled by Python between two C calls only)
            # stops the write within a fraction of a second, not after the whole array is compressed
            d = g.create_dataset(name, shape=arr.shape, dtype=arr.dtype, **kw)
            c0 = d.chunks[0] if d.chunks else 1  # whole chunks per block: a chunk written twice is compressed twice
            rows = max(1, BLOCK_BYTES // max(1, arr[0].nbytes) // c0) * c0
            for a in range(0, arr.shape[0], rows):
                raise_if_signalled()  # a signal's KeyboardInterrupt raised inside HDF5 is swallowed there
                d[a:a + rows] = arr[a:a + rows]


def new_dataset(g, name: str, data=None, *, shape=None, dtype=None, fillvalue=None):
    """``g.create_dataset(name, data=data)`` or ``g.create_dataset(name, shape=shape, dtype=dtype,
    fillvalue=fillvalue)`` (contiguous, no filters), returning the new dataset's low-level id
    (``h5py.h5d.DatasetID``). A plain numeric array under an ASCII name without ``/`` is made through
    h5py's low-level API with the calls h5py's high-level ``create_dataset`` makes (the same HDF5 type
    from ``h5t.py_create``, dataspace, creation properties: fill value, no time tracking, the
    configured attribute order), at a fraction of its ~100 us; anything else goes through
    ``g.create_dataset`` itself (its result or its error).

    Parameters
    ----------
    g : h5py.Group or h5py.File
        Where (open for writing).
    name : str
        The dataset's name.
    data : array_like, optional
        Its values (else ``shape`` and ``dtype``: a dataset of ``fillvalue``).
    shape, dtype, fillvalue : optional
        As ``create_dataset`` takes them.

    Returns
    -------
    h5py.h5d.DatasetID

    Example
    -------
    >>> import io, h5py, numpy as np
    >>> with h5py.File(io.BytesIO(), "w") as f:
    ...     _ = new_dataset(f, "x", np.arange(3.0)); _ = new_dataset(f, "s", shape=(2,), dtype=np.int8, fillvalue=-1)
    ...     f["x"][()].tolist(), f["s"][()].tolist()
    ([0.0, 1.0, 2.0], [-1, -1])
    """
    arr = None
    if data is not None:
        arr = data if type(data) is np.ndarray and data.flags.c_contiguous else None
        dt = arr.dtype if arr is not None else None
        shp = arr.shape if arr is not None else None
    else:
        dt = np.dtype(dtype) if dtype is not None else None
        shp = tuple(shape) if isinstance(shape, (tuple, list)) else None
    plain = (dt is not None and shp is not None and dt.kind in "biuf" and dt.fields is None and dt.subdtype is None
             and type(name) is str and name.isascii() and "/" not in name and name
             and (data is None or dtype is None) and (fillvalue is None or type(fillvalue) in (int, float)))
    if plain:
        try:
            dcpl = h5p.create(h5p.DATASET_CREATE)
            if fillvalue is not None:
                dcpl.set_fill_value(np.array(fillvalue))  # as make_new_dset
            dcpl.set_obj_track_times(False)
            order = h5py.get_config().track_order
            if order is True:
                dcpl.set_attr_creation_order(h5p.CRT_ORDER_TRACKED | h5p.CRT_ORDER_INDEXED)
            elif order is False:
                dcpl.set_attr_creation_order(0)
            tid = h5t.py_create(dt, logical=1)
            sid = h5s.create_simple(shp, None)
        except Exception:
            plain = False
    if not plain:
        kw = {k: v for k, v in (("data", data), ("shape", shape), ("dtype", dtype), ("fillvalue", fillvalue))
              if v is not None}  # everything given, as h5py's own call takes it
        return g.create_dataset(name, **kw).id
    dsid = h5d.create(g.id, name.encode("ascii"), tid, sid, dcpl=dcpl)
    if arr is not None:
        dsid.write(h5s.ALL, h5s.ALL, arr)
    return dsid


#: a dataset larger than this is written in blocks of rows of about this size (compressed at ~20-50 MB/s:
#: a block takes well under a second)
BLOCK_BYTES = 8 << 20


def write_bytes_atomic(path: str | Path, payload) -> Path:
    """Write ``payload`` (bytes or a buffer, e.g. an HDF5 image built in a
    ``BytesIO``) to ``path`` atomically: ``PATH.tmp-PID`` in the same folder
    with plain ``os.write``, then renamed over ``path``. A full disk or a
    file-size limit (ENOSPC, EFBIG, EDQUOT) is one clean ``OSError`` naming
    ``path``, the tmp file removed and any earlier file at ``path`` kept.
    Signals are held until the file is whole (seconds at most)."""
    from .guard import deferred_signals

    with deferred_signals(), _tmp_beside(Path(path)) as tmp:  # a signal now is handled once the file is whole
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        try:
            view = memoryview(payload).cast("B")
            while len(view):
                view = view[os.write(fd, view[: 1 << 26]):]
        finally:
            os.close(fd)
        os.replace(tmp, path)
    return Path(path)


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically (:func:`write_bytes_atomic`):
    a full disk is one OSError naming ``path``, no partial file is left.

    Parameters
    ----------
    path : str or Path
        The file.
    text : str
        Its content.

    Returns
    -------
    Path

    Example
    -------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "a.txt"
    >>> write_text_atomic(p, "x").read_text()
    'x'
    """
    return write_bytes_atomic(path, text.encode("utf-8"))


def save_figure(fig, path: str | Path, **kw) -> Path:
    """``fig.savefig`` into memory, then :func:`write_bytes_atomic` to ``path``
    (format from the suffix): a figure is whole or absent, and a full disk is
    one OSError naming ``path``.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure.
    path : str or Path
        The file (.png, .pdf, .svg).
    **kw
        Passed to ``savefig`` (dpi, ...).

    Returns
    -------
    Path

    Example
    -------
    >>> import matplotlib; matplotlib.use("Agg"); import matplotlib.pyplot as plt, tempfile, pathlib
    >>> fig = plt.figure(); p = save_figure(fig, pathlib.Path(tempfile.mkdtemp()) / "f.png"); plt.close(fig)
    >>> p.stat().st_size > 0
    True
    """
    import io as _io

    path = Path(path)
    buf = _io.BytesIO()
    fig.savefig(buf, format=(path.suffix.lstrip(".") or "png"), **kw)
    return write_bytes_atomic(path, buf.getbuffer())


@contextlib.contextmanager
def _tmp_beside(path: Path):
    """``PATH.tmp-PID`` in the folder of ``path`` (created; a stale tmp of a
    killed run there removed) for a write-then-rename; an OSError inside is one
    clean OSError naming ``path``; the tmp file never outlives the block."""
    from .guard import clean_stale_tmp

    path.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_tmp(path)  # left by a killed run at this path
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    try:
        yield tmp
    except OSError as e:
        raise OSError(e.errno, f"{e.strerror or e}: the file was not written (an earlier file there is kept)",
                      str(path)) from None
    finally:
        if tmp.exists():
            tmp.unlink()


#: arrays totalling more raw bytes than this are written by HDF5 straight to the
#: tmp file (no in-memory image: it would double the memory of a large file)
IN_MEMORY_MAX = 256 << 20


def _nbytes(content: dict[str, Any]) -> int:
    """The raw size estimate of datasets / groups (name -> array or dict), in bytes."""
    total = 0
    for val in content.values():
        if isinstance(val, dict):
            total += _nbytes(val)
            continue
        arr = np.asarray(val)
        if arr.dtype.kind == "O":
            total += 16 * arr.size + sum(len(str(x).encode()) for x in np.ravel(arr))
        else:
            total += arr.nbytes
    return total


_VLEN_STR = h5py.string_dtype()  # what h5py stores a Python str attribute as (variable-length UTF-8)


def _attr_array(v) -> np.ndarray | None:
    """The array h5py's ``attrs[name] = v`` writes for ``v`` (``h5py._hl.base.array_for_new_object``) when
    ``v`` is a Python str, a number or bool (Python or numpy), or a list, tuple or array of numbers; None for
    anything else (h5py's own call then writes it)."""
    if type(v) is str:  # exactly str (h5py's guess_dtype): a numpy str_ is not
        return np.array(v, dtype=_VLEN_STR)
    if type(v) in (int, float, bool) or isinstance(v, (np.generic, np.ndarray, list, tuple)):
        try:
            data = np.asarray(v, order="C")
        except (TypeError, ValueError, OverflowError):  # ragged and such: h5py's call says what is wrong
            return None
        if data.dtype.kind in "biuf" and data.dtype.fields is None and data.dtype.subdtype is None:
            return data
    return None


def set_new_attrs(obj, attrs: dict[str, Any]) -> None:
    """``obj.attrs[name] = value`` for every item of ``attrs`` (``obj``: an h5py File, Group or Dataset),
    through h5py's low-level API where h5py's high-level call costs most (~60 us an attribute, ~15 here):
    the attribute made is the one ``obj.attrs[name] = value`` makes (the same HDF5 type from
    ``h5t.py_create``, dataspace and value) for str (variable-length UTF-8), Python and numpy numbers and
    bools, and lists, tuples and arrays of numbers. Any other value, a name already there, or a low-level
    call that fails goes through ``obj.attrs[name] = value`` itself (its result or its error).

    Parameters
    ----------
    obj : h5py.File, h5py.Group or h5py.Dataset
        The object (open for writing).
    attrs : dict
        name -> value, as ``obj.attrs`` takes them (dicts and lists already JSON where wanted: ``_attr``).

    Example
    -------
    >>> import io, h5py
    >>> with h5py.File(io.BytesIO(), "w") as f:
    ...     set_new_attrs(f, {"format": "meanfield-run", "n": 3, "x": [1.0, 2.0]})
    ...     f.attrs["format"], f.attrs["n"], f.attrs["x"].tolist()
    ('meanfield-run', np.int64(3), [1.0, 2.0])
    """
    oid = obj.id
    types: dict = {}
    spaces: dict = {}
    for name, v in attrs.items():
        data = _attr_array(v)
        if data is not None and type(name) is str:
            try:
                key = name.encode("ascii")  # as h5py encodes a name (HLObject._e)
            except UnicodeEncodeError:
                key = name.encode("utf8")
            if not h5a.exists(oid, key):
                try:
                    tk = "str" if type(v) is str else data.dtype.str
                    if tk not in types:
                        types[tk] = (h5t.py_create(data.dtype, logical=True), h5t.py_create(data.dtype))
                    if data.shape not in spaces:
                        spaces[data.shape] = h5s.create_simple(data.shape)
                    htype, mtype = types[tk]
                    attr = h5a.create(oid, key, htype, spaces[data.shape])
                except Exception:
                    pass  # h5py's own call below
                else:
                    try:
                        attr.write(data, mtype=mtype)
                        written = True
                    except Exception:
                        written = False
                    attr.close()
                    if written:
                        continue
                    h5a.delete(oid, key)  # as h5py does when a write fails; its own call below
        obj.attrs[name] = v


def _fill(f: h5py.File, attrs: dict[str, Any], data: dict[str, Any]) -> None:
    set_new_attrs(f, {k: _attr(v) for k, v in attrs.items()})
    _write_group(f, data)


def _write_h5_direct(path: Path, attrs: dict[str, Any], data: dict[str, Any], need: int) -> Path:
    """HDF5 writes ``PATH.tmp-PID`` itself (after checking that the folder has
    ``need`` bytes free), then it is renamed over ``path`` with signals held."""
    import errno
    import shutil

    from .guard import deferred_signals

    with _tmp_beside(path) as tmp:
        free = shutil.disk_usage(path.parent).free
        if free < need:  # HDF5 must never see a failing write (it then crashes at interpreter shutdown)
            raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} ({need} bytes needed, {free} free)")
        with h5py.File(tmp, "w") as f:
            _fill(f, attrs, data)
        with deferred_signals():  # a signal now is handled once the file is in place
            os.replace(tmp, path)
    return path


def write_h5_atomic(path: str | Path, attrs: dict[str, Any], data: dict[str, Any]) -> Path:
    """Write an HDF5 file atomically (tmp file in the same folder, then rename):
    root attributes and datasets / groups (name -> array or dict).

    Arrays totalling at most :data:`IN_MEMORY_MAX` bytes: the HDF5 image is
    built in memory (signals not held: nothing is written yet) and written by
    :func:`write_bytes_atomic` (signals held): a full disk is one clean
    ``OSError`` naming ``path``; the HDF5 library never sees a failing write
    (it then crashes at interpreter shutdown). Larger: HDF5 writes the tmp
    file itself after a check that the folder has the raw size free (if not,
    one ``OSError`` naming ``path``, nothing written); signals are held only
    around the final rename."""
    import io

    need = _nbytes(data) + sum(len(str(_attr(v)).encode()) for v in attrs.values())
    if need > IN_MEMORY_MAX:
        return _write_h5_direct(Path(path), attrs, data, need)
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        _fill(f, attrs, data)
    return write_bytes_atomic(path, buf.getbuffer())


def write_run(path: str | Path, *, system: str, config: dict, status: str, message: str,
              data: dict[str, Any], attrs: dict[str, Any] | None = None) -> Path:
    """Write a run file atomically (to ``PATH.tmp-PID``, then renamed over ``path``).

    Parameters
    ----------
    path : str or Path
        The run file.
    system : str
        ``mixture``, ``engine`` or ``induction`` (root attribute ``system``).
    config : dict
        The fully resolved config (stored as JSON in ``config``).
    status : str
        ``complete``, ``diverged`` or ``interrupted``.
    message : str
        Where and why the run stopped.
    data : dict
        Name -> array (a dataset), or name -> dict (a group of them).
    attrs : dict or None
        More root attributes (dicts and lists are stored as JSON).

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    ValueError
        An unknown ``status``.
    OSError
        The folder cannot be written or the disk is full (nothing is left
        at ``path`` or beside it).

    Examples
    --------
    >>> import numpy as np
    >>> from meanfield.core.io import read_run, write_run
    >>> p = write_run("runs/tiny.h5", system="engine", config={"eta": 0.1}, status="complete",
    ...               message="", data={"t": np.arange(3.0), "loss": np.ones(3)})
    >>> r = read_run(p); r.attrs["status"], r["t"].tolist()
    ('complete', [0.0, 1.0, 2.0])
    """
    if status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
    base = {"format": FORMAT, "format_version": FORMAT_VERSION, "system": system, "meanfield_version": __version__,
            "config": json.dumps(config, sort_keys=True), "status": status, "message": message}
    return write_h5_atomic(path, {**base, **(attrs or {})}, data)


from .run import Run, read_file  # noqa: E402,F401  the one run object (meanfield.Run) and its reader


def read_run(path: str | Path) -> Run:
    """Read a run file of any system into a :class:`meanfield.core.run.Run`
    (``run["S"]``, ``run.attrs``, ``run.config``, ``run.records``, ``run.state(t)``,
    ``run.to_xarray()``; see ``docs/run-files.md``): :func:`meanfield.core.run.read_file`.

    Parameters
    ----------
    path : str or Path
        the run file.

    Returns
    -------
    Run

    Examples
    --------
    >>> r = read_run("runs/mixture.h5")     # doctest: +SKIP
    >>> r["S"].shape, r.attrs["status"]     # doctest: +SKIP
    """
    return read_file(path)
