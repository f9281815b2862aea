"""The claims of Nichani, Damian, Lee (ICML 2024) on ``meanfield/models/nichani.toml``.

The engine runs full-batch GD on the exact population loss of the official
code's two-layer disentangled transformer on the in-context latent causal
graph (``InContextTree``, uniform roots; docs/models.md, section 8). The check
measures, by code independent of the engine's law and kernels
(:mod:`meanfield.models.nichani.theory`):

* after training, the first layer's attention of every position with a
  parent, averaged over the law: the true parent must get the largest mass
  (the graph read from the attention is the true graph; the threshold is the
  largest mass of the other positions, no tuned number);
* at the induction-aligned small start, the negative gradient of the first
  layer's position-position scores: the true parent must hold the largest
  entry at every position, and the entries must rank the candidate edges
  j < i like the mutual information of x_i and x_j given the transition
  matrix (Spearman > 0 at every position with 3 or more candidates);
* the proved facts the claims stand on: the data-processing inequality for
  that mutual information (every draw of pi) and the Bayes floor of the loss.
"""

from __future__ import annotations

import numpy as np

from ...core.errors import ConfigError
from ...core.report import Claim, status
from ...engine import twolayer_net, twolayer_run
from ...engine.description import _read
from ...engine.twolayer_desc import twolayer_from_dict
from . import theory

#: both sides exact (two enumerations of one law): rounding only
LAW_RTOL = 1e-12
#: the data-processing inequality holds exactly for every draw of pi: rounding only
DPI_TOL = 1e-12
#: the induction-aligned start (small: the gradient's leading order in beta0 gamma0, checked against beta0 / 10)
BETA0 = GAMMA0 = 0.01
#: the chain of the full check: the official code's dag = "chain" at d = 2, nine chained positions and the test token
CHAIN = {"d": 2, "parents": [[]] + [[i] for i in range(1, 9)] + [[], [10]]}
SETTINGS = {"quick": {"steps": 500, "draws": 4000, "extra": ()},
            "full": {"steps": None, "draws": 20000, "extra": (CHAIN,)}}


def _require(desc) -> None:
    """Refuse, with one line naming the field, a description the claims do not describe."""
    data, net = desc.data, desc.net
    if data.get("family") != "graph":
        raise ConfigError("data.family: the nichani claims need the latent causal graph (family = \"graph\")")
    if desc.loss != "soft":
        raise ConfigError(f"model.loss: the nichani claims need loss = \"soft\" (the row pi(. | x_T)); got {desc.loss!r}")
    par = data["parents"]
    L = len(par) - 1
    if any(len(ps) > 1 for ps in par[:-1]) or par[-1] != [L] or par[L - 1]:
        raise ConfigError("data.parents: the nichani claims need a tree (at most one parent per position), the last "
                          f"context position {L} a root (the test token) and the target's parents [{L}]; got {par}")
    ok = (len(net.layers) == 2 and all(len(hs) == 1 and hs[0].score == "bilinear" and hs[0].softmax
                                       and hs[0].value == "stream" and not hs[0].normalise and hs[0].lags is None
                                       for hs in net.layers) and net.readout == "linear")
    if not ok:
        raise ConfigError("layers: the nichani claims need the official code's network: two layers of one softmax "
                          "bilinear head (every causal lag) with value = \"stream\", and readout.kind = \"linear\"")


def _load(path, data=None, steps=None):
    raw = _read(path)
    if data:
        raw.setdefault("data", {}).update(data)
    desc = twolayer_from_dict(raw, {"steps": steps} if steps else None, source=str(path))
    _require(desc)
    return desc


def _edges(par) -> list:
    """(i, parent) 0-based for the context positions with a parent."""
    return [(i, ps[0] - 1) for i, ps in enumerate(par[:-1]) if ps]


