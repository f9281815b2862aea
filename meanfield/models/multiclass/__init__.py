"""The multi-class (vector output) version of the K-mixture system (seed 000's
reviewers, W2: "multi-class classification"; the authors expect the layer-wise
learning, neurons first and attention second, to survive).

Conventions (docs/models.md), chosen so that C = 2 is exactly the binary mixture:
- K groups, C classes.  Features: group identifiers c_1..c_K and, per group k, an
  orthonormal basis v{k}_1..v{k}_{C-1} of its class subspace (P = K + K(C-1),
  Gram = I).  Class y of group k is the unit vector s_{k,y} = the y-th vertex of
  the regular simplex centred at 0 in that subspace (C = 2: s = +v_k, -v_k, the
  binary mixture's y v_k).
- A sample: group k ~ uniform, class y ~ uniform; tokens c_k, s_{k,y} and L - 2
  distractors s_{k',y'} with k' uniform in [K] \\ {k}, y' uniform in [C]; the
  population is every such multiset, weighted exactly (no Monte Carlo).
  "consistent": every distractor has class y (the neurons alone can classify it).
- Model: the mixture's two heads (+, -) with fixed signs +1, -1, softmax attention
  with separate W_K, W_Q (every position a query, averaged before the ReLU), and
  C ReLU neurons per head (one per class): f_c = relu(w_{+,c} . zbar_+) -
  relu(w_{-,c} . zbar_-); softmax cross-entropy over the C classes.
- Init and training as the mixture: infinite width, omega = 0.1, neurons 0,
  ReLU'(0) = 1, GD eta = 0.5; simultaneous or three-stage (neurons; attention;
  neurons).
"""

from __future__ import annotations

import math

import itertools

import numpy as np


def simplex(C: int) -> np.ndarray:
    """(C, C-1): unit vectors of the regular simplex centred at 0 (C = 2: [[1], [-1]])."""
    E = np.eye(C) - 1.0 / C
    # orthonormal basis of the sum-zero subspace, oriented so that C = 2 gives +1, -1
    U, _, _ = np.linalg.svd(E)
    B = U[:, :C - 1]
    if C == 2 and B[0, 0] < 0:
        B = -B
    V = E @ B
    return V / np.linalg.norm(V, axis=1, keepdims=True)


def feature_names(K: int, C: int) -> list[str]:
    if C == 2:
        return [f"c{k + 1}" for k in range(K)] + [f"v{k + 1}" for k in range(K)]
    return [f"c{k + 1}" for k in range(K)] + [f"v{k + 1}_{j + 1}" for k in range(K) for j in range(C - 1)]


#: the largest data set samples() builds (every engine step costs O(sequences x L x P^2))
MAX_SEQUENCES = 1_000_000


def samples(features, K: int = 3, C: int = 3, L: int = 3) -> dict:
    """Data builder (``[data] function = "meanfield.models.multiclass:samples"``)."""
    K, C, L = int(K), int(C), int(L)
    if K < 2 or C < 2 or L < 2:
        raise ValueError("multiclass.samples: need K >= 2, C >= 2, L >= 2")
    # counted in logs first: the exact integer power for L = 1e8 would not finish
    log_n = math.log(K * C) + (L - 2) * math.log((K - 1) * C)
    n_seq = K * C * ((K - 1) * C) ** (L - 2) if log_n < math.log(MAX_SEQUENCES) + 1 else None
    if n_seq is None or n_seq > MAX_SEQUENCES:
        n_seq = n_seq if n_seq is not None else f"about 10^{log_n / math.log(10):.3g}"
        raise ValueError(f"L: K = {K} groups, C = {C} classes and L = {L} tokens give {n_seq} sequences "
                         f"(K C ((K - 1) C)^(L - 2)), more than {MAX_SEQUENCES}; choose a smaller L")
    names = feature_names(K, C)
    if list(features) != names:
        raise ValueError(f"multiclass.samples: the dictionary's features must be {names} for K = {K}, C = {C}")
    P = len(names)
    Sx = simplex(C)

    def sig(k, y):
        x = np.zeros(P)
        x[K + k * (C - 1): K + (k + 1) * (C - 1)] = Sx[y]
        return x

    toks, tgt, wts, nms, cons = [], [], [], [], []
    for k in range(K):
        others = [j for j in range(K) if j != k]
        for y in range(C):
            for dis in itertools.product(itertools.product(others, range(C)), repeat=L - 2):
                # one sequence per ordered distractor tuple (positions do not matter; weights exact)
                xs = [np.eye(P)[k], sig(k, y)] + [sig(kk, yy) for kk, yy in dis]
                toks.append(xs)
                tgt.append(y)
                wts.append(1.0 / (K * C * ((K - 1) * C) ** (L - 2)))
                nms.append(f"g{k + 1}y{y + 1}" + "".join(f"|{features[K + kk * (C - 1)][:-2] if C > 2 else 'v' + str(kk + 1)}"
                                                         f"y{yy + 1}" for kk, yy in dis))
                cons.append(all(yy == y for _, yy in dis))
    return {"tokens": np.array(toks), "target": np.array(tgt, float), "weight": np.array(wts), "names": nms,
            "flags": {"consistent": np.array(cons)}}


