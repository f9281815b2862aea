"""One vocabulary for both systems (docs/conventions.md, "One vocabulary").

The induction system speaks the mixture's names (``stage_*``, schedules
``simultaneous`` / ``three-stage``); the old names (``phase_*``, ``joint``,
``three-phase``) are aliases for one release: they give the same config as
the new names, with a DeprecationWarning (Python) or a one-line note (CLI);
an alias together with its new name is a one-line error, exit 2. Both run
CLIs derive their flags from their config dataclass by one rule
(``meanfield.core.config.add_dataclass_flags``); criterion names, record
grids and exit codes come from the core (``core/criteria.py``,
``core/harness.py``).
"""

from __future__ import annotations

import dataclasses
import warnings

import h5py
import pytest

from meanfield.cli import build_parser, main
from meanfield.core.config import ConfigError
from meanfield.models.induction.config import make_config
from meanfield.models.mixture.config import MixtureConfig

SMALL = {"n_train": 40, "n_test": 0, "L": 12}

# old key -> (new key, a value); phase_times needs a flow method
ALIASES = [
    ("phase_etas", "stage_etas", "1.5,4,0.5", {}),
    ("phase_steps", "stage_steps", "3,4,5", {}),
    ("phase_times", "stage_times", "0.5,1,2", {"method": "flow"}),
    ("phase_criteria", "stage_criteria", "c_top>=0.9,none,grad_a<=1e-6", {}),
]


@pytest.mark.parametrize("old,new,value,extra", ALIASES, ids=[a[0] for a in ALIASES])
def test_old_key_gives_the_same_config(old, new, value, extra):
    want = make_config(dict(SMALL, **extra, **{new: value}))
    with pytest.warns(DeprecationWarning, match=f"{old} is an old name of {new}"):
        got_toml = make_config(dict(SMALL, **extra, **{old: value}))
    with pytest.warns(DeprecationWarning):
        got_kw = make_config(dict(SMALL, **extra), **{old: value})
    assert got_toml == want and got_kw == want
    assert getattr(want, old) == getattr(want, new)  # the old attribute name, kept for one release
    assert want != make_config(dict(SMALL, **extra))  # the value was not ignored


@pytest.mark.parametrize("old,new", [("joint", "simultaneous"), ("three-phase", "three-stage")])
def test_old_schedule_names(old, new):
    want = make_config(dict(SMALL, schedule=new))
    with pytest.warns(DeprecationWarning, match=f"schedule {old} is an old name of {new}"):
        got = make_config(dict(SMALL, schedule=old))
    assert got == want and got.schedule == new


def test_new_names_give_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make_config(dict(SMALL, schedule="simultaneous", stage_steps="1,2,3"))


@pytest.mark.parametrize("old,new,value,extra", ALIASES, ids=[a[0] for a in ALIASES])
def test_alias_and_new_name_together_is_an_error(old, new, value, extra):
    with pytest.raises(ConfigError, match=f"^{old}: an old name of {new}; give only {new}$"):
        make_config(dict(SMALL, **extra, **{old: value, new: value}))


def _induction_cfg(argv):
    from meanfield.models.induction.cli import config_from_args

    return config_from_args(build_parser().parse_args(["induction", "run", *argv, "--out", "x.h5"]))


def test_cli_alias_flags_and_toml_keys(tmp_path, capsys):
    base = ["--n-train", "40", "--n-test", "0", "--L", "12"]
    want = _induction_cfg(base + ["--schedule", "three-stage", "--stage-etas", "1,2,3"])
    got = _induction_cfg(base + ["--schedule", "three-phase", "--phase-etas", "1,2,3"])
    assert got == want
    notes = capsys.readouterr().err.strip().splitlines()
    assert len(notes) == 2 and all(n.startswith("meanfield: warning:") for n in notes), notes
    toml = tmp_path / "old.toml"
    toml.write_text('[run]\nschedule = "three-phase"\nphase_steps = [2, 3, 4]\n')
    old = _induction_cfg(base + ["--config", str(toml)])
    assert old == _induction_cfg(base + ["--schedule", "three-stage", "--stage-steps", "2,3,4"])


