"""Positions: absolute positional features (``[positions]``) and the causal mask (``meanfield.engine.positions``).

Absolute positional features. ``[positions] mode = "added"`` makes the token at
position i the vector x_i = E t_i + p_i, ``mode = "concatenated"`` the vector
x_i = [E t_i; p_i]; ``length`` (default: the longest sequence of ``[data]`` and
``[test]``) position vectors p_1..p_length named ``names`` (default pos1..),
with Gram ``gram`` (length x length, default the identity) and, for ``added``,
their Gram with the token features ``cross`` (P x length, default 0). Both are
tokens in the span of an enlarged dictionary: with p_i = E_pos e_i, added is
x_i = [E, E_pos] [t_i; e_i], concatenated is x_i = blockdiag(E, E_pos) [t_i; e_i];
so the description becomes the one over the P + length features (tokens,
then positions) with the Gram

    [[Gamma, cross], [cross^T, gram]]   (added)
    [[Gamma, 0],     [0,       gram]]   (concatenated: the two parts are orthogonal)

and every token gets the one-hot coefficient of its position. Gram closure
holds unchanged (the model still reads the weights only through E'^T W^T W E'
for the enlarged dictionary E'): the cost is P growing by ``length``. What
does not close: position vectors that train (learned positional embeddings
are trainable embeddings: the state would need the Gram of the embeddings
with the wide weights), refused with one line.

Causal mask: a head's ``mask = "causal"`` lets query l attend to the keys
i <= l only (for ``query = "mean"``; with ``query = "last"`` every key is at or
before the query already; a fixed query vector has no position and is
refused). A fixed mask changes which keys enter each softmax (or linear
average), not how the weights are read, so closure holds (the kernels'
column ``H_MASK``).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..core.config import ConfigError, as_choice, as_int
from .parsing import TRAINABLE_EMBEDDINGS, as_matrix, check_gram, check_table

POSITION_KEYS = ("mode", "length", "names", "gram", "cross", "trainable")
MODES = ("added", "concatenated")


def apply(raw: dict, dictionary, data, test=None):
    """(dictionary, data, test) with the positional features of ``raw`` (the
    ``[positions]`` table) added: the dictionary enlarged by the position
    vectors, every token given its position's coefficient.

    Parameters
    ----------
    raw : dict
        The ``[positions]`` table.
    dictionary : Dictionary
    data, test : Data (test may be None)

    Returns
    -------
    (Dictionary, Data, Data or None)

    Example
    -------
    >>> from meanfield.engine.objects import Dictionary, make_data
    >>> dic, d, _ = apply({"mode": "concatenated"}, Dictionary(("a", "b")), make_data(np.ones((1, 3, 2)), [1.0]))
    >>> dic.features, d.tokens.shape
    (('a', 'b', 'pos1', 'pos2', 'pos3'), (1, 3, 5))
    """
    if not isinstance(raw, dict):
        raise ConfigError("positions: must be a table ([positions] mode = \"added\" or \"concatenated\")")
    check_table("positions", raw, POSITION_KEYS)  # (trainable = false is accepted)
    if raw.get("trainable"):
        raise ConfigError(f"positions.trainable: learned position vectors are trainable embeddings: "
                          f"{TRAINABLE_EMBEDDINGS}")
    if "mode" not in raw:
        raise ConfigError("positions.mode: required, added (x_i = token + p_i) or concatenated (x_i = [token; p_i])")
    mode = as_choice("positions.mode", raw["mode"], MODES)
    Lmax = max(data.L, test.L if test is not None else 0)
    L = as_int("positions.length", raw.get("length", Lmax), lo=1)
    if L < Lmax:
        raise ConfigError(f"positions.length: {L} is shorter than the longest sequence ({Lmax} positions)")
    names = raw.get("names", [f"pos{i + 1}" for i in range(L)])
    if not isinstance(names, list) or len(names) != L or not all(isinstance(x, str) and x for x in names):
        raise ConfigError(f"positions.names: must be {L} names (one per position)")
    if set(names) & set(dictionary.features) or len(set(names)) != L:
        raise ConfigError("positions.names: must be distinct and differ from the token features")
    P = dictionary.P
    G = np.eye(L) if raw.get("gram") is None else as_matrix("positions.gram", raw["gram"], (L, L))
    if raw.get("cross") is not None and mode == "concatenated":
        raise ConfigError("positions.cross: concatenated positions are orthogonal to the tokens (x = [token; p]); "
                          "a Gram between them is mode = added")
    X = np.zeros((P, L)) if raw.get("cross") is None else as_matrix("positions.cross", raw["cross"], (P, L))
    full = np.block([[dictionary.Gamma, X], [X.T, G]])
    # the enlarged dictionary's Gram [[Gamma, cross], [cross^T, gram]] must be positive definite
    full = check_gram("positions.gram" if raw.get("cross") is None else "positions.cross (with the token Gram and "
                      "positions.gram)", full)
    dic = dataclasses.replace(dictionary, features=tuple(dictionary.features) + tuple(names), gram=full)
    return dic, _with_positions(data, L), None if test is None else _with_positions(test, L)


def _with_positions(data, L: int):
    T = np.asarray(data.tokens)
    n, Ls, P = T.shape
    out = np.zeros((n, Ls, P + L))
    out[:, :, :P] = T
    out[:, np.arange(Ls), P + np.arange(Ls)] = 1.0
    out.setflags(write=False)
    return dataclasses.replace(data, tokens=out)
