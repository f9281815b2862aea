"""User bounds over a run's trajectory (meanfield.core.bounds): values, slack, stages, safety, TOML files."""

from __future__ import annotations

import ast
import builtins
import io
import os
import re
from pathlib import Path

import numpy as np
import pytest

from meanfield.core import bounds as Bd
from meanfield.core.bound_files import format_result, load_bounds, run_bounds_cli
from meanfield.core.bounds import BoundError, evaluate, parse_bound, values
from meanfield.core.config import ConfigError
from meanfield.core.io import read_run
from meanfield.models.mixture import run as R
from meanfield.models.mixture.config import make_config

STAGE_STEPS = (200, 1000, 200)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bound_runs")
    three, simul = d / "three.h5", d / "simul.h5"
    R.run_to_file(make_config(schedule="three-stage", stage_steps=STAGE_STEPS), three, progress=False)
    R.run_to_file(make_config(schedule="simultaneous", steps=400), simul, progress=False)
    return {"three": three, "simul": simul}


@pytest.fixture(scope="module")
def run(files):
    return read_run(files["three"])


@pytest.fixture(scope="module")
def srun(files):
    return read_run(files["simul"])


# --------------------------------------------------------------------------- independent numpy reference

def _ends(r):
    return {int(e["stage"]): float(e["t"]) for e in r.attrs["stage_ends"]}


def _mask(r, during="all", tmin=None, tmax=None):
    """Selection from the stage_ends attribute: stage k is the closed interval [T_{k-1}, T_k]."""
    t = r["t"]
    m = np.ones(t.shape, bool)
    if during != "all":
        k = int(during[-1])
        ends = _ends(r)
        lo = t[0] if k == 1 else ends[k - 1]
        m = (t >= lo) & (t <= ends[k])
    if tmin is not None:
        m &= t >= tmin
    if tmax is not None:
        m &= t <= tmax
    return m


def _g(r):
    return 1.0 / (1.0 + np.exp(r["margin"]))


def _ref_cases(r):
    """(expr, during, tmin, tmax, expected_holds, numpy (holds_t, slack_t)) with features c1 c2 v1 v2 = 0 1 2 3,
    heads + - = 0 1."""
    S, A, B, w, u, M, t, loss = r["S"], r["A"], r["B"], r["w"], r["u"], r["margin"], r["t"], r["loss"]
    cons = r["samples"]["consistent"].astype(bool)
    ends = _ends(r)
    omega = float(r.attrs["omega"])

    def le(a, b):
        return a <= b, b - a

    def lt(a, b):
        return a < b, b - a

    def both(x, y):
        return x[0] & y[0], np.minimum(x[1], y[1])

    def either(x, y):
        return x[0] | y[0], np.maximum(x[1], y[1])

    bc = lambda x: np.broadcast_to(x, t.shape)  # noqa: E731
    return [
        ("loss <= 0.7", "all", None, None, True, le(loss, 0.7)),
        ("loss <= 0.5", "all", None, None, False, le(loss, 0.5)),
        ("loss >= 0.6", "all", None, None, False, le(0.6, loss)),
        ("loss <= 0.5", "all", ends[2], None, True, le(loss, 0.5)),
        ("S+[c1,v1] >= 0 and S+[c2,v1] <= 0", "stage2", None, None, True,
         both(le(0, S[:, 0, 0, 2]), le(S[:, 0, 1, 2], 0))),
        ("S+[c1,v1] >= 0.5", "stage2", None, None, False, le(0.5, S[:, 0, 0, 2])),
        ("0 <= g[3] <= 1", "all", None, None, True, both(le(0, _g(r)[:, 3]), le(_g(r)[:, 3], 1))),
        ("min_margin_inconsistent <= 1e-12", "stage1", None, None, True, le(M[:, ~cons].min(1), 1e-12)),
        ("min_margin_inconsistent <= 1e-12", "stage3", None, None, False, le(M[:, ~cons].min(1), 1e-12)),
        ("min_margin_consistent > 0", "all", ends[1], None, True, lt(0, M[:, cons].min(1))),
        ("w+[v1] >= 2*w+[c1] or loss < 0.3", "all", None, None, None,
         either(le(2 * w[:, 0, 0], w[:, 0, 2]), lt(loss, 0.3))),
        ("u-[5] + margin[2] <= sqrt(abs(B-[v1,v2]) + 1) * exp(-t/1000) + 2", "all", None, None, None,
         le(u[:, 5, 1] + M[:, 2], np.sqrt(np.abs(B[:, 1, 2, 3]) + 1) * np.exp(-t / 1000) + 2)),
        ("max(A+[v1,v1], B-[v2,v2], w-[c2]) >= omega**2 - 1e-15", "all", None, None, True,
         le(omega**2 - 1e-15, np.maximum(np.maximum(A[:, 0, 2, 2], B[:, 1, 3, 3]), w[:, 1, 1]))),
        ("-S-[c2,v2]*2 - -A-[c1,v2] < log(1 + t) / 3 + min(0, 1)", "stage2", 100.0, 300.0, None,
         lt(-S[:, 1, 1, 3] * 2 + A[:, 1, 0, 3], np.log(1 + t) / 3)),
        ("t >= Tend1", "stage2", None, None, True, le(bc(ends[1]), t)),
        ("t <= Tend2 - 100", "stage2", None, None, False, le(t, bc(ends[2] - 100))),
    ]