# ---------------------------------------------------------------- the check

#: the mixture check's settings and thresholds (meanfield.models.mixture.claims): stage-wise
#: level 10% of the largest change; |margin| <= 1e-9 counts as 0 (rounding of an exact
#: zero over thousands of steps); loss level 0.05 at the end of stage 3.
REL, MARGIN_TOL, LOSS_LEVEL = 0.1, 1e-9, 0.05
SETTINGS = {"quick": {"sim_steps": 4000, "stage_steps": (1000, 4000, 2000), "width": 64, "seeds": (1, 2)},
            "full": {"sim_steps": 8000, "stage_steps": (1000, 8000, 4000), "width": 64, "seeds": (1, 2, 3, 4)}}
#: finite against infinite width: sup |S_m - S_inf| and |w_m - w_inf| over the neuron stage and over the
#: neuron stage plus the first WIDTH_STAGE2 steps of the attention stage, mean over the seeds
ERR_WIDTHS, WIDTH_STAGE2 = (16, 64, 256, 1024), 1000
#: every claim's source: no paper states the multi-class case
SOURCE = (" Source: expected (no paper proves or shows the multi-class case: seed 000's reviewers (W2) asked for "
          "it and the mixture authors expect the layer-wise learning to survive).")


def _run(raw, over, stages=None):
    import copy

    from ...engine.api import run as engine_run
    from ...engine.description import description_from_dict

    rw = copy.deepcopy(raw)
    if stages is not None:
        rw["training"] = {"stages": [{"name": nm, "train": tr, "steps": int(n)} for nm, tr, n in
                                     zip(("neurons", "attention", "neurons"),
                                         (["values"], ["attention"], ["values"]), stages)]}
    desc = description_from_dict(rw, over)
    r = engine_run(desc)
    if r.status != "complete":
        raise RuntimeError(f"mixture_multiclass: engine run {r.status}: {r.message}")
    return desc, r


def _stage_index(r, stage):
    for e in r.stage_ends:
        if e["stage"] == stage:
            return int(np.searchsorted(r.t, e["t"] - 1e-12 * max(1.0, e["t"])))
    return None


def stage_numbers(desc, r) -> dict:
    c = desc.data.flag("consistent")
    out = {}
    for st in (1, 2, 3):
        i = _stage_index(r, st)
        if i is None:
            continue
        m = r.margin[i]
        out[st] = {"t": float(r.t[i]), "min_margin_consistent": float(m[c].min()),
                   "max_abs_margin_inconsistent": float(np.abs(m[~c]).max()),
                   "min_margin_inconsistent": float(m[~c].min()), "min_margin": float(m.min()),
                   "loss": float(r.loss[i])}
    return out


