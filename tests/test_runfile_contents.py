"""What a run file holds, for every model kind (issue 26, part 2): the tokens and
their counts, the initial state as its own dataset, width as inf (not -1), the
attention scale and every resolved parameter (docs/run-files.md).

Each file is written by the CLI (a tiny run) and read with h5py directly, not
through meanfield's reader; the values are checked against what the command
was given or against another dataset of the same file (the counts against the
stored tokens, the initial state against the first record)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import h5py
import numpy as np

MEANFIELD = [sys.executable, "-m", "meanfield"]


def _run(tmp_path, argv, name):
    out = tmp_path / name
    r = subprocess.run(MEANFIELD + argv + ["--quiet", "--out", str(out)], capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    return h5py.File(out, "r")


def _first_record_equals_initial_state(f, names):
    for name in names:
        init = np.asarray(f["initial_state"][name])
        rec = np.asarray(f[name])[0]
        assert init.shape == rec.shape and np.array_equal(init, rec), name


def _grouped_initial_state_equals_first_records(f) -> int:
    """initial_state/<block>/<name> against variables/<block>/<name>[0]; returns the entries compared."""
    size = 0
    for block in f["initial_state"]:
        for name in f["initial_state"][block]:
            init = np.asarray(f["initial_state"][block][name])
            assert np.array_equal(init, np.asarray(f["variables"][block][name])[0]), (block, name)
            size += init.size
    return size


def test_mixture_run_file(tmp_path):
    with _run(tmp_path, ["mixture", "run", "--steps", "7", "--omega", "0.3"], "mix.h5") as f:
        a = f.attrs
        assert a["width"] == math.inf  # inf, not -1
        assert json.loads(a["head_scales"]) and all(v > 0 for v in json.loads(a["head_scales"]).values())
        cfg = json.loads(a["config"])
        assert cfg["omega"] == 0.3 and cfg["steps"] == 7 and "eta" in cfg and "K" in cfg and "L" in cfg
        s = f["samples"]
        idx, sgn, tok, cnt = (np.asarray(s[k]) for k in ("idx", "sgn", "tokens", "counts"))
        n, L = idx.shape
        assert tok.shape == (n, L, 2 * int(a["K"])) and cnt.shape == (n, L) and n == int(a["n_samples"])
        want = np.zeros_like(tok)  # token l of sample i is sgn * e_idx (docs/run-files.md)
        for i in range(n):
            for ell in range(L):
                want[i, ell, idx[i, ell]] = sgn[i, ell]
        assert np.array_equal(tok, want) and np.all(cnt == 1)
        _first_record_equals_initial_state(f, ("A", "B", "S"))


def test_engine_run_file(tmp_path):
    with _run(tmp_path, ["model", "run", "incontext", "--steps", "5"], "ic.h5") as f:
        a = f.attrs
        assert a["width"] == math.inf
        assert set(json.loads(a["head_scales"])) == {h.decode() if isinstance(h, bytes) else str(h)
                                                     for h in np.asarray(f["heads"])}
        cfg = json.loads(a["config"])
        assert cfg["declared"] and cfg["parameters"]  # the declared parameters, resolved
        s = f["samples"]
        tok, cnt = np.asarray(s["tokens"]), np.asarray(s["counts"])
        assert tok.shape[:2] == cnt.shape and tok.shape[2] == len(f["features"])
        # incontext: a prompt is N context tokens (a composition of N over the K values) and one query token
        N, K = cfg["declared"]["N"], cfg["declared"]["K"]
        assert np.all(cnt >= 0) and np.all(cnt.sum(axis=1) == N + 1)
        assert cnt.shape[0] == math.comb(N + K - 1, K - 1) * K  # every composition, with every query
        assert _grouped_initial_state_equals_first_records(f) > 0


def test_induction_run_file(tmp_path):
    argv = ["induction", "run", "--n-train", "50", "--n-test", "10", "--L", "12", "--stage-steps", "2,2,2"]
    with _run(tmp_path, argv, "ind.h5") as f:
        a = f.attrs
        cfg = json.loads(a["config"])
        assert cfg["n_train"] == 50 and cfg["L"] == 12 and int(a["d"]) == cfg["d"]
        ts = f["training_set"]
        tokens = np.asarray(ts["tokens"])
        assert tokens.shape == (50, 13)
        assert np.array_equal(np.asarray(ts["counts"]), np.bincount(tokens.ravel(), minlength=int(a["d"])))
        _first_record_equals_initial_state(f, ("c", "w", "a"))


def test_twolayer_run_file(tmp_path):
    with _run(tmp_path, ["model", "run", "edelman", "--steps", "3"], "ed.h5") as f:
        a = f.attrs
        desc = json.loads(a["description"])
        assert json.loads(a["config"]) and desc["model"]["class"] == "twolayer"
        tok = np.asarray(f["tokens"])
        d = json.loads(a["data"])
        assert tok.ndim == 2 and tok.shape[1] == d["L"] + 1 and tok.min() >= 0 and tok.max() < d["d"]
        assert _grouped_initial_state_equals_first_records(f) == f["theta"].shape[1]  # all of theta


def test_an_old_width_minus_one_reads_as_inf(tmp_path):
    """Format-1 files wrote width -1 for infinite: the reader gives inf."""
    from meanfield.core.run import open_run

    with _run(tmp_path, ["mixture", "run", "--steps", "3"], "old.h5") as f:
        path = f.filename
    with h5py.File(path, "a") as f:
        f.attrs["width"] = -1.0
        f.attrs["format_version"] = 1
    assert open_run(path).attrs["width"] == math.inf
