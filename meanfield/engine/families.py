"""Built-in data/model families: a description generated from declared parameters.

``mixture``: the K-mixture system. Its parameters are exactly the fields of
``meanfield.mixture.config.MixtureConfig`` (so ``meanfield model run
meanfield/models/mixture.toml --K 3 --width 5`` takes the flags of
``meanfield mixture run``). The data reuse the mixture's own builders
(``meanfield.mixture.data.sample_set``; ``meanfield.mixture.data.data_of``
for finite noisy training sets), so the arithmetic of the
samples is the same:

* population, orthonormal features: dictionary c1..cK, v1..vK (Gamma = I),
  tokens the signed features;
* ``feature_gram``: the same tokens over features with Gram Gamma;
* ``n_train`` (finite noisy training set): the dictionary is an
  orthonormal basis of the features and every token (``data.basis_of``) (q1..qr, Gamma = I) with
  the report map C (r x P) back to the clean features, so recorded S, A, B, w
  are in feature coordinates (the clean features' projections).

This description is how ``meanfield mixture run`` runs every config that
needs general tokens or several neurons (``cfg.dense``): the mixture package
keeps no dynamics of its own for them.

Model: two heads "+" and "-" with fixed signs +1 / -1, softmax attention
(logit scale 1, or 1/sqrt(m) with ``softmax_scale``: the run file then
records S, A, B times 1/sqrt(m) like the mixture system's),
separate keys/queries, every position a query (mean), ReLU neurons
(``n_neurons`` per head, mean-field step eta * n), logistic loss.
Training: ``simultaneous`` (one stage, everything trains, ``steps``/``t_end``,
``criterion``) or ``three-stage`` (neurons; attention; neurons or both, with
``stage_steps``/``stage_times`` and ``stage_criteria``).
"""

from __future__ import annotations

from ..core.config import parse_criterion
from .objects import (CRITERIA, Data, Description, Dictionary, Head, Init, Model, StageSpec, Training,
                      make_data)


def mixture_data(cfg):
    """(Dictionary, Data) of a MixtureConfig."""
    import numpy as np

    from ..mixture.config import gram_matrix
    from ..mixture.data import feature_labels, sample_set

    names = tuple(feature_labels(cfg.K))
    P = 2 * cfg.K
    if cfg.n_train is not None:
        from ..mixture.data import data_of

        dd = data_of(cfg)
        smp = dd.samples
        dic = Dictionary(features=tuple(f"q{i + 1}" for i in range(dd.r)), gram=None, report=dd.C,
                         report_names=names)
        X = dd.X
        extra = {"samples": smp, "dense": dd}
    else:
        smp = sample_set(cfg.K, cfg.L, cfg.p, cfg.label_prob, cfg.label_noise)  # the mixture's exact population
        G = gram_matrix(cfg.feature_gram, cfg.K)
        dic = Dictionary(features=names, gram=G)
        X = np.zeros((smp.n, smp.L, P))
        for s in range(smp.n):
            for i in range(smp.L):
                X[s, i, smp.idx[s, i]] += smp.sgn[s, i]
        extra = {"samples": smp}
    data = make_data(X, smp.y, smp.weight, None, [smp.describe(i) for i in range(smp.n)],
                     {"consistent": smp.consistent, "flipped": smp.is_flipped})
    data = Data(tokens=data.tokens, target=data.target, weight=data.weight, counts=None, names=data.names,
                flags=data.flags, extra=extra)
    return dic, data


def mixture_training(cfg) -> Training:
    gd = cfg.method == "gd"
    if cfg.schedule == "simultaneous":
        stages = (StageSpec("simultaneous", ("attention", "values"), cfg.steps if gd else cfg.t_end,
                            parse_criterion("criterion", cfg.criterion, CRITERIA)),)
    else:
        lengths = cfg.stage_steps if gd else cfg.stage_times
        trains = [("values",), ("attention",), ("values", "attention") if cfg.stage3 == "both" else ("values",)]
        names = ["neurons", "attention", "neurons" if cfg.stage3 == "neurons" else "both"]
        stages = tuple(StageSpec(names[i], trains[i], lengths[i],
                                 parse_criterion("stage_criteria", cfg.stage_criteria[i], CRITERIA))
                       for i in range(3))
    return Training(method=cfg.method, eta=cfg.eta, stages=stages, schedule=cfg.schedule, dt=cfg.dt,
                    rtol=cfg.rtol, atol=cfg.atol, h_min=cfg.h_min, max_abs=cfg.max_abs,
                    record_every=cfg.record_every, record_log=cfg.record_log, record_dt=cfg.record_dt)


def mixture_description(cfg, name: str = "mixture", source: str | None = None) -> Description:
    """The mixture system (a validated MixtureConfig) as an engine description."""
    dic, data = mixture_data(cfg)
    heads = tuple(Head(name=nm, attention="softmax", kq="separate", query="mean", value="neuron",
                       n_neurons=cfg.n_neurons, outputs=1, sign=s, scale=logit_scale(cfg))
                  for nm, s in (("+", 1.0), ("-", -1.0)))
    model = Model(heads=heads, loss="logistic", relu_prime_at_zero=cfg.relu_prime_at_zero)
    init = Init(width=cfg.width, seed=cfg.seed, omega=cfg.omega, neuron_init=cfg.neuron_init)
    return Description(name=name, dictionary=dic, data=data, model=model, init=init,
                       training=mixture_training(cfg), family="mixture", parameters=cfg, source=source)


def logit_scale(cfg) -> float:
    """The factor in front of the attention logits: 1, or 1/sqrt(m) for
    ``softmax_scale = "1/sqrt(m)"`` (the original model; finite width only).
    The engine's state stays the unscaled Gram (S = E^T W_K^T W_Q E); the run
    file records S, A, B times this factor, as the mixture system does."""
    import math

    return 1.0 if getattr(cfg, "softmax_scale", "1") == "1" else 1.0 / math.sqrt(cfg.width)
