"""`meanfield model derive --format latex` of a small model (at most 12 state entries) prints each state
entry's gradient-flow right-hand side (sympy, from the explicit loss over the description's data and the
closure map of the Gram blocks). Every printed expression, lambdified, is checked against the engine's own
kernel derivative (``flow_rhs``, numba: an independent implementation) at random states, both expanded and in
the printed form over shared subexpressions (evaluated in order), for every closure
(merged / separate keys and queries, several heads, every value kind, a general Gram matrix, trained signs,
positional biases with a causal mask, group rates, each loss, the exact Gaussian population), the shipped small
descriptions and randomly drawn ones; the narrow entries' GD maps against the engine's GD step."""

import numpy as np
import pytest

import meanfield as mf
import meanfield.cli
from meanfield.engine.cli import model_path
from meanfield.engine.reduce import initial_state
from meanfield.engine.runs import run
from meanfield.engine.symbolic_entries import MAX_ENTRIES, NUMPY_FUNCTIONS, entry_system, shared_form, supported
from meanfield.engine.system import stages, system_of

TEMPLATE = '''
name = "tiny_{tag}"
[dictionary]
features = ["x", "y"]
{gram}
[data]
rows = [
  {{ tokens = ["x", "y", "x"], counts = [1, 2, 1], target = {t1} }},
  {{ tokens = ["y", "x"], counts = [1, 1], target = {t2}, weight = 2 }},
  {{ tokens = ["y", "y", "x"], counts = [1, 1, 1], target = {t1} }},
]
{heads}
[model]
loss = "{loss}"
[parameters]
eta = 0.3
steps = 1
record_every = 1
omega = 0.7
neuron_init = "gaussian:0.5"
{extra}
'''


def _head(name="h", **kw):
    opts = dict(attention="softmax", kq="merged", query="mean", value="linear", scale=1.3, sign=-1.0)
    opts.update(kw)
    out = f'[[heads]]\nname = "{name}"\n'
    for k, v in opts.items():
        out += f"{k} = {str(v).lower() if isinstance(v, bool) else repr(v).replace(chr(39), chr(34))}\n"
    return out


CASES = {
    "separate": dict(heads=_head(kq="separate")),
    "separate_linear_last": dict(heads=_head(kq="separate", attention="linear", query="last", query_self=False)),
    "matrix": dict(heads=_head(value="matrix")),
    "two_heads": dict(heads=_head("h1") + _head("h2", attention="linear", query="last", sign=0.5)),
    "gram_separate": dict(heads=_head(kq="separate"), gram="gram = [[1.0, 0.3], [0.3, 1.0]]"),
    "gram_two_neurons": dict(heads=_head(value="neuron", n_neurons=2), gram="gram = [[1.0, 0.3], [0.3, 1.0]]"),
    "trained_sign": dict(heads=_head(train_sign=True, value="neuron")),
    "positions_causal": dict(heads=_head(rpe=3, mask="causal")),
    "rates": dict(heads=_head(kq="separate"), extra='group_eta = "keys=0.5,values=2,queries=1.5"'),
    "token_fixed_squared": dict(heads=_head(value="token", query="fixed", query_vector=[1.0, -0.5]), loss="squared",
                                t1="[1.0, 0.0]", t2="[0.0, 1.0]"),
    "cross_entropy": dict(heads=_head(outputs=2), loss="cross_entropy", t1=0, t2=1),
}


def _write(tmp_path, tag, c):
    kw = dict(tag=tag, gram="", t1=1, t2=-1, loss="logistic", extra="")
    kw.update(c)
    p = tmp_path / f"tiny_{tag}.toml"
    p.write_text(TEMPLATE.format(**kw))
    return p


