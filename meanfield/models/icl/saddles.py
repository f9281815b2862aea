"""Zhang, Singh, Latham, Saxe, "Training dynamics of in-context learning in
linear attention" (ICML 2025, arXiv 2501.16265): the claims of
``meanfield/models/icl_saddles.toml``.

Three runs of the description (GD or flow on the exact population loss):

* separate rank-one keys and queries from the authors' small random init, run
  by the explicit rank-one network (``explicit_run``) and by the engine's
  width-1 Gram state from the same init, which must stay rank one (``rank_leak``)
  and equal the network's loss (``engine_network_gap``)
  (k_h, q_h, v_h iid N(0, s^2) on the x entries, v_h's y entry N(0, s^2),
  k_h's y entry and v_h's x entries 0, as in their code): saddle-to-saddle,
  the loss visiting the plateaus L_0 > L_1 > ... > L_d (``theory.plateau_levels``)
  in order, one principal component of Lambda learned per drop, largest
  eigenvalue first (their Section 4 and figures: shown);
* the same heads from the aligned init (head h on eigenvector e_h: k = q = u0 e_h,
  v_y = u0), where the dynamics reduce exactly to one scalar ODE per head,
  du/dt = u^2 (b_h - a_h u^3) (their reduction to scalar ODEs: proved), run by
  the engine's gradient flow and held against the ODE's closed-form quadrature
  (``theory.aligned_time_to``);
* merged W^{KQ} heads (``--kq merged``) from a small random init: one abrupt
  drop from L_0 to L* with no intermediate plateau (their Section 3: two fixed
  points; shown).

Measurements (``common``, fixed before any run): a plateau's band is
BAND_FRACTION = 1/4 of the gap to its nearest neighbouring level; it is visited
when the loss stays in it for at least DWELL_FRACTION = 1/2 of its entry time;
its measured level is the loss at the geometric middle of that stay; the
transition into level m is the first crossing of the midpoint (L_{m-1} + L_m)/2;
component i counts as learned when the predictor's coefficient on e_i reaches
LEARNED_FRACTION = 1/2 of its value at the global minimum (linear
interpolation between records). A crossing is bracketed by two records, so a
measured time is within one record interval of the run's own crossing: that
interval plus the flow's rtol x t is the tolerance of the scalar-ODE times.
"""

from __future__ import annotations


import numpy as np

from . import common, theory

RTOL = 1e-9
#: the full check differs from the quick one by a second seed of the random init, a longer random run and
#: finer records of the aligned flow
SETTINGS = {
    "quick": {"s": 0.05, "u0": 0.05, "seeds": [0], "separate": {"steps": 16000}, "aligned": {"t_end": 2600.0, "record_dt": 2.0},
              "merged": {"steps": 4000}},
    "full": {"s": 0.05, "u0": 0.05, "seeds": [0, 1], "separate": {"steps": 40000},
             "aligned": {"t_end": 2600.0, "record_dt": 0.5}, "merged": {"steps": 4000}},
}
#: an engine state compared with a rank-one network must be one: |second eigenvalue| / top <= this
RANK_LEAK_TOL = 1e-6
#: the engine's width-1 run against the explicit network from the same init: losses at every record to this
#: relative error (the two differ by rounding only, ~1e-13 measured over 16000 steps; docs/engine.md)
ENGINE_RTOL = 1e-9
#: the final loss of a run that learns every component: the global minimum L_d to this relative error
END_RTOL = 1e-6


def _offsets(desc):
    from ...engine import reduce

    lay = reduce.layout(desc)
    return lay, reduce