def recovery(desc, theta) -> dict:
    """The first layer's mean attention at ``theta`` and the graph read from it.

    Parameters
    ----------
    desc : TwoLayerDescription
    theta : ndarray

    Returns
    -------
    dict
        ``attention`` (T x T), ``rows`` (per position with a parent: position, parent, its mass, the largest other
        mass and position), ``recovered`` (the parent's mass is the largest at every such position).

    Example
    -------
    >>> # recovery(desc, np.asarray(run["theta"])[-1])["recovered"]
    """
    d, T = desc.net.S, desc.net.T
    att = theory.layer1_attention(desc.net.unpack(theta)["layer1.head1.A"], desc.x[:, :T], desc.p, d)
    rows = []
    for i, q in _edges(desc.data["parents"]):
        others = [j for j in range(i + 1) if j != q]
        jo = max(others, key=lambda j: att[i, j])
        rows.append({"position": i + 1, "parent": q + 1, "parent_mass": float(att[i, q]),
                     "best_other": jo + 1, "best_other_mass": float(att[i, jo])})
    return {"attention": att, "rows": rows, "recovered": all(r["parent_mass"] > r["best_other_mass"] for r in rows)}


def initial_gradient(desc, beta0=BETA0, gamma0=GAMMA0) -> np.ndarray:
    """-dL/dA1 on the position-position block at the induction-aligned start (T x T, query row, key column).

    Parameters
    ----------
    desc : TwoLayerDescription
    beta0, gamma0 : float

    Returns
    -------
    ndarray, shape (T, T)

    Example
    -------
    >>> # G = initial_gradient(desc); G[3].argmax()  # the parent of position 4
    """
    net = desc.net
    theta = np.zeros(net.size)
    theory.induction_init(net.unpack(theta), net.S, net.T, beta0, gamma0)
    _, g = twolayer_net.loss_grad(theta, net, desc.x, desc.y, desc.p)
    return -net.unpack(g)["layer1.head1.A"][net.S:, net.S:].copy()


def gradient_vs_mi(desc, draws, seed=0) -> dict:
    """The initial gradient's entries against the conditional mutual information, position by position.

    Parameters
    ----------
    desc : TwoLayerDescription
    draws : int
        Monte Carlo draws of pi for E_pi[I_pi].
    seed : int

    Returns
    -------
    dict
        ``G`` (T x T), ``mi`` (:func:`theory.conditional_mi`), ``rows`` per position with a parent (candidates j < i:
        the argmax of G and of the MI, the Spearman correlations with the MI and the chi^2 MI), ``cos_small``
        (the gradient's direction at beta0 against beta0 / 10: the leading order).

    Example
    -------
    >>> # gradient_vs_mi(desc, 4000)["rows"][0]["parent_largest"]
    """
    par = desc.data["parents"]
    G = initial_gradient(desc)
    G10 = initial_gradient(desc, BETA0 / 10, GAMMA0 / 10)
    cos = float((G * G10).sum() / np.sqrt((G * G).sum() * (G10 * G10).sum()))
    mi = theory.conditional_mi(desc.net.S, par[:-1], float(desc.data["alpha"]), draws, seed)
    al = theory.transition_alignment(desc.net.S, float(desc.data["alpha"]), len(par), draws, seed)
    rows = []
    for i, q in _edges(par):
        anc = _ancestors(par, i + 1)  # 1-based, nearest first
        ga = [float(G[i, a - 1]) for a in anc]
        ma = [float(mi["mi"][i, a - 1]) for a in anc]
        cand = list(range(i))
        g, m, c = G[i, cand], mi["mi"][i, cand], mi["chi2"][i, cand]
        rows.append({"position": i + 1, "parent": q + 1, "candidates": [j + 1 for j in cand],
                     "gradient": g.tolist(), "mi": m.tolist(), "chi2": c.tolist(),
                     "argmax_gradient": int(np.argmax(g)) + 1, "argmax_mi": int(np.argmax(m)) + 1,
                     "parent_largest": bool(len(cand) == 1 or g[q] > np.delete(g, q).max()),
                     "spearman_mi": theory.spearman(g, m) if len(cand) >= 3 else None,
                     "spearman_chi2": theory.spearman(g, c) if len(cand) >= 3 else None,
                     "ancestors": anc, "gradient_ancestors": ga, "mi_ancestors": ma,
                     "alignment_ancestors": [float(al["a"][k]) for k in range(len(anc))],
                     "ancestors_in_mi_order": _same_order(ga, ma),
                     "spearman_alignment": theory.spearman(ga, al["a"][:len(anc)]) if len(anc) >= 3 else None})
    return {"G": G, "mi": mi, "rows": rows, "cos_small": cos, "alignment": al}