def _random_case(seed):
    """A random small description: head options drawn until it has at most MAX_ENTRIES entries."""
    rng = np.random.default_rng(seed)
    while True:
        heads = ""
        for k in range(int(rng.integers(1, 3))):
            o = dict(attention=str(rng.choice(["softmax", "linear"])), kq=str(rng.choice(["merged", "separate"])),
                     query=str(rng.choice(["mean", "last"])), value=str(rng.choice(["linear", "neuron", "matrix"])),
                     scale=float(np.round(rng.uniform(0.5, 2), 2)), sign=float(rng.choice([-1.0, 1.0])))
            if o["query"] == "last":
                o["query_self"] = bool(rng.integers(2))
            heads += _head(f"h{k + 1}", **o)
        c = dict(heads=heads)
        if rng.integers(2):
            g = np.round(rng.uniform(-0.5, 0.5), 3)
            c["gram"] = f"gram = [[1.0, {g}], [{g}, 1.0]]"
        n = 0
        for blk in heads.split("[[heads]]")[1:]:
            sep = 'kq = "separate"' in blk
            val = 'value = "matrix"' in blk
            N = 2 * 2 * sep + 3 * val
            n += N * (N + 1) // 2 + 4 * (not sep) + 2 * (not val)
        if n <= MAX_ENTRIES:
            return c


def _rhs_matches(desc, seed=0, stage=0):
    """Every entry's printed right-hand side, lambdified at a random state, equals the engine's flow_rhs."""
    import sympy as sp

    s = entry_system(desc, stage=stage)
    assert len(s["entries"]) <= MAX_ENTRIES
    rng = np.random.default_rng(seed)
    y = initial_state(desc).copy()
    vals = 0.5 * rng.normal(size=len(s["entries"]))
    for v, n in zip(vals, s["entries"]):
        for i in s["index"][n]:  # a symmetric Gram block's entry sits at (a, b) and (b, a)
            y[i] = v
    ref = system_of(desc).rhs(y, stages(desc)[stage].mode)
    f = sp.lambdify(s["symbols"], [s["rhs"][n] for n in s["entries"]], [NUMPY_FUNCTIONS, "numpy"], cse=True)
    got = np.array(f(*vals), dtype=float)
    want = np.array([ref[s["index"][n][0]] for n in s["entries"]])
    assert np.abs(got - want).max() <= 1e-12 * max(1.0, np.abs(want).max()), (got, want)
    assert np.abs(want).max() > 1e-4  # the flow moves: the comparison can fail
    # the printed form: the shared subexpressions xi_k evaluated in order, then each entry's right-hand side
    printed = _eval_shared(shared_form(s), s["symbols"], vals)
    got = np.array([printed[n] for n in s["entries"]])
    assert np.abs(got - want).max() <= 1e-12 * max(1.0, np.abs(want).max()), (got, want)
    return s


def _eval_shared(sf, symbols, vals):
    """The printed form evaluated as printed: one generated function that assigns xi_0, xi_1, ... in order
    (lambdify's ``cse`` hook handed the printed replacements) and returns each entry's right-hand side."""
    import sympy as sp

    names = list(sf["rhs"])
    reduced = [sf["rhs"][n] for n in names]
    f = sp.lambdify(symbols, reduced, [NUMPY_FUNCTIONS, "numpy"], cse=lambda _exprs: (sf["shared"], reduced))
    return dict(zip(names, (float(v) for v in f(*vals))))


@pytest.mark.parametrize("tag", sorted(CASES))
def test_each_closure_rhs_equals_the_engine_kernel(tmp_path, tag):
    desc = mf.load(_write(tmp_path, tag, CASES[tag]))
    assert supported(desc) is None
    _rhs_matches(desc, seed=len(tag))


STAGES = """
[[training.stages]]
name = "values"
train = ["values"]
steps = 1
[[training.stages]]
name = "attention"
train = ["attention"]
steps = 1
"""


