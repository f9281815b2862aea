"""A run file's last state as the initial state (``init_from``, flag ``--init-from R.h5``).

``[parameters] init_from = "R.h5"`` (or ``--init-from R.h5``, or
``load(path, init_from="R.h5")``) starts the run from the last record of the
engine run file R.h5: every head's Gram matrix Q (rebuilt from its recorded
blocks: the file holds each pair of objects once, Q[b, a] = Q[a, b]^T), its
merged W~, value vectors w~ and trainable sign. The new run's clock starts at
t = 0, step 0; its training (eta, stages, rates) is its own. The file must be
of the same model: the same dictionary (features and Gram), the same heads
(every field but the initial values) and loss (the attribute ``structure``, a
digest of those, that every engine run file carries) and every recorded block
with the shape this description's state has; anything else is refused with one
line naming ``init_from`` and what differs. Not for a description a family
builds (e.g. the mixture's: its files record the family's own variables), a
dictionary with a report map,
or the explicit network (``particles``: a Gram matrix does not determine the
weights).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np

from ..core.config import ConfigError


def structure(desc) -> str:
    """The digest of what a run file must share with ``desc`` to start it: the
    dictionary (features, Gram), the heads (all fields but ``init_*``), the loss.

    Parameters
    ----------
    desc : Description

    Returns
    -------
    str
        16 hex digits.

    Example
    -------
    >>> import meanfield.engine as me                     # doctest: +SKIP
    >>> structure(me.load("docs/examples/majority.toml"))  # doctest: +SKIP
    '3f0c...'
    """
    heads = [{k: v for k, v in dataclasses.asdict(h).items() if not k.startswith("init_")} for h in desc.model.heads]
    doc = {"features": list(desc.dictionary.features), "gram": np.round(desc.dictionary.Gamma, 12).tolist(),
           "heads": heads, "loss": desc.model.loss}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:16]


def check(desc, path, lay) -> Path:
    """Refuse (one line naming ``init_from``) what cannot start ``desc``, whose state
    layout is ``lay`` (``meanfield.engine.reduce.layout(desc)``); returns the path."""
    import h5py

    p = Path(str(path))
    if desc.family is not None:
        raise ConfigError(f"init_from: not for a description built by a family ({desc.family!r}: its run files "
                          "record the family's own variables); use a general description")
    if desc.dictionary.report is not None:
        raise ConfigError("init_from: not with a report map (the file records reported, not state, coordinates)")
    if not p.is_file():
        raise ConfigError(f"init_from: no such run file: {p}")
    try:
        with h5py.File(p, "r") as f:
            system = f.attrs.get("system")
            system = system.decode() if isinstance(system, bytes) else system
            if system != "engine" or "variables" not in f:
                raise ConfigError(f"init_from: {p} is not an engine run file (system {system!r})")
            st = f.attrs.get("structure")
            st = st.decode() if isinstance(st, bytes) else st
            if st is not None and st != structure(desc):
                raise ConfigError(f"init_from: {p} is a run of another description (dictionary, heads or loss "
                                  f"differ: structure {st} != {structure(desc)})")
            if f["t"].shape[0] < 1:
                raise ConfigError(f"init_from: {p} has no records")
            if "embedding_gram" in f:  # trainable embeddings (meanfield.engine.embeddings): Gamma moved
                raise ConfigError(f"init_from: {p} is a run with trainable embeddings: its Gram E^T E moved and its "
                                  "state is the ambient Gram K with E, which Q does not determine")
            _blocks(lay, f, p)  # every block present, with its shape
    except OSError as e:
        raise ConfigError(f"init_from: cannot read {p} ({e})") from None
    return p


def _blocks(lay, f, p) -> dict:
    out = {}
    for b in lay.blocks:
        key = f"variables/{b.head}/{b.name}"
        if key not in f:
            raise ConfigError(f"init_from: {p} is a run of another description (no variable {b.name} of head "
                              f"{b.head})")
        ds = f[key]
        if tuple(ds.shape[1:]) != tuple(b.shape) and not (b.kind == "small" and ds.shape[1:] in ((), (1,))):
            raise ConfigError(f"init_from: {p} is a run of another description (variable {b.head}:{b.name} has "
                              f"shape {tuple(ds.shape[1:])}, this description {tuple(b.shape)})")
        out[(b.head, b.name)] = np.asarray(ds[-1], dtype=float)
    return out


def initial_state(desc, lay) -> np.ndarray:
    """The flat state of the last record of ``desc.init.init_from`` in ``lay``'s layout."""
    import h5py

    p = check(desc, desc.init.init_from, lay)
    with h5py.File(p, "r") as f:
        vals = _blocks(lay, f, p)
    y = np.zeros(lay.size)
    for b in lay.blocks:
        v = vals[(b.head, b.name)]
        if b.kind == "gram":
            Q = lay.gram(y, b.head)
            (r0, r1), (c0, c1) = b.rows, b.cols
            Q[c0:c1, r0:r1] = v.T
            Q[r0:r1, c0:c1] = v  # a diagonal block as recorded
        else:
            y[b.offset:b.offset + int(np.prod(b.shape))] = np.ravel(v)
    if "population" in desc.data.extra:  # its finite-width steps hold rank <= m (meanfield.engine.lowrank)
        from .lowrank import START_TOL, rank_leak, width_to_hold

        m = width_to_hold(desc, lay)
        if m and (lk := rank_leak(y, lay, m)) > START_TOL:
            raise ConfigError(f"init_from: the last record of {p} has a Gram block of rank > the width {m} "
                              f"(lambda_{m + 1} / lambda_1 = {lk:.2g}): no network of width {m} has that state; "
                              f"start from a run of width <= {m}, or give --width inf")
    return y
