"""The induction system as a two-layer description (family ``induction``, ``meanfield/models/induction/induction.toml``).

The copier-selector-classifier TF(M, H, d, D) of ``model`` written in the
engine's second model class (``meanfield.engine.twolayer_desc``): H rpe heads
with the windows ``first_lags[h] .. first_lags[h] + M - 1`` (softmax over the
lags that exist, token values, u = s / ||s||), the selector over subsets of at
most D heads, the attention read-out with the scalar a, the loss (``nll`` with
the log(0) guard ``yhat_floor``, or ``official-ce``); the training set is the
one ``meanfield induction run`` generates (``train_seed``) or reads
(``train_file``), the held-out set its own (``L_test``, ``test_seed``), the
init ``init_params`` (w_plus / w_minus / c_init / a_init / start_lags), and
the schedule's phases (c, w, a in any grouping) are the description's stages
with their own step sizes (gd) or times (flow, rk4). The parameters are those
of :class:`meanfield.models.induction.config.InductionConfig` (the same flags
as ``meanfield induction run``). Two things the TOML tables cannot say come as
the engine's Python hooks: ``sampling = fresh / minibatch`` (``batches``: the
batch of each GD step, the seeds of ``setup``) and the induction criteria
(``criteria``: grad_norm, a, c_top, rpe_top, grad_c, grad_w, grad_a, on the
generic layout (w per head, c, a)).

Example
-------
>>> desc = build({"d": 2, "L": 6, "n_train": 5, "n_test": 0, "H": 2, "M": 2, "D": 1,
...               "stage_steps": "2,2,2"}, "induction", None)
>>> [b for b, _ in desc.net.blocks], [s.train for s in desc.stages][0]
(['layer1.head1.w', 'layer1.head2.w', 'selector.c', 'readout.a'], ('selector.c',))
"""

from __future__ import annotations

import math

import numpy as np

from ...core.errors import ConfigError
from ...engine.twolayer_desc import twolayer_from_dict

__all__ = ["build", "criteria_of"]

_BLOCKS = {"c": lambda H: ["selector.c"], "w": lambda H: [f"layer1.head{h + 1}.w" for h in range(H)],
           "a": lambda H: ["readout.a"]}


def criteria_of(arch) -> dict:
    """The induction stop criteria (``core.criteria.INDUCTION_CRITERIA`` but the loss) on the generic layout
    theta = (w (H x M, head by head), c (nS), a): name -> f(theta, loss, grad).

    Example
    -------
    >>> from meanfield.models.induction.model import Arch
    >>> f = criteria_of(Arch(d=2, H=1, M=2, D=1))
    >>> f["c_top"](np.array([0.0, 0.0, 1.0, 3.0, 2.0]), 0.0, np.zeros(5)), f["a"](np.arange(5.0), 0.0, None)
    (0.9, 4.0)
    """
    HM, nS = arch.H * arch.M, arch.nS
    w, c, ia = slice(0, HM), slice(HM, HM + nS), HM + nS

    def norm(g, sl):
        g = np.asarray(g)[sl]
        return float(math.sqrt(float(g @ g)))

    def c_top(th, loss, g):
        c2 = np.asarray(th)[c] ** 2
        return float(c2.max() / c2.sum())

    def rpe_top(th, loss, g):
        W = np.asarray(th)[w].reshape(arch.H, arch.M)
        return float((1.0 / np.exp(W - W.max(axis=1, keepdims=True)).sum(axis=1)).min())

    return {"grad_norm": lambda th, loss, g: norm(g, slice(None)), "a": lambda th, loss, g: float(th[ia]),
            "c_top": c_top, "rpe_top": rpe_top, "grad_c": lambda th, loss, g: norm(g, c),
            "grad_w": lambda th, loss, g: norm(g, w), "grad_a": lambda th, loss, g: norm(g, slice(ia, ia + 1))}


def _batches(cfg, tokens):
    """The batch of each GD step of a stochastic config (the seeds of ``setup``), or None (fixed)."""
    from .data import generate
    from .setup import fresh_seed, minibatch_indices

    if cfg.sampling == "fresh":
        return lambda step: generate(cfg.batch, cfg.d, cfg.L, cfg.pa, cfg.alpha, fresh_seed(cfg, step)).tokens
    if cfg.sampling == "minibatch":
        return lambda step: tokens[minibatch_indices(cfg, tokens.shape[0], step)]
    return None


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
        A bad value (the induction config's own messages).

    Example
    -------
    >>> build({"d": 2, "L": 4, "n_train": 3, "n_test": 0, "H": 1, "M": 1, "D": 1}, "x", None).x.shape
    (3, 5)
    """
    from .config import make_config
    from .model import init_params, unpack
    from .setup import stage_specs, test_data, train_data

    cfg = make_config(dict(values))
    arch = cfg.arch()
    c, w, a = unpack(init_params(arch, cfg.w_plus, cfg.w_minus, cfg.c_init, cfg.a_init, cfg.start_lags), arch)
    tokens = np.asarray(train_data(cfg).tokens, dtype=np.int64)
    heads = [{"score": "rpe", "lags": [int(f), int(f) + arch.M - 1], "normalise": True, "value": "token",
              "w": [float(v) for v in w[h]]} for h, f in enumerate(arch.first)]
    gd = cfg.method == "gd"
    stages = []
    for s in stage_specs(cfg):
        blocks = [b for ch in "cwa" if ch in s.train for b in _BLOCKS[ch](arch.H)]
        st = {"name": s.name, "train": blocks, ("steps" if gd else "t_end"): int(s.length) if gd else float(s.length)}
        if gd:
            st["eta"] = float(s.eta)
        if s.criterion is not None:
            st["until"] = f"{s.criterion[0]}{s.criterion[1]}{s.criterion[2]!r}"
        stages.append(st)
    training = {"method": cfg.method, "stages": stages, "max_abs": cfg.max_abs}
    if cfg.method == "rk4":
        training["dt"] = float(cfg.dt)
    if cfg.method == "flow":
        training.update(rtol=float(cfg.rtol), atol=float(cfg.atol))
    for k in ("record_every", "record_log", "record_dt"):
        if getattr(cfg, k) is not None:
            training[k] = getattr(cfg, k)
    model = {"class": "twolayer", "loss": cfg.loss}
    if cfg.yhat_floor != 1e-300:
        model["yhat_floor"] = float(cfg.yhat_floor)
    raw = {"name": name, "model": model, "data": {"family": "tokens", "d": cfg.d, "tokens": tokens},
           "layers": [{"heads": heads}], "selector": {"D": arch.D, "c": [float(v) for v in c]},
           "readout": {"kind": "attention", "a": float(a)}, "training": training}
    te = test_data(cfg)
    if te is not None:  # the held-out set of meanfield induction run (seed (seed, 1), length L_test): its loss per record
        raw["data"]["test_tokens"] = np.asarray(te.tokens, dtype=np.int64)
    desc = twolayer_from_dict(raw, source=source, criteria=criteria_of(arch), batches=_batches(cfg, tokens))
    if all(getattr(cfg, k) is None for k in ("record_every", "record_log", "record_dt")):  # about 200 records
        import dataclasses

        H = desc.training.horizon  # the grid of run.save_at (harness.save_at_of with 200 records)
        rec = {"record_every": max(1, int(H) // 200)} if gd else ({"record_dt": H / 200} if H > 0 else {})
        desc = dataclasses.replace(desc, training=dataclasses.replace(desc.training, **rec))
    return desc