def check(path, out, quick: bool = False, log=print):
    from ...engine.description import _read

    S = SETTINGS["quick" if quick else "full"]
    raw = _read(path)
    if raw.get("data", {}).get("function") != "meanfield.models.multiclass:samples":
        from ...core.config import ConfigError

        raise ConfigError("data.function: the mixture_multiclass check needs meanfield.models.multiclass:samples")
    from ...engine.description import description_from_dict
    from ...engine.symmetry import pinned_entries, pinned_ties

    # the infinite-width start is symmetric under the class permutations (on every group's simplex): the engine
    # refuses it (engine.symmetry); the check runs it anyway (symmetry = allow) to report what it does
    d0 = description_from_dict(raw)
    pins, ties = pinned_entries(d0), pinned_ties(d0)
    log(f"[check] mixture_multiclass: simultaneous GD, {S['sim_steps']} steps (infinite width) ...")
    dsim, sim = _run(raw, {"steps": S["sim_steps"], "record_every": 1, "symmetry": "allow"})
    log(f"[check] mixture_multiclass: three-stage {S['stage_steps']} (infinite width) ...")
    d3, three = _run(raw, {"record_every": 10, "symmetry": "allow"}, S["stage_steps"])
    fin = []
    for seed in S["seeds"]:
        log(f"[check] mixture_multiclass: three-stage at width m = {S['width']}, seed {seed} ...")
        fin.append(_run(raw, {"record_every": 10, "width": S["width"], "seed": seed}, S["stage_steps"]))
    setting = {"K": int(raw["data"]["args"].get("K", 3)), "C": int(raw["data"]["args"].get("C", 3)),
               "L": int(raw["data"]["args"].get("L", 3)), "eta": dsim.training.eta, "omega": dsim.init.omega,
               "neuron_init": dsim.init.neuron_init, "relu_prime_at_zero": dsim.model.relu_prime_at_zero,
               "n_sequences": dsim.data.n}
    # 1. stage-wise learning in simultaneous training (the mixture's check_stagewise)
    t = sim.t
    w = np.concatenate([np.asarray(sim.var(h, "w")).reshape(len(t), -1) for h in sim.heads], axis=1)
    Sb = np.concatenate([np.asarray(sim.var(h, "S")).reshape(len(t), -1) for h in sim.heads], axis=1)
    dw = np.abs(w - w[0]).max(axis=1)
    dS = np.abs(Sb - Sb[0]).max(axis=1)

    def first(dd):
        return float(t[np.flatnonzero(dd >= REL * dd.max())[0]]) if dd.max() > 0 else float("nan")

    tw, tS = first(dw), first(dS)
    sn = stage_numbers(d3, three)
    fins = [stage_numbers(d, r) for d, r in fin]
    sim_m = {"t_neurons": tw, "t_scores": tS, "loss_end": float(sim.loss[-1]),
             "min_margin_end": float(sim.margin[-1].min()),
             "S_max_change_three_stage": float(np.abs(np.asarray(three.S) - np.asarray(three.S)[0]).max())}
    # the scores between group identifiers and class signals (the ones the binary mixture's attention learns)
    Kg = int(raw["data"]["args"].get("K", 3))
    i2 = _stage_index(three, 2)
    S2 = np.asarray(three.S)[i2 if i2 is not None else -1]  # (heads, P, P)
    sim_m["max_abs_S_c_v_after_stage2"] = float(max(np.abs(S2[:, :Kg, Kg:]).max(), np.abs(S2[:, Kg:, :Kg]).max()))
    sim_m["pinned_by_symmetry"] = pins
    sim_m["tied_by_symmetry"] = ties
    claims = claims_from(sim_m, sn, fins, setting, S)
    claims[-1].numbers["width_error"] = width_errors(raw, S, log)
    fig = _figure(out, d3, three, fin)
    for c in claims:
        c.figure = fig
    meta = {"summary": "the multi-class K-mixture (seed 000's reviewers), engine runs of "
                       "meanfield/models/mixture_multiclass.toml."}
    return claims, meta


