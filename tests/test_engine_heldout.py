"""Held-out data (``meanfield.engine.heldout``): a ``[test]`` set and a ``train_frac`` split.

Against independent computations: the run file's test loss against the explicit
network's loss on the test sequences (``meanfield.engine.oracle``, 1e-12), the
split against a permutation written out here; the description keys, the CLI and
the one-line refusals (exit 2, nothing written).
"""

from __future__ import annotations

import subprocess
import sys
import tomllib

import numpy as np
import pytest

from meanfield.core.config import ConfigError
from meanfield.engine.description import description_from_dict

TOY = """
name = "toy"
[dictionary]
features = ["a", "b", "c"]
gram = [[1.0, 0.2, 0.0], [0.2, 1.0, 0.0], [0.0, 0.0, 1.0]]
[data]
rows = [ { tokens = ["a", "-b", "c"], target = 1 }, { tokens = ["c", "b"], target = -1, weight = 2 },
         { tokens = ["-a", "c"], target = 1 }, { tokens = ["b", "-c", "a"], target = -1 },
         { tokens = ["-b", "a"], target = 1 } ]
[test]
rows = [ { tokens = ["a", "b"], target = 1 }, { tokens = ["-c", "b", "a"], target = -1, weight = 3 },
         { tokens = ["c"], target = -1 } ]
[[heads]]
name = "h"
value = "matrix"
[parameters]
eta = 0.2
steps = 200
width = 3
omega = 0.5
omega_v = 0.5
record_every = 1
"""


def _raw():
    return tomllib.loads(TOY)


def _oracle_test_losses(d, seed_orth=7):
    """The explicit network's loss and margins on the test set at its weights after every step."""
    from meanfield.engine import heldout
    from meanfield.engine import oracle as orc

    E = orc.embedding(d.dictionary.Gamma, d.P + 2, 3)
    ont = orc.Oracle(heldout.test_description(d), E)
    res = orc.Oracle(d, E).run(orc.weights_from_engine_init(d, E, seed_orth=seed_orth), project=ont.forward)
    return (np.array([x[0] for x in res["states"]]), np.array([ont.margins(x[1]["f"]) for x in res["states"]]),
            ont)