def test_bounds_match_independent_numpy(run):
    cases = _ref_cases(run)
    assert {c[4] for c in cases} >= {True, False}
    t = run["t"]
    for expr, during, tmin, tmax, expected, (h, s) in cases:
        m = _mask(run, during, tmin, tmax)
        h, s, tt = np.broadcast_to(h, t.shape)[m], np.broadcast_to(s, t.shape)[m], t[m]
        res = evaluate(parse_bound(expr), run, during=during, tmin=tmin, tmax=tmax)
        assert res.n_times == m.sum() > 0, expr
        assert res.holds == bool(h.all()), expr
        if expected is not None:
            assert res.holds == expected, expr
        iw = int(np.argmin(s))
        assert res.worst_slack == pytest.approx(s[iw], rel=1e-12, abs=1e-14), expr
        assert res.t_worst == tt[iw], expr
        assert res.n_violations == int((~h).sum()), expr
        if h.all():
            assert res.first_violation_t is None
            assert res.worst_slack >= 0, expr
        else:
            assert res.first_violation_t == tt[int(np.argmax(~h))], expr
        line = format_result(expr, res)
        assert "\n" not in line and line.startswith("HOLDS" if res.holds else "VIOLATED")


def test_atoms_and_names_equal_the_run_arrays(run):
    feats = {"c1": 0, "c2": 1, "v1": 2, "v2": 3}
    n = run["margin"].shape[1]
    for h, sign in enumerate("+-"):
        for a, ia in feats.items():
            np.testing.assert_array_equal(values(f"w{sign}[{a}]", run), run["w"][:, h, ia])
            for b, ib in feats.items():
                for X in "SAB":
                    np.testing.assert_array_equal(values(f"{X}{sign}[{a},{b}]", run), run[X][:, h, ia, ib])
        for i in range(n):
            np.testing.assert_array_equal(values(f"u{sign}[{i}]", run), run["u"][:, i, h])
    for i in range(n):
        np.testing.assert_array_equal(values(f"margin[{i}]", run), run["margin"][:, i])
        np.testing.assert_allclose(values(f"g[{i}]", run), _g(run)[:, i], rtol=1e-15)
    # spellings: S_+[..], spaces inside brackets and before margin's bracket
    np.testing.assert_array_equal(values("S_+[ c1 , v1 ]", run), run["S"][:, 0, 0, 2])
    np.testing.assert_array_equal(values("margin [2]", run), run["margin"][:, 2])
    # the bracketed atom binds tighter than anything: w+[c1]*2 is (w+[c1])*2
    np.testing.assert_array_equal(values("w+[c1]*2", run), 2 * run["w"][:, 0, 0])
    np.testing.assert_array_equal(values("loss-S-[c1,v1]", run), run["loss"] - run["S"][:, 1, 0, 2])
    cons = run["samples"]["consistent"].astype(bool)
    M = run["margin"]
    np.testing.assert_array_equal(values("min_margin", run), M.min(1))
    np.testing.assert_array_equal(values("max_margin", run), M.max(1))
    np.testing.assert_array_equal(values("min_margin_consistent", run), M[:, cons].min(1))
    np.testing.assert_array_equal(values("min_margin_inconsistent", run), M[:, ~cons].min(1))
    np.testing.assert_allclose(values("max_g", run), _g(run).max(1), rtol=1e-15)
    np.testing.assert_array_equal(values("t", run), run["t"])
    np.testing.assert_array_equal(values("step", run), run["step"])
    np.testing.assert_array_equal(values("loss", run), run["loss"])
    ends = _ends(run)
    for k in (1, 2, 3):
        assert values(f"Tend{k}", run)[0] == ends[k]
    assert values("T3", run)[0] == ends[3]
    # T1, T2, T_loss are the detected stage times (run attributes)
    for name in ("T1", "T2"):
        assert values(name, run)[0] == run.attrs[name]
    if np.isnan(run.attrs["T_loss"]):  # this short run never reaches the loss level
        with pytest.raises(BoundError, match="never reached"):
            values("T_loss", run)
    else:
        assert values("T_loss", run)[0] == run.attrs["T_loss"]
    assert values("T1", run)[0] == ends[1]  # three-stage: the neuron stage ends with stage 1
    assert ends[1] == STAGE_STEPS[0] * 0.5 and ends[2] == sum(STAGE_STEPS[:2]) * 0.5
    for name, want in [("omega", 0.1), ("eta", 0.5), ("K", 2), ("L", 3), ("n", 8), ("m", np.inf), ("inf", np.inf),
                       ("pi", np.pi), ("2**-1 + 3*4/8 - -1", 3.0)]:
        assert np.all(values(name, run) == want), name


