"""No number makes a command hang (issue 26): every flag that takes a value,
on every subcommand reachable from ``meanfield.cli``, is tried at 1e9 and at
1e300 (with the fewest other arguments that command needs, and a short run
where the command trains). Each case must answer within 60 s: a refusal
(exit 2, one line, no traceback) or bounded work (exit 0, 1 or 3), never an
internal error (70).

The cases run in one child process (tests/cli_cases.py), each under a 60 s
alarm: 1e300 in the fast suite, 1e9 (where most values are valid and run)
marked slow (about 6 minutes on the loaded 2-core machine). The commands whose
accepted run is itself a study of minutes (check, demo, induction full) are in
a slow variant too, as separate processes.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest
from cli_cases import run_cases

MEANFIELD = [sys.executable, "-m", "meanfield"]
ANSWER_S = 60.0
VALUES = ("1e9", "1e300")

#: flags whose value is a path, a name or an expression, not a number (tried by test_edges / test_cli_limits)
NOT_NUMBERS = {"--config", "--out", "--plot", "--backend", "--scheduler", "--file", "--json", "--from", "--param",
               "--select", "--x", "--y", "--z", "--hue", "--agg", "--during", "--method", "--schedule",
               "--stage-criteria", "--criterion", "--stage3", "--neuron-init", "--feature-gram", "--keep-records",
               "--train-file", "--sampling", "--loss", "--phase-criteria", "--format"}

#: the fewest other arguments of each command (short runs where it trains)
BASE = {
    ("mixture", "run"): ["--steps", "3", "--out", "x.h5"],
    ("mixture", "particles"): ["--width", "4", "--steps", "3", "--out", "x.h5"],
    ("mixture", "derive"): ["--format", "json"],
    ("mixture", "plot"): ["mix.h5", "--out", "figs"],
    ("mixture", "sweep"): ["--param", "omega=0.1,0.2", "--steps", "3", "--quiet", "--out", "sw"],
    ("mixture", "width-sweep"): ["--widths", "4", "--seeds", "1", "--steps", "3", "--quiet", "--out", "w.h5"],
    ("mixture", "construct"): [],
    ("mixture", "study"): ["k-mixtures", "--K", "2", "--steps", "5", "--widths", "4", "--seeds", "1", "--out", "st"],
    ("mixture", "bound"): ["mix.h5", "loss <= 1"],
    ("mixture", "escape"): ["--stage", "simultaneous", "--steps", "30", "--omegas", "0.1,0.2"],
    ("induction", "run"): ["--schedule", "simultaneous", "--steps", "3", "--n-train", "50", "--n-test", "20",
                           "--L", "20", "--out", "x.h5"],
    ("induction", "data"): ["--n", "10", "--out", "x.h5"],
    ("induction", "chi2"): ["--n-kernels", "20"],
    ("induction", "plot"): ["ind.h5", "--out", "figs"],
    ("model", "derive"): ["incontext"],
    ("model", "run"): ["incontext", "--steps", "3", "--out", "x.h5"],
    ("model", "sweep"): ["incontext", "--param", "omega=0.1,0.2", "--steps", "3", "--quiet", "--out", "sw"],
    ("model", "particles"): ["incontext", "--width", "4", "--steps", "3", "--out", "x.h5"],
    ("model", "width-sweep"): ["incontext", "--widths", "4", "--seeds", "1", "--steps", "3", "--quiet",
                               "--out", "w.h5"],
    ("model", "plot"): ["mix.h5", "--out", "figs"],
    ("model", "bound"): ["mix.h5", "loss <= 1"],
    ("plot",): ["mix.h5", "--out", "figs"],
}
#: commands whose accepted run takes minutes: the slow variant
SLOW = {("mixture", "check"): ["--quick"], ("mixture", "demo"): ["--quick"], ("induction", "check"): ["--quick"],
        ("induction", "full"): ["--quick"], ("model", "check"): ["incontext", "--quick"]}


#: Every run estimated beyond 10 minutes is refused without --force (meanfield.core.limits.MAX_SECONDS, the
#: rule in docs/cli.md): --steps 1e9 on any short base run is a refusal, with no list of exceptions here.


def _leaves(p: argparse.ArgumentParser, path=()):
    subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, p
    for a in subs:
        for name, sub in a.choices.items():
            yield from _leaves(sub, path + (name,))


def _value_flags(p):
    for a in p._actions:
        if a.option_strings and a.nargs != 0 and not a.choices and not isinstance(a, argparse._HelpAction):
            flag = max(a.option_strings, key=len)
            if flag not in NOT_NUMBERS:
                yield flag


def _with(base, flag, value):
    out, skip = [], False
    for i, w in enumerate(base):  # the flag under test replaces the base's own value for it
        if skip:
            skip = False
            continue
        if w == flag:
            skip = True
            continue
        out.append(w)
    return out + [flag, value]


def cases(which: dict, values=VALUES):
    from meanfield.cli import build_parser

    out = []
    for path, p in _leaves(build_parser()):
        if path not in which:
            continue
        for flag in _value_flags(p):
            for v in values:
                out.append((f"{' '.join(path)} {flag}={v}", list(path) + _with(which[path], flag, v)))
    return out


def test_every_command_with_value_flags_is_covered():
    from meanfield.cli import build_parser

    missing = [p for p, parser in _leaves(build_parser())
               if list(_value_flags(parser)) and p not in BASE and p not in SLOW and p[-1] != "sweep-plot"]
    assert not missing, missing  # a new command: give it its fewest arguments above


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("numbers")
    for argv in (["mixture", "run", "--steps", "20", "--quiet", "--out", "mix.h5"],
                 ["induction", "run", "--schedule", "simultaneous", "--steps", "5", "--n-train", "50",
                  "--n-test", "20", "--L", "20", "--quiet", "--out", "ind.h5"]):
        r = subprocess.run(MEANFIELD + argv, cwd=d, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
    return d


def _check(cid, x):
    rc, err = x["rc"], x["stderr"]
    assert rc != "timeout" and x["seconds"] < ANSWER_S, (cid, "no answer within 60 s")
    assert rc in (0, 1, 2, 3), (cid, rc, err[-2000:])
    assert "Traceback" not in err and "Traceback" not in x["stdout"], (cid, err[-2000:])
    if rc == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("meanfield"), (cid, err[-2000:])


def _run_all(files, cs):
    res, _ = run_cases(cs, files, timeout=3600, case_alarm=ANSWER_S)
    bad = []
    for cid, _argv in cs:
        try:
            _check(cid, res[cid])
        except AssertionError as e:
            bad.append(str(e)[:300])
    assert not bad, "\n".join(bad)


def test_every_number_flag_at_1e300(files):
    """Most are refused at once (beyond int64, beyond a ceiling, beyond an estimate): the fast suite."""
    cs = cases(BASE, ("1e300",))
    assert len(cs) > 300, len(cs)
    _run_all(files, cs)


@pytest.mark.slow
def test_every_number_flag_at_1e9(files):
    """At 1e9 many flags are valid (seeds, max_abs, record_every, ...): short runs, minutes in all."""
    cs = cases(BASE, ("1e9",))
    assert len(cs) > 300, len(cs)
    _run_all(files, cs)


@pytest.mark.slow
@pytest.mark.parametrize("cid,argv", cases(SLOW), ids=[c[0] for c in cases(SLOW)])
def test_studies_at_1e9_and_1e300_as_processes(tmp_path, cid, argv):
    try:
        r = subprocess.run(MEANFIELD + argv, cwd=tmp_path, capture_output=True, text=True, timeout=ANSWER_S + 30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{cid}: no answer within {ANSWER_S + 30:.0f} s")
    _check(cid, {"rc": r.returncode, "stderr": r.stderr, "stdout": r.stdout, "seconds": 0.0})
