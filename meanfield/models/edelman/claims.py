"""The claims of Edelman et al. (NeurIPS 2024) on ``meanfield/models/edelman.toml``.

The engine runs full-batch GD on the exact population loss of the in-context
Markov chain (two-layer description: a linear positional layer 1, a linear
bilinear layer 2, a linear read-out; docs/models.md, "edelman"). At every record
the check forms the model's prediction of x_(L+1) on every context and its mean
KL divergence from the three reference predictors of ``theory`` (uniform,
unigram posterior, bigram posterior); the record's *stage* is the nearest one.
No threshold is tuned: the stage is an argmin, a plateau is "at a level" when
its loss is nearer that level than the two others, and the exactness of the
levels is held to rounding (1e-12) against the engine's own law.
"""

from __future__ import annotations

import numpy as np

from ...core.errors import ConfigError
from ...core.report import Claim, status
from ...engine import twolayer_net, twolayer_run
from ...engine.description import _read
from ...engine.twolayer import markov_law
from ...engine.twolayer_desc import twolayer_from_dict
from . import theory

STAGES = ("uniform", "unigram", "bigram")
#: both sides exact (two enumerations of the same law): rounding only
LEVEL_RTOL = 1e-12
#: the alpha grid of the delay claim, and the steps of each run (quick / full)
SETTINGS = {"quick": {"alphas": (0.5, 1.0, 2.0), "steps": None}, "full": {"alphas": (0.25, 0.5, 1.0, 2.0, 4.0), "steps": None}}


def stage_series(desc, r) -> dict:
    """The nearest reference predictor at every record of a run, and the KLs.

    Parameters
    ----------
    desc : TwoLayerDescription
        An edelman-type description on the exact law.
    r : meanfield.core.run.Run
        Its run.

    Returns
    -------
    dict
        ``step``, ``loss``, ``kl`` (records x 3, order :data:`STAGES`), ``stage`` (index per record),
        ``levels`` (the three exact losses).

    Example
    -------
    >>> # s = stage_series(desc, twolayer_run.run(desc))
    """
    dd, L, alpha = desc.data["d"], desc.data["L"], float(desc.data["alpha"])
    X, p = theory.urn_law(dd, L, alpha)
    if not (X.shape == desc.x.shape and (X == desc.x).all()):
        raise ValueError("edelman: the description's sequences are not [d]^(L+1) in order")
    q = theory.strategies(X, p, dd, alpha)
    th = np.asarray(r["theta"])
    kl = np.empty((len(th), 3))
    for i, t in enumerate(th):
        yh, _ = twolayer_net.forward(t, desc.net, desc.x)
        yh = np.maximum(yh, 1e-300)
        for k, name in enumerate(STAGES):
            v = q[name]
            kl[i, k] = float((p * (v * np.log(v / yh)).sum(1)).sum())
    y = X[:, -1]
    lv = {k: float(-(p * np.log(v[np.arange(len(y)), y])).sum()) for k, v in q.items()}
    return {"step": np.asarray(r["step"]), "loss": np.asarray(r.loss), "kl": kl, "stage": kl.argmin(1), "levels": lv}


def _order(stage) -> list:
    out = []
    for s in stage:
        if not out or out[-1] != STAGES[s]:
            out.append(STAGES[s])
    return out


def _plateau(s) -> dict:
    """First step of each stage and the unigram plateau's length (steps)."""
    first = {}
    for st, k in zip(s["step"], s["stage"]):
        first.setdefault(STAGES[k], int(st))
    length = (first["bigram"] - first["unigram"]) if "bigram" in first and "unigram" in first else None
    return {"first_step": first, "unigram_plateau_steps": length}


def _require(desc) -> None:
    """Refuse, with one line naming the field, a description the reference levels do not describe."""
    data = desc.data
    if data.get("family") != "markov" or not desc.exact:
        raise ConfigError("data: the edelman claims need the exact law of the in-context Markov chain "
                          "(family = \"markov\", exact = true)")
    if list(data.get("pa", [])) != [1]:
        raise ConfigError(f"data.pa: the edelman claims need pa = [1] (a bigram chain); got {data.get('pa')}")
    if desc.loss != "nll":
        raise ConfigError(f"model.loss: the edelman claims need loss = \"nll\"; got {desc.loss!r}")


