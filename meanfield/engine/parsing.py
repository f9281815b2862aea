"""Parsing helpers of a description's tables (``meanfield.engine.parsing``): one-line
:class:`meanfield.core.config.ConfigError` checks that ``meanfield.engine.description`` and the
modules that parse its other tables (``datatables``, ``positions``) share.
"""

from __future__ import annotations

import numpy as np

from ..core.config import ConfigError

#: head options that would put the model outside the Gram-closure class, and why
OUT_OF_CLASS = {
    "hidden_activation": "a nonlinearity applied entrywise in the hidden space (relu(M x) over the m units) makes a "
                         "mean-field network over hidden units whose state is a distribution, not a finite Gram",
    "key_activation": "a nonlinearity between W_K and the token inside the bilinear form x^T W_K^T W_Q x' means the "
                      "loss no longer depends on W_K only through Gram blocks",
    "query_activation": "a nonlinearity between W_Q and the token inside the bilinear form x^T W_K^T W_Q x' means "
                        "the loss no longer depends on W_Q only through Gram blocks",
    "outer": "a wide matrix read as M_a M_b^T (a hidden-space outer product) is not a function of the Gram "
             "blocks E^T M_a^T M_b E",
    "l1_penalty": "an entrywise penalty on a wide matrix is not a function of its Gram blocks",
}
#: why trainable position vectors are refused (docs/engine.md, "Trainable embeddings")
TRAINABLE_EMBEDDINGS = ("the token dictionary's embeddings train with [dictionary] trainable = true (the state then "
                        "holds the ambient Gram of the wide weights and E, docs/engine.md, Trainable embeddings); "
                        "position vectors with a Gram and cross Gram of their own are not derived there yet")


def check_table(where: str, raw: dict, allowed) -> None:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: must be a table; got {raw!r}")
    for k in raw:
        if k in OUT_OF_CLASS:
            raise ConfigError(f"{where}.{k}: outside the Gram-closure class: {OUT_OF_CLASS[k]}")
        if k not in allowed:
            raise ConfigError(f"{where}: unknown key '{k}'; allowed: {', '.join(allowed)}")


def as_bool(name: str, v) -> bool:
    if isinstance(v, bool):
        return v
    if str(v).lower() in ("true", "1", "yes"):
        return True
    if str(v).lower() in ("false", "0", "no"):
        return False
    raise ConfigError(f"{name}: must be true or false; got {v!r}")


def as_matrix(name: str, v, shape) -> np.ndarray:
    try:
        M = np.array(v, dtype=float)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}: must be a {shape[0]}x{shape[1]} matrix of numbers; got {v!r}") from None
    if M.shape != tuple(shape):
        raise ConfigError(f"{name}: must be a {shape[0]}x{shape[1]} matrix; got shape {M.shape}")
    if not np.all(np.isfinite(M)):
        raise ConfigError(f"{name}: entries must be finite numbers")
    return M


def check_gram(name: str, G: np.ndarray) -> np.ndarray:
    if np.max(np.abs(G - G.T)) > 1e-12 * max(1.0, float(np.max(np.abs(G)))):
        raise ConfigError(f"{name}: must be symmetric")
    ev = float(np.linalg.eigvalsh(G).min())
    if not ev > 1e-10 * max(1.0, float(np.abs(G).max())):
        raise ConfigError(f"{name}: must be symmetric positive definite; smallest eigenvalue {ev:.3g}")
    return G