def width_errors(raw, S, log=print) -> dict:
    """Finite widths m in ERR_WIDTHS (seeds S["seeds"]) against infinite width on the
    three-stage schedule cut after WIDTH_STAGE2 attention steps: sup errors of the
    scores S and the neurons w in two windows and their fitted exponents in m."""
    from ...core.report import fit_line

    stages = (S["stage_steps"][0], WIDTH_STAGE2, 0)
    _, rinf = _run(raw, {"record_every": 10, "symmetry": "allow"}, stages)
    i1 = _stage_index(rinf, 1)
    Sinf, winf = np.asarray(rinf.S), np.concatenate([np.asarray(rinf.var(h, "w")).reshape(len(rinf.t), -1)
                                                     for h in rinf.heads], axis=1)
    out = {"stage1_end_t": float(rinf.t[i1]), "window_end_t": float(rinf.t[-1]), "per_width": {},
           "note": "with the zero neuron init every width starts at the same point (all pre-activations 0) and "
                   "the neurons' error after one step is O(m^-1/2), but it grows exponentially along the "
                   "unstable symmetric infinite-width trajectory and is O(1) for every m within the neuron "
                   "stage (README, the multi-class mixture): no m^-1/2 rate of the sup over the stage"}
    for m in ERR_WIDTHS:
        e1, e2 = [], []
        for seed in S["seeds"]:
            log(f"[check] mixture_multiclass: width error, m = {m}, seed {seed} ...")
            _, r = _run(raw, {"record_every": 10, "width": m, "seed": seed}, stages)
            Sm = np.asarray(r.S)
            wm = np.concatenate([np.asarray(r.var(h, "w")).reshape(len(r.t), -1) for h in r.heads], axis=1)
            d = np.maximum(np.abs(Sm - Sinf).reshape(len(r.t), -1).max(axis=1), np.abs(wm - winf).max(axis=1))
            e1.append(float(d[:i1 + 1].max()))
            e2.append(float(d.max()))
        out["per_width"][str(m)] = {"sup_err_neuron_stage": float(np.mean(e1)),
                                    "sup_err_to_window_end": float(np.mean(e2))}
    for key in ("sup_err_neuron_stage", "sup_err_to_window_end"):
        f = fit_line(np.log(ERR_WIDTHS), np.log([out["per_width"][str(m)][key] for m in ERR_WIDTHS]))
        out[f"exponent_{key}"] = f["slope"]
        out[f"r2_{key}"] = f["r2"]
    return out


