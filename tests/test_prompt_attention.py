"""Oymak et al. prompt-attention (meanfield/models/prompt_attention): the contextual law, the run file's
held-out error against an explicit numpy evaluation of the prompt-attention model, and the claims report."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

import meanfield.engine as me
from meanfield.models.prompt_attention import dataset, features

TOML = "meanfield/models/prompt_attention.toml"


def test_the_contextual_law():
    f = features(2)
    d = dataset(f, n=6, T=5, n_relevant=2, sigma=1.5, noise=0.0, seed=3)
    X, rel, y = d["tokens"], d["relevant"], np.array(d["target"])
    assert rel.sum(axis=1).tolist() == [2] * 6
    assert np.all(X[rel][:, 0] == 1) and np.all(X[~rel][:, 0] == 0)           # q* only on relevant tokens
    assert np.all(X[rel][:, 1] == np.repeat(y, 2))                             # + y v*
    assert set(np.abs(X[~rel][:, 1]).tolist()) == {1.5}                         # s sigma v*
    assert np.all(X[..., -1] == 0)                                             # no token has the prompt feature


def _explicit(Wp, v, d):
    """f(X) = v^T X^T softmax(X q), q = the prompt's logit vector; logistic loss, 0-1 error."""
    X, y = d["tokens"], np.array(d["target"])
    z = X @ Wp
    a = np.exp(z - z.max(axis=1, keepdims=True))
    a /= a.sum(axis=1, keepdims=True)
    f = np.einsum("nl,nlp,p->n", a, X, v)
    return float(np.mean(np.logaddexp(0.0, -y * f))), float(np.mean(y * f <= 0))


def test_test_error_in_the_run_equals_the_explicit_model_on_the_test_set():
    desc = me.load(TOML, steps=60, record_every=20, n_test=50)
    r = me.run(desc)
    dec = dict(desc.declared)
    te = dataset(desc.dictionary.features, n=50, T=dec["T"], n_relevant=dec["n_relevant"], sigma=dec["sigma"],
                 noise=dec["noise"], seed=1000)
    W, w = r.var("h", "W"), r.var("h", "w")
    for k in range(len(r.t)):
        loss, err = _explicit(W[k][:, -1], w[k][0, 0], te)
        assert abs(loss - r.test_loss[k]) <= 1e-12 and abs(err - r.test_error[k]) <= 1e-12
    assert r.test_loss[-1] < r.test_loss[0]


def test_check_quick_writes_the_claims_report(tmp_path):
    out = tmp_path / "check"
    p = subprocess.run([sys.executable, "-m", "meanfield", "model", "check", "prompt_attention", "--quick", "--out",
                        str(out)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    rep = json.loads((out / "report.json").read_text())
    assert {c["name"] for c in rep["claims"]} == {"prompt_attends_relevant", "prompt_separates_relevant",
                                                  "test_error_below_mean_pooling"}
    assert all(c["source"] == "expected" for c in rep["claims"])
    nums = {c["name"]: c["numbers"] for c in rep["claims"]}["test_error_below_mean_pooling"]
    assert 0 <= nums["test_error_prompt"] <= 1 and 0 <= nums["test_error_mean_pooling"] <= 1
