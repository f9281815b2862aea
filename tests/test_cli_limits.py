"""Every input gets an answer (issue 26, part 1): the hangs, internal errors
and accepted nonsense a 1,199-case fuzz run found, each a refusal now.

Each case goes through ``meanfield.cli.main`` (all of them in ONE child
process, tests/cli_cases.py) and must exit 2 with exactly one short line
``meanfield: error: ...`` naming the flag, print no traceback, finish within
seconds (a hang was the defect for many of them) and leave nothing behind in
its folder.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import h5py
import pytest
from cli_cases import LINE_CHARS, long_refusals, run_cases

MEANFIELD = [sys.executable, "-m", "meanfield"]
CASE_SECONDS = 15.0  # each case is a validation: seconds on a loaded 2-core machine


def _files(d: Path) -> set[str]:
    return {str(p.relative_to(d)) for p in d.rglob("*")}


# (id, argv, text the one line must contain: the flag)
CASES = [
    # hangs (no answer within 60 s before)
    ("width-sweep-seeds-1e9", ["mixture", "width-sweep", "--seeds", "1e9", "--out", "w.h5"], "seeds"),
    ("model-width-sweep-seeds-1e9", ["model", "width-sweep", "incontext", "--seeds", "1e9", "--out", "w.h5"],
     "seeds"),
    ("induction-H-1e9", ["induction", "chi2", "--H", "1e9"], "H"),
    ("induction-d-1e9", ["induction", "run", "--d", "1e9", "--out", "x.h5"], "size"),
    ("induction-data-d-1e9", ["induction", "data", "--d", "1e9", "--out", "x.h5"], "size"),
    ("induction-record-log-1e9", ["induction", "run", "--schedule", "simultaneous", "--steps", "3", "--record-log",
                                  "1e9", "--out", "x.h5"], "size"),
    ("escape-K-1000", ["mixture", "escape", "--K", "1000"], "K=1000"),
    ("sweep-workers-1e9", ["mixture", "sweep", "--workers", "1e9", "--param", "omega=0.1,0.2", "--out", "sw"],
     "workers"),
    ("width-sweep-workers-1e9", ["mixture", "width-sweep", "--workers", "1e9", "--widths", "4", "--seeds", "1",
                                 "--out", "w.h5"], "workers"),
    ("model-sweep-workers-1e9", ["model", "sweep", "mixture", "--workers", "1e9", "--param", "omega=0.1,0.2",
                                 "--steps", "2", "--out", "sw"], "workers"),
    ("induction-full-steps-1e15", ["induction", "full", "--steps", "1e15", "--out", "full"], "steps"),
    ("study-K-1000", ["mixture", "study", "k-mixtures", "--K", "1000", "--out", "st"], "K=1000"),
    ("study-L-1e6", ["mixture", "study", "k-mixtures", "--L", "1e6", "--out", "st"], "L=1000000"),
    ("study-steps-1e15", ["mixture", "study", "k-mixtures", "--steps", "1e15", "--out", "st"], "1e+15 steps"),
    ("study-seeds-1e9", ["mixture", "study", "k-mixtures", "--seeds", "1e9", "--out", "st"], "seeds"),
    ("escape-omegas-25000", ["mixture", "escape", "--omegas", ",".join(f"{0.001 + i * 1e-6:.7g}"
                                                                       for i in range(25000))], "omegas"),
    ("flow-t-end-1e300", ["mixture", "run", "--method", "flow", "--t-end", "1e300", "--out", "x.h5"], "t_end"),
    ("model-flow-t-end-1e300", ["model", "run", "mixture", "--method", "flow", "--t-end", "1e300", "--out", "x.h5"],
     "t_end"),
    # internal errors (exit 70 before)
    ("omega-1e300", ["mixture", "run", "--omega", "1e300", "--out", "x.h5"], "omega"),
    ("model-omega-1e300", ["model", "run", "mixture", "--omega", "1e300", "--out", "x.h5"], "omega"),
    ("width-sweep-widths-empty", ["mixture", "width-sweep", "--widths", "", "--out", "w.h5"], "widths"),
    ("model-width-sweep-widths-empty", ["model", "width-sweep", "incontext", "--widths", "", "--out", "w.h5"],
     "widths"),
    ("study-widths-empty", ["mixture", "study", "k-mixtures", "--widths", "", "--out", "st"], "widths"),
    ("study-K-empty", ["mixture", "study", "k-mixtures", "--K", "", "--out", "st"], "K"),
    ("model-plot-incomplete-file", ["model", "plot", "incomplete.h5", "--out", "figs"], "loss"),
    ("chi2-d-1e6", ["induction", "chi2", "--d", "1e6"], "alphabet d = 1000000"),
    ("chi2-lags-1e6", ["induction", "chi2", "--lags", "1e6"], "window 1000000"),
    # the window chain's d^W x d^W matrices: d = 10 (W = 3) took 23 GiB and over 2 minutes before (review)
    ("chi2-d-10", ["induction", "chi2", "--d", "10"], "alphabet d = 10"),
    # found by the 60 s walk (tests/test_cli_numbers.py): exit 70 before
    ("icl-cov-1e300", ["model", "run", "icl_zfb", "--cov", "1e300", "--out", "x.h5"], "data.cov"),
    ("icl-noise-1e300", ["model", "run", "icl_zfb", "--noise", "1e300", "--out", "x.h5"], "data.noise"),
    ("omega-q-1e300", ["model", "run", "mixture_multiclass", "--omega-q", "1e300", "--out", "x.h5"], "omega_q"),
    # accepted nonsense (before)
    ("steps-0", ["mixture", "run", "--steps", "0", "--out", "x.h5"], "steps"),
    ("model-steps-0", ["model", "run", "incontext", "--steps", "0", "--out", "x.h5"], "steps"),
    ("induction-steps-0", ["induction", "run", "--steps", "0", "--out", "x.h5"], "steps"),
    ("stage-steps-0-0-0", ["mixture", "run", "--schedule", "three-stage", "--stage-steps", "0,0,0",
                           "--out", "x.h5"], "--stage-steps"),
    ("stage-steps-stage1-0-zero-neurons", ["mixture", "run", "--schedule", "three-stage", "--stage-steps",
                                           "0,4000,2000", "--out", "x.h5"], "--stage-steps"),
    ("stage-times-0-0-0", ["mixture", "run", "--method", "flow", "--schedule", "three-stage", "--stage-times",
                           "0,0,0", "--out", "x.h5"], "--stage-times"),
    ("sweep-stage-steps-0-0-0", ["mixture", "sweep", "--schedule", "three-stage", "--stage-steps", "0,0,0",
                                 "--param", "omega=0.1,0.2", "--out", "sw"], "--stage-steps"),
    ("model-stage-steps-0-0", ["model", "run", "mixture", "--schedule", "three-stage", "--stage-steps", "0,0,0",
                               "--out", "x.h5"], "--stage-steps"),
    ("induction-stage-steps-0-0-0", ["induction", "run", "--stage-steps", "0,0,0", "--out", "x.h5"],
     "--stage-steps"),
    ("h-min-0", ["mixture", "run", "--method", "flow", "--h-min", "0", "--out", "x.h5"], "--h-min"),
    ("model-h-min-0", ["model", "run", "mixture", "--method", "flow", "--h-min", "0", "--out", "x.h5"], "--h-min"),
    ("induction-D-0", ["induction", "run", "--D", "0", "--out", "x.h5"], "D"),
    ("escape-omegas-empty", ["mixture", "escape", "--omegas", ""], "omegas"),
    ("bound-9**9**9", ["mixture", "bound", "mix.h5", "loss <= 9**9**9"], "9**9**9"),
    ("bound-1e400", ["mixture", "bound", "mix.h5", "loss <= 1e400"], "1e400"),
    ("abbreviated-flag", ["mixture", "run", "--step", "5", "--out", "x.h5"], "--step"),
    ("induction-abbreviated-flag", ["induction", "run", "--step", "5", "--out", "x.h5"], "--step"),
    ("model-abbreviated-flag", ["model", "run", "incontext", "--step", "5", "--out", "x.h5"], "--step"),
    ("chunk-size-with-per-point", ["mixture", "sweep", "--param", "omega=0.1,0.2", "--per-point", "--chunk-size",
                                   "4", "--out", "sw"], "per_point"),
    ("model-keep-records-with-per-point", ["model", "sweep", "mixture", "--param", "omega=0.1,0.2", "--per-point",
                                           "--keep-records", "1", "--out", "sw"], "per_point"),
    ("chunk-size-with-batched", ["mixture", "sweep", "--param", "omega=0.1,0.2", "--batched", "--chunk-size", "4",
                                 "--out", "sw"], "batched"),
    # long lists in error lines: the flag, close matches, where the list is
    ("bound-unknown-name", ["mixture", "bound", "mix.h5", "nosuch <= 1"], "--help"),
    ("sweep-unknown-param", ["mixture", "sweep", "--param", "omga=1,2", "--out", "sw"], "omega"),
    ("config-unknown-key", ["mixture", "run", "--config", "badkey.toml", "--out", "x.h5"], "omega"),
    # an empty output path: refused before any work (run_check and the run verbs)
    ("check-out-empty", ["model", "check", "maxmargin", "--quick", "--out", ""], "out"),
    ("model-run-out-empty", ["model", "run", "incontext", "--steps", "5", "--out", ""], "out"),
    ("mixture-run-out-empty", ["mixture", "run", "--steps", "5", "--out", ""], "out"),
    ("induction-run-out-empty", ["induction", "run", "--out", ""], "out"),
]


@pytest.fixture(scope="module")
def limit_results(tmp_path_factory):
    d = tmp_path_factory.mktemp("limits")
    r = subprocess.run(MEANFIELD + ["mixture", "run", "--steps", "20", "--quiet", "--out", str(d / "mix.h5")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    import shutil

    shutil.copy(d / "mix.h5", d / "incomplete.h5")
    with h5py.File(d / "incomplete.h5", "a") as f:
        del f["loss"]
        f.attrs["status"] = "interrupted"
    shutil.copy(d / "mix.h5", d / "ind.h5")
    with h5py.File(d / "ind.h5", "a") as f:
        f.attrs["system"] = "induction"
    (d / "badkey.toml").write_text("omga = 0.1\n")
    before = _files(d)
    warm = [("warm-up", ["mixture", "width-sweep", "--seeds", "0"])]  # pays the imports: not timed below
    results, _ = run_cases(warm + [(c, a) for c, a, _ in CASES], d)
    return {"results": results, "new": _files(d) - before, "dir": d}


@pytest.mark.parametrize("cid,argv,field", CASES, ids=[c[0] for c in CASES])
def test_refused_with_one_short_line(limit_results, cid, argv, field):
    x = limit_results["results"][cid]
    err = x["stderr"]
    lines = err.strip().splitlines()
    assert x["rc"] == 2, (x["rc"], err[-3000:])
    assert "Traceback" not in err and "Traceback" not in x["stdout"]
    assert len(lines) == 1, err[-3000:]
    assert lines[0].startswith(("meanfield: error: ", "meanfield ")), lines[0]
    assert field in lines[0], (field, lines[0])
    assert len(lines[0]) < LINE_CHARS, lines[0]
    assert x["seconds"] < CASE_SECONDS, x["seconds"]


def test_every_refusal_line_is_short(limit_results):
    long = long_refusals(limit_results["results"])
    assert not long, long


def test_refusals_write_nothing(limit_results):
    assert not limit_results["new"], sorted(limit_results["new"])
    assert not list(limit_results["dir"].rglob("*.tmp-*"))


def _parsers(p: argparse.ArgumentParser, path=("meanfield",)):
    yield path, p
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                yield from _parsers(sub, path + (name,))


def test_every_parser_refuses_abbreviations():
    """Walk every parser reachable from meanfield.cli: allow_abbrev=False on all
    (``--step 5`` is not ``--steps``), and the walk reaches every system's verbs."""
    from meanfield.cli import build_parser

    found = list(_parsers(build_parser()))
    names = {" ".join(p) for p, _ in found}
    for must in ("meanfield mixture run", "meanfield mixture sweep", "meanfield induction full",
                 "meanfield model run", "meanfield model sweep", "meanfield mixture sweep-plot"):
        assert must in names, sorted(names)
    assert len(found) > 25, len(found)
    bad = [" ".join(p) for p, parser in found if parser.allow_abbrev]
    assert not bad, bad


