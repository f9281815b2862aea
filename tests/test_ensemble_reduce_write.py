"""The reduce writes a chunk that covers a whole output dataset in one HDF5 write (h5py's ds[sl] = block
otherwise): sweep.h5 is the same either way (one chunk of the whole grid against chunks cut across its rows),
and holds the chunk files' arrays (read back with h5py, reshaped over the axes)."""

import h5py
import numpy as np

from meanfield.core.ensemble import EnsembleProblem, solve


def _datasets(path):
    with h5py.File(path, "r") as f:
        out = {}
        f.visititems(lambda n, o: out.__setitem__(n, (o.dtype, o.shape, repr(o.fillvalue), o.chunks, o[()]))
                     if isinstance(o, h5py.Dataset) else None)
        return out


def test_one_write_equals_row_slabs_and_the_chunks(tmp_path):
    axes = {"omega": [0.05, 0.1, 0.2], "eta": [0.3, 0.5]}
    base = {"steps": 5, "record_every": 5}
    whole = solve(EnsembleProblem(base, axes=axes), tmp_path / "whole", chunk_size=6, progress=False)
    cut = solve(EnsembleProblem(base, axes=axes), tmp_path / "cut", chunk_size=4, progress=False)  # rows cut
    assert (whole.n_chunks, cut.n_chunks) == (1, 2)
    a, b = _datasets(whole.path), _datasets(cut.path)
    assert a.keys() == b.keys() and "loss_end" in a and "status" in a
    for k in a:
        (da, sa, fa, ca, va), (db, sb, fb, cb, vb) = a[k], b[k]
        assert (da, sa, fa, ca) == (db, sb, fb, cb), k
        assert np.array_equal(va, vb, equal_nan=va.dtype.kind == "f"), k
    chunk = next((tmp_path / "whole" / "chunks").glob("*.h5"))
    with h5py.File(chunk, "r") as c:
        for k in c:
            if k != "index":
                assert np.array_equal(c[k][()].reshape(3, 2), a[k][4], equal_nan=c[k].dtype.kind == "f"), k
                assert c[k].dtype == a[k][0], k