def claims_from(sim_m: dict, sn: dict, fins: list, setting: dict, S: dict) -> list:
    """The four claims from measurements: ``sim_m`` (simultaneous run: t_neurons,
    t_scores, loss_end, min_margin_end), ``sn`` / ``fins`` (stage_numbers of the
    infinite-width and finite-width three-stage runs), ``S`` the settings used."""
    from ...core.report import Claim, status

    tw, tS = sim_m["t_neurons"], sim_m["t_scores"]
    claims = []
    claims.append(Claim(
        "stagewise_learning", status(bool(np.isfinite(tw) and (not np.isfinite(tS) or tw < tS))),
        "Simultaneous training: the neurons' alignment moves before the attention scores (first time the largest "
        f"change reaches {REL:.0%} of its maximum over the run), the layer-wise behaviour the authors expect in the "
        "multi-class setting."
        + SOURCE,
        dict(setting, schedule="simultaneous", steps=S["sim_steps"], width="inf"),
        {k: sim_m[k] for k in ("t_neurons", "t_scores", "loss_end", "min_margin_end")}, None, "expected"))
    s1 = sn.get(1, {})
    ok = bool(s1) and s1["min_margin_consistent"] > 0 and s1["max_abs_margin_inconsistent"] <= MARGIN_TOL
    claims.append(Claim(
        "after_neuron_stage", status(ok),
        "After the neuron stage the consistent samples are classified (margin > 0) and the inconsistent ones are "
        "not (margin 0): the neurons alone cannot tell the signal token from a distractor of another class." + SOURCE,
        dict(setting, schedule="three-stage", stage_steps=list(S["stage_steps"]), width="inf"),
        dict(s1, tolerance=MARGIN_TOL), None, "expected"))
    s2, s3 = sn.get(2, {}), sn.get(3, {})
    ok = bool(s2) and s2["min_margin"] > 0 and bool(s3) and s3["loss"] <= LOSS_LEVEL
    claims.append(Claim(
        "after_attention_stage", status(ok),
        "After the attention stage every sample has a positive margin, and the final neuron stage drives the loss "
        f"below {LOSS_LEVEL} (the three-stage story of the binary mixture), at infinite width (the symmetric "
        "mean-field start, run with --symmetry allow: the engine refuses it by default). Source: expected (no paper "
        "states the multi-class case; the mixture authors expect the layer-wise story to survive).",
        dict(setting, schedule="three-stage", stage_steps=list(S["stage_steps"]), width="inf"),
        {"stage2": s2, "stage3": s3, "S_max_change": sim_m.get("S_max_change_three_stage"),
         "max_abs_S_c_v_after_stage2": sim_m.get("max_abs_S_c_v_after_stage2"),
         "pinned_by_symmetry": {"count": len(sim_m.get("pinned_by_symmetry", [])),
                                "scores": [e for e in sim_m.get("pinned_by_symmetry", []) if ":S[" in e][:12],
                                "tied_samples": len(sim_m.get("tied_by_symmetry", []))},
         "why": "the infinite-width start (S = 0, A = B = omega^2 I, neurons 0) is invariant under every permutation "
                "of the classes acting on all groups' simplices at once; GD keeps the state invariant, which pins "
                "the scores S[c_k, v] between group identifiers and class signals to exactly 0 (found without "
                "knowing the symmetry by meanfield.engine.symmetry: they stay 0 from the start and move from a "
                "1e-6-perturbed one), so the attention cannot tell the signal from a distractor of another "
                "class and the inconsistent margins stay 0 to rounding however long it trains. The engine refuses "
                "such a run (exit 2) unless --symmetry allow; a finite width (random W_K, W_Q: the mixture paper's "
                "init) breaks the symmetry: the claim at finite width below"}, None, "expected"))
    ok = all(f.get(2, {}).get("min_margin", -1) > 0 and f.get(3, {}).get("loss", 1) <= LOSS_LEVEL for f in fins)
    claims.append(Claim(
        "after_attention_stage_finite_width", status(ok),
        f"The same at finite width m = {S['width']} (sampled W_K, W_Q, seeds {list(S['seeds'])}): every margin "
        f"positive after the attention stage and loss <= {LOSS_LEVEL} after stage 3." + SOURCE,
        dict(setting, schedule="three-stage", stage_steps=list(S["stage_steps"]), width=S["width"],
             seeds=list(S["seeds"])),
        {"per_seed": {int(s): f for s, f in zip(S["seeds"], fins)}}, None, "expected"))
    return claims


def _figure(out, d3, three, fin):
    import matplotlib

    matplotlib.use("Agg")
    from pathlib import Path

    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    c = d3.data.flag("consistent")
    for (lbl, d, r, ls) in [("m = inf", d3, three, "-")] + [(f"m = {d.init.width}, seed {d.init.seed}", d, r, ":")
                                                            for d, r in fin]:
        ax[0].semilogy(r.t, r.loss, ls, label=lbl)
        ax[1].plot(r.t, r.margin[:, ~c].min(axis=1), ls, label=f"{lbl}: min inconsistent margin")
    for e in three.stage_ends[:-1]:
        for a in ax:
            a.axvline(e["t"], color="gray", lw=0.8)
    ax[0].set_title("loss (three-stage: neurons | attention | neurons)")
    ax[1].set_title("inconsistent samples: min margin f_y - max f_c")
    for a in ax:
        a.set_xlabel("t")
        a.legend(fontsize=7)
    fig.tight_layout()
    p = Path(out) / "mixture_multiclass_stages.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return str(p)
