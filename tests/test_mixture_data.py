"""The exact K-mixture sample set against a brute-force enumeration.

Definition (spec, data section): group k ~ p, label y uniform on {+1, -1};
tokens c_k, y v_k and L-2 distractors eps v_{k'}, k' uniform on the other
groups, eps uniform on {+1, -1}, all independent. Enumerating every ORDERED
distractor tuple with its probability and merging tuples into multisets gives
the population the package must reproduce.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from fractions import Fraction

import numpy as np
import pytest

from meanfield.models.mixture.data import feature_labels, n_samples, sample_set, token_matrix

CASES = [(2, 2), (2, 3), (2, 4), (2, 5), (3, 2), (3, 3), (3, 4), (4, 3), (5, 4)]


def brute_force(K, L, p=None):
    """{(k, y, sorted distractors ((k', eps), ...)): probability} with exact fractions."""
    if p is None:
        pk = [Fraction(1, K)] * K
    else:
        tot = sum(Fraction(x).limit_denominator(10**9) for x in p)
        pk = [Fraction(x).limit_denominator(10**9) / tot for x in p]
    out = defaultdict(Fraction)
    for k in range(K):
        others = [j for j in range(K) if j != k]
        for y in (1, -1):
            for tup in itertools.product([(j, e) for j in others for e in (1, -1)], repeat=L - 2):
                prob = pk[k] * Fraction(1, 2) * Fraction(1, 2 * (K - 1)) ** (L - 2)
                out[(k, y, tuple(sorted(tup)))] += prob
    return out


def _key(s, i):
    d = tuple(sorted(zip((int(g) for g in s.distractor_group[i]), (int(e) for e in s.distractor_sign[i]))))
    return int(s.group[i]), int(s.y[i]), d


@pytest.mark.parametrize("K,L", CASES)
def test_counts_weights_flags_against_enumeration(K, L):
    s = sample_set(K, L)
    ref = brute_force(K, L)
    assert s.n == len(ref) == n_samples(K, L)
    keys = [_key(s, i) for i in range(s.n)]
    assert len(set(keys)) == s.n  # distinct samples
    assert set(keys) == set(ref)
    for i, key in enumerate(keys):
        assert s.weight[i] == pytest.approx(float(ref[key]), rel=1e-13, abs=0)
        # consistent: every distractor sign equals y (vacuously true for L = 2)
        assert bool(s.consistent[i]) == all(e == key[1] for _, e in key[2])
    assert s.weight.sum() == pytest.approx(1.0, abs=1e-14)
    assert np.all(s.weight > 0)


@pytest.mark.parametrize("K,L", CASES)
def test_token_conventions(K, L):
    """Tokens [c_k, y v_k, distractors]; feature k is c_{k+1}, K+k is v_{k+1}."""
    s = sample_set(K, L)
    assert s.idx.shape == (s.n, L) and s.sgn.shape == (s.n, L)
    np.testing.assert_array_equal(s.idx[:, 0], s.group)
    np.testing.assert_array_equal(s.sgn[:, 0], 1.0)
    np.testing.assert_array_equal(s.idx[:, 1], K + s.group)
    np.testing.assert_array_equal(s.sgn[:, 1], s.y)
    np.testing.assert_array_equal(s.idx[:, 2:], K + s.distractor_group)
    np.testing.assert_array_equal(s.sgn[:, 2:], s.distractor_sign)
    assert np.all(s.distractor_group != s.group[:, None])
    assert set(np.unique(s.y)) == {-1.0, 1.0}
    labels = feature_labels(K)
    assert labels == [f"c{k}" for k in range(1, K + 1)] + [f"v{k}" for k in range(1, K + 1)]
    for i in range(min(s.n, 6)):
        Z = token_matrix(s, i)
        assert Z.shape == (2 * K, L)
        for l in range(L):
            col = np.zeros(2 * K)
            col[s.idx[i, l]] = s.sgn[i, l]
            np.testing.assert_array_equal(Z[:, l], col)


def test_K2_L3_eight_samples():
    s = sample_set(2, 3)
    assert s.n == 8
    np.testing.assert_array_equal(s.weight, np.full(8, 1 / 8))
    # X_{k,s,s'}: every (group, y, distractor sign) once; distractor from the other group
    combos = {(int(s.group[i]), int(s.y[i]), int(s.distractor_sign[i, 0])) for i in range(8)}
    assert combos == {(k, y, e) for k in (0, 1) for y in (1, -1) for e in (1, -1)}
    np.testing.assert_array_equal(s.distractor_group[:, 0], 1 - s.group)
    np.testing.assert_array_equal(s.consistent, s.distractor_sign[:, 0] == s.y)
    assert s.consistent.sum() == 4
    assert s.describe(int(np.flatnonzero((s.group == 0) & (s.y == 1) & (s.distractor_sign[:, 0] == -1))[0])) \
        == "k=1 y=+1 [c1, +v1, -v2]"


@pytest.mark.parametrize("K,L,p", [(2, 3, (1.0, 3.0)), (3, 4, (0.2, 0.3, 0.5)), (3, 3, (5, 1, 1)), (4, 2, (1, 2, 3, 4))])
def test_group_weights(K, L, p):
    s = sample_set(K, L, p)
    pn = np.asarray(p, float) / np.sum(p)
    np.testing.assert_allclose(s.p, pn, rtol=1e-15)
    for k in range(K):
        assert s.weight[s.group == k].sum() == pytest.approx(pn[k], rel=1e-13)
    ref = brute_force(K, L, p)
    for i in range(s.n):
        assert s.weight[i] == pytest.approx(float(ref[_key(s, i)]), rel=1e-12)
    assert s.weight.sum() == pytest.approx(1.0, abs=1e-14)
    # within a group, weights do not depend on p
    u = sample_set(K, L)
    for i in range(s.n):
        assert s.weight[i] / pn[s.group[i]] == pytest.approx(u.weight[i] * K, rel=1e-12)


@pytest.mark.parametrize("K,L,p", [(1, 3, None), (2, 1, None), (2, 3, (1.0,)), (2, 3, (1.0, 0.0)),
                                   (2, 3, (1.0, -1.0)), (2, 3, (1.0, np.nan)), (3, 3, (1, 1))])
def test_bad_arguments(K, L, p):
    with pytest.raises(ValueError):
        sample_set(K, L, p)


def test_arrays_read_only():
    s = sample_set(2, 3)
    with pytest.raises(ValueError):
        s.weight[0] = 1.0
