"""The n-gram chain generator (meanfield.models.induction.data): statistics, layout,
reproducibility and HDF5 files."""

from __future__ import annotations

import numpy as np
import pytest

from meanfield.models.induction import data as D


def _transition_counts(x, pa, d):
    p = len(pa)
    r = max(pa)
    counts = np.zeros((d ** p, d))
    for i in range(r, len(x)):
        z = 0
        for lag in pa:
            z = z * d + x[i - lag]
        counts[z, x[i]] += 1
    return counts


def _check_frequencies(x, kernel, pa, d):
    counts = _transition_counts(x, pa, d)
    n = counts.sum(axis=1, keepdims=True)
    assert np.all(n > 1000)
    freq = counts / n
    sd = np.sqrt(kernel * (1 - kernel) / n)
    assert np.all(np.abs(freq - kernel) <= 5 * sd + 1e-12), np.max(np.abs(freq - kernel) / (sd + 1e-300))


@pytest.mark.parametrize("pa,alpha", [((1, 2), 1.0), ((1, 3), 2.0), ((2,), 0.5)])
def test_generator_frequencies_match_its_kernel(pa, alpha):
    # one long sequence from the generator itself, with its kernel returned
    ds = D.generate(1, d=3, L=200_000, pa=pa, alpha=alpha, seed=11, kernels=True)
    K = ds.kernels[0]
    np.testing.assert_allclose(K.sum(axis=1), 1.0, atol=1e-12)
    # avoid rows the chain almost never visits (alpha < 1 can make contexts rare)
    _check_frequencies(ds.tokens[0], K, pa, 3)


def test_sample_chain_frequencies():
    rng = np.random.default_rng(0)
    K = rng.dirichlet(np.ones(4), size=16)  # pa = (1, 2), d = 4
    x = D.sample_chain(K.reshape(4, 4, 4), (1, 2), 400_000, seed=3)
    _check_frequencies(x, K, (1, 2), 4)
    x2 = D.sample_chain(K, (2, 1), 1000, seed=3, x0=[0, 1])
    assert list(x2[:2]) == [0, 1]


def test_layout_most_recent_parent_is_most_significant():
    # alpha tiny: kernel rows are nearly one-hot, so the next token is the argmax of its row
    pa = (1, 3)
    ds = D.generate(200, d=3, L=30, pa=pa, alpha=1e-3, seed=5, kernels=True)
    hits = total = 0
    for n in range(ds.N):
        T = ds.kernel_tensor(n)
        assert T.shape == (3, 3, 3)
        for l in range(4, 32):  # 1-based positions with a full parent context
            x = ds.tokens[n]
            zi = D.context_index(ds.tokens[n:n + 1], l, pa, 3)[0]
            assert zi == x[l - 2] * 3 + x[l - 4]
            assert D.context_tuple(zi, 2, 3) == (x[l - 2], x[l - 4])
            row = T[x[l - 2], x[l - 4]]
            np.testing.assert_array_equal(row, ds.kernels[n, zi])
            hits += int(np.argmax(row) == x[l - 1])
            total += 1
    assert hits / total > 0.97


def test_dirichlet_moments_and_uniform_start():
    d, alpha = 4, 0.7
    ds = D.generate(20_000, d=d, L=3, pa=(2,), alpha=alpha, seed=1, kernels=True)
    K = ds.kernels.reshape(-1, d)
    n = K.shape[0]
    mean, var = 1 / d, (1 / d) * (1 - 1 / d) / (d * alpha + 1)
    assert np.all(np.abs(K.mean(axis=0) - mean) < 5 * np.sqrt(var / n))
    assert abs(K[:, 0].var() / var - 1) < 0.05
    # x_1, x_2 uniform
    for col in (0, 1):
        f = np.bincount(ds.tokens[:, col], minlength=d) / ds.N
        assert np.all(np.abs(f - 1 / d) < 5 * np.sqrt(0.25 * 0.75 / ds.N))


def test_tiny_alpha_is_finite():
    ds = D.generate(500, d=5, L=10, pa=(1,), alpha=1e-4, seed=2, kernels=True)
    assert np.all(np.isfinite(ds.kernels))
    np.testing.assert_allclose(ds.kernels.sum(-1), 1.0, atol=1e-12)
    assert ds.tokens.min() >= 0 and ds.tokens.max() < 5


def test_reproducible_by_seed_and_prefix_stable():
    a = D.generate(300, d=3, L=40, seed=7, kernels=True)
    b = D.generate(300, d=3, L=40, seed=7, kernels=True)
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_array_equal(a.kernels, b.kernels)
    c = D.generate(300, d=3, L=40, seed=8)
    assert not np.array_equal(a.tokens, c.tokens)
    # the first k sequences do not depend on N; kernels=False gives the same tokens
    p = D.generate(17, d=3, L=40, seed=7)
    np.testing.assert_array_equal(p.tokens, a.tokens[:17])
    # tuple seeds are distinct streams
    t1 = D.generate(50, d=3, L=40, seed=(7, 0))
    t2 = D.generate(50, d=3, L=40, seed=(7, 1))
    assert not np.array_equal(t1.tokens, t2.tokens)
    assert a.targets.shape == (300,) and np.array_equal(a.targets, a.tokens[:, 40])
    assert a.context.shape == (300, 40)


def test_hdf5_roundtrip(tmp_path):
    ds = D.generate(64, d=3, L=25, pa=(1, 3), alpha=0.3, seed=(4, 2), kernels=True)
    p = D.save_data(tmp_path / "set.h5", ds)
    back = D.load_data(p)
    np.testing.assert_array_equal(back.tokens, ds.tokens)
    np.testing.assert_array_equal(back.kernels, ds.kernels)
    assert (back.d, back.L, back.pa, back.alpha, back.seed) == (3, 25, (1, 3), 0.3, (4, 2))
    import h5py

    with h5py.File(p, "r") as f:
        np.testing.assert_array_equal(f["targets"][()], ds.targets)
        assert f.attrs["format"] == D.DATA_FORMAT and int(f.attrs["N"]) == 64
    nok = D.generate(5, d=3, L=25, seed=1)
    back2 = D.load_data(D.save_data(tmp_path / "nok.h5", nok))
    assert back2.kernels is None
    with pytest.raises(ValueError):
        back2.kernel_tensor(0)
    bad = tmp_path / "bad.h5"
    with h5py.File(bad, "w") as f:
        f.attrs["format"] = "something else"
    with pytest.raises(ValueError):
        D.load_data(bad)
    with pytest.raises(FileNotFoundError):
        D.load_data(tmp_path / "missing.h5")


def test_bad_arguments():
    with pytest.raises(ValueError):
        D.generate(3, d=1)
    with pytest.raises(ValueError):
        D.generate(3, alpha=0.0)
    with pytest.raises(ValueError):
        D.generate(3, L=2, pa=(1, 2))
    with pytest.raises(ValueError):
        D.generate(3, pa=(0, 1))
    assert D.ngram_pa(4) == (1, 2, 3)
    assert D.normalize_pa([3, 1]) == (1, 3)
