"""`meanfield mixture sweep --chunked` against a golden sweep.h5 written by the
code before the ensemble core became generic (commit f457bcb, the mixture
batch and summary kernel called directly by meanfield/core/ensemble.py):
tests/golden/ensemble_mixture_sweep.npz (every dataset of sweep.h5, the axes,
the counts, and one kept record). The refactor changed no arithmetic, so on
the machine that wrote it the new files were bit-identical (checked when it was
made). Since issue 27 the chunks run in vectorised lanes (an exp within one ulp
of libm's, a reciprocal a softmax): integers and statuses must be equal, floats
equal to rounding (tests/lanes_tolerance.py: 1e-12 of the larger of each value
and 1)."""

from pathlib import Path

import h5py
import numpy as np

from lanes_tolerance import assert_close
from meanfield.cli import main
from meanfield.core.ensemble import load

GOLDEN = Path(__file__).parent / "golden" / "ensemble_mixture_sweep.npz"
ARGV = ["mixture", "sweep", "--chunked", "--steps", "200", "--record-every", "4", "--param", "omega=0.02,0.3",
        "--param", "eta=0.5,3e4", "--param", "schedule=simultaneous,three-stage", "--param", "width=inf,8",
        "--param", "seed=0,1", "--chunk-size", "5", "--keep-records", "3,7", "--workers", "1", "--quiet"]


def test_mixture_chunked_sweep_equals_the_golden_sweep(tmp_path):
    out = tmp_path / "sw"
    assert main([*ARGV, "--out", str(out)]) == 0
    g = np.load(GOLDEN, allow_pickle=False)
    d = load(out / "sweep.h5")
    names = [k for k in g.files if "/" not in k]
    assert sorted(names) == sorted(k for k in d if k not in ("attrs", "axes"))
    d = dict(d)
    # stage times: the golden file holds the first RECORD past the crossing; they are now interpolated between
    # that record and the one before it and rounded up to the step (docs/engine.md): in (golden - 4 eta, golden]
    order = list(d["axes"])
    shape = [1] * len(order)
    shape[order.index("eta")] = -1
    rec_dt = 4 * np.asarray(d["axes"]["eta"], float).reshape(shape)  # --record-every 4
    for k in ("T1", "T2", "T_loss"):
        a, b = d.pop(k), g[k]
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=k)
        ok = np.isnan(b) | ((a <= b * (1 + 1e-12)) & (a > b - np.broadcast_to(rec_dt, b.shape) * (1 + 1e-12)))
        assert ok.all(), (k, a[~ok], b[~ok])
    names = [k for k in names if k not in ("T1", "T2", "T_loss")]
    for k in names:
        assert d[k].dtype == g[k].dtype and d[k].shape == g[k].shape, k
        assert_close(g[k], d[k], err_msg=k)
    for k, v in d["axes"].items():
        np.testing.assert_array_equal(np.asarray(v).astype(g[f"axes/{k}"].dtype), g[f"axes/{k}"])
    assert d["attrs"]["counts"] == __import__("json").loads(str(g["attrs/counts"]))
    with h5py.File(out / "records" / "0000003.h5") as f:
        assert_close(g["records/3/S"], f["S"][()])
        assert_close(g["records/3/loss"], f["loss"][()])