def _load(path, alpha=None, steps=None):
    raw = _read(path)
    if alpha is not None:
        raw.setdefault("data", {})["alpha"] = float(alpha)
    desc = twolayer_from_dict(raw, {"steps": steps} if steps else None, source=str(path))
    _require(desc)
    return desc


def _run(path, alpha=None, steps=None):
    desc = _load(path, alpha, steps)
    return desc, twolayer_run.run(desc)


def _figure(s, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(9, 3.2))
    st = np.maximum(s["step"], 1)
    ax[0].semilogx(st, s["loss"], "k", label="loss")
    for k, c in zip(STAGES, ("C0", "C1", "C2")):
        ax[0].axhline(s["levels"][k], color=c, ls="--", lw=0.8, label=f"{k} level")
        ax[1].loglog(st, np.maximum(s["kl"][:, STAGES.index(k)], 1e-16), color=c, label=k)
    ax[0].set_xlabel("GD step")
    ax[0].legend(fontsize=7)
    ax[1].set_xlabel("GD step")
    ax[1].set_ylabel("mean KL(reference || model)")
    ax[1].legend(fontsize=7)
    fig.tight_layout()
    f = out / "edelman_stages.png"
    fig.savefig(f, dpi=90)
    plt.close(fig)
    return str(f)


