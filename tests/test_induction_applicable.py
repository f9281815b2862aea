"""``meanfield induction run`` refuses a flag (or TOML key) its schedule or method
ignores, as ``meanfield mixture run`` does (meanfield.core.guard.check_applicable):
one line, exit 2, naming the key and what to give instead, nothing written.
``--steps 50`` under the default three-stage schedule used to run 900 steps."""

from __future__ import annotations

import pytest

from meanfield.cli import build_parser, main

SMALL = ["--n-train", "40", "--n-test", "0", "--L", "12"]

REFUSED = [
    (["--steps", "50"], "steps: not used here (method gd, schedule three-stage)", "--stage-steps"),
    (["--eta", "0.5", "--schedule", "w,c,a"], "eta: not used here (method gd, schedule w,c,a)", "--stage-etas"),
    (["--criterion", "loss<=0.1"], "criterion: not used here", "--stage-criteria"),
    (["--schedule", "simultaneous", "--stage-steps", "1,2,3"], "stage_steps: not used here", "--steps"),
    (["--schedule", "simultaneous", "--stage-criteria", "none,none,none"], "stage_criteria: not used here",
     "--criterion"),
    (["--schedule", "simultaneous", "--t-end", "3"], "t_end: not used here (method gd", "--steps"),
    (["--stage-times", "1,1,1"], "stage_times: not used here (method gd", "--stage-steps"),
    (["--method", "flow", "--dt", "0.1"], "dt: not used here", "method rk4"),
    (["--method", "rk4", "--rtol", "1e-3"], "rtol: not used here", "method flow"),
    (["--method", "flow", "--schedule", "simultaneous", "--steps", "10", "--t-end", "3"],
     "steps: not used when t_end is given", "t_end"),
]


@pytest.mark.parametrize("argv,msg,instead", REFUSED, ids=[" ".join(r[0]) for r in REFUSED])
def test_an_ignored_flag_is_one_line_exit_2(tmp_path, capsys, argv, msg, instead):
    out = tmp_path / "r.h5"
    rc = main(["induction", "run", *SMALL, *argv, "--quiet", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert msg in err[0] and instead in err[0], err
    assert "Traceback" not in err[0] and not out.exists()


def test_a_toml_key_the_schedule_ignores_is_refused(tmp_path, capsys):
    toml = tmp_path / "c.toml"
    toml.write_text("[run]\nsteps = 50\n")
    rc = main(["induction", "run", *SMALL, "--config", str(toml), "--quiet", "--out", str(tmp_path / "r.h5")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("meanfield: error: steps: not used here"), err


def _cfg(argv):
    from meanfield.models.induction.cli import config_from_args

    return config_from_args(build_parser().parse_args(["induction", "run", *SMALL, *argv, "--out", "x.h5"]))


@pytest.mark.parametrize("argv", [
    ["--stage-steps", "5,5,5", "--stage-etas", "1,2,3", "--stage-criteria", "none,none,none"],
    ["--schedule", "cw,a", "--stage-steps", "4,4", "--phase-etas", "1,1"],
    ["--schedule", "simultaneous", "--steps", "5", "--eta", "0.5", "--criterion", "loss<=0.1"],
    ["--schedule", "joint", "--steps", "5"],
    ["--method", "flow", "--stage-times", "1,1,1", "--rtol", "1e-4", "--atol", "1e-6"],
    ["--method", "flow", "--schedule", "simultaneous", "--t-end", "2"],
    ["--method", "flow", "--schedule", "simultaneous", "--steps", "5", "--eta", "0.2"],  # default t_end = 1
    ["--method", "rk4", "--stage-times", "1,1,1", "--dt", "0.1"],
])
def test_flags_the_run_reads_are_accepted(argv):
    cfg = _cfg(argv)
    if "--steps" in argv and cfg.method == "gd":
        assert cfg.horizon == 5  # and the run really goes that many steps
