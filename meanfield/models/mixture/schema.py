"""Schema check of a mixture run file (``system = "mixture"``), registered as its run check.

``meanfield.core.bounds`` and the mixture's plots call it (through
``meanfield.core.hooks.run_check("mixture")`` or directly) before they read
a run, so a file that opens but is wrong is one line naming the field.
"""

from __future__ import annotations

from ...core.errors import ConfigError
from ...core.limits import excerpt


def validate_mixture_run(run, path) -> None:
    """Check a mixture run file read by ``io.read_run`` against the public
    schema (README, "HDF5 run format"): the ``config`` attribute is a JSON
    object, every dataset a reader uses is there with a consistent shape.
    Raises ConfigError naming the first wrong field."""
    import numpy as np

    where = excerpt(str(path))
    cfg = run.attrs.get("config", None)
    if not isinstance(cfg, dict):
        raise ConfigError(f"{where}: attribute 'config' must be a JSON object, got {excerpt(cfg)}")
    run.config = cfg

    def ds(name, ndim):
        if name not in run:
            raise ConfigError(f"{where}: dataset '{name}' is missing")
        a = np.asarray(run[name])
        if a.ndim != ndim:
            raise ConfigError(f"{where}: dataset '{name}' must have {ndim} dimension(s), has shape {a.shape}")
        return a

    t = ds("t", 1)
    T = t.shape[0]
    feats = ds("features", 1)
    P = feats.shape[0]
    if P < 4 or P % 2:
        raise ConfigError(f"{where}: dataset 'features' must list 2K >= 4 names, has {P}")
    samples = run.get("samples")
    if not isinstance(samples, dict):
        raise ConfigError(f"{where}: group 'samples' is missing")
    for k in ("consistent", "y", "weight"):
        if k not in samples:
            raise ConfigError(f"{where}: dataset 'samples/{k}' is missing")
    n = np.asarray(samples["y"]).shape[0] if np.asarray(samples["y"]).ndim == 1 else -1
    expect = {"step": (T,), "stage": (T,), "loss": (T,), "w": (T, 2, P), "S": (T, 2, P, P), "A": (T, 2, P, P),
              "B": (T, 2, P, P), "margin": (T, n), "u": (T, n, 2)}
    for name, shape in expect.items():
        if name in ("step", "u") and name not in run:  # read only by some expressions
            continue
        a = ds(name, len(shape))
        if a.shape != shape:
            raise ConfigError(f"{where}: dataset '{name}' has shape {a.shape}, expected {shape} "
                              f"(T = {T} records, P = {P} features, n = {n} samples)")
    for k in ("consistent", "weight"):
        if np.asarray(samples[k]).shape != (n,):
            raise ConfigError(f"{where}: dataset 'samples/{k}' has shape {np.asarray(samples[k]).shape}, "
                              f"expected ({n},)")


def _default_features(attrs) -> list:
    """c1..cK v1..vK of a run file without a ``features`` dataset (from its attribute K)."""
    K = int(float(attrs["K"]))
    return [f"c{k + 1}" for k in range(K)] + [f"v{k + 1}" for k in range(K)]


def _bound_names():
    from ...core.bound_parse import BoundNames

    return BoundNames(
        variables={"min_margin_consistent": "min of margin[i] over consistent samples",
                   "min_margin_inconsistent": "min of margin[i] over inconsistent samples",
                   "omega": "attention init scale", "K": "number of groups", "L": "tokens per sample"},
        attrs={"omega": "omega", "K": "K", "L": "L"},
        groups={"min_margin_consistent": ("consistent", True), "min_margin_inconsistent": ("consistent", False)},
        signed={"S": ("S", "pair"), "A": ("A", "pair"), "B": ("B", "pair"), "w": ("w", "feature"),
                "u": ("u", "sample")},
        heads=("+", "-"), feature_pattern=r"[cv][1-9][0-9]*", features=_default_features,
        forms="S+[a,b], S-[a,b], A+[a,b], A-[a,b], B+[a,b], B-[a,b], w+[a], w-[a], u+[i], u-[i]",
        help="meanfield mixture bound --help")


#: the mixture's names in the bound language (``meanfield.core.bound_parse.BoundNames``), registered
#: for the system "mixture" by ``plugin``: its scores, self-scores and neurons per head sign
#: (``S+[c1,v1]``, ``w-[v2]``, ``u+[i]``), features c1..cK v1..vK, the sample groups
#: consistent / inconsistent, the attributes omega, K, L
BOUND_NAMES = _bound_names()
