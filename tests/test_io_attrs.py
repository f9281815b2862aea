"""meanfield.core.io.set_new_attrs writes the attributes h5py's ``obj.attrs[name] = value`` writes: every kind
of value the package stores (what ``_attr`` hands on: str, JSON text, "null", Python and numpy numbers and
bools, lists / tuples / arrays of numbers), compared attribute by attribute with h5py's own call (HDF5 type
class, size, sign, byte order, string charset and variable length, enum members, dataspace, shape, value),
the fast route taken for those kinds and h5py's own call for the rest."""

import io
import json

import h5py
import numpy as np
import pytest

from meanfield.core.io import _attr, set_new_attrs

VALUES = {
    "format": "meanfield-run", "empty": "", "unicode": "omega \u03c9 \u2264 1 \u2014 ok", "json": json.dumps({"a": [1, 2]}),
    "null": _attr(None), "int": 4000, "zero": 0, "neg": -3, "big": 2**62, "bigger": 2**63, "true": True, "false": False,
    "float": 0.1, "nan": float("nan"), "inf": float("-inf"), "negzero": -0.0,
    "np_f64": np.float64(1.5), "np_f32": np.float32(2.5), "np_i64": np.int64(-7), "np_i32": np.int32(7),
    "np_u8": np.uint8(200), "np_bool": np.bool_(True), "ints": [1, 2, 3], "floats": [0.5, 1e-300],
    "mixed": [1, 2.5], "bools": [True, False], "tuple": (3, 4), "one": [7],
    "arr": np.arange(6.0).reshape(2, 3), "arr_i": np.arange(4, dtype=np.int32), "arr0": np.array(3.25),
    "arr_empty": np.zeros(0), "arr_bool": np.array([True, False, True]), "arr_strided": np.arange(10.0)[::3],
    "arr_be": np.arange(3, dtype=">f8"), "arr_f16": np.ones(2, np.float16),
    "\u03c9_name": 1.0,  # a non-ASCII name (stored UTF-8, as h5py stores it)
}
#: what h5py's own call must write (not the low-level route)
ODD = {"bytes": b"abc", "bytes_list": [b"a", b"b"], "str_list": ["a", "b"],
       "obj_arr": np.array(["a", "bc"], dtype=object)}


def _describe(obj, name):
    """Everything HDF5 knows of attribute ``name`` of ``obj`` (an h5py object), read with the low-level API."""
    aid = h5py.h5a.open(obj.id, name.encode("utf8"))
    t, sp = aid.get_type(), aid.get_space()
    c = t.get_class()
    d = {"class": c, "size": t.get_size(), "space": sp.get_simple_extent_type(), "shape": sp.shape,
         "dtype": repr(aid.dtype)}
    if c == h5py.h5t.STRING:
        d.update(cset=t.get_cset(), vlen=t.is_variable_str(), pad=t.get_strpad())
    if c in (h5py.h5t.INTEGER, h5py.h5t.FLOAT):
        d.update(order=t.get_order())
    if c == h5py.h5t.INTEGER:
        d.update(sign=t.get_sign())
    if c == h5py.h5t.ENUM:
        d.update(members=[(t.get_member_name(i), t.get_member_value(i)) for i in range(t.get_nmembers())],
                 base=t.get_super().get_size())
    aid.close()
    return d


def _same_value(a, b):
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
    if isinstance(a, (float, np.floating)) and np.isnan(a):
        return bool(np.isnan(b))
    return bool(a == b) and (not isinstance(a, (float, np.floating)) or np.signbit(a) == np.signbit(b))


def _both(values):
    """(file written by h5py's attrs, file written by set_new_attrs), both open for reading, on a file, a
    group and a dataset."""
    bufs = []
    for how in ("h5py", "ours"):
        buf = io.BytesIO()
        with h5py.File(buf, "w") as f:
            objs = [f, f.create_group("g"), f.create_dataset("d", data=np.arange(3.0))]
            for o in objs:
                if how == "h5py":
                    for k, v in values.items():
                        o.attrs[k] = v
                else:
                    set_new_attrs(o, values)
        bufs.append(buf)
    return [h5py.File(b, "r") for b in bufs]


@pytest.mark.parametrize("values", [VALUES, ODD], ids=["package-kinds", "h5py-call"])
def test_attributes_equal_h5py_high_level(values):
    a, b = _both(values)
    with a, b:
        for path in ("/", "g", "d"):
            oa, ob = a[path], b[path]
            assert list(oa.attrs) == list(ob.attrs) == sorted(values, key=lambda k: k.encode())  # HDF5's name order
            for k in values:
                assert _describe(oa, k) == _describe(ob, k), (path, k)
                assert _same_value(oa.attrs[k], ob.attrs[k]), (path, k, oa.attrs[k], ob.attrs[k])


def test_kinds_are_what_h5py_makes():
    """The HDF5 types themselves (not only equal both ways): str variable-length UTF-8, int64, float64, bool
    h5py's enum, lists as arrays."""
    a, b = _both(VALUES)
    with a, b:
        d = _describe(b, "format")
        assert (d["class"], d["vlen"], d["cset"], d["shape"]) == (h5py.h5t.STRING, True, h5py.h5t.CSET_UTF8, ())
        assert b.attrs["format"] == "meanfield-run" and b.attrs["unicode"] == VALUES["unicode"]
        assert (_describe(b, "int")["class"], _describe(b, "int")["size"], b.attrs["int"].dtype) == \
            (h5py.h5t.INTEGER, 8, np.int64)
        assert _describe(b, "float")["class"] == h5py.h5t.FLOAT and b.attrs["float"].dtype == np.float64
        assert _describe(b, "true")["class"] == h5py.h5t.ENUM and b.attrs["true"] is np.True_
        assert b.attrs["mixed"].dtype == np.float64 and b.attrs["ints"].tolist() == [1, 2, 3]
        assert b.attrs["arr"].shape == (2, 3) and b.attrs["bigger"].dtype == np.uint64


def test_fast_route_taken_for_the_package_kinds(monkeypatch):
    """set_new_attrs calls h5py's attrs for ODD values (and a name already there) only."""
    seen = []
    real = h5py.AttributeManager.__setitem__
    monkeypatch.setattr(h5py.AttributeManager, "__setitem__", lambda self, k, v: seen.append(k) or real(self, k, v))
    with h5py.File(io.BytesIO(), "w") as f:
        set_new_attrs(f, VALUES)
        assert seen == []
        set_new_attrs(f, ODD)
        assert seen == list(ODD)
        seen.clear()
        set_new_attrs(f, {"int": "now a str", "new": 1})  # an existing name: h5py replaces it
        assert seen == ["int"] and f.attrs["int"] == "now a str" and f.attrs["new"] == 1


@pytest.mark.parametrize("bad", [np.str_("abc"), 2**64, {"a": 1}, None, [1, "a"], object()])
def test_refused_values_raise_what_h5py_raises(bad):
    errs = []
    for how in ("h5py", "ours"):
        with h5py.File(io.BytesIO(), "w") as f:
            try:
                f.attrs.__setitem__("x", bad) if how == "h5py" else set_new_attrs(f, {"x": bad})
                errs.append(("ok", f.attrs["x"].dtype if "x" in f.attrs else None))
            except Exception as e:
                errs.append((type(e), str(e), "x" in f.attrs))
    assert errs[0] == errs[1]