def _same_order(g, m) -> bool:
    """Whether g is strictly decreasing when its entries are sorted by decreasing m."""
    o = np.argsort(-np.asarray(m), kind="stable")
    return bool(np.all(np.diff(np.asarray(g)[o]) < 0))


def _ancestors(par, i) -> list:
    """The ancestors of position i (1-based), nearest first."""
    out, q = [], par[i - 1]
    while q:
        out.append(q[0])
        q = par[q[0] - 1]
    return out


def _graph_name(desc) -> str:
    return f"d={desc.net.S}, parents={desc.data['parents'][:-1]}"


def _figure(desc, rec, gm, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    T = desc.net.T
    adj = np.zeros((T, T))
    for i, q in _edges(desc.data["parents"]):
        adj[i, q] = 1.0
    G = np.where(np.tril(np.ones((T, T), dtype=bool), -1), gm["G"], np.nan)
    fig, ax = plt.subplots(1, 4, figsize=(13, 3.2))
    for a, M, title in zip(ax, (adj, rec["attention"], G, np.where(np.tril(np.ones((T, T)), -1) > 0, gm["mi"]["mi"], np.nan)),
                           ("causal graph (row: position, column: parent)", "layer-1 attention after training",
                            "initial -dL/dA1 (positions), j < i", "E_pi I(x_i; x_j | pi), j < i")):
        im = a.imshow(M, cmap="viridis")
        a.set_title(title, fontsize=8)
        a.set_xticks(range(T), range(1, T + 1))
        a.set_yticks(range(T), range(1, T + 1))
        fig.colorbar(im, ax=a, fraction=0.046)
    fig.tight_layout()
    f = out / "nichani_graph.png"
    fig.savefig(f, dpi=90)
    plt.close(fig)
    return str(f)


def check(path, out, quick: bool = False, log=print):
    """Nichani et al.'s claims on the description at ``path`` (nichani.toml as shipped).

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
    >>> # meanfield model check nichani --quick --out DIR
    """
    S = SETTINGS["quick" if quick else "full"]
    graphs = [None, *S["extra"]]
    descs = [_load(path, g, S["steps"]) for g in graphs]  # refusals (one line) before any work
    res = []
    for desc in descs:
        name = _graph_name(desc)
        log(f"[check] nichani: GD on the exact population of the latent causal graph {name} ...")
        r = twolayer_run.run(desc)
        th = np.asarray(r["theta"])
        rec = recovery(desc, th[-1])
        log(f"[check]   final loss {float(r.loss[-1]):.6f}; parent masses "
            f"{[round(x['parent_mass'], 3) for x in rec['rows']]}")
        par = desc.data["parents"]
        d, alpha = desc.net.S, float(desc.data["alpha"])
        X, p = theory.urn_graph_law(d, par[:-1], alpha)
        same = X.shape == desc.x.shape and bool((X == desc.x).all())
        law_err = float(np.max(np.abs(desc.p - p)) / np.max(p)) if same else float("inf")
        y = theory.soft_targets(X, d, par[:-1], alpha)
        y_err = float(np.max(np.abs(desc.y - y))) if same else float("inf")
        bayes = float(-(p * (y * np.log(y)).sum(1)).sum())
        log(f"[check]   initial gradient and E_pi I(x_i; x_j | pi) ({S['draws']} draws of pi) ...")
        gm = gradient_vs_mi(desc, S["draws"])
        res.append({"desc": desc, "name": name, "run": r, "rec": rec, "gm": gm, "law_err": law_err, "y_err": y_err,
                    "bayes": bayes, "loss": np.asarray(r.loss), "steps": int(np.asarray(r["step"])[-1])})
    d0 = descs[0]
    setting = {"graphs": [x["name"] for x in res], "alpha": float(d0.data["alpha"]), "eta": d0.training.eta,
               "steps": [x["steps"] for x in res], "method": d0.training.method, "init": "zero (the official code)"}
    claims = []
    claims.append(Claim(
        "layer1_recovers_graph", status(all(x["rec"]["recovered"] for x in res)),
        "After training (the official code's network and zero start, every parameter trained together), the first "
        "attention layer encodes the latent causal graph: at every position with a parent, the mean attention "
        "(over the law) on the true parent is larger than on any other position (the graph read from the attention "
        "is the true graph). The paper's experiments with this network (abstract: 'transformers trained on our "
        "in-context learning task are able to recover a wide variety of causal structures'; shown).",
        setting=setting, numbers={x["name"]: {"rows": x["rec"]["rows"], "final_loss": float(x["loss"][-1]),
                                              "bayes_level": x["bayes"]} for x in res}, source="shown"))
    floor_ok = all(x["law_err"] <= LAW_RTOL and x["y_err"] <= LAW_RTOL and
                   float(x["loss"].min()) >= x["bayes"] * (1 - LAW_RTOL) for x in res)
    claims.append(Claim(
        "law_and_bayes_floor", status(floor_ok),
        "The Polya-urn enumeration of the law and its counted soft targets equal the engine's Dirichlet-multinomial "
        "law and posterior means to rounding, and no record's loss is below the Bayes level E[H(pi(. | x_T) | "
        "context)], the least loss of any predictor (a conditional entropy; proved).",
        setting=setting, numbers={x["name"]: {"law_rel_err": x["law_err"], "target_err": x["y_err"],
                                              "bayes_level": x["bayes"], "min_loss": float(x["loss"].min())}
                                  for x in res}, source="proved"))
    dpi = max(x["gm"]["mi"]["dpi_violation"] for x in res)
    claims.append(Claim(
        "mi_parent_largest", status(dpi <= DPI_TOL),
        "Given the transition matrix pi, a tree is a Markov chain along its paths, so by the data-processing "
        "inequality I_pi(x_i; x_parent(i)) >= I_pi(x_i; x_j) for every earlier position j (the abstract's 'as a "
        "consequence of the data processing inequality'): checked exactly on every draw of pi (proved).",
        setting={**setting, "draws": S["draws"]}, numbers={"max_violation": dpi}, source="proved"))
    big_ok = all(row["parent_largest"] for x in res for row in x["gm"]["rows"])
    claims.append(Claim(
        "initial_gradient_parent_largest", status(big_ok),
        f"At the induction-aligned small start (A1 = 0; layer 2 scores beta0 = {BETA0} on the query's token against "
        f"the key's layer-1 token; the read-out gamma0 = {GAMMA0} from the layer-2 token to its logit), the "
        "negative gradient of the first layer's position-position scores has its largest entry, among the earlier "
        "positions j < i, at the true parent of every position (abstract: 'the largest entries of this gradient "
        "correspond to edges in the latent causal graph'; proved there for the paper's simplified model and "
        "training algorithm, which could not be read here: expected).",
        setting={**setting, "beta0": BETA0, "gamma0": GAMMA0},
        numbers={x["name"]: {"rows": [{k: row[k] for k in ("position", "parent", "argmax_gradient", "gradient")}
                                      for row in x["gm"]["rows"]], "cos_leading_order": x["gm"]["cos_small"]}
                 for x in res}, source="expected"))
    rho_rows = [(x["name"], row) for x in res for row in x["gm"]["rows"] if row["spearman_mi"] is not None]
    rank_ok = bool(rho_rows) and all(row["spearman_mi"] > 0 for _, row in rho_rows)
    bad = [(n, row["position"], row["spearman_mi"]) for n, row in rho_rows if not row["spearman_mi"] > 0]
    mech = "" if rank_ok else _mechanism(res, bad)
    claims.append(Claim(
        "initial_gradient_ranks_by_mi", status(rank_ok),
        "The initial gradient encodes the mutual information between tokens (abstract): at every position with 3 or "
        "more earlier candidates, the entries of the initial negative gradient over the candidates j < i rank like "
        "E_pi[I_pi(x_i; x_j)] (Spearman rank correlation > 0; the chi^2 mutual information reported beside it). "
        "The MI is computed from the law given pi (every context enumerated, pi drawn: stated sampling with its "
        "standard error), independently of the gradient code (expected: the paper's statement for its simplified "
        "model could not be read).",
        setting={**setting, "beta0": BETA0, "gamma0": GAMMA0, "draws": S["draws"]},
        numbers={"rows": [{"graph": n, **{k: row[k] for k in ("position", "parent", "candidates", "gradient", "mi",
                                                               "chi2", "spearman_mi", "spearman_chi2")}}
                          for n, row in rho_rows],
                 "mi_se_max": max(float(x["gm"]["mi"]["mi_se"].max()) for x in res), "failing": bad,
                 "mechanism": mech}, source="expected"))
    anc_rows = [(x["name"], row) for x in res for row in x["gm"]["rows"] if len(row["ancestors"]) >= 2]
    anc_ok = bool(anc_rows) and all(row["ancestors_in_mi_order"] for _, row in anc_rows)
    anc_bad = [(n, row["position"]) for n, row in anc_rows if not row["ancestors_in_mi_order"]]
    sa = [row["spearman_alignment"] for _, row in anc_rows if row["spearman_alignment"] is not None]
    anc_mech = "" if anc_ok else (
        f"{len(anc_bad)} of {len(anc_rows)} positions: along the path to the root the MI falls with the distance "
        "(data-processing inequality) but the gradient entries do not: from the uniform start an entry is its pair's "
        "term minus the row's mean (the softmax's entries sum to zero over a row), and the pair's term follows the "
        "alignment a_k = E_pi <pi^k - 1/d, pi - 1/d> of the k-step relation with the target's one-step row, which "
        "alternates in size with k (a_1..a_4 = " + ", ".join(f"{v:.3f}" for v in res[-1]["gm"]["alignment"]["a"][:4])
        + f"; rows near a permutation at alpha = {float(d0.data['alpha'])}: pi^2 is near the identity); Spearman "
        f"(gradient, a_k) over the ancestors: {', '.join(f'{v:+.2f}' for v in sa)}")
    claims.append(Claim(
        "initial_gradient_orders_ancestors_by_mi", status(anc_ok),
        "The strict reading of the ranking: along each position's path to the root, where the data-processing "
        "inequality orders the MI by the distance, the initial gradient's entries are in the MI's order (rank "
        "correlation 1 over the ancestors of every position with 2 or more of them; expected: our reading of "
        "'the gradient encodes the mutual information').",
        setting={**setting, "beta0": BETA0, "gamma0": GAMMA0, "draws": S["draws"]},
        numbers={"rows": [{"graph": n, **{k: row[k] for k in ("position", "ancestors", "gradient_ancestors",
                                                               "mi_ancestors", "alignment_ancestors",
                                                               "ancestors_in_mi_order", "spearman_alignment")}}
                          for n, row in anc_rows], "failing": anc_bad, "mechanism": anc_mech}, source="expected"))
    claims[0].figure = _figure(res[0]["desc"], res[0]["rec"], res[0]["gm"], out)
    md = ["| graph | position | parent | parent mass | best other (mass) | argmax initial gradient | Spearman (MI) |",
          "|---|---|---|---|---|---|---|"]
    for x in res:
        sp = {row["position"]: row for row in x["gm"]["rows"]}
        for row in x["rec"]["rows"]:
            g = sp[row["position"]]
            rho = "-" if g["spearman_mi"] is None else f"{g['spearman_mi']:+.2f}"
            md.append(f"| {x['name']} | {row['position']} | {row['parent']} | {row['parent_mass']:.3f} | "
                      f"{row['best_other']} ({row['best_other_mass']:.3f}) | {g['argmax_gradient']} | {rho} |")
    return claims, {"summary": "Nichani, Damian, Lee (ICML 2024), exact population GD (docs/models.md, section 8).",
                    "markdown": "\n".join(md)}


def _mechanism(res, bad) -> str:
    """Why a ranking fails: the signs of the gradient on the ancestors at distance 2 and more."""
    out = []
    for x in res:
        par = x["desc"].data["parents"]
        for row in x["gm"]["rows"]:
            i = row["position"]
            anc = _ancestors(par, i)
            for k, a in enumerate(anc[1:], start=2):
                g = row["gradient"][a - 1]
                if g < 0:
                    out.append(f"{x['name']}: position {i}, ancestor {a} at distance {k}: gradient {g:+.3g} < 0 "
                               f"though its MI is {row['mi'][a - 1]:.3f}")
    head = (f"{len(bad)} position(s) rank against the MI. The entry (i, j) measures how well the pair (x_j, x_i) "
            "predicts the target row pi(. | x_T) through the layer-2 match, i.e. how pi^k (the relation of an "
            "ancestor at distance k) aligns with pi, not the information in the pair; ")
    return head + ("; ".join(out[:6]) if out else "no ancestor entry is negative: the disorder is among non-ancestors")
