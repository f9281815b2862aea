"""The Lemma 6.1 construction: every sample classified on the EXPLICIT network
(plain-numpy oracle), for K = 2..8; the margin approaches its predicted limit;
weak attention fails (so the check can fail)."""

import numpy as np
import pytest

from meanfield.cli import main
from meanfield.models.mixture.construct import construct, limit_margin
from meanfield.models.mixture.data import sample_set


@pytest.mark.parametrize("K", range(2, 9))
def test_construction_classifies_every_sample(K):
    r = construct(K, 3, beta=20.0, d=2 * K + 3)
    assert r["samples"].n == sample_set(K, 3, None).n
    assert r["min_margin"] > 0
    assert r["min_margin"] == pytest.approx(limit_margin(3), rel=1e-6)
    np.testing.assert_allclose(r["margins"], r["margins_reduced"], atol=1e-12)
    # independent re-evaluation with hand-built tokens on the explicit weights
    E = r["E"]
    s = r["samples"]
    for n in range(0, s.n, max(1, s.n // 7)):
        X = np.stack([s.sgn[n, i] * E[:, s.idx[n, i]] for i in range(s.L)], axis=1)  # d x L
        f = 0.0
        for h, a in enumerate((1.0, -1.0)):
            logits = X.T @ r["W_K"][h].T @ r["W_Q"][h] @ X  # [key i, query l]
            p = np.exp(logits - logits.max(axis=0))
            p /= p.sum(axis=0)
            u = np.mean([(p[:, l] * (r["w"][h] @ X)).sum() for l in range(s.L)])
            f += a * max(u, 0.0)
        assert s.y[n] * f == pytest.approx(r["margins"][n], abs=1e-12)


@pytest.mark.parametrize("L", [2, 4, 5])
def test_other_lengths(L):
    r = construct(3, L, beta=40.0)
    assert r["min_margin"] == pytest.approx(limit_margin(L), rel=1e-3)


def test_without_attention_it_fails():
    """beta = 0 (uniform attention): the inconsistent samples sit at margin 0."""
    r = construct(2, 3, beta=0.0)
    assert r["min_margin"] <= 1e-15
    assert construct(2, 3, beta=0.01)["min_margin"] > 0  # any beta > 0 tilts the right way


def test_cli(tmp_path, capsys):
    assert main(["mixture", "construct", "--K", "8", "--L", "3", "--out", str(tmp_path / "w.h5")]) == 0
    out = capsys.readouterr().out
    assert "minimum margin" in out and (tmp_path / "w.h5").exists()
    assert main(["mixture", "construct", "--K", "2", "--beta", "0"]) == 1
    assert main(["mixture", "construct", "--K", "1"]) == 2
    assert main(["mixture", "construct", "--K", "3", "--d", "4"]) == 2
