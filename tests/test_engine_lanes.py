"""The engine's generic GD batch in lanes (meanfield.engine.lanes, meanfield.engine.lanes_batch).

``run_batch(desc, ..., fast=False)`` (lanes, the default on the CPU for method gd) against
``run_batch(..., fast=False, lanes=False)`` (the per-trajectory drivers over the scalar kernels: an
independent path): equal (``==``) everywhere (final states, losses, every record, stop steps and stages,
stage ends, statuses), bit for bit but for the sign of zero entries (the zero skips of
``meanfield.engine.lanes.ZERO_SKIPS`` add a lane's exact-zero terms: checked here, every differing bit
pattern is a zero), on descriptions covering the kernels' branches (softmax and linear attention;
logistic, squared and cross-entropy losses; ReLU neurons, linear, token and merged values; mean, last and
fixed queries; a causal mask with relative positional biases; normalised GD), at several block widths
with batches that are no multiple of them, per-trajectory eta, a diverging lane next to normal ones,
stop criteria that stop lanes at different steps, records every N; method rk4 likewise
(meanfield.engine.lanes_rk4). And the transform refuses what it has no rule for.
"""

from __future__ import annotations

import ast
import dataclasses
import textwrap
import tomllib
from pathlib import Path

import numpy as np
import pytest

import meanfield.engine as me
from meanfield.engine import batched, kernels, lanes, lanes_batch

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "meanfield" / "models"

FIELDS = ("y", "loss", "steps", "stop_stage", "code", "rec_t", "rec_step", "rec_stage", "rec_y", "n_records",
          "end_step", "end_t", "end_reason")


def _lanes(desc, Y0, eta, every, width, monkeypatch):
    monkeypatch.setattr(lanes_batch, "width_for", lambda B, threads=1, per_lane=0: width)
    calls = []
    real = lanes_batch.batch_kernel

    def spy(w, *more):
        calls.append(w)
        return real(w, *more)

    monkeypatch.setattr(lanes_batch, "batch_kernel", spy)
    got = me.run_batch(desc, y0s=Y0, eta=eta, record_every=every, fast=False)
    assert calls == [width]  # the lanes ran (the default of fast=False on the CPU)
    monkeypatch.undo()
    return got


def _assert_same(ref, got):
    for k in FIELDS:
        a, b = np.asarray(getattr(ref, k)), np.asarray(getattr(got, k))
        if a.dtype == np.float64:
            nan = np.isnan(a)
            assert np.array_equal(nan, np.isnan(b)), k
            assert np.array_equal(a[~nan], b[~nan]), k
            diff = a.view(np.int64) != b.view(np.int64)
            assert np.all(a[diff] == 0.0), (k, "bits differ at a non-zero entry")  # the sign of a zero only
        else:
            assert np.array_equal(a, b), k
    assert ref.status == got.status


def _perturbed(desc, B, scale, seed=0):
    y = batched.initial_states(desc)[0]
    rng = np.random.default_rng(seed)
    return np.stack([y] + [y + scale * rng.standard_normal(y.size) for _ in range(B - 1)])


def test_mixture_stages_criteria_divergence_records(monkeypatch):
    """The mixture (K = 2, L = 3) at infinite and finite widths, a three-stage schedule whose first stage
    stops on a criterion (at different steps in different lanes), per-trajectory eta, one diverging lane
    (eta = 1e8), records every 4 steps; 7 trajectories in blocks of 4 and of 8 (one block, padded)."""
    desc = me.load(MODELS / "mixture.toml", K=2, L=3, schedule="three-stage", stage_steps=(12, 15, 8),
                   stage_criteria=("consistent_margin>=0.1", None, None), eta=0.5)
    Y0 = batched.initial_states(desc, seeds=[0, 1, 2, 3, 4, 5, 6], widths=[None, 5, 8, None, 3, 16, None])
    eta = [0.5, 0.3, 0.5, 1e8, 0.7, 0.2, 0.9]
    ref = me.run_batch(desc, y0s=Y0, eta=eta, record_every=4, fast=False, lanes=False)
    assert "diverged" in ref.status and ref.status.count("complete") == 6
    assert len(set(ref.end_step[:, 0][ref.code == 0].tolist())) > 1  # the criterion stops lanes apart
    assert np.any(ref.end_reason[:, 0] == 1) and np.any(ref.end_reason[ref.code == 0, 0] == 0)
    for width in (4, 8):
        _assert_same(ref, _lanes(desc, Y0, eta, 4, width, monkeypatch))


