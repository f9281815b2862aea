"""The mixture family: a description generated from the mixture's parameters (registered in ``.plugin``).

``mixture``: the K-mixture system. Its parameters are exactly the fields of
``meanfield.models.mixture.config.MixtureConfig`` (so ``meanfield model run
meanfield/models/mixture.toml --K 3 --width 5`` takes the flags of
``meanfield mixture run``). The data reuse the mixture's own builders
(``meanfield.models.mixture.data.sample_set``; ``meanfield.models.mixture.data.data_of``
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

import numpy as np

from ...core.config import parse_criterion
from ...engine.objects import (CRITERIA, Data, Description, Dictionary, Head, Init, Model, StageSpec, Training,
                                make_data)


def mixture_data(cfg):
    """(Dictionary, Data) of a MixtureConfig."""
    import numpy as np

    from .config import gram_matrix
    from .data import feature_labels, sample_set

    names = tuple(feature_labels(cfg.K))
    P = 2 * cfg.K
    if cfg.n_train is not None:
        from .data import data_of

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


# ------------------------------------------------------------------ hooks (registered in .plugin)


def build(values: dict, name: str = "mixture", source: str | None = None) -> Description:
    """The family's builder (``meanfield.engine.registry``): ``[parameters]``
    values (file and flags) -> the mixture description (one-line errors from
    ``make_config``)."""
    from .config import make_config

    return mixture_description(make_config(values), name=name, source=source)


def check_options(file_values: dict, flags: dict) -> None:
    """Refuse an option the run ignores (the mixture's own table,
    ``meanfield.core.guard.check_applicable``): the file as written, then the
    flags given on top of it (a horizon given by flag replaces the file's step
    count)."""
    from ...core.guard import check_applicable
    from ...engine.edges import flag_pairs
    from .config import make_config

    file_keys = {k: v for k, v in file_values.items() if v is not None}
    check_applicable(file_keys, make_config(file_keys))  # the file as written
    given = {k: v for k, v in flags.items() if v is not None}
    cfg = make_config({**file_keys, **given})
    check_applicable(flag_pairs(given, flags), cfg)


def size_first(values: dict, force: bool, particles_d=None, copies: float = 1.0, width=None) -> None:
    """Refuse an absurd size from the config alone, before the samples are
    built (``--K 1000`` would otherwise allocate first)."""
    from ...core.guard import check_mixture_size
    from .config import make_config

    vals = dict(values)
    if width is not None:
        vals["width"] = width
    cfg = make_config(vals)
    if particles_d is not None and particles_d is not True:
        d = particles_d
    elif particles_d is True:
        d = 2 * cfg.K + 2
    else:
        d = None
    if copies == 0:  # derive: the samples' memory only, no steps
        from ...core.guard import check_size, mixture_estimate

        est = {**mixture_estimate(cfg), "seconds": 0.0}
        check_size(est, "size", force, f" (derive K={cfg.K}, L={cfg.L}: {est['n_samples']:.3g} samples)")
        return
    check_mixture_size(cfg, force, particles_d=d, copies=copies)


def mixture_datasets(desc: Description, r) -> tuple[dict, dict]:
    """(datasets, attributes) of a mixture-family run in the mixture system's
    schema (see the module docstring): what :func:`run_file` writes and what
    ``meanfield.models.mixture.measure.simulate`` returns for dense configs."""
    from .data import feature_labels, samples_group

    cfg = desc.parameters
    smp = desc.data.extra["samples"]
    obs = r.obs
    blk = obs["blocks"]
    c = desc.model.heads[0].scale  # softmax_scale 1/sqrt(m): the mixture records the scaled c S, c A, c B
    S, A, B = (c * np.stack([blk[f"{h}:{nm}"] for h in ("+", "-")], axis=1) for nm in ("S", "A", "B"))
    wn = np.stack([blk[f"{h}:w"][:, 0] for h in ("+", "-")], axis=1)  # (T, 2, nn, P)
    u_n = obs["u"][..., :cfg.n_neurons]  # (T, n, 2, nn)
    data = {
        "features": np.array(feature_labels(cfg.K), dtype=object),
        "heads": np.array(["+", "-"], dtype=object),
        "t": r.t, "step": r.step, "stage": r.stage,
        "loss": obs["loss"], "w": wn.mean(axis=2), "S": S, "A": A, "B": B,
        "margin": obs["margin"], "u": u_n.mean(axis=-1),
        "samples": samples_group(smp),
    }
    attrs = {}
    if cfg.dense:
        from .config import gram_matrix

        dd = desc.data.extra.get("dense")
        data["feature_gram"] = dd.gram if dd is not None else (gram_matrix(cfg.feature_gram, cfg.K)
                                                                if cfg.feature_gram is not None else np.eye(2 * cfg.K))
        if cfg.n_neurons > 1:
            data["w_neurons"] = wn
            data["u_neurons"] = u_n
        if dd is not None and dd.tokens is not None:
            data["training_set"] = {"E": dd.E, "tokens": dd.tokens, "Q": dd.Q}
        attrs.update({"dense_path": 1, "basis_dim": int(desc.dictionary.P), "n_neurons": cfg.n_neurons})
    return data, attrs


def run_file(path, desc: Description, r, common: dict, status: str, message: str, extra_attrs: dict | None = None):
    """The family's run file: the mixture system's schema (system
    ``mixture``: datasets S, A, B (T, 2, P, P), w (T, 2, P), u (T, n, 2),
    margin, loss, the ``samples`` group, T1/T2/T_loss, and, for configs off
    the fast path (``cfg.dense``), ``feature_gram``, ``w_neurons``/``u_neurons``,
    the ``training_set`` group and attributes dense_path, basis_dim,
    n_neurons), so every reader of mixture run files reads engine runs
    unchanged. ``common``: the attributes of every engine run file."""
    from ...core.io import write_run

    from ...engine.runs import initial_blocks

    cfg = desc.parameters
    data, attrs = mixture_datasets(desc, r)
    d = desc.data  # self-contained (docs/run-files.md): the sequences trained on and the initial state
    data["samples"] = {**data["samples"], "tokens": np.asarray(d.tokens, dtype=float), "counts": d.count_array}
    c = desc.model.heads[0].scale  # the recorded S, A, B are the scaled ones
    init = initial_blocks(desc, r)
    data["initial_state"] = {nm: np.stack([c * init[f"{h}:{nm}"] for h in ("+", "-")]) for nm in ("S", "A", "B")}
    data["initial_state"]["w"] = np.stack([init[f"{h}:w"][0].mean(axis=0) for h in ("+", "-")])
    attrs.update({"K": cfg.K, "L": cfg.L, "omega": cfg.omega, "schedule": cfg.schedule})
    attrs.update(common)
    attrs.update(extra_attrs or {})
    return write_run(path, system="mixture", config=cfg.to_dict(), status=status, message=message, data=data,
                     attrs=attrs)


def plot(path, out, fmt: str = "png") -> list:
    """Figures of a mixture run file (``meanfield.models.mixture.plot.plot_run``)."""
    from .plot import plot_run

    return plot_run(path, out, fmt=fmt)