def _spearman(a, b) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    if np.std(ra) == 0 or np.std(rb) == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def check(path, out, quick: bool = False, log=print):
    """Edelman et al.'s claims on the description at ``path`` (edelman.toml as shipped).

    Parameters
    ----------
    path : Path
    out : Path
    quick : bool
    log : callable

    Returns
    -------
    (list of Claim, dict)

    Example
    -------
    >>> # meanfield model check edelman --quick --out DIR
    """
    S = SETTINGS["quick" if quick else "full"]
    _load(path)  # a description the levels do not describe: one line naming the field, before any work
    log("[check] edelman: GD on the exact population of the in-context Markov chain ...")
    desc, r = _run(path)
    dd, L, alpha = desc.data["d"], desc.data["L"], float(desc.data["alpha"])
    setting = {"d": dd, "L": L, "alpha": alpha, "eta": desc.training.eta, "method": desc.training.method,
               "records": int(len(r.loss)), "status": r.attrs.get("status", "")}
    s = stage_series(desc, r)
    lv = s["levels"]
    order = _order(s["stage"])
    pl = _plateau(s)
    log(f"[check]   stages {' -> '.join(order)}; levels {lv}; final loss {s['loss'][-1]:.6f}")
    claims = []
    claims.append(Claim(
        "stages_uniform_unigram_bigram", status(order == list(STAGES)),
        "Training passes through three stages, in order: the prediction is nearest (mean KL over the law) to the "
        "uniform predictor, then to the in-context unigram posterior, then to the bigram posterior (Bayes optimal). "
        "Abstract and Fig. 1 of the paper (empirical: shown).",
        setting=setting, numbers={"order": order, **pl, "kl_end": dict(zip(STAGES, s["kl"][-1]))}, source="shown"))
    # plateau levels: at the record nearest each reference, the loss is nearer that level than the two others
    at = {}
    ok = True
    for k, name in enumerate(STAGES):
        i = int(s["kl"][:, k].argmin())
        loss = float(s["loss"][i])
        nearest = min(STAGES, key=lambda n: abs(loss - lv[n]))
        at[name] = {"step": int(s["step"][i]), "loss": loss, "kl": float(s["kl"][i, k]), "nearest_level": nearest}
        ok &= nearest == name and int(s["stage"][i]) == k
    claims.append(Claim(
        "plateau_levels", status(ok),
        "The loss plateaus at the uniform level log d, at the unigram-posterior level H(x_(L+1) | unigram counts) "
        "and at the bigram-posterior level H(x_(L+1) | x_1..x_L): at the record nearest each reference predictor "
        "the loss is nearer that level than the two others (levels exact, by enumeration of the law; shown).",
        setting=setting, numbers={"levels": lv, "at": at}, source="shown"))
    eng = markov_law(dd, L, (1,), alpha)
    X, p = theory.urn_law(dd, L, alpha)
    law_err = float(np.max(np.abs(eng.prob - p)) / np.max(p)) if (eng.tokens == X).all() else float("inf")
    floor_ok = bool(np.min(s["loss"]) >= lv["bigram"] * (1 - LEVEL_RTOL))
    claims.append(Claim(
        "levels_exact_and_bayes_floor",
        status(law_err <= LEVEL_RTOL and lv["uniform"] > lv["unigram"] > lv["bigram"] and floor_ok),
        "The Polya-urn enumeration of the law equals the engine's Dirichlet-multinomial law to rounding, the levels "
        "are ordered uniform > unigram > bigram, and no record's loss is below the Bayes (bigram) level: a "
        "conditional entropy is the least cross-entropy of any predictor of x_(L+1) from x_1..x_L (proved).",
        setting=setting, numbers={"law_rel_err": law_err, "levels": lv, "min_loss": float(np.min(s["loss"]))},
        source="proved"))
    figure = _figure(s, out)
    claims[0].figure = figure
    # the delay: the unigram plateau against alpha
    rows = []
    for a in S["alphas"]:
        log(f"[check] edelman: alpha = {a} ...")
        sa = s if a == alpha and not S["steps"] else stage_series(*_run(path, alpha=a, steps=S["steps"]))
        la = sa["levels"]
        share = (la["uniform"] - la["unigram"]) / (la["uniform"] - la["bigram"])
        rows.append({"alpha": a, "unigram_share": share, "bigram_gain": la["uniform"] - la["bigram"], "order": _order(sa["stage"]), **_plateau(sa), "levels": la})
        log(f"[check]   unigram share {share:.4f}, plateau {rows[-1]['unigram_plateau_steps']} steps, "
            f"order {' -> '.join(rows[-1]['order'])}")
    lengths = [r_["unigram_plateau_steps"] for r_ in rows]
    have = all(x is not None and x > 0 for x in lengths)
    rho = _spearman([r_["unigram_share"] for r_ in rows], lengths) if have else float("nan")
    rho_gain = _spearman([r_["bigram_gain"] for r_ in rows], lengths) if have else float("nan")
    mechanism = ("" if have and rho > 0 else
                 "the plateau length does not grow with the unigram share; its rank correlation with the bigram gain "
                 f"log d - L_bigram is {rho_gain:+.2f}: in this model the plateau tracks how weak the bigram signal is")
    claims.append(Claim(
        "unigram_delays_bigram", status(have and rho > 0),
        "The unigram stage delays the bigram one: at every prior concentration alpha of the grid a unigram plateau "
        "precedes the bigram stage, and the plateau is longer where the unigram solution holds a larger share "
        "(log d - L_unigram) / (log d - L_bigram) of the achievable gain (Spearman rank correlation > 0). The paper "
        "gives empirical evidence of the delay by other experiments; this reading against alpha is ours (expected).",
        setting={**setting, "alphas": list(S["alphas"])}, numbers={"rows": rows, "spearman": rho, "spearman_bigram_gain": rho_gain,
                                                               "mechanism": mechanism}, source="expected"))
    md = ["| alpha | unigram share | bigram gain | plateau steps | order |", "|---|---|---|---|---|"]
    md += [f"| {r_['alpha']} | {r_['unigram_share']:.4f} | {r_['bigram_gain']:.4f} | {r_['unigram_plateau_steps']} | "
           f"{' -> '.join(r_['order'])} |"
           for r_ in rows]
    return claims, {"summary": "Edelman et al. (NeurIPS 2024), exact population GD (docs/models.md, edelman).",
                    "markdown": "\n".join(md)}
