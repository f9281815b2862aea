"""Regenerate the golden mixture runs (the code as it was before the engine).

The engine test (``tests/test_engine_mixture.py``) holds the engine's mixture
description equal to these arrays to 1e-12. They were produced from commit
3c452f7 (the mixture fast and dense paths before the engine existed):

    git worktree add /tmp/golden_src 3c452f7
    PYTHONPATH=/tmp/golden_src .venv/bin/python tests/golden/make_golden.py

Each case is one ``meanfield mixture run`` (1000 GD steps, recorded every 10
steps) written to a temporary run file with the mixture system's own ``save``
and read back; the npz keeps, to stay small (< 2 MB in all): t, step, stage,
loss at every record; S, A, B, w at every 5th record (every 50 steps);
margin and u at every 10th record (every 100 steps); the stage times T1, T2,
T_loss; the status; and the config flags (``flags``, JSON) that reproduce it.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent

BASE = {"steps": 1000, "record_every": 10}
THREE = {"schedule": "three-stage", "stage_steps": "300,400,300"}


def cases() -> dict[str, dict]:
    out = {}
    for K in (2, 3, 4):
        for L in (3, 4):
            for sched, extra in (("sim", {}), ("three", THREE)):
                for wname, wflags in (("inf", {}), ("w8", {"width": 8, "seed": 1})):
                    out[f"K{K}_L{L}_{sched}_{wname}"] = {**BASE, "K": K, "L": L, **extra, **wflags}
    out["gram"] = {**BASE, "K": 2, "L": 3, "feature_gram": "cc:0.3,vv:0.2,cv:0.1"}
    out["gram_w5"] = {**BASE, "K": 2, "L": 3, "feature_gram": "cc:0.3,vv:0.2,cv:0.1", "width": 5, "seed": 2}
    out["train_noise"] = {**BASE, "K": 2, "L": 3, "n_train": 40, "noise_sigma": 0.1, "data_seed": 3}
    out["train_noise_w6"] = {**BASE, "K": 3, "L": 3, "n_train": 30, "noise_sigma": 0.05, "width": 6, "seed": 4}
    out["neurons3"] = {**BASE, "K": 2, "L": 3, "n_neurons": 3, "neuron_init": "gaussian:0.05", "seed": 5}
    out["label_noise"] = {**BASE, "K": 2, "L": 4, "label_noise": 0.1}
    out["label_noise_three"] = {**BASE, "K": 3, "L": 3, "label_noise": 0.15, **THREE}
    out["gaussian_init"] = {**BASE, "K": 2, "L": 3, "neuron_init": "gaussian:0.1", "seed": 7}
    return out


def compute(flags: dict) -> dict[str, np.ndarray]:
    from meanfield.core.io import read_run
    from meanfield.models.mixture.config import make_config
    from meanfield.models.mixture.run import run, save

    cfg = make_config({}, **flags)
    traj = run(cfg)
    with tempfile.TemporaryDirectory() as tmp:
        r = read_run(save(Path(tmp) / "g.h5", cfg, traj))
    every5 = np.arange(0, len(r["t"]), 5)
    every10 = np.arange(0, len(r["t"]), 10)
    out = {"t": r["t"], "step": r["step"], "stage": r["stage"], "loss": r["loss"],
           "rec_state": every5, "rec_margin": every10}
    for k in ("S", "A", "B", "w"):
        out[k] = r[k][every5]
    out["margin"] = r["margin"][every10]
    out["u"] = r["u"][every10]
    for k in ("T1", "T2", "T_loss"):
        out[k] = np.float64(r.attrs[k])
    out["status"] = np.array(r.attrs["status"])
    out["flags"] = np.array(json.dumps(flags, sort_keys=True))
    return out


def main(argv=None) -> int:
    import meanfield

    print(f"meanfield from {Path(meanfield.__file__).parent}", file=sys.stderr)
    names = argv or list(cases())
    for name in names:
        arr = compute(cases()[name])
        np.savez_compressed(HERE / f"mixture_{name}.npz", **arr)
        print(name, file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