def test_stage_restriction_and_stage_ends(run, srun):
    t, ends = run["t"], _ends(run)
    # attention is frozen during stage 1 at infinite width: S = 0 exactly; it moves afterwards
    assert evaluate("S+[c1,v1] == 0 and S-[c2,v1] == 0", run, "stage1").holds
    bad = evaluate("S+[c1,v1] == 0", run, "all")
    assert not bad.holds and bad.first_violation_t == t[t > ends[1]][0]
    # the neurons are frozen during stage 2
    w_T1 = float(run["w"][t == ends[1]][0, 0, 2])
    assert evaluate(f"w+[v1] == {w_T1!r}", run, "stage2").holds
    assert not evaluate(f"w+[v1] == {w_T1!r}", run, "stage3").holds
    # stages are closed intervals [T_{k-1}, T_k]
    r = evaluate("Tend1 <= t <= Tend2", run, "stage2")
    assert r.holds and r.n_times == int(((t >= ends[1]) & (t <= ends[2])).sum())
    r = evaluate("t > Tend1", run, "stage2")
    assert not r.holds and r.first_violation_t == ends[1] and r.n_violations == 1 and r.worst_slack == 0
    assert evaluate("t <= Tend1", run, "stage1").holds and evaluate("t >= Tend2", run, "stage3").holds
    r = evaluate("Tend2 <= t <= T3", run, "all", tmin=ends[2], tmax=ends[3])
    assert r.holds and r.n_times == int((t >= ends[2]).sum())
    # a simultaneous run has one stage
    assert evaluate("t <= Tend1", srun, "stage1").holds
    for expr, during, msg in [("t <= Tend2", "all", "no end of stage 2"), ("T3 > 0", "all", "no end of stage 3"),
                              ("loss < 1", "stage2", "no records of stage 2")]:
        with pytest.raises(BoundError, match=msg):
            evaluate(expr, srun, during)
    with pytest.raises(BoundError, match="during"):
        evaluate("loss < 1", run, "stage4")
    with pytest.raises(BoundError, match="tmin"):
        evaluate("loss < 1", run, tmin=10, tmax=5)
    with pytest.raises(BoundError, match="no recorded times"):
        evaluate("loss < 1", run, tmin=1e9)
    with pytest.raises(BoundError, match="no inconsistent samples"):
        inc = dict(run)
        inc["samples"] = dict(run["samples"], consistent=np.ones(8, np.int8))
        evaluate("min_margin_inconsistent > 0", _with_attrs(inc, run))


def _with_attrs(d, like):
    from meanfield.core.io import Run

    r = Run(d)
    r.attrs, r.config = like.attrs, like.config
    return r


