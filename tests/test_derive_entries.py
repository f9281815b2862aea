"""`meanfield model derive --format latex` of a small model prints each state entry's actual GD map; the maps
(sympy, from the explicit loss over the description's data) are checked against the engine's own GD step from
a random state (an independent implementation: the engine's numba kernels), for several head kinds and losses."""

import numpy as np
import pytest

import meanfield as mf
import meanfield.cli
from meanfield.engine.cli import model_path
from meanfield.engine.reduce import initial_state
from meanfield.engine.runs import run
from meanfield.engine.symbolic_entries import MAX_ENTRIES, entry_system, supported

MERGED_MAJORITY = '''
name = "tiny"
[dictionary]
features = ["plus", "minus", "blank"]
[data]
rows = [
  { tokens = ["plus", "minus", "blank"], counts = [2, 1, 1], target = 1 },
  { tokens = ["plus", "minus"], counts = [1, 2], target = -1, weight = 2 },
  { tokens = ["minus", "blank", "plus"], counts = [1, 1, 1], target = 1 },
]
[[heads]]
name = "h"
attention = "$attention"
kq = "merged"
query = "$query"
value = "$value"
scale = 1.3
sign = -1.0
[model]
loss = "logistic"
[parameters]
attention = "softmax"
query = "mean"
value = "linear"
eta = 0.3
steps = 1
record_every = 1
neuron_init = "const:0.2,-0.1,0.3"
'''


def _step_matches(desc, seed=0):
    s = entry_system(desc)
    rng = np.random.default_rng(seed)
    y0 = initial_state(desc)
    y0 = y0 + 0.4 * rng.normal(size=y0.size)
    r = run(desc, y0=y0)
    X0, X1 = r.states[0], r.states[1]
    idx = [r.entries.index(n) for n in s["entries"]]  # the same names as the run file's entries
    sub = dict(zip(s["symbols"], X0[idx]))
    g = np.array([float(s["grad"][n].subs(sub)) for n in s["entries"]])
    err = np.abs(X1[idx] - (X0[idx] - desc.training.eta * g)).max()
    assert err < 1e-12 * max(1.0, np.abs(X1).max()), err
    assert np.abs(X1 - X0).max() > 1e-3  # the step moved: the comparison can fail


def test_incontext_entries_equal_the_engine_step():
    desc = mf.load("incontext", K=3, N=2, steps=1, record_every=1)
    assert supported(desc) is None
    _step_matches(desc)


@pytest.mark.parametrize("attention,query,value", [("softmax", "mean", "linear"), ("linear", "last", "linear"),
                                                   ("softmax", "last", "neuron")])
def test_own_merged_models_equal_the_engine_step(tmp_path, attention, query, value):
    p = tmp_path / "tiny.toml"
    p.write_text(MERGED_MAJORITY)
    desc = mf.load(p, attention=attention, query=query, value=value)
    assert supported(desc) is None
    _step_matches(desc, seed=1)


def test_cli_latex_has_each_entry_and_large_models_say_why_not(capsys):
    assert meanfield.cli.main(["model", "derive", "incontext", "--K", "2", "--N", "2", "--format", "latex"]) == 0
    out = capsys.readouterr().out
    for e in ("v1,v1", "v1,v2", "v2,v1", "v2,v2"):
        assert rf"\tilde W_{{h,{e}}}' &= \tilde W_{{h,{e}}} - \eta" in out
    assert meanfield.cli.main(["model", "derive", "incontext", "--K", "4", "--N", "2", "--format", "latex"]) == 0
    out = capsys.readouterr().out
    assert f"no entry-by-entry ODE: 16 independent state entries (> {MAX_ENTRIES})" in out
    maj = model_path("incontext").parents[2] / "docs" / "examples" / "majority.toml"
    assert "no entry-by-entry ODE: 24 independent state entries" in mf.derive(maj)["latex"]
    p = mf.load("incontext", K=2, N=2)
    assert supported(p) is None
