"""The extension studies (``meanfield.models.mixture.extensions``), quick mode: files,
numbers equal to independent runs, and the statements follow from the numbers."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from meanfield.core.io import read_run
from meanfield.models.mixture import extensions as X
from meanfield.models.mixture import run as R


@pytest.mark.parametrize("name", X.STUDIES)
def test_extension_study_quick(name, tmp_path):
    rep = X.run_extension_study(name, tmp_path, quick=True, log=lambda *a: None)
    assert (tmp_path / "report.md").exists() and (tmp_path / rep["figure"]).exists()
    assert json.loads((tmp_path / "report.json").read_text())["study"] == name
    variants = X._variants(name, quick=True)
    assert [r["label"] for r in rep["rows"]] == [lab for lab, _ in variants]
    for row, (label, cfgs) in zip(rep["rows"], variants):
        f = read_run(tmp_path / row["file"])
        # the saved run is the config's run: same final loss as an independent run
        traj = R.run(cfgs[0])
        assert len(f["t"]) == len(traj.t)
        assert row["loss_end"] == pytest.approx(float(f["loss"][-1]), rel=1e-12)
        for k in ("T1", "T2", "T_loss"):
            v = f.attrs[k]
            assert (row[k] is None and math.isnan(v)) or row[k] == pytest.approx(v)
        m = np.asarray(f["margin"])[-1]
        clean = ~(np.asarray(f["samples"]["flipped"]).astype(bool) if "flipped" in f["samples"] else
                  np.zeros(m.shape, bool))
        assert row["solved"] == bool(np.all(m[clean] >= 0.1))
        assert row["seeds"]["n_seeds"] == len(cfgs)
        assert (tmp_path / row["file_three_stage"]).exists()
        if row["three_stage"]["stage2_duration"] is not None:
            assert row["three_stage"]["stage2_duration"] == pytest.approx(row["three_stage"]["T2"] - row["three_stage"]["T1"])
    # the paper's setting is solved in both schedules
    assert rep["rows"][0]["solved"] and rep["rows"][0]["three_stage"]["solved"]
    assert len(rep["changes"]) == len(rep["rows"]) - 1
    if name == "label-noise":
        r = rep["rows"][1]
        rho = r["config"]["label_noise"]
        assert r["loss_floor"] == pytest.approx(-(rho * math.log(rho) + (1 - rho) * math.log(1 - rho)))
        assert r["loss_end"] >= r["loss_floor"] - 1e-12
    if name == "noise":
        assert rep["rows"][0]["population_loss"] == pytest.approx(rep["rows"][0]["loss_end"], rel=1e-12)


def test_unknown_study(tmp_path):
    with pytest.raises(ValueError, match="study"):
        X.run_extension_study("nope", tmp_path / "x")
    assert not (tmp_path / "x").exists()
