"""Figures and markdown summary of mixture run files (meanfield.models.mixture.plot)."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from meanfield.core.io import read_run
from meanfield.models.mixture import run as R
from meanfield.models.mixture.config import make_config
from meanfield.models.mixture.plot import FIGURES, plot_run, summary_markdown

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def run_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("runs")
    three = d / "three.h5"
    simul = d / "simul.h5"
    R.run_to_file(make_config(schedule="three-stage", stage_steps=(100, 300, 100)), three, progress=False)
    R.run_to_file(make_config(schedule="simultaneous", steps=300), simul, progress=False)
    return {"three-stage": three, "simultaneous": simul}


def _check_pngs(paths, out_dir):
    assert [p.name for p in paths] == list(FIGURES)
    for p in paths:
        assert p.parent == out_dir
        data = p.read_bytes()
        assert len(data) > 1000, p
        assert data[:8] == PNG_MAGIC, p


@pytest.mark.parametrize("schedule,logx", [("three-stage", False), ("three-stage", True), ("simultaneous", False)])
def test_plot_run_writes_pngs(run_files, tmp_path, schedule, logx):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    before = len(plt.get_fignums())
    out = tmp_path / "figs"  # created by plot_run
    paths = plot_run(run_files[schedule], out, logx=logx)
    _check_pngs(paths, out)
    assert len(plt.get_fignums()) == before  # every figure closed


def test_plot_run_k3(tmp_path):
    path = tmp_path / "k3.h5"
    R.run_to_file(make_config(schedule="three-stage", K=3, L=4, stage_steps=(50, 100, 50)), path, progress=False)
    _check_pngs(plot_run(path, tmp_path), tmp_path)


@pytest.mark.parametrize("schedule", ["three-stage", "simultaneous"])
def test_summary_markdown(run_files, schedule):
    path = run_files[schedule]
    run = read_run(path)
    text = summary_markdown(path)
    ends = run.attrs["stage_ends"]
    assert len(ends) == (3 if schedule == "three-stage" else 1)
    assert run.attrs["status"] in text
    assert run.attrs["message"] in text
    lines = text.splitlines()
    for e in ends:
        row = [ln for ln in lines if ln.startswith(f"| {e['stage']} (")]
        assert len(row) == 1, (e, text)
        cells = [c.strip() for c in row[0].strip("|").split("|")]
        assert cells[1] == e["reason"]
        assert int(cells[2]) == e["step"]
        assert float(cells[3].split()[0]) == pytest.approx(e["t"])
        i = int(np.nonzero(run["t"] == e["t"])[0][-1])
        assert float(cells[4]) == pytest.approx(run["loss"][i], rel=1e-3)
    # final neuron alignments, one row per head, P = 2K values
    w = run["w"][-1]
    for h, name in enumerate(["+", "-"]):
        row = [ln for ln in lines if ln.startswith(f"| {name} |")]
        assert len(row) == 1
        vals = [float(c) for c in row[0].strip("|").split("|")[1:]]
        np.testing.assert_allclose(vals, w[h], atol=1e-3)
    assert f"K={run.attrs['K']}" in text and f"schedule={schedule}" in text


def test_missing_file_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        plot_run(tmp_path / "nope.h5", tmp_path / "out")
    with pytest.raises(FileNotFoundError):
        summary_markdown(tmp_path / "nope.h5")
    assert not (tmp_path / "out").exists()


def test_non_run_file_raises(tmp_path):
    h5 = tmp_path / "other.h5"
    with h5py.File(h5, "w") as f:
        f.create_dataset("x", data=np.arange(3))
    with pytest.raises(ValueError):
        plot_run(h5, tmp_path / "out")
    with pytest.raises(ValueError):
        summary_markdown(h5)
    txt = tmp_path / "notes.h5"
    txt.write_text("not hdf5 at all\n")
    with pytest.raises(ValueError):
        plot_run(txt, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_other_system_raises(tmp_path):
    from meanfield.core.io import write_run

    path = write_run(tmp_path / "ind.h5", system="induction", config={}, status="complete", message="ok",
                     data={"t": np.zeros(2)})
    with pytest.raises(ValueError, match="mixture"):
        plot_run(path, tmp_path / "out")