def test_run_file_test_loss_equals_explicit_network_on_the_test_set(tmp_path):
    """The test loss, margins and 0-1 error in the run file (CLI ``model run``) equal the explicit
    network's on the test set after every one of 200 steps at m = 3: 1e-12."""
    import h5py

    p = tmp_path / "toy.toml"
    p.write_text(TOY)
    out = tmp_path / "r.h5"
    r = subprocess.run([sys.executable, "-m", "meanfield", "model", "run", p, "--quiet", "--out", out],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "test (held out, 3 sequences): loss" in r.stdout and "0-1 error" in r.stdout, r.stdout
    d = description_from_dict(_raw())
    tl, mg, ont = _oracle_test_losses(d)
    with h5py.File(out, "r") as f:
        loss, margin, err = f["test_loss"][:], f["test_margin"][:], f["test_error"][:]
        assert np.allclose(f["test_samples/weight"][:], [0.2, 0.6, 0.2])
    assert len(loss) == 201
    assert np.abs(loss - tl).max() <= 1e-12 * max(1.0, np.abs(tl).max())
    assert np.abs(margin - mg).max() <= 1e-12 * max(1.0, np.abs(mg).max())
    assert np.array_equal(err, (mg <= 0) @ ont.weight / ont.weight.sum())
    assert err[0] != err[-1] or loss[0] != loss[-1]  # the test quantities move with training


def test_python_run_has_the_test_quantities_and_the_training_is_unchanged():
    import meanfield.engine as me

    d = description_from_dict(_raw())
    r = me.run(d)
    raw = _raw()
    raw.pop("test")
    r0 = me.run(description_from_dict(raw))
    assert np.array_equal(r.y, r0.y) and np.array_equal(r.loss, r0.loss)  # never trained on
    assert r.test_loss.shape == (201,) and r.test_margin.shape == (201, 3) and r.test_error.shape == (201,)
    assert r0.test_loss is None and r0.test_error is None


def test_train_frac_split_is_the_seeded_permutation():
    """train_frac = 0.6, split_seed = 5 on 5 sequences: the first round(0.6 * 5) = 3 of
    default_rng(5).permutation(5) train, the other 2 are the test set, each part's weights
    renormalised to sum 1 (the whole's total)."""
    raw = _raw()
    raw.pop("test")
    raw["data"].update(train_frac=0.6, split_seed=5)
    d = description_from_dict(raw)
    perm = np.random.default_rng(5).permutation(5)
    w = np.array([1, 2, 1, 1, 1], float) / 6
    whole = description_from_dict({**_raw(), "data": {"rows": _raw()["data"]["rows"]}})
    assert d.data.n == 3 and d.test.n == 2
    assert np.array_equal(d.data.tokens, whole.data.tokens[perm[:3]])
    assert np.array_equal(d.test.tokens, whole.data.tokens[perm[3:]])
    assert np.allclose(d.data.weight, w[perm[:3]] / w[perm[:3]].sum())
    assert np.allclose(d.test.weight, w[perm[3:]] / w[perm[3:]].sum())
    assert np.array_equal(d.test.target, whole.data.target[perm[3:]])
    tl, _, _ = _oracle_test_losses(d)
    import meanfield.engine as me

    r = me.run(d)
    assert np.abs(r.test_loss - tl).max() <= 1e-12 * max(1.0, np.abs(tl).max())


def test_test_set_from_a_function():
    raw = _raw()
    raw["test"] = {"function": "test_engine_heldout:_toy_test_data", "args": {"n": 4}}
    d = description_from_dict(raw)
    assert d.test.n == 4 and d.test.L == 2


def _toy_test_data(features, n):
    """A data function for the [test] table (n sequences of two tokens)."""
    X = np.zeros((n, 2, len(features)))
    X[:, 0, 0] = 1.0
    X[:, 1, 1] = np.linspace(-1, 1, n)
    return {"tokens": X, "target": np.where(np.arange(n) % 2 == 0, 1.0, -1.0)}


@pytest.mark.parametrize("edit, field", [
    (lambda r: r["data"].update(train_frac=1.0), "data.train_frac: must be in (0, 1)"),
    (lambda r: r["data"].update(train_frac=0.5), "data.train_frac: give either a [test] set or a train_frac split"),
    (lambda r: r["data"].update(split_seed=3), "data.split_seed: only with data.train_frac"),
    (lambda r: r["test"].update(weight=2), "test: unknown key 'weight'"),
    (lambda r: r["test"].update(train_frac=0.5), "test: unknown key 'train_frac'"),
    (lambda r: r["test"]["rows"][0].update(target=2), "test.target: logistic needs one output and targets +1 / -1"),
    (lambda r: r["test"]["rows"][0].update(tokens=["z"]), "test.rows[0].tokens[0]"),
    (lambda r: r.update(test=[1]), "test: must be a table"),
    (lambda r: r.update(test={"rows": []}), "test.rows: must be a non-empty list"),
    (lambda r: r.update(test={"function": "os:system"}), "test.function: os:system must be a Python function"),
])
def test_bad_held_out_sets_are_one_line(edit, field):
    raw = _raw()
    edit(raw)
    with pytest.raises(ConfigError) as e:
        description_from_dict(raw)
    assert field in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_split_of_one_sequence_and_mixture_family_refused():
    raw = _raw()
    raw.pop("test")
    raw["data"] = {"rows": raw["data"]["rows"][:1], "train_frac": 0.5}
    with pytest.raises(ConfigError, match="data.train_frac: a split needs at least 2 sequences"):
        description_from_dict(raw)
    with pytest.raises(ConfigError, match="test: not with family = mixture"):
        description_from_dict({"family": "mixture", "test": {"rows": []}})


def test_cli_refusal_is_one_line_exit_2_nothing_written(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text(TOY.replace("[test]\n", "[test]\nsplit_seed = 1\n"))
    out = tmp_path / "r.h5"
    r = subprocess.run([sys.executable, "-m", "meanfield", "model", "run", p, "--out", out],
                       capture_output=True, text=True, timeout=300)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "test: unknown key 'split_seed'" in lines[0], r.stderr
    assert not out.exists()
