"""The induction system as a two-layer description (family ``induction``, ``meanfield/models/induction/induction.toml``).

The copier-selector-classifier TF(M, H, d, D) of ``model`` written in the
engine's second model class (``meanfield.engine.twolayer_desc``): H rpe heads
with the windows ``first_lags[h] .. first_lags[h] + M - 1`` (softmax over the
lags that exist, token values, u = s / ||s||), the selector over subsets of at
most D heads, the attention read-out with the scalar a, the nll loss with the
same log(0) guard (``yhat_floor`` = 1e-300); the training set is the one
``meanfield induction run`` generates (``train_seed``), the init
``init_params`` (w_plus / w_minus / c_init / a_init / start_lags), and the
schedule's phases (c, w, a in any grouping) are the description's stages
with their own step sizes. The parameters are those of
:class:`meanfield.models.induction.config.InductionConfig` (the same flags as
``meanfield induction run``); what the generic class does not build is
refused in one line: ``L_test`` other than L, ``sampling``
other than fixed, ``loss = official-ce``, ``yhat_floor`` other than 1e-300,
``method`` other than gd.

Example
-------
>>> desc = build({"d": 2, "L": 6, "n_train": 5, "n_test": 0, "H": 2, "M": 2, "D": 1,
...               "stage_steps": "2,2,2"}, "induction", None)
>>> [b for b, _ in desc.net.blocks], [s.train for s in desc.stages][0]
(['layer1.head1.w', 'layer1.head2.w', 'selector.c', 'readout.a'], ('selector.c',))
"""

from __future__ import annotations

import numpy as np

from ...core.errors import ConfigError
from ...engine.twolayer_desc import twolayer_from_dict

__all__ = ["build"]

_BLOCKS = {"c": lambda H: ["selector.c"], "w": lambda H: [f"layer1.head{h + 1}.w" for h in range(H)],
           "a": lambda H: ["readout.a"]}


def build(values: dict, name: str, source: str | None = None):
    """The two-layer description of an induction config (the family's ``build`` hook).

    Parameters
    ----------
    values : dict
        ``[parameters]`` and flags: fields of ``InductionConfig`` (strings or numbers).
    name : str
        The description's name.
    source : str or None
        Its path.

    Returns
    -------
    meanfield.engine.twolayer_desc.TwoLayerDescription

    Raises
    ------
    ConfigError
        A bad value (the induction config's own messages) or a setting the generic class does not build.

    Example
    -------
    >>> build({"d": 2, "L": 4, "n_train": 3, "n_test": 0, "H": 1, "M": 1, "D": 1}, "x", None).x.shape
    (3, 5)
    """
    from .config import make_config
    from .model import init_params, unpack
    from .setup import stage_specs, train_data

    from .setup import test_data

    cfg = make_config(dict(values))
    for field, ok, allowed in [("L_test", cfg.L_test in (None, cfg.L), "the training L (a held-out set of another "
                                                                        "length is not built for the description)"),
                               ("sampling", cfg.sampling == "fixed", "fixed"), ("loss", cfg.loss == "nll", "nll"),
                               ("yhat_floor", cfg.yhat_floor == 1e-300, "1e-300 (the generic log(0) guard)"),
                               ("method", cfg.method == "gd", "gd")]:
        if not ok:
            raise ConfigError(f"{field}: {allowed} in the induction description (meanfield model run induction); "
                              f"got {getattr(cfg, field)!r}; the other settings run with meanfield induction run")
    arch = cfg.arch()
    c, w, a = unpack(init_params(arch, cfg.w_plus, cfg.w_minus, cfg.c_init, cfg.a_init, cfg.start_lags), arch)
    tokens = np.asarray(train_data(cfg).tokens, dtype=np.int64)
    heads = [{"score": "rpe", "lags": [int(f), int(f) + arch.M - 1], "normalise": True, "value": "token",
              "w": [float(v) for v in w[h]]} for h, f in enumerate(arch.first)]
    stages = []
    for s in stage_specs(cfg):
        blocks = [b for ch in "cwa" if ch in s.train for b in _BLOCKS[ch](arch.H)]
        st = {"name": s.name, "train": blocks, "steps": int(s.length), "eta": float(s.eta)}
        if s.criterion is not None:
            if s.criterion[0] != "loss":
                raise ConfigError(f"stage_criteria: only loss criteria in the induction description; got "
                                  f"{s.criterion[0]!r}")
            st["until"] = f"loss{s.criterion[1]}{s.criterion[2]!r}"
        stages.append(st)
    training = {"method": "gd", "stages": stages, "max_abs": cfg.max_abs}
    for k in ("record_every", "record_log"):
        if getattr(cfg, k) is not None:
            training[k] = getattr(cfg, k)
    raw = {"name": name, "model": {"class": "twolayer", "loss": "nll"},
           "data": {"family": "tokens", "d": cfg.d, "tokens": tokens},
           "layers": [{"heads": heads}], "selector": {"D": arch.D, "c": [float(v) for v in c]},
           "readout": {"kind": "attention", "a": float(a)}, "training": training}
    te = test_data(cfg)
    if te is not None:  # the held-out set of meanfield induction run (seed (seed, 1)): its loss per record
        raw["data"]["test_tokens"] = np.asarray(te.tokens, dtype=np.int64)
    desc = twolayer_from_dict(raw, source=source)
    if all(getattr(cfg, k) is None for k in ("record_every", "record_log", "record_dt")):  # about 200 records
        import dataclasses

        desc = dataclasses.replace(desc, training=dataclasses.replace(
            desc.training, record_every=max(1, int(desc.training.horizon) // 200)))
    return desc