def paper_weights(desc, kind: str, s: float, seed: int = 0) -> list:
    """The weights of the check's inits (module docstring), head by head:
    {"k", "q", "v"} (P each) for separate heads, {"W" (P, P), "v"} for merged ones.

    Parameters
    ----------
    desc : Description
        An icl_saddles description.
    kind : str
        "random" (the authors' init, scale s, seeded) or "aligned" (head h on
        the h-th eigenvector of Lambda, k = q = s e_h, v_y = s; separate heads only).
    s : float
        Init scale (u0 for aligned).
    seed : int

    Returns
    -------
    list of dict

    Example
    -------
    >>> # paper_weights(desc, "aligned", 0.05)[0]["k"]
    """
    law = desc.data.extra["population"]["law"]
    d, P = law.d, law.P
    _, U = theory.eigen(law.Lambda)
    rng = np.random.default_rng(seed)
    out = []
    for k, h in enumerate(desc.model.heads):
        v = np.zeros(P)
        if kind == "aligned":
            if h.kq != "separate" or desc.init.width != 1:
                raise ValueError("paper_weights: the aligned init is for separate rank-one heads")
            # one head on each eigenvector; heads beyond d start at 0 (a fixed point they never leave)
            kx = qx = s * U[:, k] if k < d else np.zeros(d)
            v[d] = s if k < d else 0.0
        else:
            kx, qx = s * rng.standard_normal(d), s * rng.standard_normal(d)
            v[d] = s * rng.standard_normal()
        if h.kq == "separate":
            out.append({"k": np.concatenate([kx, [0.0]]), "q": np.concatenate([qx, [0.0]]), "v": v})
        else:
            W = np.zeros((P, P))
            W[:d, :d] = s * rng.standard_normal((d, d))
            out.append({"W": W, "v": v})
    return out


def paper_init(desc, kind: str, s: float, seed: int = 0) -> np.ndarray:
    """The engine state of ``paper_weights`` (Q_h = u^T u, u = [k, q], for separate
    heads of width 1; W~ for merged ones; the value vectors).

    Parameters
    ----------
    desc, kind, s, seed
        As :func:`paper_weights`.

    Returns
    -------
    numpy.ndarray
        The engine state.

    Example
    -------
    >>> # y0 = paper_init(desc, "aligned", 0.05); meanfield.engine.runs.run(desc, y0)
    """
    lay, R = _offsets(desc)
    P = desc.P
    y = np.zeros(lay.size)
    for k, (h, w) in enumerate(zip(desc.model.heads, paper_weights(desc, kind, s, seed))):
        if h.kq == "separate":
            N = int(lay.hi[k, R.H_N])
            if desc.init.width != 1 or N != 2 * P:
                raise ValueError("paper_init: separate heads of width 1 with keys and queries only")
            u = np.zeros(N)
            u[int(lay.hi[k, R.H_IK]):int(lay.hi[k, R.H_IK]) + P] = w["k"]
            u[int(lay.hi[k, R.H_IQ]):int(lay.hi[k, R.H_IQ]) + P] = w["q"]
            off = int(lay.hi[k, R.H_QOFF])
            y[off:off + N * N] = np.outer(u, u).ravel()
        else:
            off = int(lay.hi[k, R.H_WOFF])
            y[off:off + P * P] = w["W"].ravel()
        off = int(lay.hi[k, R.H_VOFF])
        y[off:off + P] = w["v"]
    return y