def test_a_short_valid_sweep_still_runs_with_workers_at_the_ceiling(tmp_path):
    from meanfield.core.guard import max_workers

    for flags, index in (([], "sweep.h5"), (["--per-point"], "sweep.json")):  # chunked (the default), per point
        r = subprocess.run(MEANFIELD + ["mixture", "sweep", "--param", "omega=0.1,0.2", "--steps", "5", "--quiet",
                                        "--workers", str(max_workers()), *flags, "--out", f"sw{len(flags)}"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        assert (tmp_path / f"sw{len(flags)}" / index).is_file()


@pytest.mark.parametrize("count", [1e300, 1e7, float("inf")])
def test_a_description_with_huge_token_counts_is_refused(count):
    """issue 26: token counts are multiplicities (their log enters the logits): at most MAX_COUNT."""
    import copy

    from meanfield.core.config import ConfigError
    from meanfield.engine.datatables import MAX_COUNT
    from meanfield.engine.description import description_from_dict

    raw = {"dictionary": {"features": ["a", "b"]},
           "data": {"rows": [{"tokens": ["a", "b"], "target": 1, "counts": [1, 2]},
                             {"tokens": ["b", "a"], "target": -1}]},
           "heads": [{"name": "h"}], "model": {"loss": "logistic"}, "parameters": {"steps": 3}}
    description_from_dict(copy.deepcopy(raw))  # the same description with sane counts is fine
    raw["data"]["rows"][0]["counts"] = [1, count]
    with pytest.raises(ConfigError, match=r"data.rows\[0\].counts: must be"):
        description_from_dict(raw)
    assert count > MAX_COUNT


def test_huge_token_counts_from_the_command_line(tmp_path):
    """The same refusal through `meanfield model run` on a file: exit 2, one line naming the field, nothing
    written."""
    (tmp_path / "m.toml").write_text(
        'name = "m"\n[dictionary]\nfeatures = ["a", "b"]\n[data]\nrows = [\n'
        '  {tokens = ["a", "b"], target = 1, counts = [1, 1e300]},\n  {tokens = ["b", "a"], target = -1},\n]\n'
        '[[heads]]\nname = "h"\n[model]\nloss = "logistic"\n[parameters]\nsteps = 3\n', encoding="utf-8")
    r = subprocess.run(MEANFIELD + ["model", "run", "m.toml", "--out", "r.h5"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "data.rows[0].counts: must be" in lines[0], r.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["m.toml"]


def test_the_python_api_keeps_evaluate_at_the_start_runs():
    """The refusals of --h-min 0 and of zero-step stage plans are the command
    line's (meanfield.core.config.check_cli_values): from Python h_min = 0 (no
    floor) and a plan of zero steps (the start evaluated) stay accepted, and a
    zero-step plan records exactly its initial state."""
    from meanfield.core.config import ConfigError, check_cli_values
    from meanfield.engine.description import description_from_dict
    from meanfield.models.mixture.measure import simulate
    from meanfield.models.mixture.config import make_config

    assert make_config(method="flow", t_end=1.0, h_min=0.0).h_min == 0.0
    cfg = make_config({"K": 2, "L": 3}, schedule="three-stage", stage_steps=(0, 0, 0))
    sim = simulate(cfg)
    assert len(sim["loss"]) == 1  # the start, evaluated, nothing trained
    raw = {"dictionary": {"features": ["a", "b"]},
           "data": {"rows": [{"tokens": ["a", "b"], "target": 1}, {"tokens": ["b", "a"], "target": -1}]},
           "heads": [{"name": "h"}], "model": {"loss": "logistic"},
           "parameters": {"method": "flow", "t_end": 1.0, "h_min": 0.0}}
    assert description_from_dict(raw).parameters.h_min == 0.0
    for bad in ({"h_min": "0"}, {"stage_steps": "0,0"}, {"stage_times": "0.0,0"}, {"phase_steps": "0"}):
        with pytest.raises(ConfigError, match="on the command line"):
            check_cli_values(bad)
    check_cli_values({"h_min": "1e-9", "stage_steps": "0,1", "stage_times": None})


def test_force_is_not_offered_or_honoured_beyond_any_run(tmp_path):
    """Beyond 16 x the machine's memory or a year of computing, --force neither appears in the line nor
    goes past it (an absurd estimate is a plain refusal); below those, it still goes past."""
    from meanfield.core.config import ConfigError
    from meanfield.core.limits import HARD_SECONDS, MAX_SECONDS, check_size, memory_limit

    for est in ({"bytes": 17 * memory_limit()}, {"seconds": 2 * HARD_SECONDS}):
        with pytest.raises(ConfigError) as e:
            check_size(est, "steps", force=True)
        assert "--force" not in str(e.value) and "beyond any run" in str(e.value)
    check_size({"seconds": 2 * MAX_SECONDS}, "steps", force=True)  # an hour's run: --force goes past
    with pytest.raises(ConfigError, match="--force runs it anyway"):
        check_size({"seconds": 2 * MAX_SECONDS}, "steps")
    r = subprocess.run([sys.executable, "-m", "meanfield", "induction", "full", "--steps", "1e15", "--force",
                        "--out", str(tmp_path / "o")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr[-400:]
    line = r.stderr.strip()
    assert "\n" not in line and "beyond any run" in line and "--force" not in line, line
    assert not (tmp_path / "o").exists()


def test_chi2_estimate_counts_the_window_chain():
    """The chi2 table's largest arrays are the window chain's transition matrices (B, d^W, d^W) and their
    elimination copy (meanfield.models.induction.theory.window_transition, stationary): the estimate holds
    at least those two, and a size whose two matrices alone exceed the memory is refused."""
    from meanfield.core.config import ConfigError
    from meanfield.core.limits import memory_limit
    from meanfield.models.induction.sizes import chi2_estimate

    d, W, n = 5, 3, 2000
    est = chi2_estimate(d, (1, 2), (1, 2, 3), 2, n)
    assert est["bytes"] >= 2 * 8.0 * 1000 * float(d ** W) ** 2
    d = next(d for d in range(2, 100) if 2 * 8.0 * 1000 * float(d ** W) ** 2 > memory_limit())
    with pytest.raises(ConfigError, match=f"alphabet d = {d}"):
        chi2_estimate(d, (1, 2), (1, 2, 3), 2, n)


def test_model_plot_answers_on_induction_run_files(limit_results, tmp_path):
    """issue 26: `model plot` on an induction run file was exit 70. A real induction run file gives its
    figures; a file that says induction but holds another schema is drawn generically or refused in one line."""
    d = limit_results["dir"]
    r = subprocess.run(MEANFIELD + ["induction", "run", "--schedule", "simultaneous", "--steps", "3", "--n-train",
                                    "50", "--n-test", "20", "--L", "20", "--quiet", "--out", str(tmp_path / "i.h5")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    for run, ok in ((tmp_path / "i.h5", (0,)), (d / "ind.h5", (0, 2))):
        out = tmp_path / (run.stem + "_figs")
        r = subprocess.run(MEANFIELD + ["model", "plot", str(run), "--out", str(out)], capture_output=True,
                           text=True, timeout=300)
        assert r.returncode in ok and "Traceback" not in r.stderr, (run, r.returncode, r.stderr[-2000:])
        if r.returncode == 0:
            assert any(out.iterdir())
        else:
            assert len(r.stderr.strip().splitlines()) == 1 and not out.exists()


def test_empty_widths_on_every_command_that_takes_widths(tmp_path):
    """issue 26: `--widths ""` was exit 70 on six commands. Every parser with a --widths option (walked from
    meanfield.cli, each study name too) refuses it in one line naming widths, writing nothing."""
    from meanfield.cli import build_parser

    cases = []
    for path, p in _parsers(build_parser()):
        if "--widths" not in p._option_string_actions:
            continue
        pos = [a for a in p._actions if not a.option_strings and a.dest not in ("help",)]
        heads = [[]]
        if pos and pos[0].choices:  # mixture study NAME: every study
            heads = [[c] for c in pos[0].choices]
        elif pos:  # the model verbs: a shipped model
            heads = [["incontext"]]
        for h in heads:
            argv = list(path[1:]) + h + ["--widths", "", "--out", "o.h5" if "width-sweep" in path else "o"]
            cases.append((" ".join(argv), argv))
    assert len(cases) >= 6, cases
    before = _files(tmp_path)
    res, _ = run_cases(cases, tmp_path, timeout=600, case_alarm=60)
    for cid, _argv in cases:
        x = res[cid]
        lines = x["stderr"].strip().splitlines()
        assert x["rc"] == 2 and len(lines) == 1 and "widths" in lines[0], (cid, x["rc"], x["stderr"][-500:])
    assert _files(tmp_path) == before
