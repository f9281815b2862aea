"""A start that GD cannot leave by symmetry (meanfield.engine.symmetry, issue 26):
found without knowing the symmetry, checked against what the runs themselves do
(pinned scores stay exactly 0 at infinite width, move at finite width), no false
alarm on the shipped models whose symmetric starts GD does leave, and the CLI's
one-line refusal."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cli_cases import run_cases

MODELS = Path(__file__).resolve().parent.parent / "meanfield" / "models"


def _path(name):
    return next(MODELS.rglob(f"{name}.toml"))


def _load(name, **over):
    from meanfield.engine.description import load_description

    return load_description(_path(name), over)


def test_multiclass_scores_are_pinned_and_the_runs_agree():
    from meanfield.engine.api import run
    from meanfield.engine.symmetry import pinned_entries, pinned_ties

    d = _load("mixture_multiclass", K=2, C=3, L=3, steps=300, record_every=50, symmetry="allow")
    pins = pinned_entries(d)
    assert "+:S[c1, v1_1]" in pins and "-:S[c2, v2_2]" in pins
    ties = pinned_ties(d)
    c = d.data.flag("consistent")
    assert sorted(ties) == sorted(np.asarray(d.data.names)[~c].tolist())  # exactly the inconsistent samples
    # what the detector says, seen in the runs: at infinite width the group-identifier / class-signal scores
    # stay 0 to rounding and the inconsistent margins stay 0 (the flat line); at a finite width they move
    K = 2
    r = run(d)
    S = np.asarray(r.S)
    assert np.abs(S[:, :, :K, K:]).max() < 1e-12 and np.abs(S).max() > 1e-3
    assert np.abs(np.asarray(r.margin)[:, ~c]).max() < 1e-12
    rf = run(_load("mixture_multiclass", K=2, C=3, L=3, steps=300, record_every=50, width=16, seed=1))
    assert np.abs(np.asarray(rf.S)[:, :, :K, K:]).max() > 1e-4
    assert pinned_ties(_load("mixture_multiclass", K=2, C=3, L=3, width=16, seed=1)) == []
    # random neurons break it at infinite width too
    assert pinned_ties(_load("mixture_multiclass", K=2, C=3, L=3, neuron_init="gaussian:0.1")) == []


@pytest.mark.parametrize("name", ["mixture", "incontext", "maxmargin"])
def test_no_alarm_where_gd_leaves_the_symmetric_start(name):
    # the binary mixture starts at S = 0 with zero neurons (its attention gradient is exactly 0 at step 0,
    # its inconsistent margins 0) and leaves it; the others have no tie either
    from meanfield.engine.symmetry import pinned_ties, refuse_symmetric_start

    d = _load(name, steps=5)
    assert pinned_ties(d) == []
    refuse_symmetric_start(d)


def test_harmless_parameter_pins_are_not_refused():
    # a fixed query and a value matrix at infinite width: the isotropic start keeps K^T V = 0 and some scores
    # in the span the query allows (parameters pinned), but no margin is tied: no refusal
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from test_engine_description import _desc

    from meanfield.engine.symmetry import pinned_entries, pinned_ties, refuse_symmetric_start

    d = _desc("cross_entropy_3_classes", width="inf")
    assert pinned_ties(d) == []
    refuse_symmetric_start(d)
    d = _desc("matrix_fixed_query_scaled", width="inf")
    assert pinned_entries(d) and pinned_ties(d) == []
    refuse_symmetric_start(d)
    # the binary mixture trained in stages (neurons first: inconsistent margins 0 by design) is not refused
    from meanfield.engine.description import description_from_dict, read_raw

    raw = read_raw(_path("mixture"))
    refuse_symmetric_start(description_from_dict(raw, {"schedule": "three-stage", "stage_steps": "5,5,5"}))


def test_refusal_cli(tmp_path):
    out = tmp_path / "mc.h5"
    base = ["model", "run", "mixture_multiclass", "--K", "2", "--C", "3", "--L", "3", "--steps", "20", "--quiet"]
    cases = [("inf", base + ["--out", str(out)]),
             ("bad", base + ["--symmetry", "maybe", "--out", str(out)]),
             ("allow", base + ["--symmetry", "allow", "--out", str(tmp_path / "a.h5")]),
             ("width", base + ["--width", "8", "--out", str(tmp_path / "w.h5")])]
    res, _ = run_cases(cases, cwd=tmp_path)
    r = res["inf"]
    assert r["rc"] == 2 and len(r["stderr"].strip().splitlines()) == 1, r
    assert "symmetry" in r["stderr"] and "--width" in r["stderr"] and "--symmetry allow" in r["stderr"]
    assert "tied at margin 0" in r["stderr"]
    assert len(r["stderr"].strip()) < 240
    assert res["bad"]["rc"] == 2 and "symmetry" in res["bad"]["stderr"]
    assert not out.exists()
    assert res["allow"]["rc"] == 0 and (tmp_path / "a.h5").exists()
    assert res["width"]["rc"] == 0 and (tmp_path / "w.h5").exists()
