"""Held-out data: a ``[test]`` data set and a seeded ``train_frac`` split (``meanfield.engine.heldout``).

A description may carry a test set, never trained on, whose loss, margins and
(for a classification loss) 0-1 error are recorded at every record:

* ``[test] rows = [...]`` or ``[test] function = "pkg.mod:fn"``, ``args = {...}``:
  exactly the forms of ``[data]`` (tokens over the same dictionary, targets of
  the same kind);
* ``[data] train_frac = F`` (0 < F < 1) with ``split_seed = S`` (default 0):
  the data set (rows, or the family a data function generates) is split by a
  permutation from ``numpy.random.default_rng(S)``: the first
  ``round(F n)`` sequences (at least 1, at most n - 1) train, the rest are the
  test set. Each part's weights are renormalised to the total of the whole.

Why nothing else changes: the engine's state (the Gram matrix Q of the wide
objects over the dictionary, the narrow objects, the signs) does not depend on
the data; a data set only enters through the loss. The test quantities are
the same loss and margins evaluated on the test sequences at the recorded
states (the kernels with the test set packed in place of the training set).
The 0-1 error is the test-weighted fraction of sequences with margin <= 0
(logistic: y f; cross-entropy: f_y - max_{c != y} f_c); a squared loss
records no error (a regression).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..core.config import ConfigError, as_float, as_int
from .objects import Data

#: the keys of a [test] table (as [data])
TEST_KEYS = ("rows", "function", "args")
#: the split keys [data] accepts besides its own
SPLIT_KEYS = ("train_frac", "split_seed")


def split(data: Data, frac: float, seed: int) -> tuple[Data, Data]:
    """(train, test) of ``data``: a permutation from ``default_rng(seed)``, the first
    ``round(frac n)`` sequences (clipped to 1..n-1) train. Each part keeps the order
    of the permutation, its weights renormalised to the total weight of ``data``.

    Parameters
    ----------
    data : Data
        The whole data set (n >= 2).
    frac : float
        The training fraction, 0 < frac < 1.
    seed : int
        The permutation's seed.

    Returns
    -------
    (Data, Data)
        The training and the test part.

    Example
    -------
    >>> from meanfield.engine.objects import make_data
    >>> d = make_data(np.eye(4)[:, None, :], [1, -1, 1, -1])
    >>> tr, te = split(d, 0.75, 0)
    >>> (tr.n, te.n)
    (3, 1)
    """
    n = data.n
    if n < 2:
        raise ConfigError(f"data.train_frac: a split needs at least 2 sequences; the data set has {n}")
    perm = np.random.default_rng(seed).permutation(n)
    k = min(n - 1, max(1, int(round(frac * n))))
    return _take(data, perm[:k]), _take(data, perm[k:])


def _take(data: Data, idx: np.ndarray) -> Data:
    total = float(np.sum(data.weight))
    w = np.asarray(data.weight, dtype=float)[idx]
    if w.sum() <= 0:
        raise ConfigError("data.train_frac: one part of the split has total weight 0 (every sequence there has "
                          "weight 0); change split_seed or train_frac")
    arrs = dict(tokens=np.asarray(data.tokens)[idx], target=np.asarray(data.target)[idx],
                weight=w * (total / w.sum()),
                counts=None if data.counts is None else np.asarray(data.counts)[idx],
                names=None if data.names is None else tuple(data.names[i] for i in idx),
                flags={k: np.asarray(v)[idx] for k, v in data.flags.items()})
    for k in ("tokens", "target", "weight", "counts"):
        if arrs[k] is not None:
            arrs[k] = np.array(arrs[k])
            arrs[k].setflags(write=False)
    return dataclasses.replace(data, **arrs, extra={})


def held_out(raw: dict, data: Data, features: tuple[str, ...], parse) -> tuple[Data, Data | None]:
    """(training data, test data or None) of a raw description: ``[test]`` parsed
    with ``parse(table, features, where)`` (the loader's ``[data]`` parser), or the
    ``train_frac`` split of ``[data]``; both at once is refused (one line)."""
    draw = raw.get("data") or {}
    frac = draw.get("train_frac") if isinstance(draw, dict) else None
    test = None
    if frac is not None:
        f = as_float("data.train_frac", frac, positive=True)
        if not f < 1:
            raise ConfigError(f"data.train_frac: must be in (0, 1) (the fraction that trains); got {frac!r}")
        if "test" in raw:
            raise ConfigError("data.train_frac: give either a [test] set or a train_frac split of [data], not both")
        seed = as_int("data.split_seed", draw.get("split_seed", 0), lo=0)
        data, test = split(data, f, seed)
    elif isinstance(draw, dict) and "split_seed" in draw:
        raise ConfigError("data.split_seed: only with data.train_frac (the seed of the split)")
    if "test" in raw:
        t = raw["test"]
        if not isinstance(t, dict):
            raise ConfigError("test: must be a table ([test] with rows = [...] or function = \"package.module:function\")")
        test = parse(t, features, "test")
    return data, test


def test_description(desc):
    """``desc`` with its test set as the data (for the kernels and the explicit
    network); None when it has none."""
    if getattr(desc, "test", None) is None:
        return None
    return dataclasses.replace(desc, data=desc.test, test=None)


def classification(desc) -> bool:
    """Whether the loss is a classification loss (a 0-1 error is recorded)."""
    return desc.model.loss in ("logistic", "cross_entropy")


def zero_one(margin: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """The weighted 0-1 error of margins (T, n): sum_i w_i [margin_i <= 0] / sum_i w_i."""
    w = np.asarray(weight, dtype=float)
    return (np.asarray(margin) <= 0.0) @ w / w.sum()


def observables(desc, Y: np.ndarray) -> dict | None:
    """Per record on the test set: ``loss`` (T,), ``margin`` (T, n_test) and, for a
    classification loss, ``error`` (T,); None without a test set.

    Parameters
    ----------
    desc : Description
        A description with ``test`` set.
    Y : ndarray (T, size)
        Recorded engine states.

    Returns
    -------
    dict or None

    Example
    -------
    >>> import meanfield.engine as me                       # doctest: +SKIP
    >>> r = me.run(me.load("docs/examples/majority.toml"))  # doctest: +SKIP
    >>> r.test_loss                                         # doctest: +SKIP
    """
    td = test_description(desc)
    if td is None:
        return None
    from .packed import EngineSystem, pack

    sysm = EngineSystem(pack(td))
    Y = np.atleast_2d(np.asarray(Y, dtype=np.float64))
    loss = np.empty(Y.shape[0])
    margin = np.empty((Y.shape[0], td.data.n))
    for k in range(Y.shape[0]):
        l, _, _, m, _ = sysm.loss_and_grads(Y[k])
        loss[k], margin[k] = l, m
    out = {"loss": loss, "margin": margin}
    if classification(desc):
        out["error"] = zero_one(margin, td.data.weight)
    return out