def test_cli_alias_and_new_flag_exit_2_one_line(tmp_path, capsys):
    out = tmp_path / "r.h5"
    rc = main(["induction", "run", "--n-train", "40", "--n-test", "0", "--L", "12", "--phase-steps", "1,1,1",
               "--stage-steps", "1,1,1", "--quiet", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and not out.exists()
    assert len(err) == 1 and "phase_steps: an old name of stage_steps" in err[0], err


def test_old_run_file_reads(tmp_path):
    """A run file written before the rename (config keys phase_*, schedule
    three-phase) summarises like the same file with the new names."""
    import json

    from meanfield.core.outcome import outcome_lines

    out = tmp_path / "r.h5"
    assert main(["induction", "run", "--n-train", "40", "--n-test", "0", "--L", "12", "--stage-steps", "2,2,2",
                 "--stage-criteria", "loss<=1e-9,none,none", "--quiet", "--out", str(out)]) == 0
    new_lines = outcome_lines(out)
    assert any("loss<=1e-9" in s or "loss <= 1e-09" in s for s in new_lines), new_lines
    with h5py.File(out, "r+") as f:
        cfg = json.loads(f.attrs["config"])
        assert cfg["schedule"] == "three-stage" and "stage_steps" in cfg and "phase_steps" not in cfg
        for a in ("etas", "steps", "times", "criteria"):
            cfg[f"phase_{a}"] = cfg.pop(f"stage_{a}")
        cfg["schedule"] = "three-phase"
        f.attrs["config"] = json.dumps(cfg)
    assert outcome_lines(out) == new_lines


def _mixture_run_parser():
    p = build_parser()
    sub = next(a for a in p._actions if a.__class__.__name__ == "_SubParsersAction")
    mix = sub.choices["mixture"]
    sub2 = next(a for a in mix._actions if a.__class__.__name__ == "_SubParsersAction")
    return sub2.choices["run"]


def test_mixture_run_has_a_flag_for_every_config_field_and_nothing_else():
    from meanfield.models.mixture.cli import RUN_FLAGS

    fields = [f.name for f in dataclasses.fields(MixtureConfig)]
    want = {("--" + f if f in ("K", "L", "p") else "--" + f.replace("_", "-")): f for f in fields}
    assert RUN_FLAGS == want
    run = _mixture_run_parser()
    by_dest = {a.dest: a.option_strings for a in run._actions}
    for f in fields:
        assert by_dest.get(f) == [want_flag for want_flag, g in want.items() if g == f], f
    # options that are not config fields: the command's own (file names, plotting, size guard, backend)
    others = {d for d in by_dest if d not in fields}
    assert others <= {"help", "config", "force", "out", "plot", "fig_format", "quiet", "backend", "batch",
                      "progress", "json"}, others


def test_mixture_flags_parse_into_fields():
    run = _mixture_run_parser()
    a = run.parse_args(["--K", "3", "--L", "4", "--p", "0.2,0.3,0.5", "--stage-steps", "1,2,3",
                        "--relu-prime-at-zero", "0.5", "--softmax-scale", "1", "--out", "x.h5"])
    assert (a.K, a.L, a.p, a.stage_steps, a.relu_prime_at_zero) == ("3", "4", "0.2,0.3,0.5", "1,2,3", "0.5")


def test_record_log_grid_starts_like_the_mixture():
    """Flow with record_log: both systems put the first record at 1/100 of the
    (smallest) step size and the last at the horizon (docs/conventions.md)."""
    import numpy as np

    from meanfield.models.induction.run import save_at as ind_save_at
    from meanfield.models.mixture.config import make_config as mix_config
    from meanfield.models.mixture.system import save_at as mix_save_at

    ind = make_config(dict(SMALL, method="flow", record_log=7, stage_etas="2,10,1", stage_times="5,6,7"))
    np.testing.assert_allclose(ind_save_at(ind).points, np.geomspace(1.0 / 100, 18.0, 7), rtol=1e-12)
    mix = mix_config(method="flow", record_log=7, eta=1.0, t_end=18.0)
    np.testing.assert_allclose(mix_save_at(mix).points, np.geomspace(1.0 / 100, 18.0, 7), rtol=1e-12)


def _run_parser(system):
    p = build_parser()
    sub = next(a for a in p._actions if a.__class__.__name__ == "_SubParsersAction")
    top = sub.choices[system]
    sub2 = next(a for a in top._actions if a.__class__.__name__ == "_SubParsersAction")
    return sub2.choices["run"]


def test_both_run_clis_derive_their_flags_from_the_config_dataclass_by_one_rule():
    """``meanfield mixture run`` and ``meanfield induction run``: one flag per
    config field, named by core.config.flag_of (dashes, case kept), dest the
    field, default None; the induction's old names are flags of their own."""
    from meanfield.models.mixture.cli import RUN_FLAGS
    from meanfield.core.config import dataclass_flags, flag_of
    from meanfield.models.induction.config import FIELD_ALIASES, InductionConfig

    assert RUN_FLAGS == dataclass_flags(MixtureConfig)
    assert flag_of("stage_steps") == "--stage-steps" and flag_of("K") == "--K" and flag_of("L_test") == "--L-test"
    for system, cls, aliases in (("mixture", MixtureConfig, {}), ("induction", InductionConfig, FIELD_ALIASES)):
        run = _run_parser(system)
        by_dest = {a.dest: a for a in run._actions}
        for f in dataclasses.fields(cls):
            a = by_dest.get(f.name)
            assert a is not None and a.option_strings == [flag_of(f.name)] and a.default is None, (system, f.name)
        for old in aliases:
            assert by_dest[old].option_strings == [flag_of(old)], old
        fields = {f.name for f in dataclasses.fields(cls)} | set(aliases)
        others = {d for d in by_dest if d not in fields}
        assert others <= {"help", "config", "force", "out", "plot", "fig_format", "quiet", "backend", "batch",
                          "progress", "json"}, (system, others)


def test_one_criterion_vocabulary_and_one_exit_code_table():
    """The criterion tables of the kernels are the ones in core/criteria.py
    (the mixture's and every engine description's share one; the induction
    model has its own, with the shared names loss and grad_w); every system's
    run exits by the harness's table."""
    from meanfield.core import criteria, harness
    from meanfield.engine import kernels as ek
    from meanfield.engine import objects
    from meanfield.engine import runs as erun
    from meanfield.models.induction import criteria as icrit
    from meanfield.models.induction import run as irun
    from meanfield.models.mixture import kernels as mk
    from meanfield.models.mixture import run as mrun

    assert mk.CRITERIA == ek.CRITERIA == objects.CRITERIA == criteria.MARGIN_CRITERIA
    assert icrit.CRITERIA == criteria.INDUCTION_CRITERIA
    assert {"loss", "grad_w"} <= set(criteria.MARGIN_CRITERIA) & set(criteria.INDUCTION_CRITERIA)
    assert mrun.EXIT_CODES is erun.EXIT_CODES is irun.EXIT_CODES is harness.EXIT_CODES
    assert harness.EXIT_CODES == {"complete": 0, "diverged": 3, "interrupted": 130}


def test_record_grids_follow_one_rule():
    """Both systems' record grids come from harness.save_at_of: the same
    options give the same grid; by default about 1000 records (mixture) and
    RECORDS = 200 (induction: each record evaluates every sequence's loss)."""
    import numpy as np

    from meanfield.core import harness
    from meanfield.models.induction.run import RECORDS
    from meanfield.models.induction.run import save_at as ind_save_at
    from meanfield.models.mixture.config import make_config as mix_config
    from meanfield.models.mixture.system import save_at as mix_save_at

    assert RECORDS == 200
    ind = make_config(dict(SMALL, schedule="simultaneous", steps=4000))
    mix = mix_config(steps=4000)
    assert ind_save_at(ind).every == 4000 // 200 and mix_save_at(mix).every == 4000 // 1000
    assert ind_save_at(make_config(dict(SMALL, record_every=7))).every == mix_save_at(mix_config(record_every=7)).every == 7
    ind = make_config(dict(SMALL, schedule="simultaneous", method="flow", t_end=10.0, record_dt=0.5))
    mix = mix_config(method="flow", t_end=10.0, record_dt=0.5)
    np.testing.assert_array_equal(ind_save_at(ind).points, mix_save_at(mix).points)
    np.testing.assert_array_equal(harness.save_at_of(mix).points, mix_save_at(mix).points)
