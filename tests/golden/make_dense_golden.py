"""Regenerate the golden dense-path run files (the code as it was before the
dense path ran through the engine).

``tests/test_mixture_dense_golden.py`` holds today's ``meanfield.models.mixture.run``
(``run_to_file`` of a dense config: feature Gram, finite noisy training set,
several neurons per head, label noise, three-stage schedule, flow / rk4,
finite width, stop criteria) equal to these files: the same datasets (names,
shapes, dtypes), the same attributes, values to 1e-12 relative. They were
produced from commit f457bcb (the dense path's own kernels, ``meanfield/models/mixture/dense.py``):

    git archive f457bcb | tar -x -C /tmp/src
    PYTHONPATH=/tmp/src .venv/bin/python tests/golden/make_dense_golden.py

Each case is written as ``dense_<name>.npz``: every dataset of the run file
under its path (``samples/idx``, ``training_set/Q``; strings as unicode
arrays), ``__attrs__`` (JSON of the root attributes as ``read_run`` returns
them) and ``__flags__`` (JSON of the config flags). Cases are small (a few
hundred GD steps, about 30 records) so the set stays well under 1 MB.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def cases() -> dict[str, dict]:
    b = {"steps": 300, "record_every": 10}
    return {
        "gram": {**b, "K": 2, "L": 3, "feature_gram": "cc:0.2"},
        "gram_full": {**b, "K": 2, "L": 3, "feature_gram": "cc:0.3,vv:0.2,cv:0.1", "neuron_init": "gaussian:0.1",
                      "seed": 4},
        "train": {**b, "K": 2, "L": 3, "n_train": 20, "noise_sigma": 0.1, "data_seed": 1},
        "train_w4": {**b, "K": 3, "L": 3, "n_train": 15, "noise_sigma": 0.05, "width": 4, "seed": 2,
                     "ambient_d": 9},
        "neurons3": {**b, "K": 2, "L": 3, "n_neurons": 3, "neuron_init": "gaussian:0.1", "seed": 2},
        "label_noise": {**b, "K": 2, "L": 4, "label_noise": 0.1, "feature_gram": "cc:0.2"},
        "label_noise_neurons": {**b, "K": 2, "L": 3, "label_noise": 0.1, "n_neurons": 2,
                                "neuron_init": "gaussian:0.05", "seed": 1},
        "three": {"K": 2, "L": 3, "feature_gram": "cc:0.2,vv:0.1", "n_neurons": 2, "schedule": "three-stage",
                  "stage_steps": "100,150,100", "stage3": "both", "record_every": 10,
                  "stage_criteria": "consistent_margin>=0.05,none,loss<=0.3"},
        "width": {**b, "K": 3, "L": 3, "feature_gram": "cc:0.2", "width": 5, "seed": 3},
        "criterion": {"K": 2, "L": 3, "n_neurons": 2, "steps": 2000, "record_every": 25,
                      "criterion": "min_margin>=0.05"},
        "grad_w": {"K": 2, "L": 3, "feature_gram": "cv:0.1", "steps": 3000, "record_every": 50,
                   "criterion": "grad_w<=0.01"},
        # flow cases stop before the first ReLU kink (adaptive steps through a kink depend on round-off)
        "flow": {"K": 2, "L": 3, "feature_gram": "cc:0.2", "method": "flow", "t_end": 20.0, "record_dt": 2.0,
                 "rtol": 1e-11, "atol": 1e-13, "width": 4, "seed": 1,
                 "neuron_init": "const:0.5,0.5,0.5,0.5,-0.5,-0.5,-0.5,-0.5"},
        "flow_train": {"K": 2, "L": 3, "n_train": 10, "noise_sigma": 0.05, "method": "flow", "t_end": 12.0,
                       "record_dt": 1.0, "neuron_init": "const:0.5,0.5,0.5,0.5,-0.5,-0.5,-0.5,-0.5"},
        "flow_crit": {"K": 2, "L": 3, "n_neurons": 2, "method": "flow", "t_end": 100.0, "record_dt": 2.0,
                      "criterion": "loss<=0.53", "neuron_init": "const:0.5,0.5,0.5,0.5,-0.5,-0.5,-0.5,-0.5"},
        "rk4": {"K": 2, "L": 3, "n_neurons": 2, "method": "rk4", "t_end": 10.0, "dt": 0.25, "record_every": 4,
                "neuron_init": "gaussian:0.1", "seed": 6},
        # not zero neurons here: with vv:0.3 and zero neurons some pre-activations are exactly 0 after
        # one step (a ReLU kink); the Cholesky basis of f457bcb made them +-1e-18 and took the other branch
        "record_log": {"K": 2, "L": 3, "feature_gram": "vv:0.3", "steps": 500, "record_log": 20,
                       "neuron_init": "gaussian:0.1", "seed": 3},
    }


def flatten(run, prefix: str = "") -> dict[str, np.ndarray]:
    out = {}
    for k, v in run.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}/"))
        else:
            a = np.asarray(v)
            out[prefix + k] = a.astype(str) if a.dtype.kind == "O" else a
    return out


def compute(flags: dict) -> dict[str, np.ndarray]:
    from meanfield.core.io import read_run
    from meanfield.models.mixture.config import make_config
    from meanfield.models.mixture.run import run_to_file

    cfg = make_config({}, **flags)
    with tempfile.TemporaryDirectory() as tmp:
        _, path = run_to_file(cfg, Path(tmp) / "g.h5", progress=False)
        r = read_run(path)
    out = flatten(r)
    out["__attrs__"] = np.array(json.dumps({k: v for k, v in r.attrs.items() if k != "meanfield_version"},
                                           sort_keys=True, default=str))
    out["__flags__"] = np.array(json.dumps(flags, sort_keys=True))
    return out


def main(argv=None) -> int:
    import meanfield

    print(f"meanfield from {Path(meanfield.__file__).parent}", file=sys.stderr)
    names = argv or list(cases())
    for name in names:
        np.savez_compressed(HERE / f"dense_{name}.npz", **compute(cases()[name]))
        print(name, file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
