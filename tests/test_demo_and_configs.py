"""The demo runs end to end and tells the K=2 story; every example config in
runs/ is valid and runs."""

from pathlib import Path

import h5py
import numpy as np
import pytest

from meanfield.cli import main
from meanfield.core.config import load_toml
from meanfield.models.mixture.config import make_config
from meanfield.models.mixture.demo import story_checks
from meanfield.core.io import read_run

ROOT = Path(__file__).resolve().parents[1]


def test_demo_quick(tmp_path, capsys):
    assert main(["mixture", "demo", "--quick", "--out", str(tmp_path)]) == 0
    summary = (tmp_path / "summary.md").read_text()
    assert "**NO**" not in summary
    for name in ("three_stage", "simultaneous"):
        with h5py.File(tmp_path / f"{name}.h5") as f:
            assert f.attrs["status"] == "complete"
        assert len(list((tmp_path / name).glob("*.png"))) == 5


def test_story_checks_fail_when_attention_is_frozen(tmp_path):
    """The story checker must be able to say NO: with a stage 2 of zero steps
    the inconsistent samples are never separated."""
    out = tmp_path / "frozen.h5"
    assert main(["mixture", "run", "--schedule", "three-stage", "--stage-steps", "1000,0,500",
                 "--out", str(out), "--quiet"]) == 0
    checks = {claim: ok for claim, ok, _ in story_checks(read_run(out))}
    assert checks["after stage 1 the consistent samples are separated (min margin > 0)"]
    assert not checks["after stage 2 the inconsistent samples are separated too"]


@pytest.mark.parametrize("path", sorted((ROOT / "runs").glob("*.toml")), ids=lambda p: p.name)
def test_example_configs_are_valid(path):
    cfg = make_config(load_toml(path))
    assert cfg.K >= 2


def test_example_config_runs(tmp_path):
    out = tmp_path / "r.h5"
    assert main(["mixture", "run", "--config", str(ROOT / "runs" / "three_stage.toml"), "--out", str(out),
                 "--quiet"]) == 0
    run = read_run(out)
    assert set(np.unique(run["stage"])) == {1, 2, 3}
    assert run.config["stage_criteria"][1] == "inconsistent_margin>=1"
