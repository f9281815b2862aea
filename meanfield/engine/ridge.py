"""The attention's ridge penalty (issue 26; Tarzanagh et al.'s experiments use a tiny one).

``ridge = lambda`` (``--ridge``) trains on loss + lambda (||W_K||_F^2 + ||W_Q||_F^2)
for a head with separate keys and queries, loss + lambda ||W||_F^2 for a merged
W (the attention's parameters only: values, readouts and signs are not
penalised). Its gradient 2 lambda W enters the GD map, the flow and normalised
GD (whose step is then eta (grad + 2 lambda W) / ||grad + 2 lambda W||_F, the
authors' normalisation of the whole gradient), exactly, in the reduced state:
a wide matrix's columns M E move by 2 lambda eta M E, a merged W~ = E^T W E by
2 lambda eta W~ (``meanfield.engine.kernels.eng_update``, the head's
``hf[k, F_RIDGE]``). The norm ||W||_F^2 is a function of the Gram state only
when the dictionary is orthonormal (Gamma = I: ||W||_F^2 = tr(W~^T W~), and
||M_o||_F^2 = tr(Q_oo) for m x d wide weights with d = P), so a ridge is refused
on any other Gram. The recorded ``loss`` is the data loss, without the penalty.
Tested against explicit numpy networks (``tests/test_engine_ridge.py``).
"""

from __future__ import annotations

import numpy as np

from ..core.config import ConfigError


def check_ridge(desc) -> None:
    """Refuse a ridge the reduced state cannot carry exactly (one line).

    Parameters
    ----------
    desc : Description
        A description with ``training.ridge > 0``.

    Returns
    -------
    None
        Raises ConfigError naming ``ridge``.

    Example
    -------
    >>> import meanfield.engine as me
    >>> check_ridge(me.load("meanfield/models/maxmargin.toml", ridge=1e-3))
    """
    G = np.asarray(desc.dictionary.Gamma, dtype=float)
    if not np.array_equal(G, np.eye(len(G))):
        raise ConfigError("ridge: only with an orthonormal dictionary (gram = identity): ||W||_F^2 is then a "
                          "function of the Gram state (tr of the attention's blocks); this Gram is not I")
    if not any(h.kq in ("merged", "separate") for h in desc.model.heads):  # pragma: no cover - every head has one
        raise ConfigError("ridge: no head has attention parameters (kq merged or separate)")
