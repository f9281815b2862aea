"""meanfield.Run: one object for every run file (mixture, engine, induction) and for in-memory engine runs.

Each value the Run reports is checked against the file's raw datasets read
with h5py (an independent reader), or against the description it came from;
the NetCDF round trip goes through xarray and netCDF4/h5netcdf, not through
our writer.
"""

import json
import math
import subprocess
import sys

import h5py
import numpy as np
import pytest

import meanfield
import meanfield.cli
from meanfield.core.errors import ConfigError


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("runs")
    argvs = {
        "mixture": ["mixture", "run", "--steps", "4", "--quiet", "--out", str(d / "mix.h5")],
        "mixture8": ["mixture", "run", "--steps", "4", "--width", "8", "--quiet", "--out", str(d / "mix8.h5")],
        "engine": ["model", "run", "incontext", "--K", "2", "--N", "3", "--steps", "6", "--record-every", "1", "--quiet",
                   "--out", str(d / "ic.h5")],
        "induction": ["induction", "run", "--n-train", "20", "--n-test", "0", "--L", "8", "--stage-steps", "1,1,1",
                      "--quiet", "--out", str(d / "ind.h5")],
    }
    out = {}
    for name, argv in argvs.items():
        assert meanfield.cli.main(["-q"] + argv) == 0
        out[name] = d / argv[-1].split("/")[-1]
    return out


def _raw(path):
    with h5py.File(path, "r") as f:
        return {k: f[k][()] for k in f if isinstance(f[k], h5py.Dataset)}, dict(f.attrs)


@pytest.mark.parametrize("kind", ["mixture", "engine", "induction"])
def test_open_run_every_system(files, kind):
    r = meanfield.open_run(files[kind])
    raw, attrs = _raw(files[kind])
    assert isinstance(r, meanfield.Run)
    assert r.system == kind
    assert r.path == files[kind]
    np.testing.assert_array_equal(r.t, raw["t"])
    assert r.states.shape == (len(raw["t"]), len(r.entries))
    assert len(set(r.entries)) == len(r.entries)  # one name per scalar entry
    assert "t" in r.records and all(np.shape(v)[0] == len(raw["t"]) for v in r.records.values())
    assert r.status == attrs["status"]
    assert r.attrs["format_version"] == 2


def test_entry_names_index_the_raw_arrays(files):
    m = meanfield.open_run(files["mixture"])
    raw, _ = _raw(files["mixture"])
    feats = [x.decode() if isinstance(x, bytes) else str(x) for x in raw["features"]]
    X = m.states
    for name, (h, a, b) in (("S[+,c1,v1]", (0, "c1", "v1")), ("B[-,v2,c2]", (1, "v2", "c2"))):
        i = m.entries.index(name)
        np.testing.assert_array_equal(X[:, i], raw[name[0]][:, h, feats.index(a), feats.index(b)])
    np.testing.assert_array_equal(X[:, m.entries.index("w[-,v1]")], raw["w"][:, 1, feats.index("v1")])
    e = meanfield.open_run(files["engine"])
    with h5py.File(files["engine"], "r") as f:
        W = f["variables/h/W"][()]
    np.testing.assert_array_equal(e.states[:, e.entries.index("W[h,v1,v2]")], W[:, 0, 1])


def test_state_linear_and_nearest(files):
    r = meanfield.open_run(files["engine"])
    raw, _ = _raw(files["engine"])
    with h5py.File(files["engine"], "r") as f:
        W = f["variables/h/W"][()].reshape(len(raw["t"]), -1)
    t = raw["t"]
    tm = 0.25 * t[1] + 0.75 * t[2]
    np.testing.assert_allclose(r.state(tm), 0.25 * W[1] + 0.75 * W[2], rtol=0, atol=1e-15)
    np.testing.assert_array_equal(r.state(t[3]), W[3])  # exact at a record
    np.testing.assert_array_equal(r.state(tm, method="nearest"), W[2])
    with pytest.raises(ConfigError, match="^t: must be within the recorded range"):
        r.state(t[-1] + 1.0)
    with pytest.raises(ConfigError, match="^method: must be linear or nearest"):
        r.state(tm, method="cubic")


def test_in_memory_run_equals_its_file(files, tmp_path):
    mem = meanfield.run("incontext", K=2, N=3, steps=6, record_every=1, progress=False)
    f = meanfield.open_run(files["engine"])
    assert mem.path is None and mem.entries == f.entries
    np.testing.assert_array_equal(mem.states, f.states)
    np.testing.assert_array_equal(mem.loss, f.loss)
    assert mem.attrs["description_hash"] == f.attrs["description_hash"]