def test_each_stage_trains_its_own_groups(tmp_path):
    """A staged description: each stage's right-hand sides (its trained columns D; frozen entries 0)."""
    p = _write(tmp_path, "staged", dict(heads=_head(kq="separate")))
    p.write_text(p.read_text().replace("steps = 1\n", "", 1) + STAGES)
    desc = mf.load(p)
    for stage in (0, 1):
        s = _rhs_matches(desc, seed=stage, stage=stage)
        moving = {n for n in s["entries"] if s["rhs"][n] != 0}
        assert moving == ({n for n in s["entries"] if n.startswith("w[")} if stage == 0 else
                          {n for n in s["entries"] if not n.startswith("w[")})
    tex = mf.derive(desc)["latex"]
    assert "Gradient flow of stage 1 (values: trains values)" in tex and r"\paragraph{Stage 2.}" in tex


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_small_descriptions_rhs_equals_the_engine_kernel(tmp_path, seed):
    desc = mf.load(_write(tmp_path, f"random{seed}", _random_case(seed)))
    assert supported(desc) is None
    _rhs_matches(desc, seed=seed)


@pytest.mark.parametrize("name,kw", [("incontext", dict(K=2, N=2)), ("incontext", dict(K=3, N=2)),
                                     ("icl_softmax", dict(d=1, N=2, samples=4)),
                                     # the exact Gaussian population (closed-form moments; PopulationSystem.rhs)
                                     ("icl_zfb", dict(d=1, cov="1")),
                                     ("icl_zfb", dict(d=2, cov="1,0.5", task_cov="1,2", noise=0.3))])
def test_shipped_small_descriptions_rhs_equals_the_engine_kernel(name, kw):
    desc = mf.load(name, **kw)
    assert supported(desc) is None
    _rhs_matches(desc)


def test_narrow_gd_maps_equal_the_engine_step(tmp_path):
    """GD: X' = X + eta dX/dt for the narrow entries, checked against the engine's GD step."""
    import sympy as sp

    for desc in (mf.load("incontext", K=3, N=2, steps=1, record_every=1),
                 mf.load(_write(tmp_path, "g", CASES["gram_two_neurons"]))):
        s = entry_system(desc)
        rng = np.random.default_rng(0)
        y0 = initial_state(desc) + 0.4 * rng.normal(size=initial_state(desc).size)
        r = run(desc, y0=y0)
        X0, X1 = r.states[0], r.states[1]
        idx = [r.entries.index(n) for n in s["narrow"]]  # the same names as the run file's entries
        f = sp.lambdify(s["symbols"], [s["rhs"][n] for n in s["narrow"]], [NUMPY_FUNCTIONS, "numpy"], cse=True)
        vals = [X0[r.entries.index(n)] for n in s["entries"]]
        err = np.abs(X1[idx] - (X0[idx] + desc.training.eta * np.array(f(*vals), dtype=float))).max()
        assert err < 1e-12 * max(1.0, np.abs(X1).max()), err
        assert np.abs(X1 - X0).max() > 1e-3


def test_cli_latex_has_each_entry_and_large_models_say_why_not(tmp_path, capsys):
    assert meanfield.cli.main(["model", "derive", "incontext", "--K", "2", "--N", "2", "--format", "latex"]) == 0
    out = capsys.readouterr().out
    for e in ("v1,v1", "v1,v2", "v2,v1", "v2,v2"):
        assert rf"\dot{{\tilde W}}_{{h,{e}}} &= " in out
    p = _write(tmp_path, "sep", CASES["separate"])
    assert meanfield.cli.main(["model", "derive", str(p), "--format", "latex"]) == 0
    out = capsys.readouterr().out
    for e in (r"\dot{S}_{h,x,y} &= ", r"\dot{A}_{h,x,y} &= ", r"\dot{B}_{h,y,y} &= ", r"\dot{\tilde w}_{h,out1,n1,x}"):
        assert e in out
    assert r"\dot{A}_{h,y,x}" not in out  # a symmetric block's entry once
    assert meanfield.cli.main(["model", "derive", "incontext", "--K", "4", "--N", "2", "--format", "latex"]) == 0
    out = capsys.readouterr().out
    assert f"no entry-by-entry ODE: 16 independent state entries (> {MAX_ENTRIES})" in out
    maj = model_path("incontext").parents[2] / "docs" / "examples" / "majority.toml"
    assert "no entry-by-entry ODE: 24 independent state entries" in mf.derive(maj)["latex"]
    assert supported(mf.load("icl_zfb")) == f"20 independent state entries (> {MAX_ENTRIES})"
