"""`meanfield.engine.packed.pack` builds the kernels' sparse token arrays vectorised (a cold-start cost:
0.26 CPU s of the 1.5 s of `model run incontext` in a loop); checked here against the per-token loop it
replaced (written out below as the reference), array by array, bit for bit."""

import numpy as np
import pytest

import meanfield as mf
from meanfield.engine.cli import model_path
from meanfield.engine.packed import pack


def _loop_reference(desc):
    X = np.asarray(desc.data.tokens, dtype=np.float64)
    cnt = np.asarray(desc.data.count_array, dtype=np.float64)
    last = np.array([int(np.flatnonzero(c > 0)[-1]) for c in cnt], dtype=np.int64)
    nz = X != 0.0
    nzn = nz.sum(axis=2).astype(np.int64)
    Z = max(1, int(nzn.max()))
    nzi = np.zeros(X.shape[:2] + (Z,), dtype=np.int64)
    nzc = np.zeros(X.shape[:2] + (Z,))
    for s_, i_ in zip(*np.nonzero(nzn)):
        idx = np.flatnonzero(nz[s_, i_])
        nzi[s_, i_, :idx.size] = idx
        nzc[s_, i_, :idx.size] = X[s_, i_, idx]
    return {"last": last, "nzn": nzn, "nzi": nzi, "nzc": nzc}


@pytest.mark.parametrize("name,kw", [("incontext", dict(K=3, N=4)), ("majority", {}), ("maxmargin", {}),
                                     ("icl_softmax", dict(samples=6)), ("mixture", dict(n_train=5, noise_sigma=0.1))])
def test_pack_equals_the_per_token_loop(name, kw):
    src = model_path("incontext").parents[2] / "docs" / "examples" / "majority.toml" if name == "majority" else name
    desc = mf.load(src, **kw)
    pk = pack(desc)
    ref = _loop_reference(desc)
    for k, want in ref.items():
        got = getattr(pk, k)
        assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want), k
        assert got.flags.c_contiguous and got.flags.writeable, k  # the kernels' one cached signature
    assert (ref["nzn"] > 1).any() or name != "icl_softmax"  # dense tokens: more than one feature per token
