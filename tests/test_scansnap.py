"""Tian et al. "Scan and Snap" (meanfield/models/scansnap): the data against a hand count, the description
against an explicit numpy evaluation of the Y/Z model's loss, and the claims report."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

import meanfield.engine as me
from meanfield.models.scansnap import dataset, features

TOML = "meanfield/models/scansnap.toml"


def test_data_is_the_long_sequence_limit_of_the_sequence_classes():
    f = features(2, 3, 2)
    assert f == ["c1", "c2", "d1_1", "d1_2", "d1_3", "d2_1", "d2_2", "d2_3", "m"]
    d = dataset(f, 2, 3, 2)
    assert d["target"] == [0, 1] and d["counts"][1] == [3, 3, 1, 2, 3, 1]
    names = [[f[int(np.argmax(t))] for t in seq] for seq in d["tokens"]]
    assert names[1] == ["c1", "c2", "d2_1", "d2_2", "d2_3", "m"]


def _explicit_loss(desc, Z, Y):
    """The Y/Z model without normalisation: z_l = Z[l, m], p_l = c_l e^{z_l} / sum c e^z over the
    contextual tokens, logits Y zbar, cross-entropy, sequences weighted equally."""
    X = np.asarray(desc.data.tokens)
    c = np.asarray(desc.data.count_array)
    tot = 0.0
    for s in range(X.shape[0]):
        keys = X[s, :-1]
        m = int(np.argmax(X[s, -1]))
        z = keys @ Z[:, m]
        e = c[s, :-1] * np.exp(z)
        zbar = (e / e.sum()) @ keys
        f = Y @ zbar
        tot += np.log(np.exp(f).sum()) - f[int(desc.data.target[s])]
    return tot / X.shape[0]


def test_the_description_is_the_yz_model():
    desc = me.load(TOML, steps=50, record_every=50)
    r = me.run(desc)
    W, w = r.var("h", "W")[-1], r.var("h", "w")[-1][:, 0, :]
    assert abs(_explicit_loss(desc, W, w) - r.loss[-1]) <= 1e-12
    assert r.loss[-1] < r.loss[0]


def test_check_quick_writes_the_claims_report(tmp_path):
    out = tmp_path / "check"
    p = subprocess.run([sys.executable, "-m", "meanfield", "model", "check", "scansnap", "--quick", "--out", str(out)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    rep = json.loads((out / "report.json").read_text())
    names = {c["name"]: c for c in rep["claims"]}
    assert set(names) == {"scan_distinct_up_common_down", "scan_order_by_cooccurrence", "snap_not_winner_takes_all",
                          "snap_time_set_by_rate_ratio"}
    assert all(c["source"] == "expected" for c in rep["claims"])
    snap = names["snap_time_set_by_rate_ratio"]["numbers"]["snap_t"]
    assert len(snap) == 3 and all(s is not None for s in snap)
    assert (out / "report.md").exists()
