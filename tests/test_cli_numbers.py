"""No number makes a command hang (issue 26): every flag that takes a value,
on every subcommand reachable from ``meanfield.cli``, is tried at 1e9 and at
1e300 (with the fewest other arguments that command needs, and a short run
where the command trains). Each case must answer within 60 s: a refusal
(exit 2, one short line, no traceback) or bounded work (exit 0, 1 or 3),
never an internal error (70).

The flags come from the parsers themselves, with no list of exceptions: every
option that takes a value (the parsers hand every value over as text, so a
number flag cannot be told from a name flag there: all are tried; a name
flag given 1e9 is a refusal or a file of that name). The ``model`` verbs are
walked for every shipped description, each with the flags its help shows
(``meanfield model VERB MODEL --help``: the verb's own flags and the
parameters that model takes, ``meanfield.engine.help.apply``).

The cases run in one child process (tests/cli_cases.py), each under a 60 s
alarm. Which run where (docs/cli.md, "The 60 s walk"):

* fast (``make test``): every command's flags at 1e300 (the model verbs for
  incontext, ``model run`` for every shipped model), and a fixed sample of
  1e9 cases (every :data:`SAMPLE_EVERY`-th of the full list, offsets fixed);
* slow (``pytest -m slow``): every case at both values, for every model; and
  the commands whose accepted run is itself a study of minutes (check, demo,
  induction full) as separate processes.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest
from cli_cases import long_refusals, run_cases

MEANFIELD = [sys.executable, "-m", "meanfield"]
ANSWER_S = 60.0
VALUES = ("1e9", "1e300")
SAMPLE_EVERY = 23  # the fast sample of the 1e9 cases: every 23rd (a prime: it does not follow the flag order)

#: the fewest other arguments of each command (short runs where it trains); the model verbs: MODEL_BASE
BASE = {
    ("mixture", "run"): ["--steps", "3", "--out", "x.h5"],
    ("mixture", "particles"): ["--width", "4", "--steps", "3", "--out", "x.h5"],
    ("mixture", "derive"): ["--format", "json"],
    ("mixture", "plot"): ["mix.h5", "--out", "figs"],
    ("mixture", "sweep"): ["--param", "omega=0.1,0.2", "--steps", "3", "--quiet", "--out", "sw"],
    ("mixture", "sweep-plot"): ["msw", "--x", "omega", "--y", "loss", "--out", "sp.png"],
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
    ("model", "plot"): ["mix.h5", "--out", "figs"],
    ("model", "bound"): ["mix.h5", "loss <= 1"],
    ("model", "sweep-plot"): ["msw", "--x", "omega", "--y", "loss", "--out", "sp.png"],
    ("plot",): ["mix.h5", "--out", "figs"],
    ("warm",): ["--only", "engine"],
}
#: the model verbs: MODEL first, then these; SHORT stands for the model's shortest training (_short)
MODEL_BASE = {
    "derive": [],
    "run": ["SHORT", "--out", "x.h5"],
    "sweep": ["--param", "seed=0,1", "SHORT", "--quiet", "--out", "sw"],
    "particles": ["--width", "4", "SHORT", "--out", "x.h5"],
    "width-sweep": ["--widths", "4", "--seeds", "1", "SHORT", "--quiet", "--out", "w.h5"],
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
    """Every option of parser ``p`` that takes a value and is shown in its help."""
    for a in p._actions:
        if a.option_strings and a.nargs != 0 and a.help != argparse.SUPPRESS:
            yield max(a.option_strings, key=len)


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


def shipped_models() -> list[str]:
    """The shipped descriptions' names, as ``meanfield model`` finds them (meanfield.engine.cli.model_path)."""
    from meanfield.engine.cli import MODELS_DIR

    return sorted({f.stem for f in MODELS_DIR.glob("*.toml")}
                  | {f.stem for f in MODELS_DIR.glob("*/*.toml") if f.stem == f.parent.name})


def _short(model: str) -> list[str]:
    """The model's shortest training: 3 steps (per stage, where it is staged), and a symmetric infinite-width
    start allowed (it would refuse every case alike: meanfield.engine.symmetry)."""
    from meanfield.engine.cli import model_path
    from meanfield.engine.description import read_raw

    raw = read_raw(model_path(model))
    tr = raw.get("training") if isinstance(raw.get("training"), dict) else {}
    stages = tr.get("stages") or []
    if raw.get("family") == "induction":  # its own default schedule (three-stage)
        from meanfield.models.induction.config import make_config

        stages = make_config({}).stage_steps
    out = ["--stage-steps", ",".join(["3"] * len(stages))] if stages else ["--steps", "3"]
    if raw.get("family") is None and raw.get("model", {}).get("class") != "twolayer":
        out += ["--symmetry", "allow"]
    return out


