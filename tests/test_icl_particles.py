"""``particles`` on Gaussian in-context regression: the explicit network on the exact population, online SGD on
sampled prompt batches, a fixed sampled set; CLI flags and their failure paths.

The explicit network (``meanfield.engine.oracle``: weights in R^d, d = P + 2, a random embedding) trained on the
exact population loss equals the engine's Gram-closure run at the same width to 1e-10 (the closure cross-check:
the two share no reduction; the population loss itself is held to Monte Carlo in tests/test_icl_moments.py and the
chain rule to an explicit network written in tests/test_icl_engine.py). Online SGD: seeded (same seed, same run;
another seed, another run), it lowers the exact population loss of its weights, and every step's batch is new.
"""

from __future__ import annotations

import numpy as np
import pytest

import meanfield.engine as me
from meanfield.core.config import ConfigError
from meanfield.engine.description import description_from_dict
from meanfield.engine.finite import particles
from tests.cli_cases import run_cases


def raw(m, steps=100, samples=0, attention="linear", value="matrix"):
    return {"name": "t", "data": {"family": "icl_regression", "d": 2, "N": 5, "cov": "1,0.4", "noise": 0.1,
                                  "samples": samples, "seed": 3},
            "heads": [{"name": "h0", "attention": attention, "kq": "separate", "query": "last", "query_self": False,
                       "value": value},
                      {"name": "h1", "attention": attention, "kq": "merged", "query": "last", "query_self": False,
                       "value": "linear", "init_W": {"identity": 0.3, "on": "x"}, "init_w": {"y": 0.2}}],
            "model": {"loss": "squared"},
            "parameters": {"steps": steps, "eta": 0.1, "width": m, "seed": 2, "omega": 0.6, "omega_v": 0.6,
                           "sigma_r": 0.6}}


@pytest.mark.parametrize("m", [1, 8])
def test_population_particles_equal_engine(m):
    desc = description_from_dict(raw(m))
    r = particles(desc)
    e = me.run(desc)
    assert r.status == e.status == "complete"
    scale = np.maximum(np.abs(e.y).max(axis=1, keepdims=True), 1.0)
    assert float(np.max(np.abs(r.y - e.y) / scale)) <= 1e-10
    assert abs(e.loss[-1] - e.loss[0]) > 1e-2 * e.loss[0]  # it moved


def test_online_sgd_is_seeded_and_learns():
    desc = description_from_dict(raw(4, steps=150))
    a = particles(desc, batch=64, batch_seed=1)
    b = particles(desc, batch=64, batch_seed=1)
    c = particles(desc, batch=64, batch_seed=2)
    e = me.run(desc)
    np.testing.assert_array_equal(a.y, b.y)
    assert np.abs(a.y[-1] - c.y[-1]).max() > 1e-6
    # the recorded loss is the exact population loss of the SGD weights: it falls as the exact run's does
    assert a.loss[-1] < a.loss[0] - 0.5 * (e.loss[0] - e.loss[-1])
    # SGD is not the population GD: the trajectories differ
    assert np.abs(a.y[-1] - e.y[-1]).max() > 1e-6


def test_fixed_sampled_set():
    """Full-batch GD of the explicit network on a fixed sampled set equals the engine's sampled run (closure);
    minibatches drawn from that set are seeded."""
    desc = description_from_dict(raw(3, steps=60, samples=40))
    assert "population" not in desc.data.extra and desc.data.tokens.shape == (40, 6, 3)
    r = particles(desc)
    e = me.run(desc)
    scale = np.maximum(np.abs(e.y).max(axis=1, keepdims=True), 1.0)
    assert float(np.max(np.abs(r.y - e.y) / scale)) <= 1e-10
    a = particles(desc, batch=10, batch_seed=0)
    assert np.abs(a.y[-1] - r.y[-1]).max() > 1e-8
    with pytest.raises(ConfigError, match="batch: at most the 40"):
        particles(desc, batch=41)


def test_softmax_runs_sampled_only():
    with pytest.raises(ConfigError, match="no closed-form population loss"):
        description_from_dict(raw(2, attention="softmax"))
    desc = description_from_dict(raw(2, steps=5, samples=20, attention="softmax"))
    assert desc.data.extra["sampled"]["exact"] == 0
    assert "sampled, not exact" in desc.data.extra["sampled"]["population"]
    r = particles(desc, batch=8)
    assert r.status == "complete"