def test_criteria_of_every_kind_and_lanes_in_different_stages(monkeypatch):
    """Criteria on the inconsistent margin, the loss and the value velocity (grad_w) in the three stages:
    lanes end stages at different steps, so a block holds lanes of different stages (masks) at once and
    the update runs once per mask."""
    desc = me.load(MODELS / "mixture.toml", K=2, L=3, schedule="three-stage", stage_steps=(10, 30, 30),
                   stage_criteria=("inconsistent_margin>=0.001", "loss<=0.66", "grad_w<=0.05"), eta=0.5)
    Y0 = batched.initial_states(desc, seeds=[0, 1, 2, 3, 4, 5], widths=[None, 5, 8, None, 3, 16])
    eta = [0.5, 0.3, 0.5, 1.0, 0.7, 0.2]
    ref = me.run_batch(desc, y0s=Y0, eta=eta, record_every=4, fast=False, lanes=False)
    assert len({tuple(r) for r in ref.end_step.tolist()}) >= 3 and ref.end_reason[3, 2] == 1
    _assert_same(ref, _lanes(desc, Y0, eta, 4, 8, monkeypatch))


def _toml_positions():
    raw = tomllib.loads(textwrap.dedent("""
        name = "toy_causal"
        [dictionary]
        features = ["a", "b"]
        [data]
        rows = [ { tokens = ["a", "-b", "b"], target = 1 }, { tokens = ["b", "a"], target = -1 },
                 { tokens = ["-a", "b", "a"], target = 1 } ]
        [positions]
        mode = "added"
        [[heads]]
        name = "h"
        value = "linear"
        mask = "causal"
        rpe = true
        [parameters]
        eta = 0.3
        steps = 25
    """))
    from meanfield.engine.description import description_from_dict

    return description_from_dict(raw)


CASES = {
    # linear attention, mean query, linear value, logistic loss
    "majority_linear": lambda: me.load(ROOT / "docs/examples/majority.toml", attention="linear", steps=30),
    # softmax, ReLU neurons at finite width, cross-entropy (three classes)
    "multiclass_relu": lambda: me.load(MODELS / "mixture_multiclass.toml", steps=25, width=8, seed=1),
    # last query not a key, the token as value, squared loss
    "incontext_squared": lambda: me.load(MODELS / "incontext.toml", steps=20, N=6, record_every=None),
    # merged W, last query (a key), linear value
    "maxmargin_merged": lambda: me.load(MODELS / "maxmargin.toml", steps=30, record_log=None),
    # separate K, Q under normalised GD (the eng_normalise_wide path)
    "maxmargin_normalised": lambda: me.load(MODELS / "maxmargin.toml", steps=30, kq="separate",
                                            normalise="parameter", eta=0.1, record_log=None),
    # a fixed query vector
    "prompt_fixed_query": lambda: me.load(MODELS / "prompt_attention.toml", steps=15, n_train=12, n_test=4,
                                          record_every=None),
    # a causal mask with relative positional biases
    "positions_causal_rpe": _toml_positions,
}


SEEDED = {"maxmargin_normalised": [6, 8, None, 5, 12]}


