"""The reviewers' extensions (seed 000, W2), one study each: runs, a figure and numbers.

``run_extension_study(name, out, quick=False)`` runs the paper's setting
(K = 2, L = 3, omega = 0.1, eta = 0.5, zero neurons, exact GD map, infinite
width) next to variants of one extension, each with simultaneous training
(the paper's experiments, 4000 steps) and with the three-stage schedule of
Algorithm 1 (neurons 1000 steps, attention 4000, neurons 2000), writes the
HDF5 run files, ``report.md``, ``report.json`` and ``figure.png`` into
``out``, and returns the report. Names (:data:`STUDIES`):

* ``imbalance``: group weights p = (0.7, 0.3) and label probability
  P(y = +1) = 0.7, separately and together;
* ``gram``: non-orthogonal features, correlation rho in {0.2, 0.4} between the
  signals of different groups (vv), between a group's identifier and its
  signal (cv), and between identifiers (cc);
* ``noise``: a finite training set of n_train = 64 sequences with Gaussian
  noise sigma in {0, 0.1, 0.3} on every token (ambient d = 2K + 4), next to
  the population; the learned weights are also scored on the clean population;
* ``neurons``: n in {1, 4, 16} neurons per head with Gaussian initialisation
  (sigma_w = 0.01), mean-field time scale;
* ``label-noise``: flip probability rho in {0.1, 0.2}.

What is compared (the stage-wise picture; margins of flipped labels never
count, "margin level" is the stage-time level 0.1):

* simultaneous runs: T1, T2, T_loss from ``meanfield.models.mixture.stagetimes``
  (there T1 also waits for the neuron gradient to fall to 10 %, which in the
  paper's setting happens only after the attention stage, so T1 = T2 there);
  t_cons / t_incons, the first times the consistent / inconsistent samples
  all reach the margin level (neurons / attention done); t_neurons /
  t_scores, the first times the neurons / the scores have moved 10 % of their
  largest change (``claims.check_stagewise``); per group, t_incons of that
  group's samples;
* three-stage runs: the margins at the end of the neuron stage (the
  consistent ones positive, the inconsistent ones exactly 0 in the paper's
  setting), the attention-stage duration T2 - T1 (overall and per group),
  the final loss and margins;
* at the end of the simultaneous run: loss, smallest consistent /
  inconsistent margins, accuracy, the neuron alignment (cosine of w+ with
  c1 + ... + cK + v1 + ... + vK and of w- with c1 + ... + cK - v1 - ... - vK,
  the ratio of mean c to mean |v| components of w+), same-group /
  between-group scores S+[c_k, v_k], S+[c_j, v_k];
* per study: population scores of the learned weights (noise), the spread
  of the neurons (neurons), the optimal clean margin log((1 - rho) / rho)
  and the loss floor H(rho) (label noise).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np

from ...core.io import read_run
from . import kernels
from .config import make_config
from .data import sample_set
from .run import run as run_traj
from .run import save as save_run
from .stagetimes import DEFAULTS as STAGE_DEFAULTS

STUDIES = ("imbalance", "gram", "noise", "neurons", "label-noise")

TITLES = {
    "imbalance": "Class and group imbalance",
    "gram": "Non-orthogonal features",
    "noise": "Noisy tokens, finite training set",
    "neurons": "Several neurons per head (Gaussian init)",
    "label-noise": "Label noise",
}


def _f(x):
    x = float(x)
    return None if math.isnan(x) or math.isinf(x) else x


def _cos(a, b) -> float:
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    return float(a @ b / (na * nb)) if na > 0 and nb > 0 else math.nan


def _first_at_or_after(mask, t, t0):
    if t0 is None or math.isnan(t0):
        return math.nan
    i0 = int(np.searchsorted(t, t0 - 1e-12 * max(1.0, abs(t0))))
    idx = np.flatnonzero(mask[i0:])
    return float(t[i0 + idx[0]]) if idx.size else math.nan


def metrics(f, K: int) -> dict:
    """Stage-wise numbers of one run file (``meanfield.core.io.Run``)."""
    t = np.asarray(f["t"], float)
    m = np.asarray(f["margin"], float)
    smp = f["samples"]
    cons = np.asarray(smp["consistent"]).astype(bool)
    flipped = np.asarray(smp["flipped"]).astype(bool) if "flipped" in smp else np.zeros(cons.shape, bool)
    clean = ~flipped
    w = np.asarray(f["w"], float)[-1]
    S = np.asarray(f["S"], float)[-1]
    pat_p = np.ones(2 * K)
    pat_m = np.r_[np.ones(K), -np.ones(K)]
    mc = m[-1][clean & cons]
    mi = m[-1][clean & ~cons]
    out = {
        "T1": _f(f.attrs["T1"]), "T2": _f(f.attrs["T2"]), "T_loss": _f(f.attrs["T_loss"]),
        "t_end": float(t[-1]), "status": f.attrs["status"],
        "loss_end": float(np.asarray(f["loss"])[-1]),
        "consistent_margin_end": float(mc.min()) if mc.size else None,
        "inconsistent_margin_end": float(mi.min()) if mi.size else None,
        "accuracy_end": float(np.mean(m[-1][clean] > 0)),
        "cos_w_plus": _cos(w[0], pat_p), "cos_w_minus": _cos(w[1], pat_m),
        "w_plus_c_over_v": float(np.mean(w[0, :K]) / np.mean(np.abs(w[0, K:]))) if np.any(w[0, K:]) else None,
        "w_plus": w[0].tolist(), "w_minus": w[1].tolist(),
        "same_group_score": float(np.mean([S[0, k, K + k] for k in range(K)])),
        "between_group_score": float(np.mean([S[0, j, K + k] for k in range(K) for j in range(K) if j != k])),
    }
    lev = STAGE_DEFAULTS["margin"]
    sel_c, sel_i = clean & cons, clean & ~cons
    out["t_cons"] = _f(_first_at_or_after(m[:, sel_c].min(axis=1) >= lev, t, 0.0)) if sel_c.any() else None
    out["t_incons"] = _f(_first_at_or_after(m[:, sel_i].min(axis=1) >= lev, t, 0.0)) if sel_i.any() else None
    for key, X in (("t_neurons", np.asarray(f["w"], float)), ("t_scores", np.asarray(f["S"], float))):
        dX = np.abs(X - X[0]).reshape(len(t), -1).max(axis=1)
        out[key] = float(t[np.flatnonzero(dX >= 0.1 * dX.max())[0]]) if dX.max() > 0 else None
    group = np.asarray(smp["group"])
    per = []
    for k in range(K):
        sel = sel_i & (group == k)
        per.append(_f(_first_at_or_after(m[:, sel].min(axis=1) >= lev, t, 0.0)) if sel.any() else None)
    out["t_incons_per_group"] = per
    out.update(_end_state(f, m[-1], clean))
    return out


def _end_state(f, margin_end, clean) -> dict:
    """solved: every clean sample has margin >= the level at the end; dead_frac:
    the weight (among clean samples) of samples on which every neuron of both
    heads is inactive (u <= 0) at the end: they send no gradient any more."""
    u = np.asarray(f["u_neurons"] if "u_neurons" in f else f["u"], float)[-1]
    u = u.reshape(u.shape[0], -1)
    dead = np.all(u <= 0, axis=1) & clean
    wgt = np.asarray(f["samples"]["weight"], float)
    return {"solved": bool(np.all(margin_end[clean] >= STAGE_DEFAULTS["margin"])),
            "dead_frac": float(wgt[dead].sum() / wgt[clean].sum())}


def three_stage_metrics(f, K: int) -> dict:
    """Numbers of a three-stage run: margins after the neuron stage, attention-stage
    duration T2 - T1 (overall and per group), the end."""
    t = np.asarray(f["t"], float)
    m = np.asarray(f["margin"], float)
    smp = f["samples"]
    cons = np.asarray(smp["consistent"]).astype(bool)
    clean = ~(np.asarray(smp["flipped"]).astype(bool) if "flipped" in smp else np.zeros(cons.shape, bool))
    sel_c, sel_i = clean & cons, clean & ~cons
    T1 = _f(f.attrs["T1"])
    T2 = _f(f.attrs["T2"])
    i1 = int(np.searchsorted(t, T1 - 1e-12 * max(1.0, T1))) if T1 is not None else len(t) - 1
    group = np.asarray(smp["group"])
    lev = STAGE_DEFAULTS["margin"]
    per = []
    for k in range(K):
        sel = sel_i & (group == k)
        Tk = _first_at_or_after(m[:, sel].min(axis=1) >= lev, t, T1 if T1 is not None else math.nan)
        per.append(_f(Tk - T1) if sel.any() and T1 is not None else None)
    return {
        **_end_state(f, m[-1], clean),
        "T1": T1, "T2": T2, "stage2_duration": _f(T2 - T1) if T1 is not None and T2 is not None else None,
        "stage2_duration_per_group": per,
        "stage1_consistent_margin": float(m[i1, sel_c].min()) if sel_c.any() else None,
        "stage1_inconsistent_margin": float(m[i1, sel_i].min()) if sel_i.any() else None,
        "stage1_inconsistent_margin_max": float(m[i1, sel_i].max()) if sel_i.any() else None,
        "loss_end": float(np.asarray(f["loss"])[-1]),
        "inconsistent_margin_end": float(m[-1, sel_i].min()) if sel_i.any() else None,
        "status": f.attrs["status"],
    }


def _run(cfg, out: Path, name: str):
    traj = run_traj(cfg)
    path = save_run(out / f"{name}.h5", cfg, traj)
    return read_run(path)


def population_scores(f, K: int, L: int) -> dict:
    """Loss and margins of the final recorded weights (feature coordinates, one
    neuron per head) on the CLEAN population of the paper (signed orthonormal
    features: the logits are the feature-coordinate scores)."""
    smp = sample_set(K, L)
    y = kernels.pack(f["S"][-1], f["A"][-1], f["B"][-1], f["w"][-1])
    u = np.empty((smp.n, 2))
    mg = np.empty(smp.n)
    loss = kernels.forward(y, smp.P, smp.idx, smp.sgn, smp.y, smp.weight, u, mg)
    c = smp.consistent
    return {"population_loss": float(loss), "population_consistent_margin": float(mg[c].min()),
            "population_inconsistent_margin": float(mg[~c].min()),
            "population_accuracy": float(np.sum(smp.weight * (mg > 0)))}


# ------------------------------------------------------------------ the studies


def _base(quick: bool, **kw):
    steps = 1200 if quick else 4000
    return make_config({}, steps=steps, record_every=10 if not quick else 6, **kw)


def three_stage(cfg, quick: bool):
    """The three-stage (Algorithm 1) version of a study config."""
    st = (300, 900, 300) if quick else (1000, 4000, 2000)
    return make_config(cfg.to_dict() | {"schedule": "three-stage", "stage_steps": st, "record_every": 5 if quick else 10,
                                        "steps": cfg.steps})


SEEDS = 5  # seeds of the studies whose runs are random (neuron init, training-set draw)


def _variants(name: str, quick: bool) -> list[tuple[str, list]]:
    """(label, configs) of every variant of a study: the first variant is the
    paper's setting (or its analogue) to compare with; a variant's configs are
    its seeds (one for deterministic settings), the first of them is the
    representative whose run files, table row and curves are shown."""
    b = lambda **kw: _base(quick, **kw)  # noqa: E731
    ns = 2 if quick else SEEDS
    if name == "imbalance":
        return [("paper", [b()]), ("p=(0.51,0.49)", [b(p=(0.51, 0.49))]), ("p=(0.7,0.3)", [b(p=(0.7, 0.3))]),
                ("P(y=+1)=0.7", [b(label_prob=0.7)]), ("both", [b(p=(0.7, 0.3), label_prob=0.7)])]
    if name == "gram":
        rhos = (0.4,) if quick else (0.2, 0.4)
        out = [("paper", [b()])]
        for key in ("vv", "cv", "cc"):
            out += [(f"{key}={r}", [b(feature_gram=f"{key}:{r}")]) for r in rhos]
        return out
    if name == "noise":
        sig = (0.0, 0.3) if quick else (0.0, 0.1, 0.3)
        return [("population", [b()])] + [
            (f"n=64 sigma={s}", [b(n_train=64, noise_sigma=s, data_seed=k) for k in range(ns)]) for s in sig]
    if name == "neurons":
        nn = (1, 4) if quick else (1, 4, 16)
        return [("paper (zero, n=1)", [b()])] + [
            (f"n={n} gaussian", [b(n_neurons=n, neuron_init="gaussian:0.01", seed=k) for k in range(ns)]) for n in nn]
    if name == "label-noise":
        rhos = (0.2,) if quick else (0.1, 0.2)
        return [("paper", [b()])] + [(f"rho={r}", [b(label_noise=r)]) for r in rhos]
    raise ValueError(f"study: must be one of {', '.join(STUDIES)}; got {name!r}")


def _slug(label: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "=.-" else "_" for ch in label).strip("_")


def _seed_summary(ms: list[dict], m3s: list[dict]) -> dict:
    """Over a variant's seeds: how often every clean sample ends above the margin
    level, the dead fraction, medians."""
    def med(xs):
        xs = [x for x in xs if x is not None]
        return float(np.median(xs)) if xs else None

    return {
        "n_seeds": len(ms),
        "solved_frac": float(np.mean([m["solved"] for m in ms])),
        "dead_frac_mean": float(np.mean([m["dead_frac"] for m in ms])),
        "loss_end_median": med([m["loss_end"] for m in ms]),
        "t_incons_median": med([m["t_incons"] for m in ms]),
        "three_stage_solved_frac": float(np.mean([m["solved"] for m in m3s])),
        "stage2_duration_median": med([m["stage2_duration"] for m in m3s]),
        "stage1_inconsistent_margin_median": med([m["stage1_inconsistent_margin"] for m in m3s]),
    }


def run_extension_study(name: str, out, quick: bool = False, log=print) -> dict:
    """Run one extension study (see the module docstring) into ``out``; returns the report."""
    import tempfile

    if name not in STUDIES:
        raise ValueError(f"study: must be one of {', '.join(STUDIES)}; got {name!r}")
    variants = _variants(name, quick)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    rows, runs = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, cfgs in variants:
            log(f"[{name}] {label} ({len(cfgs)} seed{'s' if len(cfgs) > 1 else ''}) ...")
            cfg = cfgs[0]
            f = _run(cfg, out, _slug(label))
            f3 = _run(three_stage(cfg, quick), out, _slug(label) + "_three-stage")
            runs[label] = (f, f3)
            ms, m3s = [metrics(f, cfg.K)], [three_stage_metrics(f3, cfg.K)]
            for k, c in enumerate(cfgs[1:], start=1):
                ms.append(metrics(_run(c, Path(tmp), f"s{k}"), c.K))
                m3s.append(three_stage_metrics(_run(three_stage(c, quick), Path(tmp), f"s{k}_3"), c.K))
            row = {"label": label, "file": f"{_slug(label)}.h5",
                   "file_three_stage": f"{_slug(label)}_three-stage.h5", "dense_path": bool(cfg.dense),
                   **ms[0], "three_stage": m3s[0], "seeds": _seed_summary(ms, m3s)}
            row["config"] = {k: v for k, v in cfg.to_dict().items()
                             if k in ("p", "label_prob", "label_noise", "feature_gram", "noise_sigma", "n_train",
                                      "ambient_d", "data_seed", "n_neurons", "neuron_init", "seed", "steps")}
            if name == "noise":
                row.update(population_scores(f, cfg.K, cfg.L))
                row["basis_dim"] = int(f.attrs.get("basis_dim", 2 * cfg.K))
            if name == "neurons":
                row.update(_neuron_spread(f, cfg.K))
            if name == "label-noise":
                rho = cfg.label_noise
                row["optimal_clean_margin"] = _f(math.log((1 - rho) / rho)) if rho > 0 else None
                row["loss_floor"] = _f(-(rho * math.log(rho) + (1 - rho) * math.log(1 - rho))) if rho > 0 else 0.0
            rows.append(row)
    report = {"study": name, "title": TITLES[name], "quick": quick, "rows": rows,
              "changes": _changes(rows), "elapsed_s": None}
    report["figure"] = _figure(out, name, runs, [(lab, cfgs[0]) for lab, cfgs in variants])
    report["elapsed_s"] = time.perf_counter() - t0
    (out / "report.json").write_text(json.dumps(report, indent=1))
    (out / "report.md").write_text(_markdown(report))
    log(f"[{name}] report: {out / 'report.md'} ({report['elapsed_s']:.1f} s)")
    return report


def _neuron_spread(f, K: int) -> dict:
    """Several neurons: how the head-+ neurons align with w+ = sum c + sum v."""
    if "w_neurons" not in f:
        return {"n_neurons": 1}
    wn = np.asarray(f["w_neurons"], float)[-1]          # (2, n, P)
    pat = np.ones(2 * K)
    cos = np.array([_cos(v, pat) for v in wn[0]])
    un = np.asarray(f["u_neurons"], float)[-1]          # (n_samples, 2, n)
    active = np.any(un[:, 0, :] > 0, axis=0)
    norms = np.linalg.norm(wn[0], axis=1)
    return {"n_neurons": int(wn.shape[1]), "neuron_cos_min": float(np.nanmin(cos)),
            "neuron_cos_median": float(np.nanmedian(cos)), "neurons_aligned_frac": float(np.mean(cos > 0.9)),
            "neurons_active_frac": float(np.mean(active)),
            "neuron_norm_spread": float(norms.std() / norms.mean()) if norms.mean() > 0 else None}


def _changes(rows: list[dict]) -> list[str]:
    """Plain statements of what changes against the first row."""
    base = rows[0]
    out = []

    def rel(a, b):
        return f"{a:.4g} -> {b:.4g}" if a is not None and b is not None else f"{a} -> {b}"

    b3 = base["three_stage"]
    for r in rows[1:]:
        r3 = r["three_stage"]
        parts = [f"t_cons {rel(base['t_cons'], r['t_cons'])}", f"t_incons {rel(base['t_incons'], r['t_incons'])}",
                 f"T1 {rel(base['T1'], r['T1'])}", f"T2 {rel(base['T2'], r['T2'])}",
                 f"final loss {rel(base['loss_end'], r['loss_end'])}",
                 f"inconsistent margin {rel(base['inconsistent_margin_end'], r['inconsistent_margin_end'])}",
                 f"cos(w+, pattern) {rel(base['cos_w_plus'], r['cos_w_plus'])}",
                 f"three-stage: attention stage {rel(b3['stage2_duration'], r3['stage2_duration'])}, "
                 f"inconsistent margin after the neuron stage "
                 f"{rel(b3['stage1_inconsistent_margin'], r3['stage1_inconsistent_margin'])}"]
        a = r["seeds"]
        parts.append(f"every clean sample above the margin level at the end: "
                     f"{'yes' if r['solved'] else 'no'} (dead weight {r['dead_frac']:.3g})"
                     + (f"; over {a['n_seeds']} seeds solved in {a['solved_frac']:.0%} (simultaneous), "
                        f"{a['three_stage_solved_frac']:.0%} (three-stage), mean dead weight {a['dead_frac_mean']:.3g}"
                        if a["n_seeds"] > 1 else ""))
        if r["t_incons"] is None:
            parts.append("simultaneous: the inconsistent samples never reach the margin level")
        if r3["stage2_duration"] is None:
            parts.append("three-stage: the attention stage never brings the inconsistent samples to the margin level")
        g = r["t_incons_per_group"]
        if len(set(x for x in g if x is not None)) > 1:
            parts.append("t_incons per group " + ", ".join(f"k={k + 1}: {_fmt(v)}" for k, v in enumerate(g)))
        g3 = r3["stage2_duration_per_group"]
        if len(set(x for x in g3 if x is not None)) > 1:
            parts.append("attention stage per group " + ", ".join(f"k={k + 1}: {_fmt(v)}" for k, v in enumerate(g3)))
        out.append(f"{r['label']}: " + "; ".join(parts))
    return out


# ------------------------------------------------------------------ report


def _fmt(v, p=4):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{p}g}"
    return str(v)


_COLUMNS = [("t_cons", "t_cons"), ("t_incons", "t_incons"), ("t_neurons", "t_neurons"), ("t_scores", "t_scores"),
            ("T1", "T1"), ("T2", "T2"), ("T_loss", "T_loss"), ("loss_end", "final loss"),
            ("consistent_margin_end", "min cons. margin"), ("inconsistent_margin_end", "min incons. margin"),
            ("accuracy_end", "accuracy"), ("cos_w_plus", "cos(w+, c+v)"), ("cos_w_minus", "cos(w-, c-v)"),
            ("w_plus_c_over_v", "w+ c/v"), ("same_group_score", "S+[ck,vk]"),
            ("between_group_score", "S+[cj,vk]"), ("dead_frac", "dead")]
_EXTRA = {
    "noise": [("basis_dim", "basis r"), ("population_loss", "pop. loss"),
              ("population_inconsistent_margin", "pop. incons. margin"), ("population_accuracy", "pop. accuracy")],
    "neurons": [("n_neurons", "n"), ("neuron_cos_min", "min cos neuron"), ("neuron_cos_median", "median cos"),
                ("neurons_aligned_frac", "aligned (cos>0.9)"), ("neurons_active_frac", "active"),
                ("neuron_norm_spread", "norm spread")],
    "label-noise": [("optimal_clean_margin", "log((1-rho)/rho)"), ("loss_floor", "loss floor H(rho)")],
    "imbalance": [],
    "gram": [],
}


def _markdown(rep: dict) -> str:
    name = rep["study"]
    rows = rep["rows"]
    cols = _COLUMNS + _EXTRA[name]
    lines = [f"# Extension study: {rep['title']}", "",
             "K = 2, L = 3, omega = 0.1, eta = 0.5, exact GD map, infinite width, zero neurons unless stated. "
             "Times t = step x eta; margin level 0.1; margins of flipped labels never count; scores and neurons in "
             "feature coordinates (head +). Column meanings: see the docstring of "
             "`meanfield.models.mixture.extensions`.", "",
             f"## Simultaneous training ({rows[0]['config']['steps']} steps{', quick' if rep['quick'] else ''})", "",
             "| variant | " + " | ".join(c[1] for c in cols) + " |", "|---|" + "---|" * len(cols)]
    for r in rows:
        lines.append(f"| {r['label']} | " + " | ".join(_fmt(r.get(k)) for k, _ in cols) + " |")
    lines += ["", "t_incons per group (first time all of that group's inconsistent samples reach the margin level): "
              + "; ".join(f"{r['label']}: " + ", ".join(f"k={k + 1} {_fmt(v)}" for k, v in enumerate(r["t_incons_per_group"]))
                          for r in rows), "",
              "## Three-stage schedule (Algorithm 1)", "",
              "| variant | T1 | stage-1 cons. margin | stage-1 incons. margin (min, max) | attention stage T2 - T1 | "
              "per group | final loss | final incons. margin |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        a = r["three_stage"]
        lines.append(f"| {r['label']} | {_fmt(a['T1'])} | {_fmt(a['stage1_consistent_margin'])} | "
                     f"{_fmt(a['stage1_inconsistent_margin'])}, {_fmt(a['stage1_inconsistent_margin_max'])} | "
                     f"{_fmt(a['stage2_duration'])} | "
                     + ", ".join(_fmt(v) for v in a["stage2_duration_per_group"])
                     + f" | {_fmt(a['loss_end'])} | {_fmt(a['inconsistent_margin_end'])} |")
    if any(r["seeds"]["n_seeds"] > 1 for r in rows):
        lines += ["", "## Over seeds", "",
                  "| variant | seeds | solved (simultaneous) | dead weight (mean) | median final loss | median t_incons "
                  "| solved (three-stage) | median attention stage | median stage-1 incons. margin |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            a = r["seeds"]
            lines.append(f"| {r['label']} | {a['n_seeds']} | {_fmt(a['solved_frac'])} | {_fmt(a['dead_frac_mean'])} | "
                         f"{_fmt(a['loss_end_median'])} | {_fmt(a['t_incons_median'])} | "
                         f"{_fmt(a['three_stage_solved_frac'])} | {_fmt(a['stage2_duration_median'])} | "
                         f"{_fmt(a['stage1_inconsistent_margin_median'])} |")
    lines += ["", "## What changes against the first row", ""] + [f"- {c}" for c in rep["changes"]]
    lines += ["", f"![{name}]({rep['figure']})", "",
              "Run files: " + ", ".join(f"`{r['file']}`, `{r['file_three_stage']}`" for r in rows),
              "", f"({rep['elapsed_s']:.1f} s)", ""]
    return "\n".join(lines)


def _figure(out: Path, name: str, runs: dict, variants) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axs = plt.subplots(2, 3, figsize=(15, 7.5))
    ax = axs[:, :2]
    for i, (label, cfg) in enumerate(variants):
        f, f3 = runs[label]
        K = cfg.K
        t = np.asarray(f["t"], float)
        col = f"C{i}"
        ax[0, 0].plot(t, f["loss"], color=col, label=label)
        m = np.asarray(f["margin"], float)
        smp = f["samples"]
        cons = np.asarray(smp["consistent"]).astype(bool)
        clean = ~(np.asarray(smp["flipped"]).astype(bool) if "flipped" in smp else np.zeros(cons.shape, bool))
        if (clean & ~cons).any():
            ax[0, 1].plot(t, m[:, clean & ~cons].min(axis=1), color=col, label=f"{label} incons.")
        ax[0, 1].plot(t, m[:, clean & cons].min(axis=1), color=col, ls=":", lw=1)
        w = np.asarray(f["w"], float)
        ax[1, 0].plot(t, w[:, 0, :K].mean(axis=1), color=col, ls="--", lw=1)
        ax[1, 0].plot(t, w[:, 0, K:].mean(axis=1), color=col, label=label)
        S = np.asarray(f["S"], float)
        ax[1, 1].plot(t, np.mean([S[:, 0, k, K + k] for k in range(K)], axis=0), color=col, label=label)
        ax[1, 1].plot(t, np.mean([S[:, 0, j, K + k] for k in range(K) for j in range(K) if j != k], axis=0),
                      color=col, ls="--", lw=1)
        for T, ls in ((f.attrs["T1"], ":"), (f.attrs["T2"], "-.")):
            if T is not None and not (isinstance(T, float) and math.isnan(T)):
                ax[0, 1].axvline(float(T), color=col, ls=ls, lw=0.7)
        # three-stage: min margins and the same-group score
        t3 = np.asarray(f3["t"], float)
        m3 = np.asarray(f3["margin"], float)
        if (clean & ~cons).any():
            axs[0, 2].plot(t3, m3[:, clean & ~cons].min(axis=1), color=col, label=label)
        axs[0, 2].plot(t3, m3[:, clean & cons].min(axis=1), color=col, ls=":", lw=1)
        S3 = np.asarray(f3["S"], float)
        axs[1, 2].plot(t3, np.mean([S3[:, 0, k, K + k] for k in range(K)], axis=0), color=col, label=label)
        axs[1, 2].plot(t3, np.mean([S3[:, 0, j, K + k] for k in range(K) for j in range(K) if j != k], axis=0),
                       color=col, ls="--", lw=1)
        if name == "neurons" and "w_neurons" in f and i == len(variants) - 1:
            wn = np.asarray(f["w_neurons"], float)
            for q in range(wn.shape[2]):
                ax[1, 0].plot(t, wn[:, 0, q, K], color=col, lw=0.4, alpha=0.5)
    ax[0, 0].set_yscale("log")
    ax[0, 0].set_ylabel("training loss")
    for a in (ax[0, 1], axs[0, 2]):
        a.axhline(STAGE_DEFAULTS["margin"], color="gray", lw=0.5)
        a.set_ylabel("min margin: inconsistent (solid), consistent (dotted)")
        a.set_ylim(-1.5, None)
    ax[1, 0].set_ylabel("w+: mean v (solid), mean c (dashed)")
    ax[1, 1].set_ylabel("S+[ck,vk] (solid), S+[cj,vk] (dashed)")
    axs[1, 2].set_ylabel("S+[ck,vk] (solid), S+[cj,vk] (dashed)")
    for a in axs.ravel():
        a.set_xlabel("t")
        a.set_xscale("symlog", linthresh=10.0)
        a.set_xlim(left=0.0)
    for e in (runs[variants[0][0]][1].attrs.get("stage_ends") or [])[:2]:
        for a in axs[:, 2]:
            a.axvline(float(e["t"]), color="gray", ls=":", lw=0.7)
    for a in axs[:, 2]:
        a.set_title("three-stage (Algorithm 1); gray: stage ends", fontsize=9)
    for a in axs[:, :2].ravel():
        a.set_title("simultaneous", fontsize=9)
    ax[0, 0].legend(fontsize=7)
    ax[1, 1].legend(fontsize=7)
    fig.suptitle(f"{TITLES[name]} (simultaneous: T1 dotted, T2 dash-dot vertical lines)")
    fig.tight_layout()
    fig.savefig(out / "figure.png", dpi=110)
    plt.close(fig)
    return "figure.png"