def model_cases(models, verbs=tuple(MODEL_BASE), values=VALUES) -> list:
    """``meanfield model VERB MODEL FLAG VALUE`` for every flag of ``MODEL``'s help of that verb."""
    from meanfield.cli import build_parser
    from meanfield.engine import help as model_help
    from meanfield.engine.cli import model_path

    out = []
    for model in models:
        short = _short(model)
        for verb in verbs:
            parser = dict(_leaves(build_parser()))[("model", verb)]
            model_help.apply(parser, model_path(model))
            base = [model] + [w for x in MODEL_BASE[verb] for w in (short if x == "SHORT" else [x])]
            for flag in _value_flags(parser):
                for v in values:
                    out.append((f"model {verb} {model} {flag}={v}", ["model", verb] + _with(base, flag, v)))
    return out


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


def all_cases(values=VALUES) -> list:
    """Every case of the walk: every command, every model."""
    return cases(BASE, values) + model_cases(shipped_models(), values=values)


def fast_cases() -> list:
    """The fast variant: 1e300 on every command (the model verbs for incontext, ``model run`` for every
    model) and every SAMPLE_EVERY-th case of the full 1e9 walk."""
    big = cases(BASE, ("1e300",)) + model_cases(["incontext"], values=("1e300",))
    big += model_cases([m for m in shipped_models() if m != "incontext"], verbs=("run",), values=("1e300",))
    sample = all_cases(("1e9",))[::SAMPLE_EVERY]
    return big + sample


def test_every_command_with_value_flags_is_covered():
    """Every leaf command has its fewest arguments here (a new command must be added), and every
    shipped model's short base run answers by itself (else every case of it would be the same refusal)."""
    from meanfield.cli import build_parser

    missing = [p for p, parser in _leaves(build_parser())
               if list(_value_flags(parser)) and p not in BASE and p not in SLOW
               and not (p[0] == "model" and p[1] in MODEL_BASE)]
    assert not missing, missing


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("numbers")
    for argv in (["mixture", "run", "--steps", "20", "--quiet", "--out", "mix.h5"],
                 ["induction", "run", "--schedule", "simultaneous", "--steps", "5", "--n-train", "50",
                  "--n-test", "20", "--L", "20", "--quiet", "--out", "ind.h5"],
                 ["mixture", "sweep", "--param", "omega=0.1,0.2", "--steps", "3", "--workers", "1", "--quiet",
                  "--out", "msw"]):
        r = subprocess.run(MEANFIELD + argv, cwd=d, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
    return d


def test_every_models_short_base_runs(files):
    """Each shipped model's ``model run`` base (the short training the walk adds its flag to) runs."""
    cs = [(f"base {m}", ["model", "run", m] + _short(m) + ["--quiet", "--out", f"base_{m}.h5"])
          for m in shipped_models()]
    res, _ = run_cases(cs, files, timeout=1200, case_alarm=ANSWER_S)
    bad = {cid: (x["rc"], x["stderr"][-300:]) for cid, x in res.items() if x["rc"] != 0}
    assert not bad, bad


def _check(cid, x):
    rc, err = x["rc"], x["stderr"]
    assert rc != "timeout" and x["seconds"] < ANSWER_S, (cid, "no answer within 60 s")
    assert rc in (0, 1, 2, 3), (cid, rc, err[-2000:])
    assert "Traceback" not in err and "Traceback" not in x["stdout"], (cid, err[-2000:])
    if rc == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("meanfield"), (cid, err[-2000:])


def _run_all(files, cs, timeout: float):
    """``timeout``: the whole batch (a case stuck in compiled code, where the alarm cannot reach it, ends it)."""
    res, _ = run_cases(cs, files, timeout=timeout, case_alarm=ANSWER_S, workers=2)  # both cores: half the wall time
    bad = []
    for cid, _argv in cs:
        try:
            _check(cid, res[cid])
        except AssertionError as e:
            bad.append(str(e)[:300])
    long = long_refusals(res)
    bad += [f"{cid}: a refusal of {len(line)} characters: {line[:160]}..." for cid, line in long.items()]
    assert not bad, "\n".join(bad)


@pytest.mark.slow  # a subset of the whole walk below, which the suite runs (issue 26's acceptance: every flag)
def test_every_number_flag_fast_variant(files):
    """1e300 on every command and a fixed sample of the 1e9 walk."""
    cs = fast_cases()
    assert len(cs) > 800, len(cs)
    _run_all(files, cs, timeout=1800)


@pytest.mark.parametrize("value", VALUES)
def test_every_number_flag_of_every_command_and_model(files, value):
    """The whole walk at one value: at 1e9 many flags are valid (seeds, max_abs, record_every, ...), short
    runs; every shipped model on every model verb (both values: 132 s on the 2-core machine, 2026-12-06;
    each case answers within ANSWER_S = 60 s or fails)."""
    cs = all_cases((value,))
    assert len(cs) > 2000, len(cs)
    _run_all(files, cs, timeout=6 * 3600)


@pytest.mark.slow
@pytest.mark.parametrize("cid,argv", cases(SLOW), ids=[c[0] for c in cases(SLOW)])
def test_studies_at_1e9_and_1e300_as_processes(tmp_path, cid, argv):
    try:
        r = subprocess.run(MEANFIELD + argv, cwd=tmp_path, capture_output=True, text=True, timeout=ANSWER_S + 30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{cid}: no answer within {ANSWER_S + 30:.0f} s")
    _check(cid, {"rc": r.returncode, "stderr": r.stderr, "stdout": r.stdout, "seconds": 0.0})