@pytest.mark.parametrize("name", sorted(CASES))
def test_descriptions(name, monkeypatch):
    desc = CASES[name]()
    if name in SEEDED:  # a state of Grams: initial states at finite width (a perturbation would leave the class)
        Y0 = batched.initial_states(desc, seeds=[0, 1, 2, 3, 4], widths=SEEDED[name])
    else:
        Y0 = _perturbed(desc, 5, 0.05)
    eta = [float(desc.training.eta) * f for f in (1.0, 0.5, 1.5, 0.8, 1.2)]
    ref = me.run_batch(desc, y0s=Y0, eta=eta, record_every=3, fast=False, lanes=False)
    assert ref.status.count("complete") >= 4, (name, ref.status)
    _assert_same(ref, _lanes(desc, Y0, eta, 3, 3, monkeypatch))  # 5 lanes in blocks of 3 (one padded)


def test_diverging_lane_next_to_normal_ones_and_width_one(monkeypatch):
    desc = me.load(ROOT / "docs/examples/majority.toml", steps=40)
    Y0 = _perturbed(desc, 6, 0.1, seed=2)
    eta = [0.2, 1e9, 0.3, 0.2, 5e8, 0.1]
    ref = me.run_batch(desc, y0s=Y0, eta=eta, record_every=7, fast=False, lanes=False)
    assert ref.status[1] == "diverged" and ref.status[0] == "complete"
    for width in (1, 4):
        _assert_same(ref, _lanes(desc, Y0, eta, 7, width, monkeypatch))


def test_two_threads(monkeypatch):
    """Blocks of lanes over two threads (contiguous slices, core.batched.run_cpu): the same results."""
    import numba

    desc = me.load(MODELS / "mixture.toml", K=2, L=3, steps=20, eta=0.5)
    Y0 = batched.initial_states(desc, seeds=list(range(21)), widths=[None, 4, 6] * 7)
    eta = list(np.linspace(0.3, 0.9, 21))
    ref = me.run_batch(desc, y0s=Y0, eta=eta, record_every=5, fast=False, lanes=False)
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("one numba thread here (NUMBA_NUM_THREADS=1): nothing to split")
    n = numba.get_num_threads()
    threads = 2
    numba.set_num_threads(threads)
    calls = []
    real = lanes_batch.batch_kernel
    monkeypatch.setattr(lanes_batch, "batch_kernel", lambda w, *m: calls.append(w) or real(w, *m))
    try:
        got = me.run_batch(desc, y0s=Y0, eta=eta, record_every=5, fast=False)
    finally:
        numba.set_num_threads(n)
    assert calls == [lanes_batch.width_for(21, threads)] and calls[0] > 0  # 10 and 11 a thread: 8 lanes
    _assert_same(ref, got)


@pytest.mark.parametrize("name", ["mixture", "majority_linear"])
def test_rk4_lanes(name, monkeypatch):
    """Method rk4 in lanes (meanfield.engine.lanes_rk4): stages of given time (the last step of each
    shortened), per-trajectory dt, a lane whose large steps overshoot max_abs next to normal ones, records
    every 3 steps; blocks of 3 and 8."""
    from meanfield.engine import lanes_rk4

    if name == "mixture":
        desc = me.load(MODELS / "mixture.toml", K=2, L=3, method="rk4", schedule="three-stage",
                       stage_steps=(40, 60, 30), eta=0.5, max_abs=1.49)
        Y0 = batched.initial_states(desc, seeds=[0, 1, 2, 3, 4], widths=[None, 5, 8, None, 3])
        dt = [1.0, 20.0, 0.5, 3.0, 0.7]
    else:
        desc = me.load(ROOT / "docs/examples/majority.toml", attention="linear", method="rk4", steps=200,
                       max_abs=0.4)
        Y0 = _perturbed(desc, 5, 0.05)
        dt = [1.0, 3.0, 0.5, 8.0, 2.0]
    ref = me.run_batch(desc, y0s=Y0, eta=dt, record_every=3, fast=False, lanes=False)
    assert "diverged" in ref.status and ref.status.count("complete") >= 3, ref.status
    for width in (3, 8):
        monkeypatch.setattr(lanes_batch, "width_for", lambda B, threads=1, per_lane=0: width)
        calls = []
        real = lanes_rk4.rk4_kernel
        monkeypatch.setattr(lanes_rk4, "rk4_kernel", lambda w, *m: calls.append(w) or real(w, *m))
        got = me.run_batch(desc, y0s=Y0, eta=dt, record_every=3, fast=False)
        monkeypatch.undo()
        assert calls == [width]
        _assert_same(ref, got)


