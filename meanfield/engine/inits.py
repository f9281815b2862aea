"""Initial values of a head's blocks given in the description (``init_W``, ``init_w``, ``init_gram``).

Keys of a ``[[heads]]`` table (``docs/engine.md``):

* ``init_W`` (merged heads): the narrow key-query matrix W~ at t = 0 (default 0):
  a P x P matrix, or ``{ identity = c, on = "x" }`` (c on the diagonal of
  the features named by ``on``: a feature group of the dictionary such as
  the icl_regression family's ``x`` (x1..xd) and ``y``, a feature name, or a
  list of them; default every feature);
* ``init_w`` (value = linear / neuron): the value vector w~ at t = 0 for every
  output and neuron of the head (default: ``neuron_init``): P numbers, or
  ``{ FEATURE_OR_GROUP = value, ... }`` (every feature in it gets the value,
  the others 0), e.g. ``{ y = 0.1 }``;
* ``init_gram`` (wide objects, infinite width only): ``{ BLOCK = value }`` with
  BLOCK a Gram block's name (``S``, ``A``, ``B``, ``V.r1``, ``r1.r1``, ...; its
  transpose is set too) and value a matrix of the block's shape, a number
  (blocks of one row or column: the entries), or ``{ identity = c, on = ... }``;
  the whole initial Gram must stay positive semidefinite (it is a Gram U^T U).

All values are kept as nested tuples of floats (the Head stays hashable).
"""

from __future__ import annotations

import numpy as np

from ..core.config import ConfigError, as_float


def _names(where: str, on, features, groups) -> list[int]:
    g = dict(groups or ())
    items = on if isinstance(on, list) else [on]
    idx = []
    for it in items:
        s = str(it)
        if s in g:
            idx += [features.index(f) for f in g[s]]
        elif s in features:
            idx.append(features.index(s))
        else:
            allowed = ", ".join(list(g) + list(features))
            raise ConfigError(f"{where}: unknown feature or group {it!r}; allowed: {allowed}")
    return idx


def _identity(where: str, v: dict, features, groups, n: int) -> np.ndarray:
    for k in v:
        if k not in ("identity", "on"):
            raise ConfigError(f"{where}: unknown key '{k}'; allowed: identity, on (or give the matrix)")
    if "identity" not in v:
        raise ConfigError(f"{where}: a table needs identity = c (and optionally on = a group or features)")
    c = as_float(f"{where}.identity", v["identity"])
    if n != len(features):
        raise ConfigError(f"{where}: identity = c only for a block over the features (P = {len(features)})")
    idx = _names(f"{where}.on", v.get("on"), features, groups) if "on" in v else list(range(n))
    M = np.zeros((n, n))
    M[idx, idx] = c
    return M


def _matrix(where: str, v, shape) -> np.ndarray:
    try:
        M = np.array(v, dtype=float)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: must be a {shape[0]}x{shape[1]} matrix of numbers; got {v!r}") from None
    if M.shape != tuple(shape):
        if M.size == shape[0] * shape[1] and 1 in shape:
            M = M.reshape(shape)
        else:
            raise ConfigError(f"{where}: must be a {shape[0]}x{shape[1]} matrix; got shape {M.shape}")
    if not np.all(np.isfinite(M)):
        raise ConfigError(f"{where}: entries must be finite numbers")
    return M


def _tup(M: np.ndarray):
    return tuple(tuple(float(x) for x in row) for row in np.atleast_2d(M))


def init_W(where: str, v, features, groups=()):
    """The ``init_W`` of a merged head as a nested tuple (P x P), or None."""
    if v is None:
        return None
    P = len(features)
    M = _identity(where, v, features, groups, P) if isinstance(v, dict) else _matrix(where, v, (P, P))
    return _tup(M)


def init_w(where: str, v, features, groups=()):
    """The ``init_w`` of a head as a tuple of P floats, or None."""
    if v is None:
        return None
    P = len(features)
    if isinstance(v, dict):
        w = np.zeros(P)
        for k, x in v.items():
            w[_names(f"{where}.{k}", str(k), features, groups)] = as_float(f"{where}.{k}", x)
        return tuple(float(x) for x in w)
    if isinstance(v, list) and len(v) == P:
        return tuple(as_float(where, x) for x in v)
    raise ConfigError(f"{where}: must be {P} numbers (one per feature) or a table {{feature_or_group = value}}; "
                      f"got {v!r}")


def init_gram(where: str, v):
    """The ``init_gram`` table kept raw (checked against the layout by :func:`apply_gram`), or None."""
    if v is None:
        return None
    if not isinstance(v, dict) or not v:
        raise ConfigError(f"{where}: must be a table {{BLOCK = matrix}} (blocks: S, A, B, V.r1, ...)")
    out = []
    for k, x in v.items():
        out.append((str(k), _freeze(x)))
    return tuple(out)


def _freeze(x):
    if isinstance(x, dict):
        return ("table", tuple((str(k), _freeze(v)) for k, v in x.items()))
    if isinstance(x, list):
        return tuple(_freeze(v) for v in x)
    return x


def _thaw(x):
    if isinstance(x, tuple) and len(x) == 2 and x[0] == "table":
        return {k: _thaw(v) for k, v in x[1]}
    if isinstance(x, tuple):
        return [_thaw(v) for v in x]
    return x


def apply_gram(Q: np.ndarray, head, k: int, lay, features, groups=()) -> np.ndarray:
    """Q (the head's initial Gram) with the blocks of ``head.init_gram`` set; refuses
    an unknown block and a result that is not positive semidefinite."""
    where = f"heads[{k}].init_gram"
    names = {b.name: b for b in lay.blocks if b.head == head.name and b.kind == "gram"}
    Q = Q.copy()
    for name, raw in head.init_gram:
        b = names.get(name)
        if b is None:
            raise ConfigError(f"{where}.{name}: no such Gram block in head {head.name!r}; blocks: "
                              f"{', '.join(names) or 'none (no wide objects)'}")
        v = _thaw(raw)
        shape = b.shape
        if isinstance(v, dict):
            if shape[0] != shape[1]:
                raise ConfigError(f"{where}.{name}: identity = c only for a square block; give the matrix")
            M = _identity(f"{where}.{name}", v, features, groups, shape[0])
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and shape == (1, 1):
            M = np.array([[float(v)]])
        else:
            M = _matrix(f"{where}.{name}", v, shape)
        r0, r1 = b.rows
        c0, c1 = b.cols
        Q[r0:r1, c0:c1] = M
        Q[c0:c1, r0:r1] = M.T
    ev = float(np.linalg.eigvalsh(0.5 * (Q + Q.T)).min())
    if ev < -1e-12 * max(1.0, float(np.abs(Q).max())):
        raise ConfigError(f"{where}: the initial Gram of head {head.name!r} must be positive semidefinite (it is "
                          f"U^T U of the weights); smallest eigenvalue {ev:.3g}: raise omega or shrink the blocks")
    return Q
