"""The k-mixtures study: numbers equal independent runs; the observations
it states follow from its numbers."""

import json

import numpy as np

from meanfield.cli import main
from meanfield.models.mixture import claims as C
from meanfield.models.mixture.config import make_config
from meanfield.models.mixture.studies import group_scores


def test_group_scores():
    S = np.arange(36.0).reshape(6, 6)
    g = group_scores(S, 3)
    assert list(g["same"]) == [S[0, 3], S[1, 4], S[2, 5]]
    assert sorted(g["between"]) == sorted([S[j, 3 + k] for k in range(3) for j in range(3) if j != k])


def test_k_mixtures_study(tmp_path):
    assert main(["mixture", "study", "k-mixtures", "--K", "3,4", "--steps", "600", "--widths", "16,1024",
                 "--seeds", "2", "--out", str(tmp_path)]) == 0
    rep = json.loads((tmp_path / "report.json").read_text())
    for row in rep["rows"]:
        r = C.simulate(make_config({}, K=row["K"], steps=600, record_every=600))
        K = row["K"]
        S = r["S"][-1][0]
        assert row["same_group_mean"] == np.mean([S[k, K + k] for k in range(K)])
        assert row["between_group_mean"] == np.mean([S[j, K + k] for k in range(K) for j in range(K) if j != k])
    b = [abs(r["between_group_mean"]) for r in rep["rows"]]
    assert rep["observation_scores"]["between_shrinks"] == (b[1] < b[0])
    a = rep["asymmetry"]["tie-breaking"]
    assert a["infinite_width"] < 1e-12
    assert rep["observation_asymmetry"]["tie_breaking_shrinks"] == (a["loglog_slope"] < -0.2)
    for f in rep["figures"]:
        assert (tmp_path / f).exists()
    assert "Appendix A.4" in (tmp_path / "report.md").read_text()


def test_study_bad_input(tmp_path):
    assert main(["mixture", "study", "k-mixtures", "--K", "1,3", "--out", str(tmp_path / "x")]) == 2
    assert not (tmp_path / "x").exists()


def test_extension_study_cli(tmp_path):
    assert main(["mixture", "study", "label-noise", "--quick", "--out", str(tmp_path / "ln")]) == 0
    rep = json.loads((tmp_path / "ln" / "report.json").read_text())
    assert rep and (tmp_path / "ln" / "report.md").exists()


def test_dense_configs_refused_where_unsupported(tmp_path):
    assert main(["mixture", "particles", "--width", "4", "--n-neurons", "2", "--out", str(tmp_path / "p.h5")]) == 2
    assert main(["mixture", "width-sweep", "--widths", "8", "--seeds", "1", "--feature-gram", "vv:0.2",
                 "--out", str(tmp_path / "w.h5"), "--quiet"]) == 2
    assert not (tmp_path / "p.h5").exists() and not (tmp_path / "w.h5").exists()