def test_lanes_false_takes_the_per_trajectory_path(monkeypatch):
    from meanfield.engine import lanes_rk4

    never = lambda w, *m: (_ for _ in ()).throw(AssertionError("lanes ran"))  # noqa: E731
    gd, rk4 = (me.load(ROOT / "docs/examples/majority.toml", steps=5),
               me.load(ROOT / "docs/examples/majority.toml", method="rk4", steps=1))
    seeds = list(range(8 * numba_threads()))  # enough a thread for lanes: only lanes=False keeps them off
    for desc in (gd, rk4):  # control: without lanes=False the lanes run
        with pytest.raises(AssertionError, match="lanes ran"):
            with monkeypatch.context() as m:
                m.setattr(lanes_batch, "batch_kernel", never)
                m.setattr(lanes_rk4, "rk4_kernel", never)
                me.run_batch(desc, seeds=seeds, fast=False)
    monkeypatch.setattr(lanes_batch, "batch_kernel", never)
    monkeypatch.setattr(lanes_rk4, "rk4_kernel", never)
    me.run_batch(gd, seeds=seeds, fast=False, lanes=False)
    me.run_batch(rk4, seeds=seeds, fast=False, lanes=False)


def numba_threads() -> int:
    import numba

    return numba.get_num_threads()


def test_width_for_and_small_batches_per_trajectory(monkeypatch):
    """Below 8 trajectories a thread the per-trajectory drivers run (a lane costs more than a scalar
    trajectory there), with the same results."""
    assert lanes_batch.width_for(1) == 0 and lanes_batch.width_for(7) == 0 and lanes_batch.width_for(8) == 8
    assert lanes_batch.width_for(10**4) == lanes_batch.WIDTHS[0][1]
    assert lanes_batch.width_for(10**4, threads=10**4) == 0
    desc = me.load(ROOT / "docs/examples/majority.toml", steps=5)
    Y0 = _perturbed(desc, 3, 0.1)
    ref = me.run_batch(desc, y0s=Y0, record_every=2, fast=False, lanes=False)
    monkeypatch.setattr(lanes_batch, "batch_kernel", lambda w, *m: (_ for _ in ()).throw(AssertionError("lanes ran")))
    _assert_same(ref, me.run_batch(desc, y0s=Y0, record_every=2, fast=False))


# ------------------------------------------------------------------ the transform's refusals


def _edited(name, old, new):
    defs = dict(lanes._module_tree(kernels.SOURCE_SHA1))
    src = ast.unparse(defs[name])
    assert old in src, old
    defs[name] = ast.parse(src.replace(old, new, 1)).body[0]
    return defs


_NESTED = "a kernel call with lane arguments inside an expression"
_SHAPE = "the shape of a lane value other than"
_I5, _I6 = "\n" + " " * 20, "\n" + " " * 24  # a new line at indentation 5, 6 (of ast.unparse)


