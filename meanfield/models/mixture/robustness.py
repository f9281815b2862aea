"""How robust is the paper's story to perturbations of its exactly symmetric start?

The authors expect (rebuttal, W2) that "Gaussian initialization with
sufficiently small variance" of the neurons gives "similar dynamics". This
module measures it, for three perturbations of the paper's start (K = 2,
L = 3, omega = 0.1, eta = 0.5, zero neurons, infinite width, exact GD map):

* ``neuron``: neuron init N(0, eps^2 I) (the config's ``gaussian:EPS``);
* ``attention``: the infinite-width attention init written as width-2P factors
  M_K = omega [I; 0], M_Q = omega [0; I] (so S = M_K^T M_Q = 0,
  A = B = omega^2 I exactly) with every factor entry moved by eps N(0, 1);
  S, A, B are recomputed from the factors, so A, B stay positive semidefinite;
* ``embedding``: the explicit network (``meanfield.models.mixture.particles``) at
  width 2P started at exactly these factors, written in R^d through a random
  orthonormal embedding E (d = 2K + 1): the only perturbation is the rounding
  of the products with E (about 1e-17). E = identity is the unperturbed
  control;
* ``width``: the paper's finite-width model, W_K, W_Q entries N(0, omega^2/m)
  sampled at width m (the init moves by about omega^2 / sqrt(m)), zero
  neurons; "eps" is m there, and the smallest perturbation the largest m.

over seeds, sizes eps from 1e-12 to 1e-2 and both schedules (simultaneous,
4000 steps; three-stage, 1000 / 4000 / 2000 steps). A run "solves" when
every (clean) sample ends with margin >= 0.1 (the stage-time margin level).

The mechanism (:func:`mechanism`): the dead-ReLU set D(t), the (sample, head)
pairs with ReLU'(u) = 0 (u < 0, or u = 0 with ReLU'(0) = 0), and the kink set,
the pairs with |u| <= 1e-9 max(1, max |u|). With zero neurons EVERY
pre-activation sits exactly at u = 0 at t = 0, where ReLU'(0) = 1 counts it
active, and the symmetric run keeps u+ = u- on the inconsistent samples
(margin exactly 0) until attention separates them. A perturbation of any size
puts the pre-activations at +-tiny: a head whose u starts (or is pushed)
below 0 on a sample gets no gradient from it, the first steps go in an
asymmetric direction, and a sample whose u is < 0 on BOTH heads sends no
gradient to anything: it stays at margin 0 for good and the loss stops at
(its weight) x log 2 (2 of 8 samples: 0.173 plus the others' small loss).

:func:`robustness_study` (``meanfield mixture study robustness``) adds what
restores the story: several neurons per head (the phase diagram: perturbation
size against neurons per head, coloured by the solved fraction), ReLU'(0),
a positive neuron init (equal c-components 0.01 plus the perturbation), label
noise; :func:`robustness_claims` are the ``expected`` claims of ``check``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from ...core.report import Claim
from ...core.report import jfloat as _f
from ...core.report import status as _status
from .config import make_config
from .measure import as_run, simulate
from .run import run as run_traj
from .run import samples_of
from .stagetimes import DEFAULTS as STAGE_DEFAULTS

LEVEL = STAGE_DEFAULTS["margin"]  # a sample is solved when its margin ends >= this
KINK_TOL = 1e-9                   # |u| <= KINK_TOL * max(1, max|u|): at the ReLU kink (as width-sweep)
KINDS = ("neuron", "attention", "embedding", "width")
BASE = {"K": 2, "L": 3, "omega": 0.1, "eta": 0.5}
SCHEDULES = {"simultaneous": dict(schedule="simultaneous", steps=4000),
             "three-stage": dict(schedule="three-stage", stage_steps=(1000, 4000, 2000))}
SETTINGS = {
    "quick": {"eps": [1e-12, 1e-6, 1e-2], "seeds": 2, "neurons": [1, 2, 4], "record_every": 40,
              "widths": [256, 4096]},
    "full": {"eps": [1e-12, 1e-10, 1e-8, 1e-6, 1e-4, 1e-2], "seeds": 8, "neurons": [1, 2, 4, 8, 16],
             "widths": [16, 64, 256, 1024, 4096, 16384, 65536],
             "record_every": 20},
}


# ------------------------------------------------------------------ runs


def _as_run(cfg, traj) -> dict:
    r = as_run(cfg, traj)
    r["attrs"]["relu_prime_at_zero"] = cfg.relu_prime_at_zero
    return r


def symmetric_factors(K: int, omega: float) -> tuple[np.ndarray, np.ndarray]:
    """Width-2P factors (M_K, M_Q) of the infinite-width init: M_K^T M_Q = 0,
    M_K^T M_K = M_Q^T M_Q = omega^2 I."""
    P = 2 * K
    MK = np.zeros((2 * P, P))
    MQ = np.zeros((2 * P, P))
    MK[:P] = omega * np.eye(P)
    MQ[P:] = omega * np.eye(P)
    return MK, MQ


def attention_perturbed_state(cfg, eps: float, seed: int) -> np.ndarray:
    """The reduced start of ``cfg`` (infinite width) with the attention factors
    moved by eps N(0, 1) per entry (independently per head)."""
    from .init import neuron_init
    from .kernels import pack

    K, P = cfg.K, cfg.P
    rng = np.random.default_rng(np.random.SeedSequence([seed, 7]))
    S, A, B = (np.empty((2, P, P)) for _ in range(3))
    for h in range(2):
        MK, MQ = symmetric_factors(K, cfg.omega)
        MK = MK + eps * rng.standard_normal(MK.shape)
        MQ = MQ + eps * rng.standard_normal(MQ.shape)
        S[h], A[h], B[h] = MK.T @ MQ, MK.T @ MK, MQ.T @ MQ
    return pack(S, A, B, neuron_init(K, cfg.neuron_init, cfg.seed))


def neuron_perturbed_state(cfg, eps: float, seed: int) -> np.ndarray:
    """The reduced start of ``cfg`` with eps N(0, 1) added to every neuron
    alignment (on top of the config's neuron init, e.g. a positive one)."""
    from .init import initial_state

    y = initial_state(cfg).copy()
    P = cfg.P
    rng = np.random.default_rng(np.random.SeedSequence([seed, 11]))
    y[-2 * P:] += eps * rng.standard_normal(2 * P)
    return y


def embedded_run(cfg, embed_seed: int | None) -> dict:
    """The explicit network at width 2P from the exactly symmetric factors, in
    R^(2K+1) through the random orthonormal embedding ``embed_seed`` (None: E =
    identity in R^(2K), no rounding from the embedding)."""
    from ...engine.oracle import embedding
    from . import particles as pt
    from .init import neuron_init
    from .run import save_at, solver, stages

    K, P = cfg.K, cfg.P
    E = np.eye(P) if embed_seed is None else embedding(np.eye(P), P + 1, embed_seed)
    MK, MQ = symmetric_factors(K, cfg.omega)
    w = neuron_init(K, cfg.neuron_init, cfg.seed) @ E.T
    system = pt.system_of_weights(cfg, E, pt.head_weights([MK @ E.T] * 2, [MQ @ E.T] * 2, w))
    traj = solver(cfg).solve(system, system.projection(), stages(cfg), save_at(cfg))
    return _as_run(cfg, traj)


def perturbed_run(kind: str, eps: float, seed: int, schedule: str = "simultaneous", record_every: int = 20,
                  **over) -> dict:
    """One run of the paper's setting (``over``: config overrides such as
    relu_prime_at_zero, neuron_init, label_noise, n_neurons) perturbed by
    ``kind`` at size ``eps`` (ignored for ``embedding``: eps < 0 there means the
    identity embedding) with ``seed``."""
    if kind not in KINDS + ("none",):
        raise ValueError(f"kind: must be one of {', '.join(KINDS + ('none',))}; got {kind!r}")
    cfg = make_config(BASE, record_every=record_every, **SCHEDULES[schedule], **over)
    if kind == "embedding":
        return embedded_run(cfg, None if eps < 0 else seed)
    if kind == "width":
        cfg = make_config(cfg.to_dict() | {"width": int(eps), "seed": seed})
        return _as_run(cfg, run_traj(cfg)) if not cfg.dense else _dense(cfg)
    if kind == "none":
        return _as_run(cfg, run_traj(cfg)) if not cfg.dense else _dense(cfg)
    if kind == "neuron" and cfg.dense:  # several neurons: the config's own Gaussian init
        return _dense(make_config(cfg.to_dict() | {"neuron_init": f"gaussian:{eps!r}", "seed": seed}))
    if cfg.dense:
        raise ValueError("kind: only neuron perturbations with several neurons per head")
    y0 = neuron_perturbed_state(cfg, eps, seed) if kind == "neuron" else attention_perturbed_state(cfg, eps, seed)
    return _as_run(cfg, run_traj(cfg, y0))


def _dense(cfg) -> dict:
    r = simulate(cfg)
    r["attrs"]["relu_prime_at_zero"] = cfg.relu_prime_at_zero
    return r


# ------------------------------------------------------------------ mechanism


def mechanism(run, relu_prime_at_zero: float | None = None) -> dict:
    """Solved or not, and why: the stuck samples (margin < the level at the
    end), their pre-activations, the kink and dead-ReLU sets over time.
    ``run``: an in-memory run (dict) or a run file (``meanfield.core.io.Run``)."""
    m = np.asarray(run["margin"], float)
    t = np.asarray(run["t"], float)
    smp = run["samples"]
    clean = ~(np.asarray(smp["flipped"]).astype(bool) if "flipped" in smp else np.zeros(m.shape[1], bool))
    if relu_prime_at_zero is None:
        attrs = run["attrs"] if isinstance(run, dict) else getattr(run, "attrs", {})
        relu_prime_at_zero = attrs.get("relu_prime_at_zero", 1.0)
    r0 = float(relu_prime_at_zero)
    if "u_neurons" in run:
        U = np.asarray(run["u_neurons"], float)         # (T, n, 2, neurons)
    else:
        U = np.asarray(run["u"], float)[..., None]      # (T, n, 2, 1)
    scale = max(1.0, float(np.nanmax(np.abs(U)))) if U.size else 1.0
    dead_n = (U < 0) | ((U == 0) & (r0 == 0.0))
    dead = dead_n.all(axis=3)                            # (T, n, 2): no neuron of the head passes gradient
    kink = (np.abs(U) <= KINK_TOL * scale).all(axis=3)   # every neuron of the head at the kink
    both_dead = dead.all(axis=2) & clean[None, :]        # (T, n)
    stuck = np.flatnonzero(clean & (m[-1] < LEVEL))
    desc = [str(d) for d in smp["description"]]
    cons = np.asarray(smp["consistent"]).astype(bool)
    rows = []
    for i in stuck:
        alive = np.flatnonzero(~both_dead[:, i])
        j = alive[-1] + 1 if alive.size else 0
        rows.append({"sample": int(i), "description": desc[i], "consistent": bool(cons[i]),
                     "margin_end": float(m[-1, i]), "u_plus_end": float(U[-1, i, 0].max()),
                     "u_minus_end": float(U[-1, i, 1].max()),
                     "u_plus_t0": float(U[0, i, 0].max()), "u_minus_t0": float(U[0, i, 1].max()),
                     "dead_both_heads_from_t": float(t[j]) if j < len(t) else None,
                     "at_kink_until_t": _f(t[np.flatnonzero(kink[:, i].all(axis=1))[-1]])
                     if kink[:, i].all(axis=1).any() else None})
    sel = clean & ~cons
    at_kink = kink[:, sel].all(axis=2).any(axis=1) if sel.any() else np.zeros(len(t), bool)
    kink_until = _f(t[np.flatnonzero(at_kink)[-1]]) if at_kink.any() else None
    return {"solved": bool(stuck.size == 0), "n_stuck": int(stuck.size), "stuck": rows,
            "loss_end": float(run["loss"][-1]), "min_margin_end": float(m[-1, clean].min()),
            "dead_pairs_over_time": dead.sum(axis=(1, 2)).tolist(), "kink_pairs_over_time": kink.sum(axis=(1, 2)).tolist(),
            "dead_samples_over_time": both_dead.sum(axis=1).tolist(),
            "t": t.tolist(), "inconsistent_at_kink_until_t": kink_until}


def explain(mech: dict, short: bool = False) -> str:
    """One sentence: why a run ends the way it does (``short``: the stuck
    samples and when they died, without the pre-activations)."""
    k0 = mech["kink_pairs_over_time"][0] if mech.get("kink_pairs_over_time") else 0
    kink = (f"; at t = 0, {k0} (sample, head) pre-activations sit at the ReLU kink u = 0" if k0 else "")
    if mech["solved"]:
        return (f"every sample ends with margin >= {LEVEL:g} (smallest {mech['min_margin_end']:.3g}, "
                f"loss {mech['loss_end']:.3g})" + kink)
    if short:
        return (f"{mech['n_stuck']} stuck at loss {mech['loss_end']:.3g}: " + ", ".join(
            f"{s['description']} (dead on both heads from t = {s['dead_both_heads_from_t']:g})"
            if s["dead_both_heads_from_t"] is not None else s["description"] for s in mech["stuck"][:3])
            + (", ..." if mech["n_stuck"] > 3 else ""))
    parts = []
    for s in mech["stuck"]:
        dead = s["dead_both_heads_from_t"]
        why = (f"u+ = {s['u_plus_t0']:.2g}, u- = {s['u_minus_t0']:.2g} at t = 0; ReLU inactive on both heads "
               f"(u+ = {s['u_plus_end']:.2g}, u- = {s['u_minus_end']:.2g}) from "
               f"t = {dead:g} on, so it sends no gradient" if dead is not None else
               f"u+ = {s['u_plus_end']:.2g}, u- = {s['u_minus_end']:.2g}")
        parts.append(f"{s['description']} ({'consistent' if s['consistent'] else 'inconsistent'}) stays at "
                     f"margin {s['margin_end'] + 0.0:.2g}: {why}")
    return (f"{mech['n_stuck']} sample(s) never solved, loss stops at {mech['loss_end']:.4g}: " + "; ".join(parts)
            + kink)


# ------------------------------------------------------------------ grids and claims


def grid(kinds=KINDS, eps=(1e-12, 1e-6, 1e-2), seeds: int = 2, schedules=tuple(SCHEDULES), record_every: int = 40,
         log=None, widths=(256, 4096), **over) -> list[dict]:
    """Rows (kind, eps, schedule) with the solved fraction over ``seeds`` and
    the mechanism of the first unsolved run. ``embedding`` has one row per
    schedule (eps = rounding) plus the identity control (eps = 0); ``width``
    one per width m in ``widths`` (eps = m)."""
    rows = []
    for kind in kinds:
        sizes = [-1.0, 0.0] if kind == "embedding" else ([int(m) for m in widths] if kind == "width" else list(eps))
        for e in sizes:
            for sch in schedules:
                if log:
                    log(f"[robustness] {kind} eps={e:g} {sch}: {seeds} seeds ...")
                if kind == "embedding" and e < 0:
                    mechs = [mechanism(perturbed_run("embedding", -1.0, 0, sch, record_every, **over))]
                else:
                    mechs = [mechanism(perturbed_run(kind, e, s, sch, record_every, **over)) for s in range(seeds)]
                bad = [mm for mm in mechs if not mm["solved"]]
                rows.append({"kind": kind, "eps": "identity embedding" if e < 0 else (
                    "rounding" if kind == "embedding" else e), "schedule": sch, "runs": len(mechs),
                    "solved_frac": float(np.mean([mm["solved"] for mm in mechs])),
                    "loss_end_median": float(np.median([mm["loss_end"] for mm in mechs])),
                    "stuck_samples": sorted({s["description"] for mm in bad for s in mm["stuck"]}),
                    "explanation": explain(bad[0] if bad else mechs[0]),
                    "explanation_short": explain(bad[0] if bad else mechs[0], short=True)})
    return rows


def robustness_claims(rows: list[dict]) -> list[Claim]:
    """The authors' expectation per perturbation kind (source ``expected``):
    PASS when, at the smallest perturbation tested, every run (all seeds, both
    schedules) solves every sample, i.e. a small enough perturbation leaves
    the story intact."""
    out = []
    what = {"neuron": "a Gaussian neuron init N(0, eps^2 I) of small variance",
            "attention": "a small perturbation eps of the attention init (factor entries)",
            "embedding": "the network written through a random orthonormal embedding (rounding, ~1e-17)",
            "width": "the sampled init of a large enough finite width m (zero neurons; the rebuttal: the "
                     "discretization to finite width 'can be handled easily', Appendix G)"}
    for kind in sorted({r["kind"] for r in rows}, key=KINDS.index):
        rk = [r for r in rows if r["kind"] == kind and r["eps"] != "identity embedding"]
        if kind == "embedding":
            smallest = rk
        elif kind == "width":
            m0 = max(r["eps"] for r in rk)
            smallest = [r for r in rk if r["eps"] == m0]
        else:
            e0 = min(r["eps"] for r in rk)
            smallest = [r for r in rk if r["eps"] == e0]
        ok = all(r["solved_frac"] == 1.0 for r in smallest)
        nums = {f"solved_frac[eps={r['eps']:g}, {r['schedule']}]" if isinstance(r["eps"], float) else
                f"solved_frac[m={r['eps']}, {r['schedule']}]" if kind == "width" else
                f"solved_frac[{r['eps']}, {r['schedule']}]": r["solved_frac"] for r in rows if r["kind"] == kind}
        nums["loss_end_median_smallest"] = float(np.median([r["loss_end_median"] for r in smallest]))
        nums["stuck_samples"] = sorted({d for r in rk for d in r["stuck_samples"]})
        nums["mechanism"] = next((r["explanation"] for r in smallest if r["solved_frac"] < 1), smallest[0]["explanation"])
        out.append(Claim(f"robust_{kind}", _status(ok),
                         f"with {what[kind]} training still solves every sample (the authors' expectation: "
                         "'similar dynamics')", numbers=nums, source="expected",
                         setting=dict(BASE, neuron_init="zero", relu_prime_at_zero=1.0,
                                      schedules=sorted({r["schedule"] for r in rows}),
                                      seeds=max(r["runs"] for r in rk), solved="every sample margin >= 0.1")))
    return out


# ------------------------------------------------------------------ the study


def phase_diagram(eps, neurons, seeds: int, record_every: int, log=None) -> np.ndarray:
    """Solved fraction (simultaneous training) over seeds: rows = neurons per
    head, columns = the Gaussian neuron-init size eps."""
    F = np.zeros((len(neurons), len(eps)))
    for a, n in enumerate(neurons):
        if log:
            log(f"[robustness] phase diagram: {n} neuron(s) per head, {len(eps)} sizes x {seeds} seeds ...")
        for b, e in enumerate(eps):
            F[a, b] = np.mean([mechanism(perturbed_run("neuron", e, s, "simultaneous", record_every,
                                                       n_neurons=n))["solved"] for s in range(seeds)])
    return F


RESTORERS = [
    ("paper's setting (zero init, ReLU'(0) = 1)", {}),
    ("ReLU'(0) = 0", {"relu_prime_at_zero": 0.0}),
    ("ReLU'(0) = 0.5", {"relu_prime_at_zero": 0.5}),
    ("positive neuron init: c-components 0.01", {"neuron_init": "const:0.01,0.01,0,0"}),
    ("label noise rho = 0.1", {"label_noise": 0.1}),
]


def restorers(eps, seeds: int, record_every: int, kinds=("neuron", "attention"), log=None) -> list[dict]:
    rows = []
    for label, over in RESTORERS:
        if log:
            log(f"[robustness] restorer: {label} ...")
        for kind in kinds:
            for sch in SCHEDULES:
                mechs = {e: [mechanism(perturbed_run(kind, e, s, sch, record_every, **over)) for s in range(seeds)]
                         for e in eps}
                rows.append({"variant": label, "kind": kind, "schedule": sch,
                             "solved_frac": {f"{e:g}": float(np.mean([mm["solved"] for mm in ms]))
                                             for e, ms in mechs.items()},
                             "explanation": explain(next((mm for ms in mechs.values() for mm in ms
                                                          if not mm["solved"]), mechs[eps[0]][0]), short=True)})
    return rows


def robustness_study(out, quick: bool = False, log=print) -> dict:
    """``meanfield mixture study robustness``: the grid, the claims, the phase
    diagram, the restorers, the dead-ReLU set over time; report.md, report.json,
    phase_diagram.png, dead_set.png in ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    S = SETTINGS["quick" if quick else "full"]
    t0 = time.perf_counter()
    rows = grid(eps=S["eps"], seeds=S["seeds"], record_every=S["record_every"], log=log, widths=S["widths"])
    claims = robustness_claims(rows)
    F = phase_diagram(S["eps"], S["neurons"], S["seeds"], S["record_every"], log=log)
    rest = restorers(S["eps"], S["seeds"], S["record_every"], log=log)
    traces = {lab: mechanism(perturbed_run(k, e, 0, "simultaneous", S["record_every"]))
              for lab, k, e in (("unperturbed", "none", 0.0), ("neuron eps=1e-12", "neuron", 1e-12),
                                ("attention eps=1e-12", "attention", 1e-12),
                                ("random embedding", "embedding", 0.0))}
    rep = {"study": "robustness", "quick": quick, "eps": S["eps"], "seeds": S["seeds"], "neurons": S["neurons"],
           "grid": rows, "claims": [c.__dict__ for c in claims], "phase_diagram": F.tolist(), "restorers": rest,
           "traces": {k: {"t": v["t"], "dead_pairs": v["dead_pairs_over_time"], "kink_pairs": v["kink_pairs_over_time"],
                          "dead_samples": v["dead_samples_over_time"],
                          "explanation": explain(v)} for k, v in traces.items()}}
    rep["figures"] = _figures(out, S, F, traces)
    rep["elapsed_s"] = time.perf_counter() - t0
    (out / "report.json").write_text(json.dumps(rep, indent=1, default=str))
    (out / "report.md").write_text(_markdown(rep))
    log(f"[robustness] report: {out / 'report.md'} ({rep['elapsed_s']:.1f} s)")
    return rep


def _markdown(rep: dict) -> str:
    eps = rep["eps"]
    L = ["# Study: robustness of the symmetric start", "",
         "K = 2, L = 3, omega = 0.1, eta = 0.5, exact GD map, infinite width; simultaneous training 4000 steps, "
         "three-stage 1000 / 4000 / 2000 steps. A run is solved when every sample ends with margin >= 0.1. "
         f"{rep['seeds']} seeds per cell. Perturbations: see `meanfield.models.mixture.robustness`.", "",
         "## The authors' expectation (claims of source `expected`)", "",
         "| claim | status | mechanism |", "|---|---|---|"]
    for c in rep["claims"]:
        L.append(f"| {c['name']}: {c['statement']} | **{c['status']}** | {c['numbers']['mechanism']} |")
    L += ["", "## Solved fraction per perturbation", "",
          "| perturbation | size eps (width: m) | schedule | runs | solved | median final loss | stuck samples |",
          "|---|---|---|---|---|---|---|"]
    for r in rep["grid"]:
        e = f"{r['eps']:g}" if isinstance(r["eps"], float) else r["eps"]
        L.append(f"| {r['kind']} | {e} | {r['schedule']} | {r['runs']} | {r['solved_frac']:.2f} | "
                 f"{r['loss_end_median']:.4g} | {', '.join(r['stuck_samples']) or '-'} |")
    L += ["", "## Mechanism: the dead-ReLU set over time (simultaneous, seed 0)", "",
          "A (sample, head) pair is dead when ReLU'(u) = 0 there; in a solved run every sample keeps one live "
          "head (f = relu(u+) - relu(u-) uses one head per sign), so 4 of the 16 pairs end dead. A sample dead on "
          "BOTH heads sends no gradient to any parameter and keeps margin 0 for good.", ""]
    for k, v in rep["traces"].items():
        L.append(f"- {k}: {v['explanation']}")
    L += ["", "![dead set](dead_set.png)", "",
          "## What restores the story", "",
          "Phase diagram: neurons per head (Gaussian init N(0, eps^2 I), mean field over neurons) against eps, "
          "simultaneous training; solved fraction over seeds.", "",
          "| neurons per head | " + " | ".join(f"eps = {e:g}" for e in eps) + " |", "|---|" + "---|" * len(eps)]
    for n, row in zip(rep["neurons"], rep["phase_diagram"]):
        L.append(f"| {n} | " + " | ".join(f"{x:.2f}" for x in row) + " |")
    L += ["", "![phase diagram](phase_diagram.png)", "",
          "Other changes, one neuron per head (solved fraction per eps):", "",
          "| variant | perturbation | schedule | " + " | ".join(f"eps = {e:g}" for e in eps) + " | why (first unsolved run) |",
          "|---|---|---|" + "---|" * len(eps) + "---|"]
    for r in rep["restorers"]:
        L.append(f"| {r['variant']} | {r['kind']} | {r['schedule']} | "
                 + " | ".join(f"{v:.2f}" for v in r["solved_frac"].values()) + f" | {r['explanation']} |")
    L += ["", f"({rep['elapsed_s']:.1f} s)", ""]
    return "\n".join(L)


def _figures(out: Path, S: dict, F: np.ndarray, traces: dict) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    eps, neurons = S["eps"], S["neurons"]
    fig, ax = plt.subplots(figsize=(6, 3.8))
    im = ax.imshow(F, origin="lower", aspect="auto", cmap="RdYlGn", vmin=0, vmax=1)
    ax.set_xticks(range(len(eps)), [f"{e:g}" for e in eps])
    ax.set_yticks(range(len(neurons)), [str(n) for n in neurons])
    for a in range(F.shape[0]):
        for b in range(F.shape[1]):
            ax.text(b, a, f"{F[a, b]:.2f}", ha="center", va="center", fontsize=8)
    ax.set_xlabel("neuron init size eps (N(0, eps^2 I))")
    ax.set_ylabel("neurons per head")
    ax.set_title("fraction of runs solving every sample (simultaneous)", fontsize=9)
    fig.colorbar(im, ax=ax, label="solved fraction")
    fig.tight_layout()
    fig.savefig(out / "phase_diagram.png", dpi=120)
    plt.close(fig)

    fig, axs = plt.subplots(1, 2, figsize=(10, 3.6), sharex=True)
    for i, (lab, v) in enumerate(traces.items()):
        axs[0].plot(v["t"], v["dead_pairs_over_time"], color=f"C{i}", label=lab)
        axs[1].plot(v["t"], v["dead_samples_over_time"], color=f"C{i}", label=lab)
    axs[0].set_ylabel("dead (sample, head) pairs: ReLU'(u) = 0")
    axs[1].set_ylabel("samples dead on BOTH heads (no gradient)")
    axs[0].set_title("at t = 0 all 16 pairs sit at the kink u = 0", fontsize=9)
    for a in axs:
        a.set_xlabel("t")
        a.set_xscale("symlog", linthresh=10.0)
    axs[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "dead_set.png", dpi=120)
    plt.close(fig)
    return ["phase_diagram.png", "dead_set.png"]
