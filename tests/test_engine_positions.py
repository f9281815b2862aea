"""Positions (``meanfield.engine.positions``): absolute positional features and the causal mask.

The enlarged dictionary against vectors built here (x_i = E t_i + p_i, x_i = [E t_i; p_i]); the
engine against the explicit network is in tests/test_engine_oracle.py (random descriptions with
positions); the description keys and the one-line refusals (exit 2, nothing written).
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
features = ["a", "b"]
[data]
rows = [ { tokens = ["a", "-b", "b"], target = 1 }, { tokens = ["b", "a"], target = -1 } ]
[positions]
mode = "added"
[[heads]]
name = "h"
value = "linear"
mask = "causal"
[parameters]
eta = 0.1
steps = 20
"""


def _raw():
    return tomllib.loads(TOY)


@pytest.mark.parametrize("mode", ["added", "concatenated"])
def test_tokens_are_the_positional_vectors_in_the_enlarged_dictionary(mode):
    """Explicit vectors: token features E (d x 2) and position vectors E_pos (d x 3) at random (added:
    in one space; concatenated: [E t; p] in the direct sum). The description's enlarged dictionary
    (its Gram) and coefficients reproduce every x_i^T x_j."""
    rng = np.random.default_rng(1)
    d = 7
    E, Ep = rng.normal(size=(d, 2)), rng.normal(size=(d, 3))
    raw = _raw()
    raw["dictionary"]["gram"] = (E.T @ E).tolist()
    raw["positions"] = {"mode": mode, "gram": (Ep.T @ Ep).tolist()}
    if mode == "added":
        raw["positions"]["cross"] = (E.T @ Ep).tolist()
    desc = description_from_dict(raw)
    assert desc.dictionary.features == ("a", "b", "pos1", "pos2", "pos3")
    t = {"a": np.array([1.0, 0]), "-b": np.array([0, -1.0]), "b": np.array([0, 1.0])}
    for s, row in enumerate(raw["data"]["rows"]):
        if mode == "added":
            xs = [E @ t[tok] + Ep[:, i] for i, tok in enumerate(row["tokens"])]
        else:
            xs = [np.concatenate([E @ t[tok], Ep[:, i]]) for i, tok in enumerate(row["tokens"])]
        co = desc.data.tokens[s, :len(xs)]
        gram = co @ desc.dictionary.Gamma @ co.T
        assert np.allclose(gram, np.array([[x @ y for y in xs] for x in xs]), rtol=1e-12, atol=1e-12)


def test_python_run_and_the_mask_changes_it():
    """A causal head with relative positional biases (rpe = true: 2 x 3 - 1 = 5 offsets, recorded as
    the head's variable b); without the mask the run differs."""
    import meanfield.engine as me

    raw = _raw()
    raw["heads"][0]["rpe"] = True
    r = me.run(description_from_dict(raw))
    assert r.var("h", "b").shape == (r.t.size, 5) and np.abs(r.var("h", "b")[-1]).max() > 0
    raw["heads"][0]["mask"] = "none"
    r0 = me.run(description_from_dict(raw))
    assert r.status == "complete" and np.abs(r.loss[-1] - r0.loss[-1]) > 1e-6


@pytest.mark.parametrize("edit, field", [
    (lambda r: r["positions"].update(trainable=True), "positions.trainable: learned position vectors are trainable"),
    (lambda r: r["positions"].update(mode="rotary"), "positions.mode: "),
    (lambda r: r["dictionary"].update(trainable=True), "positions: not with dictionary.trainable"),
    (lambda r: r["positions"].pop("mode"), "positions.mode: required"),
    (lambda r: r["positions"].update(mode="concatenated", cross=[[0, 0, 0], [0, 0, 0]]),
     "positions.cross: concatenated positions are orthogonal"),
    (lambda r: r["positions"].update(length=2), "positions.length: 2 is shorter than the longest sequence"),
    (lambda r: r["positions"].update(names=["a", "x", "y"]), "positions.names: must be distinct and differ"),
    (lambda r: r["positions"].update(gram=[[1, 2, 0], [2, 1, 0], [0, 0, 1]]), "positions.gram: must be symmetric "
                                                                              "positive definite"),
    (lambda r: r["positions"].update(cross=[[1, 0, 0], [0, 0, 0]]), "positions.cross (with the token Gram"),
    (lambda r: r["positions"].update(colour=1), "positions: unknown key 'colour'"),
    (lambda r: r["heads"][0].update(mask="future"), "heads[0].mask: "),
    (lambda r: r["heads"][0].update(query="fixed", query_vector=[1, 0, 0, 0, 0]),
     "heads[0].mask: causal needs a query at a position"),
    (lambda r: r["heads"][0].update(mask="none", rpe=True, query="fixed", query_vector=[1, 0, 0, 0, 0]),
     "heads[0].rpe: relative positions need a query at a position"),
    (lambda r: r["heads"][0].update(rpe=2), "heads[0].rpe: 2 offsets do not reach the longest sequence (3)"),
    (lambda r: r["heads"][0].update(rpe=-1), "heads[0].rpe: "),
])
def test_bad_positions_are_one_line(edit, field):
    raw = _raw()
    edit(raw)
    with pytest.raises(ConfigError) as e:
        description_from_dict(raw)
    assert field in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_cli_refusal_exit_2_nothing_written(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text(TOY.replace('mode = "added"', 'mode = "added"\ntrainable = true'))
    out = tmp_path / "r.h5"
    r = subprocess.run([sys.executable, "-m", "meanfield", "model", "run", p, "--out", out], capture_output=True,
                       text=True, timeout=300)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "positions.trainable" in lines[0], r.stderr
    assert not out.exists()
    with pytest.raises(ConfigError, match="positions: not with family = mixture"):
        description_from_dict({"family": "mixture", "positions": {"mode": "added"}})
