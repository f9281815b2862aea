"""meanfield.core.io.new_dataset makes the dataset h5py's ``create_dataset`` makes: for every array kind the
package writes (and the shape / dtype / fill value datasets of a sweep's reduce), compared dataset by dataset
with h5py's own call in the same file (HDF5 type, dataspace, values, fill value, creation properties:
layout, fill and allocation time, time tracking, attribute order, filters), the low-level route taken for
plain numeric contiguous data and h5py's own call for the rest."""

import io

import h5py
import numpy as np
import pytest

from meanfield.core.io import new_dataset

DATA = {
    "f8": np.arange(6.0).reshape(2, 3), "i8": np.arange(5), "i1": np.array([-1, 0, 2], np.int8),
    "u1": np.array([1, 200], np.uint8), "bool": np.array([True, False]), "scalar": np.array(2.5),
    "empty": np.zeros((0, 3)), "f4": np.ones(3, np.float32), "be": np.arange(3, dtype=">f8"),
    "f16": np.ones(2, np.float16), "nan": np.array([np.nan, -0.0, np.inf]),
}
SHAPED = {"status": ((4, 3), np.int8, -1), "loss": ((4, 3), np.float64, np.nan), "steps": ((7,), np.int64, -1),
          "nofill": ((2,), np.float64, None)}
#: not plain: h5py's own call makes them
ODD = {"strided": np.arange(10.0)[::3], "strings": np.array(["a", "bc"], dtype=h5py.string_dtype()),
       "lst": [1.0, 2.0], "complex": np.array([1 + 2j])}


def _describe(ds):
    pl = ds.id.get_create_plist()
    fill = np.zeros((), ds.dtype) if ds.dtype.kind in "biuf" else None
    if fill is not None:
        pl.get_fill_value(fill)
    return {"type": ds.id.get_type(), "space": ds.id.get_space().get_simple_extent_type(), "shape": ds.shape,
            "dtype": ds.dtype.str, "value": ds[()].tobytes() if ds.dtype.kind != "O" else list(ds[()]),
            "layout": pl.get_layout(), "fill_time": pl.get_fill_time(), "alloc": pl.get_alloc_time(),
            "track_times": pl.get_obj_track_times(), "order": pl.get_attr_creation_order(),
            "fill_defined": pl.fill_value_defined(), "fill": None if fill is None else fill.tobytes(),
            "filters": pl.get_nfilters(), "class": type(ds.id).__name__}


@pytest.mark.parametrize("track_order", [False, True])
def test_new_dataset_is_create_dataset(track_order):
    old = h5py.get_config().track_order
    h5py.get_config().track_order = track_order
    try:
        with h5py.File(io.BytesIO(), "w") as f:
            g = f.create_group("g")
            cases = [(k, {"data": v}) for k, v in {**DATA, **ODD}.items()]
            cases += [(k, {"shape": s, "dtype": d, "fillvalue": fv}) for k, (s, d, fv) in SHAPED.items()]
            cases += [("data_and_dtype", {"data": np.arange(3.0), "dtype": np.float32}),  # both: h5py's own call
                      ("data_dtype_fill", {"data": np.arange(3), "dtype": np.int16, "fillvalue": 7})]
            for name, kw in cases:
                ref = g.create_dataset("ref_" + name, **kw)
                got = new_dataset(g, "new_" + name, **kw)
                assert isinstance(got, h5py.h5d.DatasetID)
                a, b = _describe(ref), _describe(g["new_" + name])
                assert a.pop("type") == b.pop("type"), name  # H5Tequal
                assert a == b, name
    finally:
        h5py.get_config().track_order = old


def test_new_dataset_errors_are_h5pys():
    with h5py.File(io.BytesIO(), "w") as f:
        new_dataset(f, "x", np.arange(3.0))
        with pytest.raises(ValueError):  # a name already there: h5py's error (its own call)
            new_dataset(f, "x", np.arange(3.0))
        new_dataset(f, "a/b", np.arange(2))  # a path: h5py makes the group, as create_dataset does
        assert f["a/b"][()].tolist() == [0, 1]
        new_dataset(f, "\u03c9", np.arange(2.0))  # a non-ASCII name: h5py's own call
        assert f["\u03c9"][()].tolist() == [0.0, 1.0]
