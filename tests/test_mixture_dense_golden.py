"""Dense mixture configs (feature Gram, finite noisy training set, several
neurons, label noise, three-stage, flow / rk4, finite width, stop criteria):
today's ``meanfield.models.mixture.run.run_to_file`` writes the same run file as the
dense path did before it ran through the engine (golden files
``tests/golden/dense_*.npz``, made by ``tests/golden/make_dense_golden.py``
from commit f457bcb, where ``meanfield/models/mixture/dense.py`` had its own kernels).

Same: the set of datasets and groups (names), every shape and dtype kind,
string datasets exactly, numbers to 1e-12 times max(1, |golden|) (both sides
compute the same exact map in a different floating-point order; a wrong term
moves values by 1e-3 or more); the same root attributes (names; numbers to
1e-12 relative, strings and JSON structures equal).

Adaptive flow (method ``flow``) is the exception: its step-size decisions see
the round-off of the other summation order (an error estimate is a
difference of nearly equal numbers), so the accepted steps differ and the two
runs agree to the error control, not to round-off: measured 3e-12 at
rtol 1e-11 and 6e-10 at rtol 1e-8; the tolerance there is 100 rtol (the
right-hand sides themselves agree to 1e-16 at the same state, and the number
of solver steps is the same). The flow cases end before the first ReLU kink.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from meanfield.core.io import read_run
from meanfield.models.mixture.config import make_config
from meanfield.models.mixture.run import run_to_file

GOLDEN = Path(__file__).parent / "golden"
NAMES = sorted(p.stem[len("dense_"):] for p in GOLDEN.glob("dense_*.npz"))
TOL = 1e-12

sys.path.insert(0, str(GOLDEN))
from make_dense_golden import flatten  # noqa: E402


def _close_num(a, b, where, tol=None):
    tol = TOL if tol is None else tol
    a, b = np.asarray(a, float), np.asarray(b, float)
    assert a.shape == b.shape, (where, a.shape, b.shape)
    assert np.array_equal(np.isnan(a), np.isnan(b)), where
    if a.size == 0:
        return
    ok = ~np.isnan(b)
    scale = max(1.0, float(np.max(np.abs(b[ok]))) if ok.any() else 1.0)
    err = float(np.max(np.abs(a[ok] - b[ok]))) if ok.any() else 0.0
    assert err <= tol * scale, f"{where}: max error {err:.3g} > {tol:g} x {scale:.3g}"


def _same(a, b, where, tol=None):
    """Attribute values (after JSON): numbers close, everything else equal."""
    if isinstance(b, bool) or isinstance(a, bool):
        assert a == b, (where, a, b)
    elif isinstance(b, int) and isinstance(a, int):
        assert a == b, (where, a, b)
    elif isinstance(b, (int, float)) and isinstance(a, (int, float)):
        _close_num(a, b, where, tol)
    elif isinstance(b, dict):
        assert isinstance(a, dict) and set(a) == set(b), (where, a, b)
        for k in b:
            _same(a[k], b[k], f"{where}.{k}", tol)
    elif isinstance(b, list):
        assert isinstance(a, list) and len(a) == len(b), (where, a, b)
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]", tol)
    else:
        assert a == b, (where, a, b)


def test_golden_set_is_there():
    for name in ("gram", "train", "neurons3", "label_noise", "three", "flow", "rk4", "width", "criterion"):
        assert name in NAMES


@pytest.mark.parametrize("name", NAMES)
def test_dense_run_file_equals_golden(name, tmp_path):
    g = np.load(GOLDEN / f"dense_{name}.npz")
    flags = json.loads(str(g["__flags__"]))
    cfg = make_config({}, **flags)
    assert cfg.dense
    tol = max(TOL, 100 * cfg.rtol) if cfg.method == "flow" else TOL
    _, path = run_to_file(cfg, tmp_path / "r.h5", progress=False)
    r = read_run(path)
    got = flatten(r)
    want = {k: g[k] for k in g.files if not k.startswith("__")}
    # run-file format 2 adds the initial state as its own group and the tokens with their counts
    # (docs/run-files.md); everything the golden file holds must still be there and equal
    extra = set(got) - set(want)
    assert set(want) <= set(got) and all(k.startswith("initial_state/") or k in ("samples/counts", "samples/tokens")
                                         for k in extra), sorted(extra)
    for k in (k for k in extra if k.startswith("initial_state/")):
        np.testing.assert_array_equal(got[k], got[k.split("/", 1)[1]][0], err_msg=k)  # the state at the first record
    for k, b in want.items():
        a = got[k]
        assert a.shape == b.shape, (k, a.shape, b.shape)
        if b.dtype.kind == "U":
            assert a.dtype.kind == "U" and np.array_equal(a, b), k
        else:
            assert a.dtype.kind == b.dtype.kind, (k, a.dtype, b.dtype)
            if k == "step" and cfg.method == "flow":
                # the solver's step counter at each record: the accepted steps differ (see above)
                assert a[0] == b[0] and a[-1] == b[-1] and np.all(np.diff(a) >= 0), (a, b)
            elif b.dtype.kind in "biu":
                np.testing.assert_array_equal(a, b, err_msg=k)
            else:
                _close_num(a, b, k, tol)
    want_attrs = json.loads(str(g["__attrs__"]))
    got_attrs = json.loads(json.dumps({k: v for k, v in r.attrs.items() if k != "meanfield_version"},
                                      sort_keys=True, default=str))
    assert set(want_attrs) <= set(got_attrs) and set(got_attrs) - set(want_attrs) <= {"description", "description_hash",
                                                                                      "head_scales"}
    for k, b in want_attrs.items():
        a = got_attrs[k]
        if k == "format_version":  # run-file format 2 (docs/run-files.md): the golden files were written as 1
            assert str(b) == "1" and str(a) == "2", (a, b)
        elif k == "width" and str(b) == "-1":  # format 2 writes infinite width as inf (was -1)
            assert float(a) == np.inf, (a, b)
        elif k.startswith("stage_time_criteria") and isinstance(b, dict):
            # stage times are interpolated between records now (docs/engine.md): the definitions say so
            for q, text in b.items():
                if not isinstance(text, str):
                    _same(a[q], text, f"{k}.{q}", tol)
                    continue
                base = text.replace("first record", "first time", 1) + ", interpolated between records"
                assert a[q] in (text, base, base + " to the step"), (k, q, a[q], text)
        elif k in ("T1", "T2", "T_loss") and isinstance(b, (int, float)) and not isinstance(b, bool) and b == b:
            # the golden value is the first record past the crossing; now interpolated: in (previous record, golden]
            t = np.asarray(got["t"], float)
            prev = float(t[t < b].max()) if (t < b).any() else -np.inf
            assert prev < a <= b * (1 + 1e-12) + 1e-300, (k, a, b, prev)
        elif k == "config":
            assert a == b
        else:
            _same(a, b, k, tol)