def test_to_xarray_round_trips_through_netcdf(files, tmp_path):
    xr = pytest.importorskip("xarray")
    for kind in ("mixture", "engine", "induction"):
        r = meanfield.open_run(files[kind])
        ds = r.to_xarray()
        assert ds["state"].dims == ("time", "entry")
        assert list(ds["entry"].values) == r.entries
        np.testing.assert_array_equal(ds["state"].values, r.states)
        p = tmp_path / f"{kind}.nc"
        ds.to_netcdf(p)
        with xr.open_dataset(p) as back:
            back.load()
            for v in ds.data_vars:
                np.testing.assert_array_equal(back[v].values, ds[v].values)
            np.testing.assert_array_equal(back["time"].values, ds["time"].values)
            assert set(back.attrs) == set(ds.attrs)
            for k, v in ds.attrs.items():
                np.testing.assert_array_equal(back.attrs[k], v, err_msg=k)  # NaN == NaN here
        assert json.loads(ds.attrs["config"]) == r.config


def test_to_dataframe(files):
    pytest.importorskip("pandas")
    r = meanfield.open_run(files["mixture"])
    df = r.to_dataframe()
    assert list(df.index) == list(r.t) and df.index.name == "t"
    np.testing.assert_array_equal(df["loss"].values, r.loss)
    np.testing.assert_array_equal(df["S[+,c1,v1]"].values, r.states[:, r.entries.index("S[+,c1,v1]")])


@pytest.mark.parametrize("module,method", [("xarray", "to_xarray"), ("pandas", "to_dataframe")])
def test_missing_extra_is_one_line_naming_it(files, monkeypatch, module, method):
    r = meanfield.open_run(files["engine"])
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    with pytest.raises(ImportError) as e:
        getattr(r, method)()
    msg = str(e.value)
    assert "\n" not in msg and "pip install 'meanfield[analysis]'" in msg and module in msg


def test_run_files_are_self_contained(files):
    desc = meanfield.load("incontext", K=2, N=3, steps=6, record_every=1)
    e = meanfield.open_run(files["engine"])
    np.testing.assert_array_equal(e["samples"]["tokens"], np.asarray(desc.data.tokens, dtype=float))
    np.testing.assert_array_equal(e["samples"]["counts"], desc.data.count_array)
    np.testing.assert_array_equal(e.initial_state, e.states[0])  # the first record is at t = 0
    assert e.attrs["head_scales"] == {h.name: h.scale for h in desc.model.heads}
    assert e.attrs["width"] == math.inf and e.attrs["meanfield_version"] == meanfield.__version__
    assert e.attrs["description"]["parameters"]["steps"] == 6
    other = meanfield.load("incontext", K=2, N=4, steps=6)
    from meanfield.engine.runs import description_hash

    assert description_hash(desc) == e.attrs["description_hash"] != description_hash(other)
    m = meanfield.open_run(files["mixture"])
    s = m["samples"]
    # token l of sample i is sgn[i, l] e_{idx[i, l]} over the 2K features
    tok = np.zeros(s["tokens"].shape)
    for i in range(tok.shape[0]):
        for l in range(tok.shape[1]):
            tok[i, l, s["idx"][i, l]] = s["sgn"][i, l]
    np.testing.assert_array_equal(s["tokens"], tok)
    assert m.attrs["width"] == math.inf and meanfield.open_run(files["mixture8"]).attrs["width"] == 8
    np.testing.assert_array_equal(m.initial_state, m.states[0])
    ind = meanfield.open_run(files["induction"])
    ts = ind["training_set"]
    assert ts["tokens"].shape[0] == 20
    np.testing.assert_array_equal(ts["counts"], np.bincount(ts["tokens"].ravel(), minlength=len(ts["counts"])))
    np.testing.assert_array_equal(ind.initial_state, ind.states[0])
    assert len(ind.attrs["description_hash"]) == 64


def test_old_files_width_minus_one_reads_inf(files, tmp_path):
    p = tmp_path / "old.h5"
    p.write_bytes(files["mixture"].read_bytes())
    with h5py.File(p, "a") as f:
        f.attrs["width"] = -1
        f.attrs["format_version"] = 1
        del f["initial_state"]
    r = meanfield.open_run(p)
    assert r.attrs["width"] == math.inf
    np.testing.assert_array_equal(r.initial_state, r.states[0])  # older files: the first record


def test_open_run_refuses_what_is_not_a_run(tmp_path):
    with pytest.raises(FileNotFoundError):
        meanfield.open_run(tmp_path / "nope.h5")
    p = tmp_path / "x.h5"
    with h5py.File(p, "w") as f:
        f["a"] = 1
    with pytest.raises(ValueError, match="not a meanfield run file"):
        meanfield.open_run(p)
    text = tmp_path / "notes.h5"
    text.write_text("not hdf5\n")
    for q in (text, tmp_path):  # not h5py's raw OSError
        with pytest.raises(ValueError, match="not an HDF5 file"):
            meanfield.open_run(q)