def test_icl_cli(tmp_path):
    """The particles flags and the data family's bad inputs: one line naming the field, exit 2, nothing written."""
    out, bad = tmp_path / "p.h5", str(tmp_path / "x.h5")
    from meanfield.engine.cli import MODELS_DIR

    sm = tmp_path / "softmax.toml"
    sm.write_text((MODELS_DIR / "icl_zfb.toml").read_text().replace('attention = "linear"', 'attention = "softmax"'))
    cases = [
        ("exact", ["model", "run", "icl_zfb", "--steps", "5", "--out", str(tmp_path / "e.h5"), "--quiet"], 0,
         "data: exact population"),
        ("softmax", ["model", "run", str(sm), "--out", bad], 2, "give --samples n"),
        ("softmax-sampled", ["model", "run", str(sm), "--samples", "30", "--steps", "3", "--out",
                             str(tmp_path / "s.h5"), "--quiet"], 0, "data: sampled, not exact: 30 prompts"),
        ("ok", ["model", "particles", "icl_zfb", "--width", "1", "--d", "2", "--N", "4", "--cov", "1,0.5",
                "--steps", "20", "--batch", "32", "--out", str(out), "--quiet"], 0, "complete"),
        ("batch0", ["model", "particles", "icl_zfb", "--width", "1", "--batch", "0", "--out", bad], 2, "batch"),
        ("seed", ["model", "particles", "icl_zfb", "--width", "1", "--batch-seed", "3", "--out", bad], 2,
         "batch-seed"),
        ("toobig", ["model", "particles", "icl_zfb", "--width", "1", "--samples", "10", "--batch", "11",
                    "--out", bad], 2, "at most the 10"),
        ("cov-neg", ["model", "run", "icl_zfb", "--cov", "1,-1,1", "--out", bad], 2, "positive definite"),
        ("cov-len", ["model", "run", "icl_zfb", "--cov", "1,2", "--out", bad], 2, "data.cov"),
        ("cov-nan", ["model", "run", "icl_zfb", "--cov", "nan", "--out", bad], 2, "data.cov"),
        ("d0", ["model", "run", "icl_zfb", "--d", "0", "--out", bad], 2, "data.d"),
        ("N0", ["model", "run", "icl_zfb", "--N", "0", "--out", bad], 2, "data.N"),
        ("noise", ["model", "run", "icl_zfb", "--noise", "-1", "--out", bad], 2, "data.noise"),
        ("batched", ["model", "sweep", "icl_zfb", "--param", "eta=0.05,0.1", "--steps", "5", "--batched",
                     "--out", str(tmp_path / "sw")], 2, "not batched"),
        ("chunked", ["model", "sweep", "icl_zfb", "--param", "eta=0.05,0.1", "--steps", "5", "--chunked",
                     "--out", str(tmp_path / "sw")], 2, "not batched"),
        ("dbig", ["model", "run", "icl_zfb", "--d", "40", "--out", bad], 2, "data.d"),
    ]
    res, _ = run_cases([(c[0], c[1]) for c in cases], cwd=str(tmp_path.parent))
    for cid, argv, rc, text in cases:
        r = res[cid]
        assert r["rc"] == rc, (cid, r["stdout"][-500:], r["stderr"][-500:])
        both = r["stdout"] + r["stderr"]
        assert text in both, (cid, both[-500:])
        if rc == 2:
            assert "Traceback" not in both and len(r["stderr"].strip().splitlines()) == 1, (cid, r["stderr"])
    import h5py

    with h5py.File(out) as f:
        assert "online SGD" in f.attrs["particles_training"]
        assert f.attrs["exact"] == 1 and f.attrs["batch"] == 32 and f.attrs["icl_d"] == 2
    with h5py.File(tmp_path / "s.h5") as f:
        assert f.attrs["exact"] == 0 and "sampled, not exact" in f.attrs["population"] and f.attrs["samples"] == 30
    assert not (tmp_path / "x.h5").exists() and not (tmp_path / "sw").exists()


def test_python_api_particles_takes_batch(tmp_path):
    """``meanfield.particles`` (the public API) has the command's --batch / --batch-seed: the same online-SGD run as
    the engine's particles, in memory and as a file; a bad batch is the command's one-line ConfigError."""
    import meanfield as mf

    desc = description_from_dict(raw(4, steps=30))
    a = mf.particles(desc, batch=32, batch_seed=5, progress=False)
    b = particles(desc, batch=32, batch_seed=5)
    np.testing.assert_array_equal(a.y, b.y)
    assert np.abs(a.y[-1] - mf.particles(desc, progress=False).y[-1]).max() > 1e-6   # not the full-batch run
    f = mf.particles(desc, out=tmp_path / "p.h5", batch=32, batch_seed=5, progress=False)
    np.testing.assert_array_equal(f.y, b.y)
    with pytest.raises(ConfigError, match="^batch"):
        mf.particles(desc, batch=0, progress=False)
    with pytest.raises(ConfigError, match="^batch-seed"):
        mf.particles(desc, batch_seed=1, progress=False)