@pytest.mark.parametrize("fn, old, new, why", [
    # a return under a lane-dependent test (the function would return different things per lane)
    ("eng_attend", "if z > mx:\n                    mx = z", "if z > mx:\n                    return 0.0",
     "a continue, break or return under a lane-dependent test"),
    # a new exact-zero skip not in ZERO_SKIPS (its claim was never checked)
    ("eng_head_forward", "if c != 0.0:", "if c == 0.0:\n                continue\n            if True:",
     "a continue, break or return under a lane-dependent test"),
    # an index that depends on a lane value
    ("eng_forward_sample", "u[s, k, c] = zb[k, c]", "u[s, k, c] = zb[k, int(zb[k, c])]", "a lane-dependent index"),
    # a loop whose bound depends on a lane value
    ("eng_criterion", "for s in range(margin.shape[0]):", "for s in range(int(loss)):",
     "a lane value where a uniform one is needed"),
    # a lane value stored into a table without a lane axis
    ("eng_head_forward", "lka[k, j] = eng_attend(", "lka[k, j] = zb[k, 0]\n        lka[k, j] = eng_attend(",
     "a lane value stored into an array without a lane axis"),
    # a function returning lane values that can end without one (its caller would read stale rows)
    ("eng_sign", "return hf[k, 1]", "hf[k, 1]", "can end without a return"),
    # a statement kind without a rule
    ("eng_criterion", "if kind == 1:", "with open('x'):\n        pass\n    if kind == 1:", "a With statement"),
    # a lane kernel's result stored into a table without a lane axis (every lane would get the last lane's value)
    ("eng_head_forward", "lka[k, j] = eng_attend(",
     "lka[k, j] = eng_sign(y, hi, hf, k)\n        lka[k, j] = eng_attend(",
     "a lane value stored into an array without a lane axis"),
    # a call of a kernel with lane arguments inside an expression, an if test, a loop bound (its text would
    # call the scalar kernel)
    ("eng_head_forward", "lka[k, j] = eng_attend(", "lka[k, j] = 1.0 * eng_attend(", _NESTED),
    ("eng_head_forward", "if ql == 0.0:", "if eng_attend(y, hi, hf, qv, nzi, nzc, nzn, cnt, last, s, k, P, l, T, pa, "
     "j) == 0.0:", _NESTED),
    ("eng_head_forward", "for i in range(L):", "for i in range(int(eng_attend(y, hi, hf, qv, nzi, nzc, nzn, cnt, "
     "last, s, k, P, l, T, pa, j))):", _NESTED),
    # a lane array's shape but by a constant index >= 0 (.shape[-1] would be the lane count), len of a lane array
    ("eng_criterion", "range(margin.shape[0])", "range(margin.shape[-1])", _SHAPE),
    ("eng_criterion", "range(margin.shape[0])", "range(margin.shape[kind - kind])", _SHAPE),
    ("eng_forward_sample", "C = f.shape[0]", "C = f.shape[0] + 0 * len(f.shape)", _SHAPE),
    ("eng_forward_sample", "C = f.shape[0]", "C = len(f)", r"len\(\) of a lane value"),
    # a zero skip moved above a statement it then skips (its reason was reviewed for other statements)
    ("eng_backward_sample", f"d = df[c] * a_k / nn{_I6}outc += uu{_I5}if d == 0.0:{_I6}continue\n",
     f"d = df[c] * a_k / nn{_I5}if d == 0.0:{_I6}continue{_I5}if val != 0:{_I6}outc += uu\n",
     "the zero skip guards different statements than the reviewed ones"),
    # a second site of a zero skip's key in one function
    ("eng_backward_sample", f"if d == 0.0:{_I6}continue\n",
     f"if d == 0.0:{_I6}continue{_I5}if d == 0.0:{_I6}continue\n", "a second zero skip with the test 'd == 0.0'"),
    # an edit of the statements a span trim's span serves
    ("eng_update", "if b0 == b1:", "if b0 >= b1:", "the span trim guards different statements than the reviewed"),
])
def test_the_transform_refuses_what_it_has_no_rule_for(fn, old, new, why):
    with pytest.raises(lanes.LaneTransformError, match=why):
        lanes.transform(_edited(fn, old, new))


def test_the_transform_of_the_kernels_is_complete():
    src, roots = lanes.transform()
    assert set(roots) == set(lanes.ROOTS)
    compile(src, "lanes", "exec")
    # every zero skip and span trim named is one the kernels have (a stale entry would hide nothing, but
    # says the list was not kept with the kernels)
    defs = lanes._module_tree(kernels.SOURCE_SHA1)
    for (fn, test) in list(lanes.ZERO_SKIPS) + list(lanes.SPAN_TRIMS):
        assert test in ast.unparse(defs[fn]), (fn, test)
    assert dataclasses.is_dataclass(me.run_batch(me.load(ROOT / "docs/examples/majority.toml", steps=2),
                                                 fast=False))