def test_plot_and_plot_runs_label_every_line(files):
    import matplotlib

    matplotlib.use("Agg")
    fig = meanfield.plot_runs([files["mixture"], files["mixture8"]], label="width",
                              entries=["S[+,c1,v1]"])
    loss_ax, ent_ax = fig.axes[:2]
    assert [t.get_text() for t in loss_ax.get_legend().get_texts()] == ["width = inf", "width = 8"]
    assert [t.get_text() for t in ent_ax.get_legend().get_texts()] == ["S[+,c1,v1], width = inf",
                                                                       "S[+,c1,v1], width = 8"]
    assert "t" in loss_ax.get_xlabel() and loss_ax.get_ylabel() == "loss"
    r = meanfield.open_run(files["engine"])
    fig = r.plot()
    labels = {t.get_text() for a in fig.axes for t in a.get_legend().get_texts()}
    assert set(r.entries) <= labels
    with pytest.raises(ConfigError, match="^entries: no state entry 'S\\[x\\]'"):
        r.plot(entries=["S[x]"])
    with pytest.raises(ConfigError, match="^runs: give at least one run"):
        meanfield.plot_runs([])


def test_import_is_light_and_all_is_documented():
    code = ("import sys, meanfield; heavy = [m for m in ('numba', 'sympy', 'xarray', 'pandas', 'h5py', "
            "'matplotlib', 'scipy') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    for name in meanfield.__all__:
        obj = getattr(meanfield, name)
        if name in ("__version__",) or isinstance(obj, type) and issubclass(obj, Exception):
            continue
        doc = obj.__doc__ or ""
        for section in ("Parameters", "Example") + (() if isinstance(obj, type) else ("Returns",)):
            assert section in doc, f"meanfield.{name}: docstring without {section}"
    for method in ("state", "plot", "to_xarray", "to_dataframe"):
        doc = getattr(meanfield.Run, method).__doc__
        assert "Returns" in doc and "Example" in doc, method
    with pytest.raises(AttributeError):
        meanfield.no_such_name


def test_progress_bar_on_and_off(capsys):
    meanfield.run("incontext", K=2, N=3, steps=3, progress=False)
    assert capsys.readouterr().err == ""
    meanfield.run("incontext", K=2, N=3, steps=3, progress=True)
    err = capsys.readouterr().err
    assert "incontext" in err and "3/3" in err  # tqdm's text bar in a terminal


def test_set_parameters_and_bad_input():
    d = meanfield.load("incontext", K=2, N=3)
    d2 = meanfield.set_parameters(d, N=4)
    assert dict(d2.declared)["N"] == 4 and dict(d2.declared)["K"] == 2
    with pytest.raises(ConfigError):
        meanfield.load("incontext", no_such_parameter=1)
    with pytest.raises(ConfigError, match="^model: no such file"):
        meanfield.load("no_such_model")


def test_progress_shows_no_rate_before_the_first_chunk():
    import io
    import time

    from meanfield.core.integrate import Monitor

    class Tty(io.StringIO):
        def isatty(self):
            return True

    buf = Tty()
    with Monitor(total=100, unit="step", quiet_s=0.0, every_s=0.0, stream=buf) as mon:
        time.sleep(0.05)  # the first chunk: compilation and set-up, not stepping
        mon.update(10, 1, "")
        time.sleep(0.05)
        mon.update(60, 1, "")
    first, second = [x for x in buf.getvalue().split("\r") if x.strip()][:2]
    assert "rate after the first chunk" in first and "step/s" not in first
    rate = float(second.split("step/s")[0].rsplit(",", 1)[-1].split()[-1])
    assert 50 / 0.5 < rate < 50 / 0.04  # measured from the first chunk on: (60 - 10) steps over ~0.05 s


def test_compile_notice_names_its_estimate(capsys, monkeypatch):
    import logging

    from meanfield.core import guard

    monkeypatch.setattr(logging.getLogger(guard.LOG), "handlers", [])  # as in a notebook: no CLI log handler

    class Cold:  # a dispatcher with nothing compiled and no cache index: a first use
        signatures = []
        _cache = None

    assert guard.first_use_notice(Cold(), family="engine", echo=True)
    err = capsys.readouterr().err
    assert f"compiling kernels, about {guard.COMPILE_S['engine']} s, once" in err and len(err.splitlines()) == 1

    class Warm:
        signatures = ["(float64,)"]

    assert not guard.first_use_notice(Warm(), family="engine", echo=True)
    assert capsys.readouterr().err == ""