def explicit_run(path, kind: str, s: float, seed: int, **over):
    """The explicit rank-one network (``meanfield.engine.population_oracle.PopulationOracle``:
    weights W_K, W_Q (1 x P), v per head, full-batch GD on the exact population loss)
    from ``paper_weights``: (desc, t, loss, As), As the predictor at every record.

    Parameters
    ----------
    path : Path
    kind, s, seed
        As :func:`paper_weights`.
    **over
        Declared parameters and run knobs (GD only).

    Returns
    -------
    (Description, numpy.ndarray, numpy.ndarray, numpy.ndarray)

    Example
    -------
    >>> # desc, t, loss, As = explicit_run("meanfield/models/icl_saddles.toml", "random", 0.05, 0)
    """
    from ...engine import oracle as orc
    from ...engine.description import load_description
    from ...engine.population_oracle import PopulationOracle

    desc = load_description(str(path), over)
    P = desc.P
    E = np.eye(P)
    params = orc.weights_from_engine_init(desc, E)
    for p, w in zip(params, paper_weights(desc, kind, s, seed)):
        p["WK"], p["WQ"], p["w"] = w["k"][None, :], w["q"][None, :], w["v"][None, None, :]
    tr = desc.training
    every = max(1, int(sum(int(st.length) for st in tr.stages)) // 2000)
    res = PopulationOracle(desc, E).run(params, record_every=every)
    loss = np.asarray(res["loss"], float)
    if not np.all(np.isfinite(loss)):
        raise common.RunFailed("explicit network: non-finite loss")
    d = P - 1
    As = []
    for st in res["states"]:
        T = sum(np.einsum("a,bj->abj", hs["w"].reshape(-1), hs["S"][:, :d]) * float(hs["a"]) for hs in st)
        As.append(common.predictor_of_T(T)[0])
    return desc, np.asarray(res["t"], float) * tr.eta, loss, np.asarray(As)


def rank_leak(desc, r) -> float:
    """The largest |second eigenvalue| / top eigenvalue of any width-1 head's Gram state
    over a run's records (0 for a rank-one network; the engine holds its finite-width
    state on that manifold, ``meanfield.engine.lowrank``, docs/engine.md).

    Parameters
    ----------
    desc, r
        An engine run of separate width-1 heads.

    Returns
    -------
    float

    Example
    -------
    >>> # rank_leak(*run_from(path, "aligned", 0.05, 0, method="flow"))
    """
    from ...engine.lowrank import rank_leak as leak

    lay, _ = _offsets(desc)
    return float(max(leak(y, lay, 1) for y in r.y))


def engine_network_gap(r, t, loss) -> float:
    """The largest relative difference between an engine run's losses and the explicit
    network's (``explicit_run``'s t, loss) at the network's record times.

    Parameters
    ----------
    r : Run
        The engine run (records on a grid containing the network's times).
    t, loss : numpy.ndarray

    Returns
    -------
    float
        inf if a network time has no engine record.

    Example
    -------
    >>> # engine_network_gap(r_e, t_s, l_s)
    """
    rt = np.asarray(r.t, float)
    j = np.searchsorted(rt, t)
    j = np.minimum(j, rt.size - 1)
    if not np.allclose(rt[j], t, rtol=1e-12, atol=1e-9):
        return float("inf")
    return float(np.max(np.abs(np.asarray(r.loss)[j] - loss) / np.maximum(np.abs(loss), 1e-300)))


def run_from(path, kind: str, s: float, seed: int, **over):
    """Load the description with ``over``, run it from ``paper_init``; (desc, run).

    Parameters
    ----------
    path : Path
    kind, s, seed
        As ``paper_init``.
    **over
        Declared parameters and run knobs.

    Returns
    -------
    (Description, Run)

    Example
    -------
    >>> # desc, r = run_from('meanfield/models/icl_saddles.toml', 'aligned', 0.05, 0)
    """
    from ...engine.description import load_description
    from ...engine.runs import run

    desc = load_description(str(path), over)
    r = run(desc, y0=paper_init(desc, kind, s, seed))
    if r.status != "complete":
        raise common.RunFailed(f"engine run {r.status}: {r.message}")
    return desc, r


def learned_times(t, As, Lam, N, Sw=None, sigma=0.0) -> list:
    """The first time each component's coefficient reaches LEARNED_FRACTION (interpolated; None if never).

    Parameters
    ----------
    t : array_like
        Record times.
    As : array_like
        Predictors (R, d, d).
    Lam, N, Sw, sigma
        The law.

    Returns
    -------
    list of float or None

    Example
    -------
    >>> [round(t, 6) for t in learned_times([0.0, 1.0], np.array([[[0.0]], [[1.0]]]), np.eye(1), 10**9)]
    [0.5]
    """
    c = np.array([common.components_learned(A, Lam, N, Sw, sigma) for A in As])
    return [common._crossing(t, -c[:, i], -common.LEARNED_FRACTION) for i in range(c.shape[1])]


def _law(desc):
    return desc.data.extra["population"]["law"]


def measure_separate(desc, t, loss, As) -> dict:
    """Plateau table and learning order of a separate-head run.

    Parameters
    ----------
    desc, r
        A separate-head run.

    Returns
    -------
    dict

    Example
    -------
    >>> # measure_separate(*run_from(path, 'random', 0.05, 0))
    """
    law = _law(desc)
    Lam, Sw = np.asarray(law.Lambda), np.asarray(law.Sigma_w)
    levels = theory.plateau_levels(Lam, law.N, Sw, law.sigma)
    table = common.plateau_table(t, loss, levels)
    tl = learned_times(t, As, Lam, law.N, Sw, law.sigma)
    return {"levels": levels, "tail_sums": theory.tail_sums(Lam), "table": table, "t_learned": tl,
            "eigenvalues": theory.eigen(Lam)[0], "loss_end": float(loss[-1]), "t": t, "loss": loss}


def separate_ok(m: dict) -> tuple[bool, dict]:
    """separate_ok.

    Parameters
    ----------
    m : dict
        ``measure_separate``.

    Returns
    -------
    (bool, dict)
        Overall and per criterion.

    Example
    -------
    >>> # separate_ok(measure_separate(desc, r))
    """
    rows = m["table"]
    in_band = all(row["measured"] is not None and abs(row["measured"] - row["predicted"]) <= row["band"]
                  for row in rows)
    te = [row["t_enter"] for row in rows]
    ordered = all(a is not None for a in te) and all(a < b for a, b in zip(te, te[1:]))
    tl = m["t_learned"]
    order = all(a is not None for a in tl) and all(a < b for a, b in zip(tl, tl[1:]))
    end = theory.relerr(m["loss_end"], float(m["levels"][-1])) <= END_RTOL
    parts = {"measured_levels_in_band": in_band, "plateaus_in_order": ordered,
             "components_learned_in_eigenvalue_order": order, "ends_at_global_minimum": end}
    return all(parts.values()), parts


def measure_aligned(desc, r, u0: float) -> dict:
    """Measured vs scalar-ODE learning times of an aligned-init flow run.

    Parameters
    ----------
    desc, r
        An aligned-init flow run.
    u0 : float

    Returns
    -------
    dict

    Example
    -------
    >>> # measure_aligned(desc, r, 0.05)
    """
    law = _law(desc)
    Lam, Sw = np.asarray(law.Lambda), np.asarray(law.Sigma_w)
    b, a = theory.aligned_head_rates(Lam, law.N, Sw, law.sigma)
    pred = [theory.aligned_time_to(bi, ai, u0, common.LEARNED_FRACTION) for bi, ai in zip(b, a)]
    As, _ = common.predictor_series(r)
    meas = learned_times(r.t, As, Lam, law.N, Sw, law.sigma)
    dt = float(np.max(np.diff(r.t)))
    tol = [dt + RTOL * p * 10 for p in pred]
    levels = theory.plateau_levels(Lam, law.N, Sw, law.sigma)
    return {"b": b, "a": a, "u0": u0, "t_pred": pred, "t_meas": meas, "tol": tol, "record_interval": dt,
            "table": common.plateau_table(r.t, r.loss, levels), "levels": levels, "loss_end": float(r.loss[-1])}


def aligned_ok(m: dict) -> bool:
    """aligned_ok.

    Parameters
    ----------
    m : dict
        ``measure_aligned`` (t_meas, t_pred, tol).

    Returns
    -------
    bool

    Example
    -------
    >>> aligned_ok({'t_meas': [1.0], 't_pred': [1.5], 'tol': [1.0]})
    True
    """
    return all(tm is not None and abs(tm - tp) <= tol for tm, tp, tol in zip(m["t_meas"], m["t_pred"], m["tol"]))


def measure_merged(desc, r) -> dict:
    """measure_merged.

    Parameters
    ----------
    desc, r
        A merged-head run.

    Returns
    -------
    dict

    Example
    -------
    >>> # measure_merged(desc, r)
    """
    law = _law(desc)
    Lam, Sw = np.asarray(law.Lambda), np.asarray(law.Sigma_w)
    sep_levels = theory.plateau_levels(Lam, law.N, Sw, law.sigma)
    table = common.plateau_table(r.t, r.loss, sep_levels)
    return {"levels": sep_levels, "table": table, "loss_end": float(r.loss[-1]),
            "L_star": theory.min_loss(Lam, law.N, Sw, law.sigma)}


def merged_ok(m: dict) -> tuple[bool, dict]:
    """merged_ok.

    Parameters
    ----------
    m : dict
        ``measure_merged``.

    Returns
    -------
    (bool, dict)

    Example
    -------
    >>> # merged_ok(measure_merged(desc, r))
    """
    rows = m["table"]
    parts = {"starts_on_L0": bool(rows[0]["visited"]),
             "no_intermediate_plateau": not any(row["visited"] for row in rows[1:-1]),
             "ends_at_global_minimum": theory.relerr(m["loss_end"], m["L_star"]) <= END_RTOL}
    return all(parts.values()), parts


def _f(x, fmt="{:.6g}"):
    return "-" if x is None else fmt.format(x)


def table_markdown(sep: dict, ali: dict, mer: dict) -> str:
    """The saddle-to-saddle table: predicted and measured plateau levels and times.

    Parameters
    ----------
    sep, ali, mer : dict
        The three runs' measurements.

    Returns
    -------
    str

    Example
    -------
    >>> # table_markdown(sep, ali, mer)
    """
    lines = ["## Saddle-to-saddle table", "",
             "Levels: predicted L_m = (1/2)(tr Lambda - sum_{i<=m} lambda_i^2/Gamma_i) (exact at this N), its "
             "N -> infinity limit (the tail sum (1/2) sum_{i>m} lambda_i), and the measured level (loss at the "
             "geometric middle of the stay in the band |L - L_m| <= 1/4 gap). Times: t_enter = first record in "
             "the band; t_trans = first crossing of (L_{m-1} + L_m)/2; t_learn(m) = component m's coefficient "
             "reaching 1/2 of its optimum, measured (engine) and, for the aligned init, predicted by the scalar "
             "ODE du/dt = u^2 (b - a u^3) (quadrature).", "",
             "| m | lambda_m | L_m predicted | tail sum | random init: measured | t_enter | t_trans | t_learn | "
             "aligned: measured | t_learn measured | t_learn predicted | merged: visited |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    ev = list(sep["eigenvalues"])
    for m, row in enumerate(sep["table"]):
        ar = ali["table"][m]
        lam = ev[m - 1] if m else None
        tl = sep["t_learned"][m - 1] if m else None
        tam = ali["t_meas"][m - 1] if m else None
        tap = ali["t_pred"][m - 1] if m else None
        lines.append(f"| {m} | {_f(lam)} | {row['predicted']:.6g} | {sep['tail_sums'][m]:.6g} | "
                     f"{_f(row['measured'])} | {_f(row['t_enter'])} | {_f(row['t_transition'])} | {_f(tl)} | "
                     f"{_f(ar['measured'])} | {_f(tam)} | {_f(tap)} | {'yes' if mer['table'][m]['visited'] else 'no'} |")
    return "\n".join(lines) + "\n"


def _rows(table):
    return [{k: common.jl(v) for k, v in row.items()} for row in table]


def check(path, out, quick: bool = False, log=print):
    """The ZSLS claims on the description at ``path`` (icl_saddles.toml as shipped).

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
    >>> # meanfield model check icl_saddles --quick --out DIR
    """
    from ...core.report import Claim, status

    S = SETTINGS["quick" if quick else "full"]
    log("[check] icl_saddles: separate rank-one heads, the authors' random init, the explicit network's GD on the "
        "population (and the engine on the same init) ...")
    try:
        seps = []
        leaks, gaps = [], []
        for seed in S["seeds"]:
            d_s, t_s, l_s, A_s = explicit_run(path, "random", S["s"], seed, **S["separate"])
            seps.append(measure_separate(d_s, t_s, l_s, A_s))
            every = max(1, int(S["separate"]["steps"]) // 2000)  # explicit_run's record grid
            d_e, r_e = run_from(path, "random", S["s"], seed, record_every=every, **S["separate"])  # same init
            leaks.append(rank_leak(d_e, r_e))
            gaps.append(engine_network_gap(r_e, t_s, l_s))
        d_a, r_a = run_from(path, "aligned", S["u0"], 0, method="flow", rtol=RTOL, atol=1e-14, **S["aligned"])
        d_m, r_m = run_from(path, "random", S["s"], 0, kq="merged", **S["merged"])
    except common.RunFailed as e:
        st = {"settings": S}
        return [common.failed_claim(n, src, "ZSLS (see docs/models.md 4c).", e, st) for n, src in
                (("zsls_separate_plateau_levels", "shown"), ("zsls_separate_plateaus_rested_on", "shown"),
                 ("zsls_aligned_scalar_odes", "proved"), ("zsls_merged_single_drop", "shown"))], {
            "summary": "Zhang, Singh, Latham, Saxe (ICML 2025): a run did not complete."}
    sep = seps[0]
    oks = [separate_ok(m) for m in seps]
    same = [lk <= RANK_LEAK_TOL and g <= ENGINE_RTOL for lk, g in zip(leaks, gaps)]
    ok_s = all(o for o, _ in oks) and all(same)
    parts_s = [p | {"engine_equals_network_same_init": sm} for (_, p), sm in zip(oks, same)]
    ok_r = all(row["visited"] for m in seps for row in m["table"])
    for seed, m in zip(S["seeds"], seps):
        log(f"[check]   seed {seed}: plateaus rested on {[row['visited'] for row in m['table']]}, "
            f"components learned at {m['t_learned']}")
    log("[check] icl_saddles: separate rank-one heads, aligned init, gradient flow ...")
    ali = measure_aligned(d_a, r_a, S["u0"])
    ali["rank_leak"] = rank_leak(d_a, r_a)
    ok_a = aligned_ok(ali) and ali["rank_leak"] <= RANK_LEAK_TOL
    log(f"[check]   learning times measured {ali['t_meas']}, predicted {ali['t_pred']}")
    log("[check] icl_saddles: merged W^KQ heads, small random init, GD ...")
    mer = measure_merged(d_m, r_m)
    ok_m, parts_m = merged_ok(mer)
    tr = d_s.training
    law = _law(d_s)
    setting = {"d": law.d, "N": law.N, "Lambda_eigenvalues": common.jl(sep["eigenvalues"]), "heads": len(d_s.model.heads),
               "width": d_s.init.width, "population": "exact (closed-form Gaussian moments)",
               "loss": "(1/2) E[(yhat - y_q)^2]"}
    claims = [
        Claim("zsls_separate_plateau_levels", status(ok_s),
              "Separate rank-one keys and queries (ZSLS Section 4, their rank-one ATTN_S experiments): from a small "
              "random init the loss passes every plateau L_m = (1/2)(tr Lambda - sum_{i<=m} lambda_i^2/Gamma_i) (the "
              "tail sums (1/2) sum_{i>m} lambda_i as N -> infinity), m = 0..d, in order, the level measured inside "
              "its band (1/4 of the gap to the nearest level); each drop learns one principal component of Lambda, "
              "largest eigenvalue first (in-context principal component regression: coefficient >= 1/2 of its "
              f"optimum), and the run ends at the global minimum L_d (to {END_RTOL:g} relative). The engine's "
              "width-1 Gram run from the same init stays rank one (|lambda_2|/lambda_1 <= "
              f"{RANK_LEAK_TOL:g}, projected every step: docs/engine.md, 'Finite width') and its loss equals the "
              f"explicit network's at every record to {ENGINE_RTOL:g} relative.",
              setting | {"init": f"authors' random init, s = {S['s']}", "method": tr.method, "eta": tr.eta},
              {"seeds": S["seeds"], "run": "the explicit rank-one network (meanfield.engine.population_oracle."
               "PopulationOracle), exact population gradient, GD, and the engine from the same init", "engine_rank_leak_same_init": leaks,
               "engine_vs_network_loss_rel_max": gaps, "engine_rtol": ENGINE_RTOL, "rank_leak_tol": RANK_LEAK_TOL,
               "criteria": parts_s, "tables": [_rows(m["table"]) for m in seps],
               "t_learned": [m["t_learned"] for m in seps], "loss_end": [m["loss_end"] for m in seps]},
              None, "shown"),
        Claim("zsls_separate_plateaus_rested_on", status(ok_r),
              "Saddle-to-saddle (ZSLS Section 4, their figures): the loss rests on every plateau, i.e. stays in its "
              "band for at least 1/2 of the time it took to reach it (a span >= log 1.5 on a log-time axis; the "
              "first level from the start, the last to the end). Dwell / entry time per level (seed by seed): "
              + "; ".join(", ".join(f"L_{row['m']}: {row['dwell']:.4g}/{_f(row['t_enter'])}" for row in m["table"])
                          for m in seps) + ".",
              setting | {"init": f"authors' random init, s = {S['s']}", "method": tr.method, "eta": tr.eta},
              {"seeds": S["seeds"], "visited": [[row["visited"] for row in m["table"]] for m in seps],
               "dwell": [[row["dwell"] for row in m["table"]] for m in seps],
               "t_enter": [[row["t_enter"] for row in m["table"]] for m in seps],
               "dwell_fraction": common.DWELL_FRACTION, "t_learned": [m["t_learned"] for m in seps],
               "mechanism_if_failed": "a level is crossed without rest when the next component escapes its saddle "
                                      "soon after the previous one: with a random init each escape time is set by "
                                      "the init's projection on that component (~ 1/(lambda^2 u_proj)), which can "
                                      "bring neighbouring escapes close (t_learned)"},
              None, "shown"),
        Claim("zsls_aligned_scalar_odes", status(ok_a),
              "Separate rank-one heads from the aligned init (head h on Lambda's h-th eigenvector, k = q = u0 e_h, "
              "v_y = u0) evolve by independent scalar ODEs du/dt = u^2 (b_h - a_h u^3), b_h = lambda_h^2, "
              "a_h = lambda_h^2 Gamma_h (ZSLS Section 4: the reduction to scalar ODEs). The engine's gradient flow "
              f"(rtol {RTOL:g}) learns component h (coefficient 1/2 of its optimum) at the time the ODE's "
              "quadrature gives, within one record interval plus 10 rtol t.",
              setting | {"init": f"aligned, u0 = {S['u0']}", "method": "flow", "rtol": RTOL},
              {k: common.jl(ali[k]) for k in ("b", "a", "u0", "t_pred", "t_meas", "tol", "record_interval",
                                              "loss_end", "rank_leak")} | {"rank_leak_tol": RANK_LEAK_TOL},
              None, "proved"),
        Claim("zsls_merged_single_drop", status(ok_m),
              "Merged key-query W^{KQ} heads (ZSLS Section 3: two fixed points, the zero saddle and the global "
              "minimum): from a small random init the loss leaves L_0 in a single abrupt drop to the global minimum "
              "L*, resting on none of the separate parametrisation's intermediate plateaus L_1..L_{d-1} (same bands "
              f"and dwell rule), and ends at L* (to {END_RTOL:g} relative).",
              setting | {"init": f"small random W^KQ_xx, v_y (s = {S['s']})", "kq": "merged"},
              {"criteria": parts_m, "table": _rows(mer["table"]), "loss_end": mer["loss_end"], "L_star": mer["L_star"]},
              None, "shown"),
    ]
    md = table_markdown(sep, ali, mer)
    (out / "saddles_table.md").write_text(md)
    return claims, {"summary": "Zhang, Singh, Latham, Saxe (ICML 2025), engine runs of meanfield/models/icl_saddles.toml.",
                    "markdown": md}
