"""Trainable token embeddings (``meanfield.engine.embeddings``) against an explicit torch network.

The engine's closed state (the ambient Gram K of the wide weights, the embeddings E and the narrow
values in ambient coordinates) is stepped by its exact GD map; ``tests/embeddings_oracle.py`` trains
explicit weights and E with autograd from the same initial weights. They must agree to 1e-10 over
200 steps at m in {1, 3, 50} and at m = inf (the explicit network of width D_h started from
orthogonal blocks omega_a I: its ambient Gram is exactly the infinite-width expectation), for random
descriptions covering the class with the embeddings trainable (coverage asserted).
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from meanfield.engine.description import description_from_dict
from meanfield.engine import reduce as R

torch = pytest.importorskip("torch")

from embeddings_oracle import EmbeddingNet  # noqa: E402
from test_engine_oracle import RTOL, STEPS, random_raw  # noqa: E402

#: seeds whose random descriptions together cover the class (test_engine_oracle.SEEDS) and rates
SEEDS = (0, 1, 4, 5, 10, 14)


def embedding_raw(seed: int, m, rates: bool = False) -> dict:
    """``random_raw`` with trainable embeddings: ambient d = P (even seeds) or P + 1 (odd), and for
    seeds divisible by 3 the embeddings at a rate of their own."""
    raw = random_raw(seed, m=m, rates=rates)
    P = len(raw["dictionary"]["features"])
    raw["dictionary"]["trainable"] = True
    if seed % 2:
        raw["dictionary"]["ambient"] = P + 1
    if seed % 3 == 0:
        er = np.random.default_rng(60_000 + seed)
        own = f"embeddings={raw['parameters']['eta'] * er.uniform(0.3, 1.6):.4f}"
        ge = raw["parameters"].get("group_eta")
        raw["parameters"]["group_eta"] = own if not ge else ge + "," + own
    return raw


def _flat(lay, red: dict) -> np.ndarray:
    y = np.zeros(lay.size)
    for k, h in enumerate(lay.heads):
        if (h.name, "Q") in red:
            N, off = int(lay.hi[k, R.H_N]), int(lay.hi[k, R.H_QOFF])
            y[off:off + N * N] = red[(h.name, "Q")].ravel()
        for name, col in (("W", R.H_WOFF), ("w", R.H_VOFF), ("a", R.H_AOFF)):
            off = int(lay.hi[k, col])
            if off >= 0:
                v = np.ravel(red[(h.name, name)])
                y[off:off + v.size] = v
    return y


def _net(d, sys_):
    """The explicit network from the engine's initial explicit weights (finite m) or, at m = inf,
    from orthogonal blocks omega_a I of width D_h."""
    from meanfield.engine.embeddings import initial_weights

    el = sys_.el
    if d.init.width is not None:
        E0, Ms, y0 = initial_weights(d)
    else:
        y0 = sys_.initial_state()
        E0 = el.E_of(y0).copy()
        Ms = []
        for h in el.heads:
            D = h["D"]
            Ms.append(np.linalg.cholesky(y0[h["K"]:h["K"] + D * D].reshape(D, D) + 0.0).T if D else np.zeros((0, 0)))
    yr0 = sys_.reduce(y0)
    Ep = np.linalg.solve(E0.T @ E0, E0.T)           # its own: E0^+ (P x d)
    narrow = []
    for h in d.model.heads:
        nar = {"a": float(sys_.pk.lay.get(yr0, h.name, "a")[0]) if h.train_sign else h.sign}
        if h.kq == "merged":
            nar["W"] = Ep.T @ sys_.pk.lay.get(yr0, h.name, "W") @ Ep
        if h.value in ("neuron", "linear"):
            w = sys_.pk.lay.get(yr0, h.name, "w")
            nar["w"] = w.reshape(-1, w.shape[-1]) @ Ep
        narrow.append(nar)
    return EmbeddingNet(d, E0, Ms, narrow)


def _compare(d):
    import meanfield.engine as me

    r = me.run(d)
    net = _net(d, r.system_obj)
    states, grams = net.run()
    Z = np.array([_flat(r.system_obj.pk.lay, s) for s in states])
    assert r.status == "complete" and len(r.y) == len(Z) == STEPS + 1
    scale = np.maximum(np.abs(Z).max(axis=1), 1.0)
    err = float((np.abs(Z - r.y).max(axis=1) / scale).max())
    gerr = float(np.abs(grams - r.embedding_gram).max() / max(1.0, np.abs(grams).max()))
    moved = float(np.abs(grams[-1] - grams[0]).max())
    return err, gerr, moved, r


def test_random_embedding_descriptions_cover_the_class():
    seen = {k: set() for k in ("attention", "kq", "query", "value", "loss", "train_sign", "ambient", "own_rate",
                               "staged", "heads")}
    for seed in SEEDS:
        d = description_from_dict(embedding_raw(seed, 3))
        assert d.dictionary.trainable
        for h in d.model.heads:
            for k in ("attention", "kq", "query", "value", "train_sign"):
                seen[k].add(getattr(h, k))
        seen["loss"].add(d.model.loss)
        seen["heads"].add(len(d.model.heads) > 1)
        seen["staged"].add(len(d.training.stages) > 1)
        seen["ambient"].add((d.dictionary.ambient or d.P) > d.P)
        seen["own_rate"].add("embeddings" in dict(d.training.group_eta))
    assert seen["attention"] == {"softmax", "linear"} and seen["kq"] == {"separate", "merged"}
    assert seen["query"] == {"mean", "last", "fixed"} and seen["value"] == {"neuron", "linear", "matrix", "token"}
    assert seen["loss"] == {"logistic", "squared", "cross_entropy"} and seen["train_sign"] == {True, False}
    assert seen["ambient"] == {True, False} and seen["own_rate"] == {True, False}
    assert seen["staged"] == {True, False} and True in seen["heads"]


@pytest.mark.parametrize("m", (1, 3, 50, None))
@pytest.mark.parametrize("seed", SEEDS)
def test_engine_equals_explicit_network_with_trainable_embeddings(seed, m):
    err, gerr, moved, _ = _compare(description_from_dict(embedding_raw(seed, m)))
    assert moved > 1e-4, "the embeddings must move for the test to mean anything"
    assert err <= RTOL and gerr <= RTOL, (err, gerr)


@pytest.mark.parametrize("seed", (0, 5))
def test_trainable_embeddings_with_group_rates_and_schedules(seed):
    err, gerr, moved, _ = _compare(description_from_dict(embedding_raw(seed, 3, rates=True)))
    assert moved > 1e-4 and err <= RTOL and gerr <= RTOL, (err, gerr)


def test_the_comparison_can_fail():
    """The engine with its embeddings frozen (rate 0) leaves the explicit network that trains them (by
    more than 1e3 x the tolerance), and at fixed E its projection is the fixed-dictionary run (1e-10)."""
    import dataclasses

    d = description_from_dict(embedding_raw(4, 3))
    frozen = dataclasses.replace(d, training=dataclasses.replace(d.training, group_eta=(("embeddings", 0.0),)))
    import meanfield.engine as me

    r0 = me.run(frozen)
    net = _net(d, r0.system_obj)
    states, grams = net.run()
    Z = np.array([_flat(r0.system_obj.pk.lay, s) for s in states])
    assert np.abs(Z - r0.y).max() > 1e3 * RTOL
    assert np.abs(grams[-1] - r0.embedding_gram[-1]).max() > 1e-4
    # at fixed E the ambient state's projection is today's fixed-dictionary run
    fixed = dataclasses.replace(frozen, dictionary=dataclasses.replace(d.dictionary, trainable=False, ambient=None))
    rf = me.run(fixed)
    assert np.abs(rf.y - r0.y).max() <= 1e-10 * max(1.0, np.abs(rf.y).max())


def test_fixed_dictionary_runs_are_unchanged_by_the_feature():
    """At d = P the trainable run's first record (its reduced state) is the fixed run's initial state at
    finite m (the same draws), to rounding."""
    import dataclasses

    import meanfield.engine as me

    d = description_from_dict(embedding_raw(1, 3))
    d = dataclasses.replace(d, dictionary=dataclasses.replace(d.dictionary, ambient=None))
    r = me.run(dataclasses.replace(d, training=dataclasses.replace(d.training, stages=d.training.stages[:1])))
    yf = R.initial_state(dataclasses.replace(d, dictionary=dataclasses.replace(d.dictionary, trainable=False)))
    assert np.abs(r.y[0] - yf).max() <= 1e-13 * max(1.0, np.abs(yf).max())


MAJ = {"name": "tiny", "dictionary": {"features": ["a", "b"], "trainable": True},
       "heads": [{"name": "h", "value": "linear"}],
       "data": {"rows": [{"tokens": ["a", "b"], "target": 1}, {"tokens": ["b", "b"], "target": -1}]},
       "parameters": {"steps": 5}}


@pytest.mark.parametrize("edit, msg", [
    (lambda r: r["dictionary"].update(trainable="maybe"), "dictionary.trainable: must be true or false"),
    (lambda r: r["dictionary"].update(ambient=1), "dictionary.ambient"),
    (lambda r: (r["dictionary"].update(trainable=False), r["dictionary"].update(ambient=3)), "dictionary.ambient: only"),
    (lambda r: r.update(positions={"mode": "added"}), "positions: not with dictionary.trainable"),
    (lambda r: r["heads"][0].update(mask="causal"), "heads[0].mask: not with dictionary.trainable"),
    (lambda r: r["heads"][0].update(rpe=True), "heads[0].rpe: not with dictionary.trainable"),
    (lambda r: r["parameters"].update(normalise="parameter"), "normalise: not with dictionary.trainable"),
    (lambda r: r["parameters"].update(group_eta="embedding=1"), "group_eta: unknown group 'embedding'"),
    (lambda r: (r["dictionary"].update(trainable=False), r["parameters"].update(group_eta="embeddings=0.1")),
     "group_eta: a rate for embeddings needs [dictionary] trainable = true"),
    (lambda r: (r["dictionary"].update(trainable=False), r.update(training={"stages": [
        {"name": "s", "train": ["values"], "steps": 3, "eta": {"embeddings": 0.1}}]}), r["parameters"].pop("steps")),
     "training.stages[0].eta: a rate for embeddings needs"),
])
def test_refusals_are_one_line(edit, msg):
    from meanfield.core.config import ConfigError

    import copy
    raw = copy.deepcopy(MAJ)
    edit(raw)
    with pytest.raises(ConfigError) as e:
        description_from_dict(raw)
    assert str(e.value).startswith(msg) and "\n" not in str(e.value)


def test_cli_runs_and_refuses(tmp_path):
    import json

    toml = tmp_path / "tiny.toml"
    toml.write_text('name = "tiny"\n[dictionary]\nfeatures = ["a", "b"]\ntrainable = true\nambient = 3\n'
                    '[[heads]]\nname = "h"\nvalue = "linear"\n[data]\nrows = [{tokens = ["a", "b"], target = 1}, '
                    '{tokens = ["b", "b"], target = -1}]\n[parameters]\nsteps = 30\nwidth = 4\n')
    out = tmp_path / "r.h5"
    p = subprocess.run([sys.executable, "-m", "meanfield", "model", "run", str(toml), "--out", str(out)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    import h5py

    with h5py.File(out) as f:
        G = f["embedding_gram"][...]
        assert G.shape[1:] == (2, 2) and np.abs(G[-1] - G[0]).max() > 0
        assert json.loads(f.attrs["description"])["embeddings"] == {"trainable": True, "ambient": 3}
    bad = tmp_path / "bad.h5"
    p = subprocess.run([sys.executable, "-m", "meanfield", "model", "run", str(toml), "--out", str(bad),
                        "--normalise", "parameter"], capture_output=True, text=True)
    assert p.returncode == 2 and not bad.exists()
    assert len(p.stderr.strip().splitlines()) == 1 and "normalise: not with dictionary.trainable" in p.stderr
    p = subprocess.run([sys.executable, "-m", "meanfield", "model", "particles", str(toml), "--out", str(bad)],
                       capture_output=True, text=True)
    assert p.returncode == 2 and not bad.exists() and len(p.stderr.strip().splitlines()) == 1, p.stderr


@pytest.mark.parametrize("seed", (0, 1, 4, 5))
def test_flow_rhs_equals_the_explicit_gradient(seed):
    """The flow's right-hand side (method flow / rk4) at the initial state equals the explicit
    network's -grad mapped to the ambient state: dK/dt = M^T dM + dM^T M with dM = -(rate/eta) grad M,
    dE/dt = -(rate_E/eta) grad E, and the narrow values' -rate grad (1e-12)."""
    from meanfield.engine.system import stages, system_of

    raw = embedding_raw(seed, 3)
    raw.pop("training", None)
    d = description_from_dict(raw)
    sy = system_of(d)
    y0 = sy.initial_state()
    st = stages(d)[0]
    rhs = sy.rhs(y0, st.mode)
    net = _net(d, sy)
    loss = net.loss()
    ws = [net.E] + [v for p in net.params for v in p.values()]
    grads = dict(zip(range(len(ws)), torch.autograd.grad(loss, ws)))
    from meanfield.engine.rates import stage_base_eta, stage_group_rates

    r = stage_group_rates(d.training, d.training.stages[0])
    rho = {g: v / stage_base_eta(d.training, d.training.stages[0]) for g, v in r.items()}
    el = sy.el
    want = np.zeros_like(y0)
    want[el.E:] = -(rho["embeddings"] * grads[0].numpy()).ravel()
    i = 1
    for k, (h, p) in enumerate(zip(d.model.heads, net.params)):
        hh = el.heads[k]
        cols, dcols = [], []
        for key, v in p.items():
            g = grads[i].numpy()
            i += 1
            grp = {"WK": "keys", "WQ": "queries", "W": "keys", "w": "values", "MV": "values", "r": "readout",
                   "a": "signs"}[key]
            lr = rho[grp] * (h.n_neurons if (key == "w" and h.value == "neuron") else 1)
            if key in ("WK", "WQ", "MV"):
                cols.append(v.detach().numpy())
                dcols.append(-lr * g)
            elif key == "r":
                cols.append(v.detach().numpy().T)
                dcols.append(-lr * g.T)
            elif key == "W":
                want[hh["W"]:hh["W"] + el.d ** 2] = (-lr * g).ravel()
            elif key == "w":
                want[hh["w"]:hh["w"] + g.size] = (-lr * g).ravel()
            elif key == "a" and h.train_sign:
                want[hh["a"]] = -lr * float(g)
        if cols:
            M, dM = np.concatenate(cols, axis=1), np.concatenate(dcols, axis=1)
            D = hh["D"]
            want[hh["K"]:hh["K"] + D * D] = (M.T @ dM + dM.T @ M).ravel()
    assert np.abs(rhs - want).max() <= 1e-12 * max(1.0, np.abs(want).max())
    assert np.abs(want[el.E:]).max() > 1e-6


def test_init_from_a_trainable_run_is_refused(tmp_path):
    """A fixed-dictionary run may not start from a trainable-embedding run file (its Gram moved)."""
    import copy

    import meanfield.engine as me
    from meanfield.core.config import ConfigError

    raw = copy.deepcopy(MAJ)
    path = tmp_path / "t.h5"
    me.run_to_file(description_from_dict(raw), path, progress=False)
    raw["dictionary"]["trainable"] = False
    raw["parameters"]["init_from"] = str(path)
    with pytest.raises(ConfigError) as e:
        description_from_dict(raw)
    assert str(e.value).startswith("init_from:") and "trainable embeddings" in str(e.value)
