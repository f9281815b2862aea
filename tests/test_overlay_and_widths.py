"""`meanfield plot R1.h5 R2.h5 --label width` (the overlay command) and width-sweep's two-width answer."""

import subprocess
import sys

import numpy as np
import pytest

import meanfield.cli
from meanfield.core.outcome import width_sweep_lines
from meanfield.core.widths import TWO_POINTS, exponent_text, fit_exponent


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("ov")
    for w in ("inf", "8"):
        assert meanfield.cli.main(["-q", "mixture", "run", "--steps", "3", "--width", w, "--quiet",
                                   "--out", str(d / f"w{w}.h5")]) == 0
    return d


def test_overlay_writes_a_labelled_figure(two_runs, monkeypatch, capsys):
    import matplotlib.figure

    figs = []
    orig = matplotlib.figure.Figure.savefig
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda self, *a, **k: figs.append(self) or orig(
        self, *a, **k))
    out = two_runs / "o.png"
    rc = meanfield.cli.main(["plot", str(two_runs / "winf.h5"), str(two_runs / "w8.h5"), "--label", "width",
                             "--entries", "S[+,c1,v1],w[-,v1]", "--out", str(out)])
    assert rc == 0 and out.stat().st_size > 0
    assert f"figure: {out}" in capsys.readouterr().out
    loss_ax, ent_ax = figs[0].axes[:2]
    assert [t.get_text() for t in loss_ax.get_legend().get_texts()] == ["width = inf", "width = 8"]
    assert len(ent_ax.get_legend().get_texts()) == 4


@pytest.mark.parametrize("args,msg", [
    (["nope.h5"], "runs: nope.h5 is not a readable run file"),
    (["{d}/winf.h5", "--label", "zzz"], "label: no attribute or parameter 'zzz'"),
    (["{d}/winf.h5", "--entries", "S[x]"], "entries: no state entry 'S[x]'"),
    (["{d}/winf.h5", "--out", "x.jpg"], "out: must be a path ending in .png or .pdf or .svg"),
])
def test_overlay_bad_input_is_one_line(two_runs, tmp_path, args, msg):
    r = subprocess.run([sys.executable, "-m", "meanfield", "plot", *[a.format(d=two_runs) for a in args]],
                       capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and msg in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == []


def test_two_widths_give_the_line_and_no_interval():
    # the slope through the two mean log-errors, computed by hand
    errs = [[1.0, 4.0], [0.1, 0.4]]
    fit = fit_exponent([10, 1000], errs)
    expect = (np.mean(np.log([0.1, 0.4])) - np.mean(np.log([1.0, 4.0]))) / (np.log(1000) - np.log(10))
    assert fit["exponent"] == pytest.approx(expect) and fit["exponent_ci"] is None and fit["two_points"]
    assert "two points fix a line" in exponent_text("S", fit) and "[" not in exponent_text("S", fit)
    three = fit_exponent([10, 100, 1000], [[1.0, 1.2], [0.3, 0.35], [0.1, 0.11]])
    assert three["exponent_ci"] is not None and "95% CI" in exponent_text("S", three)
    lines = width_sweep_lines({"widths": [10, 1000], "lead": "S", "exponent": fit["exponent"], "exponent_ci": None,
                               "errors": {"S": [1.0, 0.1]}, "quantities": ["S"], "infinite_width_status": "complete",
                               "statuses": ["complete"] * 2, "elapsed_s": 0.1, "kinks": []})
    text = "\n".join(lines)
    assert TWO_POINTS in text and " .. " not in text  # no interval printed


def test_model_plot_of_an_induction_run_and_of_a_file_without_records(tmp_path, capsys):
    import h5py

    ind = tmp_path / "ind.h5"
    assert meanfield.cli.main(["-q", "induction", "run", "--n-train", "20", "--n-test", "0", "--L", "8",
                               "--stage-steps", "1,1,1", "--quiet", "--out", str(ind)]) == 0
    assert meanfield.cli.main(["model", "plot", str(ind), "--out", str(tmp_path / "f")]) == 0
    assert (tmp_path / "f" / "run.png").stat().st_size > 0
    empty = tmp_path / "empty.h5"
    empty.write_bytes(ind.read_bytes())
    with h5py.File(empty, "a") as f:
        for k in list(f):
            del f[k]
        f["t"] = np.zeros(0)
    r = subprocess.run([sys.executable, "-m", "meanfield", "model", "plot", str(empty), "--out", str(tmp_path / "g")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "has no records" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "g").exists() or not any((tmp_path / "g").iterdir())