def test_nan_and_inf(run):
    r = evaluate("log(S+[c1,v1]) > -50", run, "all")  # log 0 = -inf, log of negatives = NaN
    assert not r.holds
    r = evaluate("sqrt(-1 - loss) < 1", run)
    assert not r.holds and np.isnan(r.worst_slack) and r.first_violation_t == run["t"][0]
    r = evaluate("m <= inf and 1/sqrt(m) == 0", run)
    assert r.holds and r.worst_slack == 0
    with pytest.raises(BoundError, match="not a representable number"):  # issue 26: refused, not inf
        evaluate("9**9**9**9 < 1", run)  # (and float arithmetic: no huge integers are ever formed)
    with pytest.raises(BoundError, match="too large"):
        evaluate("loss < 1e400", run)
    with pytest.raises(BoundError, match="too large") as e:  # a 400-digit number is quoted shortened
        evaluate("loss <= 1" + "0" * 400, run)
    assert len(str(e.value)) < 200 and "(401 characters)" in str(e.value), str(e.value)


# --------------------------------------------------------------------------- safety

MALICIOUS = [
    ("__import__('os').system('touch SENTINEL')", "call of"),
    ("__import__('os').system('true')", "call of"),
    ("().__class__", "attribute access"),
    ("loss.__class__", "attribute access"),
    ("loss.__class__ < 1", "attribute access"),
    ("().__class__.__bases__[0].__subclasses__()", "call of"),
    ("[x for x in ()]", "comprehension"),
    ("loss < sum(x for x in (1, 2))", "call of 'sum'"),
    ("lambda: 1", "lambda"),
    ("(lambda: 0)() < 1", "call of 'lambda: 0'"),
    ('"a"', "constant"),
    ("loss < 'a'", "constant"),
    ("loss < b'a'", "constant"),
    ("loss < True", "constant"),
    ("loss < None", "constant"),
    ("loss < 1j", "constant"),
    ("loss < f'{loss}'", "f-string"),
    ("exec('1') < 1", "call of 'exec'"),
    ("eval('1') < 1", "call of 'eval'"),
    ("open('x') < 1", "call of 'open'"),
    ("__builtins__ < 1", "unknown name '__builtins__'"),
    ("x < 1", "unknown name 'x'"),
    ("loss[0] < 1", "subscript 'loss[0]'"),
    ("(1, 2) < (3, 4)", "tuple"),
    ("{1: 2} < 1", "dict"),
    ("max(*[loss, loss]) < 1", "starred"),
    ("max(loss, t, key=abs) < 1", "keyword argument"),
    ("loss < 1 if t else 2", "conditional expression"),
    ("(y := loss) < 1", "assignment expression"),
    ("not loss < 1", "operator 'not'"),
    ("loss != 1", "operator '!='"),
    ("loss in t", "operator 'in'"),
    ("loss is t", "operator 'is'"),
    ("loss % 2 < 1", "operator '%'"),
    ("loss // 2 < 1", "operator '//'"),
    ("~loss < 1", "operator '~'"),
    ("exp < 1", "'exp' is a function"),
    ("min(loss) < 1", "2 or more arguments"),
    ("abs(loss, t) < 1", "exactly 1 argument"),
    ("loss", "must be a comparison"),
    ("loss < (t < 1)", "used as a number"),
    ("S+[c9,v1] > 0", "unknown feature 'c9'"),
    ("S+[c1,v3] > 0", "unknown feature 'v3'"),
    ("w-[c3] > 0", "unknown feature 'c3'"),
    ("margin[99] > 0", "sample index 99 out of range"),
    ("u+[8] > 0", "sample index 8 out of range"),
    ("g[-1] > 0", "sample index"),
    ("S + [c1,v1] > 0", "'S' needs a head"),
    ("S+[c1] > 0", "two feature names"),
    ("w+[c1,v1] > 0", "one feature name"),
    ("u+[c1] > 0", "one sample index"),
    ("w < 1", "'w' needs a head"),
    ("margin > 0", "'margin' needs a sample index"),
    ("S+[c1,v1", "syntax error"),
    ("loss <", "syntax error"),
    ("loss\u2264 1", "ASCII only"),
    ("\uff4coss < 1", "ASCII only"),  # NFKC would turn this into 'loss'
    ("", "empty"),
    ("(" * 300 + "loss" + ")" * 300 + " < 1", "syntax error"),
    ("-" * 200 + "loss < 1", "nested too deeply"),
    ("loss < 1" + " " * 5000, "too long"),
]


@pytest.fixture
def guarded(monkeypatch, tmp_path):
    """Fail loudly if anything would run user code: eval/exec, compile to code, os.system, importing os."""
    calls = []

    def forbid(name):
        def f(*a, **k):
            calls.append(name)
            raise AssertionError(f"{name} called")
        return f

    real_compile, real_import = builtins.compile, builtins.__import__

    def only_ast(source, filename, mode, flags=0, *a, **k):
        if not flags & ast.PyCF_ONLY_AST:
            calls.append("compile")
            raise AssertionError("compile to code")
        return real_compile(source, filename, mode, flags, *a, **k)

    def imp(name, *a, **k):
        if name in ("os", "subprocess", "posix"):
            calls.append(f"import {name}")
            raise AssertionError(f"import {name}")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "eval", forbid("eval"))
    monkeypatch.setattr(builtins, "exec", forbid("exec"))
    monkeypatch.setattr(builtins, "open", forbid("open"))
    monkeypatch.setattr(builtins, "compile", only_ast)
    monkeypatch.setattr(os, "system", forbid("os.system"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(builtins, "__import__", imp)
    yield calls
    monkeypatch.undo()


@pytest.mark.parametrize("expr,msg", MALICIOUS)
def test_malicious_and_bad_expressions_are_rejected(run, guarded, expr, msg):
    with pytest.raises(BoundError) as ei:
        evaluate(parse_bound(expr), run)
    text = str(ei.value)
    assert msg in text
    assert "\n" not in text and len(text) < 600
    assert isinstance(ei.value, ConfigError)
    assert guarded == []
    assert not Path("SENTINEL").exists()


def test_parse_never_executes_python(run, guarded, monkeypatch):
    # a real sentinel: if the text were executed this would set a flag
    flag = {"hit": False}
    monkeypatch.setattr(builtins, "meanfield_bound_sentinel", lambda: flag.__setitem__("hit", True), raising=False)
    for expr in ["meanfield_bound_sentinel() < 1", "loss < meanfield_bound_sentinel()",
                 "[meanfield_bound_sentinel()] < 1", "(lambda: meanfield_bound_sentinel())() < 1"]:
        with pytest.raises(BoundError):
            evaluate(expr, run)
    assert flag["hit"] is False and guarded == []
    # and a legal bound works under the same guards
    assert evaluate("0 <= g[0] <= 1", run).holds
    assert guarded == []
    src = Path(Bd.__file__).read_text()
    assert not re.search(r"(?<![\w.])(eval|exec|compile)\s*\(", src)


def test_placeholder_names_cannot_be_forged(run):
    # the rewrite's placeholder prefix is chosen so that it does not occur in the user's text
    with pytest.raises(BoundError, match="unknown name '_ref0_'"):
        evaluate("_ref0_ < 1", run)
    with pytest.raises(BoundError, match="unknown name"):
        evaluate("S+[c1,v1] < _ref0_", run)
    assert evaluate("S+[c1,v1] < 1e9", run).holds


# --------------------------------------------------------------------------- TOML files and the CLI helper

GOOD_TOML = """
[[bound]]
name = "loss below log 2"
expr = "loss <= log(2) + 1e-12"

[[bound]]
name = "scores signed in stage 3"
expr = "S+[c1,v1] > 0 and S+[c2,v1] < 0"
during = "stage3"

[[bound]]
name = "late loss"
expr = "loss <= 0.1"
tmin = 500.0
tmax = 600
"""


def test_load_bounds_good_file(tmp_path):
    p = tmp_path / "b.toml"
    p.write_text(GOOD_TOML)
    got = load_bounds(p)
    assert got == [
        ("loss below log 2", "loss <= log(2) + 1e-12", "all", None, None),
        ("scores signed in stage 3", "S+[c1,v1] > 0 and S+[c2,v1] < 0", "stage3", None, None),
        ("late loss", "loss <= 0.1", "all", 500.0, 600.0),
    ]
    got = load_bounds(str(p), during="stage2", tmin=1)
    assert [g[2] for g in got] == ["stage2", "stage3", "stage2"] and [g[3] for g in got] == [1.0, 1.0, 500.0]
    p.write_text('[[bound]]\nexpr = "loss < 1"\n[[bound]]\nexpr = "loss < 2"\n')
    assert [g[0] for g in load_bounds(p)] == ["bound1", "bound2"]


@pytest.mark.parametrize("content,msg", [
    ('[[bound]]\nname = "a"\nexpr = "loss < 1"\nwhen = "all"\n', "unknown key 'when'"),
    ('title = "x"\n[[bound]]\nexpr = "loss < 1"\n', "unknown top-level key 'title'"),
    ('[[bound]]\nname = "a"\n', "missing key 'expr'"),
    ('[[bound]]\nexpr = 3\n', "expr must be a string"),
    ('[[bound]]\nexpr = "loss < 1"\nduring = "stage9"\n', "during"),
    ('[[bound]]\nexpr = "loss < 1"\ntmin = "soon"\n', "tmin"),
    ('[[bound]]\nexpr = "loss < 1"\ntmax = true\n', "tmax"),
    ('[[bound]]\nexpr = "loss < 1"\ntmin = 5\ntmax = 1\n', "tmin"),
    ('[[bound]]\nname = "a"\nexpr = "loss < 1"\n[[bound]]\nname = "a"\nexpr = "loss < 2"\n', "duplicate name"),
    ('[[bound]]\nname = 3\nexpr = "loss < 1"\n', "name must be"),
    ('[[bound]]\nname = "evil"\nexpr = "().__class__ < 1"\n', "bound 'evil'.*attribute access"),
    ('bound = "loss < 1"\n', "array of tables"),
    ('', "no \\[\\[bound\\]\\] tables"),
    ('[[bound]\n', "malformed TOML"),
])
def test_load_bounds_bad_files(tmp_path, content, msg):
    p = tmp_path / "b.toml"
    p.write_text(content)
    with pytest.raises(BoundError, match=msg) as ei:
        load_bounds(p)
    assert "\n" not in str(ei.value)


def test_load_bounds_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_bounds(tmp_path / "nope.toml")


def test_run_bounds_cli(files, tmp_path):
    out = io.StringIO()
    assert run_bounds_cli(files["three"], "loss <= 0.7", stream=out) == 0
    assert out.getvalue().startswith("HOLDS     loss <= 0.7:")
    out = io.StringIO()
    assert run_bounds_cli(files["three"], ["loss <= 0.7", "loss <= 0.5"], stream=out) == 1
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("HOLDS") and lines[1].startswith("VIOLATED  loss <= 0.5: first at t=0,")
    assert lines[2] == "1 of 2 bounds hold"
    p = tmp_path / "b.toml"
    p.write_text(GOOD_TOML)
    out = io.StringIO()
    assert run_bounds_cli(files["three"], None, file=p, stream=out) in (0, 1)
    names = [ln.split(":")[0].split(None, 1)[1] for ln in out.getvalue().splitlines()[:-1]]
    assert names == ["loss below log 2", "scores signed in stage 3", "late loss"]
    out = io.StringIO()
    assert run_bounds_cli(files["three"], [str(p), "t >= Tend1"], during="stage2", stream=out) in (0, 1)
    assert "t >= Tend1: worst slack +0 at t=100 " in out.getvalue() and "during=stage2" in out.getvalue()
    # bad input: ConfigError before anything is printed
    for args, kw, msg in [((files["three"], "S+[c9,v1] > 0"), {}, "unknown feature"),
                          ((files["three"], ["loss < 1", "lambda: 1"]), {}, "lambda"),
                          ((files["simul"], "loss < 1"), {"during": "stage3"}, "no records of stage 3"),
                          ((tmp_path / "missing.h5", "loss < 1"), {}, "not found"),
                          ((p, "loss < 1"), {}, "cannot read run file"),
                          ((files["three"], []), {}, "no bounds given"),
                          ((files["three"], "loss < 1"), {"tmin": "x"}, "tmin"),
                          ((files["three"], tmp_path / "none.toml"), {}, "bounds file not found")]:
        out = io.StringIO()
        with pytest.raises(ConfigError, match=msg):
            run_bounds_cli(*args, stream=out, **kw)
        assert out.getvalue() == ""


def test_bound_cli_malicious_exit_2(tmp_path, capsys):
    """From the command line: a malicious expression exits 2 with one line and runs nothing."""
    from meanfield.cli import main

    out = tmp_path / "r.h5"
    assert main(["mixture", "run", "--steps", "20", "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    sentinel = tmp_path / "pwned"
    for expr in ("__import__('os').system('touch " + str(sentinel) + "')", "().__class__",
                 "loss.__class__.__bases__", "[x for x in ()]"):
        assert main(["mixture", "bound", str(out), expr]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and ("not allowed" in err or "unknown" in err), err
    assert not sentinel.exists()
    assert main(["mixture", "bound", str(out), "loss <= 1"]) == 0
    assert main(["mixture", "bound", str(out), "loss <= 0.1"]) == 1
    assert main(["mixture", "bound", str(tmp_path / "missing.h5"), "loss <= 1"]) == 2
