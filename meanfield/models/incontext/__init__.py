"""Huang, Cheng, Liang, "In-context convergence of transformers" (ICML 2024):
the exact population over prompts and an independent numpy reference.

Setting (see docs/models.md for every convention):
- K orthonormal features v_1..v_K (d = K, Gram = identity); each of the N
  context tokens x_i and the query x_q is v_k with probability p_k, iid.
- task vector w ~ N(0, I_d), y_i = <w, x_i>; prompt embedding
  E = [x_1 .. x_N x_q; y_1 .. y_N 0]; W^{KQ} = [[Q, 0], [0, 0]],
  W^{PV} = [[0, 0], [0, 1]] (fixed), so yhat = sum_i attn_i y_i with
  attn_i = softmax_i(x_i^T Q x_q) over the N context tokens (the query does not
  attend to itself; ``query_in_softmax=True`` adds it to the denominator with
  value y = 0, as the full (N+1)-column softmax of E^T W^{KQ} E would).
- the task vector integrated out in closed form:
  E_w (yhat - <w, x_q>)^2 = || sum_i attn_i x_i - x_q ||^2, so with query v_k
  and counts c (c_n context tokens equal to v_n), attn on feature n is
  a_n = c_n e^{Q~[n,k]} / sum_m c_m e^{Q~[m,k]} and the loss of the prompt is
  (1 - a_k)^2 + sum_{n != k} a_n^2.  L = 1/2 E over prompts.
- Q~ = V^T Q V (K x K, Q~[n, k] = v_n^T Q v_k: key feature n, query feature k);
  A_k = Q~[k, k], B_{k,n} = Q~[n, k] (n != k); Q^{(0)} = 0; GD on Q with step eta
  maps Q~ exactly to Q~ - eta dL/dQ~ (orthonormal features: Gamma = I).

The population is exact and finite: a prompt is, for this permutation-invariant
model, its count vector c (a composition of N into K non-negative parts,
enumerated by stars and bars) and its query feature k, with probability
multinomial(N; c) prod_n p_n^{c_n} * p_k.
"""

from __future__ import annotations

import itertools
import math

import numpy as np


def compositions(N: int, K: int) -> np.ndarray:
    """All count vectors c in N^K with sum N (stars and bars), shape (C(N+K-1, K-1), K),
    in lexicographic order of the bar positions."""
    if K < 1 or N < 0:
        raise ValueError("compositions: need K >= 1 and N >= 0")
    out = []
    for bars in itertools.combinations(range(N + K - 1), K - 1):
        prev, c = -1, []
        for b in bars:
            c.append(b - prev - 1)
            prev = b
        c.append(N + K - 1 - prev - 1)
        out.append(c)
    return np.asarray(out, dtype=np.int64)


def feature_probs(K: int, p=None, *, p1=None) -> np.ndarray:
    """Feature probabilities p_k: uniform (balanced) by default; ``p1`` gives the
    dominant feature v_1 probability p1 and the others (1 - p1)/(K - 1); or ``p`` explicit."""
    if p is not None:
        p = np.asarray(p, float)
        if p.shape != (K,) or np.any(p <= 0) or abs(p.sum() - 1) > 1e-12:
            raise ValueError(f"p: {K} positive probabilities summing to 1 expected; got {p.tolist()}")
        return p
    if p1 is not None:
        if not 0 < p1 < 1:
            raise ValueError(f"p1: must be in (0, 1); got {p1}")
        return np.array([p1] + [(1 - p1) / (K - 1)] * (K - 1))
    return np.full(K, 1.0 / K)


def enumerate_prompts(K: int, N: int, p) -> dict:
    """The exact prompt population.  ``counts`` (nC, K): every composition c of N;
    ``wc`` (nC,): multinomial(N; c) prod p_n^{c_n}; ``p`` (K,): the query law.
    Prompt (c, k) has probability wc[c] * p[k]; ``weight`` (nC, K) is that table."""
    p = np.asarray(p, float)
    C = compositions(N, K)
    logmult = math.lgamma(N + 1) - np.array([sum(math.lgamma(ci + 1) for ci in c) for c in C])
    with np.errstate(divide="ignore", invalid="ignore"):
        logp = np.where(C > 0, C * np.log(p)[None, :], 0.0).sum(axis=1)
    wc = np.exp(logmult + logp)
    return {"counts": C, "wc": wc, "p": p, "weight": wc[:, None] * p[None, :], "N": N, "K": K}


def attention(Qt: np.ndarray, pop: dict, query_in_softmax: bool = False) -> np.ndarray:
    """a[c, n, k]: total attention of the query v_k of a prompt with counts c on its
    context tokens of feature n (shape (nC, K, K))."""
    C = pop["counts"].astype(float)  # (nC, K)
    z = np.broadcast_to(Qt[None, :, :], (len(C), *Qt.shape))  # z[c, n, k] = Q~[n, k]
    present = (C > 0)[:, :, None]
    mx = np.max(np.where(present, z, -np.inf), axis=1, keepdims=True)  # (nC, 1, K)
    diagQ = np.diagonal(Qt)[None, None, :]
    if query_in_softmax:
        mx = np.maximum(mx, diagQ)
    e = C[:, :, None] * np.exp(z - mx)
    den = e.sum(axis=1, keepdims=True)
    if query_in_softmax:
        den = den + np.exp(diagQ - mx)
    return e / den


def _residual(a):
    K = a.shape[-1]
    r = a.copy()
    r[:, np.arange(K), np.arange(K)] -= 1.0  # r[c, n, k] = a - 1[n == k]
    return r


def prompt_losses(Qt, pop, query_in_softmax=False):
    """(nC, K): E_w squared error ||sum_i attn_i x_i - x_q||^2 of prompt (c, k) (no 1/2)."""
    r = _residual(attention(Qt, pop, query_in_softmax))
    return np.sum(r * r, axis=1)


def population_loss(Qt, pop, query_in_softmax=False) -> float:
    """L(Q) = 1/2 E_prompts E_w (yhat - <w, x_q>)^2."""
    return 0.5 * float(np.sum(pop["weight"] * prompt_losses(Qt, pop, query_in_softmax)))


def query_losses(Qt, pop, query_in_softmax=False, *, present_only=False) -> np.ndarray:
    """L_k = 1/2 E[squared error | x_q = v_k], shape (K,).  ``present_only``: conditioned
    also on the query feature appearing in the context (c_k >= 1), the event on which
    the paper's near-zero-error statements are made (a prompt without v_k in its
    context has error >= 1 whatever Q is)."""
    l = prompt_losses(Qt, pop, query_in_softmax)
    w = pop["wc"][:, None] * np.ones_like(l)
    if present_only:
        w = w * (pop["counts"] > 0)
    return 0.5 * np.sum(w * l, axis=0) / np.sum(w, axis=0)


def population_grad(Qt, pop, query_in_softmax=False) -> np.ndarray:
    """dL/dQ~ (K x K), by hand: for a prompt with query k, logits z_n = Q~[n, k],
    softmax with multiplicities, r = a - e_k, dl/da = r (l = 1/2 ||r||^2),
    dl/dz_n = a_n (r_n - <a, r>); the query's own softmax share s (when present)
    carries value 0 and logit Q~[k, k]: it adds -s <a, r> to dl/dz_k."""
    K = Qt.shape[0]
    a = attention(Qt, pop, query_in_softmax)
    r = _residual(a)
    ar = np.sum(a * r, axis=1, keepdims=True)  # (nC, 1, K)
    gz = a * (r - ar)
    if query_in_softmax:
        s = 1.0 - a.sum(axis=1)  # (nC, K)
        gz[:, np.arange(K), np.arange(K)] += -s * ar[:, 0, :]
    return np.sum(pop["weight"][:, None, :] * gz, axis=0)


def gd(pop, K, eta, steps, record_every=1, Qt0=None, query_in_softmax=False):
    """Reference GD on Q~ (exact for GD on Q with orthonormal features).
    Returns dict t (steps recorded), Qt (T, K, K), loss (T,), Lk (T, K)."""
    Qt = np.zeros((K, K)) if Qt0 is None else np.array(Qt0, float)
    ts, Qs, Ls, Lks = [], [], [], []
    for t in range(steps + 1):
        if t % record_every == 0 or t == steps:
            ts.append(t)
            Qs.append(Qt.copy())
            Lks.append(query_losses(Qt, pop, query_in_softmax))
            Ls.append(population_loss(Qt, pop, query_in_softmax))
        if t < steps:
            Qt = Qt - eta * population_grad(Qt, pop, query_in_softmax)
    return {"t": np.asarray(ts), "Qt": np.asarray(Qs), "loss": np.asarray(Ls), "Lk": np.asarray(Lks)}


def A_B(Qt):
    """A[..., k] = Q~[k, k]; B[..., k, n] = Q~[n, k] (query k, key n; the diagonal is NaN)."""
    Qt = np.asarray(Qt)
    K = Qt.shape[-1]
    A = np.diagonal(Qt, axis1=-2, axis2=-1).copy()
    B = np.swapaxes(Qt, -1, -2).copy()
    B[..., np.arange(K), np.arange(K)] = np.nan
    return A, B


# ---------------------------------------------------------------- phases and claims

def phase_boundaries(A, B, k, *, tie_rel=1e-9, persist=None) -> list[dict]:
    """Phase boundaries of query feature k along a GD run recorded every step.

    The paper says its phases are set by "the competing strengths of two types of
    attention weights" (A_k against the B_{k,n}).  Measured here, fixed before
    looking at any run: with the per-step rates dA = A_k(t+1) - A_k(t) and
    dB_n = -(B_{k,n}(t+1) - B_{k,n}(t)) (the decrease of a non-target weight),
    a boundary is a step where
      (a) dA switches between increasing and decreasing (the target weight's growth
          turns from accelerating to decelerating or back), or
      (b) the ranking of the competing strengths {dA} u {dB_n} changes
          (rates equal to ``tie_rel`` relative are one entry: symmetric features);
    a change counts only if the new state then holds for ``persist`` steps
    (default 1% of the run, at least 2) so that floating-point chatter between
    nearly equal rates is not a phase.  Returns [{"t": step, "kind": ...}, ...]."""
    A = np.asarray(A, float)
    B = np.asarray(B, float)
    T = A.shape[0]
    K = A.shape[1]
    if persist is None:
        persist = max(2, T // 100)
    dA = np.diff(A[:, k])
    others = [n for n in range(K) if n != k]
    dB = -np.diff(B[:, k, :][:, others], axis=0)  # (T-1, K-1)
    acc = np.sign(np.diff(dA))  # (T-2,)
    # ranking state: tuple of sorted groups
    def ranking(i):
        vals = [("A", dA[i])] + [(f"B{n + 1}", dB[i, j]) for j, n in enumerate(others)]
        vals.sort(key=lambda x: -x[1])
        groups, cur = [], [vals[0]]
        for name, v in vals[1:]:
            ref = cur[-1][1]
            if abs(v - ref) <= tie_rel * max(abs(v), abs(ref), 1e-300):
                cur.append((name, v))
            else:
                groups.append(tuple(sorted(x[0] for x in cur)))
                cur = [(name, v)]
        groups.append(tuple(sorted(x[0] for x in cur)))
        return tuple(groups)

    ranks = [ranking(i) for i in range(T - 1)]
    events = []

    def scan(states, kind, offset):
        cur = states[0]
        i = 1
        while i < len(states):
            if states[i] != cur and states[i] != 0:
                j = i
                while j < len(states) and states[j] == states[i]:
                    j += 1
                if j - i >= persist:
                    events.append({"t": int(i + offset), "kind": kind,
                                   "from": str(cur), "to": str(states[i])})
                    cur = states[i]
                i = j
            else:
                i += 1

    acc_states = [a for a in acc.tolist()]
    # drop exact zeros (no change): carry the previous sign
    for i in range(1, len(acc_states)):
        if acc_states[i] == 0:
            acc_states[i] = acc_states[i - 1]
    scan(acc_states, "dA_k turns " , 1)
    for e in events:
        if e["kind"].startswith("dA_k"):
            e["kind"] = "growth of A_k " + ("accelerates" if e["to"] == "1.0" else "decelerates")
    scan(ranks, "ranking of the competing rates", 0)
    events.sort(key=lambda e: e["t"])
    return events


def first_below(t, series, eps):
    """First recorded step at which ``series`` <= eps (and stays there); None if never."""
    series = np.asarray(series)
    ok = series <= eps
    if not ok[-1]:
        return None
    bad = np.nonzero(~ok)[0]
    i = 0 if bad.size == 0 else bad[-1] + 1
    return int(t[i])


# ---------------------------------------------------------------- the engine's data

#: the largest exact population prompts() builds (every engine step costs O(sequences x K^2))
MAX_SEQUENCES = 1_000_000


def prompts(features, N: int = 20, p1: float | None = None, p=None) -> dict:
    """Data builder for the engine (``[data] function = "meanfield.models.incontext:prompts"``).

    One sequence per (count vector c, query feature k): positions 1..K are the
    features v_1..v_K with counts c_1..c_K (0 = padding: feature absent), position
    K+1 is the query v_k (count 1; the head reads it with ``query = "last"`` and
    ``query_self = false``, so it is not a key); target e_k (the query token, P
    outputs with ``value = "token"``: the closed-form task-vector average of the
    paper); weight multinomial(N; c) prod p^c * p_k (sums to 1)."""
    K = len(features)
    if K < 2:
        raise ValueError("incontext.prompts: need at least 2 features")
    N = int(N)
    if N < 1:
        raise ValueError(f"incontext.prompts: N must be >= 1; got {N}")
    n_seq = math.comb(N + K - 1, K - 1) * K
    if n_seq > MAX_SEQUENCES:
        raise ValueError(f"N: the exact population of N = {N} tokens over K = {K} features has {n_seq} sequences "
                         f"(C(N + K - 1, K - 1) x K), more than {MAX_SEQUENCES}; choose a smaller N")
    pr = feature_probs(K, p, p1=p1 if p1 else None)  # p1 = 0 (the description's default): balanced
    pop = enumerate_prompts(K, N, pr)
    C = pop["counts"]
    nC = len(C)
    n = nC * K
    tokens = np.zeros((n, K + 1, K))
    counts = np.zeros((n, K + 1))
    target = np.zeros((n, K))
    weight = np.zeros(n)
    names = []
    for ci in range(nC):
        for k in range(K):
            s = ci * K + k
            tokens[s, np.arange(K), np.arange(K)] = 1.0
            counts[s, :K] = C[ci]
            tokens[s, K, k] = 1.0
            counts[s, K] = 1.0
            target[s, k] = 1.0
            weight[s] = pop["wc"][ci] * pr[k]
            names.append(f"c={'.'.join(map(str, C[ci]))}|q={features[k]}")
    return {"tokens": tokens, "counts": counts, "target": target, "weight": weight, "names": names}


# ---------------------------------------------------------------- the check

#: near-zero error level: the paper's theorems bound the prediction error by eps
#: after a time growing like 1/eps; 1e-2 is a >= 30x reduction of the error at
#: Q = 0 (0.39 balanced K = 4) and is reached well inside the horizons below.
EPS = 1e-2
P1_IMBALANCED = 0.55  # dominant feature probability; the K - 1 others share the rest (0.15 each at K = 4)
P1_VARIANTS = (0.4, 0.7)  # other dominant probabilities whose phase counts the report lists
#: quick: N = 12 context tokens (1820 sequences), full: the description's N (20 as shipped: 7084 sequences)
SETTINGS = {"quick": {"eta": 0.5, "steps": 1500, "err_every": 5, "N": 12},
            "full": {"eta": 0.25, "steps": 6000, "err_every": 10, "N": None}}


def _engine_run(raw: dict, eta: float, steps: int):
    from ...engine.api import run as engine_run
    from ...engine.description import description_from_dict

    desc = description_from_dict(raw, {"eta": eta, "steps": steps, "record_every": 1})
    r = engine_run(desc)
    if r.status != "complete":
        raise RuntimeError(f"incontext: engine run {r.status}: {r.message}")
    return desc, r


def check(path, out, quick: bool = False, log=print):
    """The claims of Huang, Cheng, Liang (ICML 2024) on the description at ``path``
    (balanced as shipped) and its imbalanced variant (data.args.p1 = 0.55)."""
    import copy

    from ...engine.description import _read

    S = SETTINGS["quick" if quick else "full"]
    raw = _read(path)
    args = dict(raw.get("data", {}).get("args", {}))
    if raw.get("data", {}).get("function") != "meanfield.models.incontext:prompts":
        from ...core.config import ConfigError

        raise ConfigError("data.function: the incontext check needs meanfield.models.incontext:prompts")
    args.pop("p1", None)
    args.pop("p", None)
    N = int(S["N"] or args.get("N", 20))
    args["N"] = N
    runs = {}
    for label, extra in (("balanced", {}), ("imbalanced", {"p1": P1_IMBALANCED})):
        rw = copy.deepcopy(raw)
        rw["data"]["args"] = dict(args, **extra)
        log(f"[check] incontext {label}: engine GD, eta {S['eta']}, {S['steps']} steps ...")
        desc, r = _engine_run(rw, S["eta"], S["steps"])
        K = desc.P
        pr = feature_probs(K, p1=extra.get("p1"))
        pop = enumerate_prompts(K, N, pr)
        W = np.asarray(r.W)[:, 0]
        A, B = A_B(W)
        t = np.asarray(r.step)
        sub = np.arange(0, len(t), S["err_every"])
        err = np.array([query_losses(W[i], pop, present_only=True) for i in sub])
        err_all = np.array([query_losses(W[i], pop) for i in sub])
        # independent cross-check: the engine's loss against the closed form at a few records
        idx = np.unique(np.linspace(0, len(t) - 1, 7).astype(int))
        xl = max(abs(population_loss(W[i], pop) - r.loss[i]) for i in idx)
        # and one reference GD segment from Q = 0 (the first 200 steps)
        ref = gd(pop, K, S["eta"], min(200, S["steps"]), record_every=1)
        xw = float(np.max(np.abs(ref["Qt"] - W[:len(ref["Qt"])])))
        phases = {k: phase_boundaries(A, B, k) for k in range(K)}
        Teps = {k: first_below(t[sub], err[:, k], EPS) for k in range(K)}
        runs[label] = {"desc": desc, "p": pr, "t": t, "A": A, "B": B, "W": W, "loss": r.loss, "sub": sub,
                       "err": err, "err_all": err_all, "phases": phases, "Teps": Teps,
                       "xcheck_loss": float(xl), "xcheck_W_200": xw}
        log(f"[check]   {label}: T_eps {Teps}, phases {[len(v) + 1 for v in phases.values()]}, "
            f"engine vs closed form: loss {xl:.1e}, W over 200 steps {xw:.1e}")
    # the phase count under other choices (N = 12 for speed): other dominant probabilities (engine),
    # and the other reading of the paper's softmax, the query in the denominator with value 0
    # (the engine's query_self = true would give the query token as its own value: reference GD here)
    variants = {}
    Nv = SETTINGS["quick"]["N"]
    for p1v in P1_VARIANTS:
        rw = copy.deepcopy(raw)
        rw["data"]["args"] = dict(args, N=Nv, p1=p1v)
        log(f"[check] incontext variant p1 = {p1v}, N = {Nv} ...")
        desc, r = _engine_run(rw, S["eta"], S["steps"])
        Av, Bv = A_B(np.asarray(r.W)[:, 0])
        variants[f"p1={p1v},N={Nv}"] = [len(phase_boundaries(Av, Bv, k)) + 1 for k in range(desc.P)]
    for lbl, p1v in (("balanced", None), ("imbalanced", P1_IMBALANCED)):
        K = runs["balanced"]["desc"].P
        log(f"[check] incontext variant query in the softmax ({lbl}, N = {Nv}), reference GD ...")
        popv = enumerate_prompts(K, Nv, feature_probs(K, p1=p1v))
        rv = gd(popv, K, S["eta"], S["steps"], query_in_softmax=True)
        Av, Bv = A_B(rv["Qt"])
        variants[f"query_in_softmax,{lbl},N={Nv}"] = [len(phase_boundaries(Av, Bv, k)) + 1 for k in range(K)]
    runs["variants"] = variants
    fig = _figure(out, runs)
    eta = S["eta"]
    setting = {"K": runs["balanced"]["desc"].P, "N": N, "eta": eta, "steps": S["steps"], "init": "Q = 0",
               "eps": EPS, "population": "exact (compositions of N x query feature)", "query_in_softmax": False}
    claims = claims_from(runs, setting, fig)
    meta = {"summary": "Huang, Cheng, Liang (ICML 2024), engine runs of meanfield/models/incontext.toml.",
            "cross_check": {lbl: {"engine_vs_closed_form_loss": runs[lbl]["xcheck_loss"],
                                  "engine_vs_reference_gd_W_200_steps": runs[lbl]["xcheck_W_200"]}
                            for lbl in ("balanced", "imbalanced")}}
    return claims, meta


#: where the paper's statements were read (issue 26): the abstract of the ICML 2024 version (and arXiv:2310.05249);
#: the full text is indexed (the ICML 2024 proceedings text) but only its opening could be read here
PAPER = ("Huang, Cheng, Liang, In-context convergence of transformers, ICML 2024 (arXiv:2310.05249), abstract: "
         "balanced features, near-zero error 'over two phases of the training dynamics of the attention map'; "
         "imbalanced, the dominant feature's queries converge first, the under-represented ones later, 'via one "
         "and four training phases'; phases set by 'the competing strengths of two types of attention weights'")
#: why the four-phase claim is expected, not proved (issue 26), with the measured evidence added by the check
FOUR_PHASE_EVIDENCE = (
    "The paper's phases are delimited by thresholds of its proof (its body, not readable here: only the abstract "
    "of the ICML 2024 / arXiv:2310.05249 text could be read, the proceedings' full text is indexed but its body "
    "was not reachable). The detector (fixed before any run) counts changes of the rate regime of A_k against "
    "the B_{k,n}: it finds the paper's 2 phases (balanced) and 1 phase (dominant query), and 3, not 4, for the "
    "under-represented queries, with 2 at p1 = 0.4 and 3 at p1 = 0.7 and with the query in the softmax. A "
    "phase boundary of the proof that is a threshold crossing (a weight reaching a level) without a change of "
    "the rates' ranking or of the growth's acceleration is invisible to any rate detector, and the paper's "
    "asymptotic regime (its conditions on K, N, p) may not hold at K = 4: neither 'the detector is wrong' nor "
    "'the description differs' can be decided from the abstract, so the fourth phase cannot be checked here "
    "and the claim is labelled expected; the count measured is reported.")


#: why the phase counts are expected, not proved (issue 26): the paper's phases are those of its proof
PHASES_ARE_THE_PROOFS = (
    "The paper's phases are stages of its proof, delimited by thresholds that its body states (not readable "
    "here); the count measured is the project's rate detector (incontext.phase_boundaries, fixed before any "
    "run), a proxy for them, so the count is expected, not proved, whichever way it comes out. ")
#: the conditions of the theorems that are asymptotic (the paper's body could not be read to state them exactly)
CONDITIONS = ("the theorems' conditions (context length N large against K, a small enough step, Q = 0 at the "
              "start) are asymptotic and not verified at this K and N")


def claims_from(runs: dict, setting: dict, fig=None) -> list:
    """The five claims from measured runs: ``runs["balanced"]`` and
    ``runs["imbalanced"]`` each with ``p``, ``A`` (T, K), ``B`` (T, K, K),
    ``phases`` {k: phase_boundaries(A, B, k)}, ``Teps`` {k: step or None},
    ``err`` (T', K) and ``loss`` (T,).

    Labels by what the paper proves for the algorithm run (GD from Q = 0):
    the convergences (every query to near-zero error; the dominant feature's
    queries first) are its theorems, ``proved``; the phase counts are stages
    of its proof, measured here by a proxy (the rate detector), ``expected``
    (issue 26: the balanced count was labelled proved with the same detector
    whose four-phase count was only expected).

    Parameters
    ----------
    runs : dict
        The measured runs (as :func:`check` builds them).
    setting : dict
        The setting written into every claim.
    fig : str or None
        The figure of the claims.

    Returns
    -------
    list of meanfield.core.report.Claim

    Example
    -------
    >>> [c.name for c in claims_from(_example_runs(), {})][:2]
    ['balanced_near_zero_error', 'balanced_two_phases']
    """
    from ...core.report import Claim, status

    claims = []
    b = runs["balanced"]
    K = len(b["Teps"])
    nph = [len(b["phases"][k]) + 1 for k in range(K)]
    reach = all(b["Teps"][k] is not None for k in range(K))
    claims.append(Claim(
        "balanced_near_zero_error", status(reach),
        "Balanced features (p_k = 1/K): GD from Q = 0 brings every query feature to near-zero prediction error "
        "(<= eps, on prompts whose context contains the query feature) in finite time (the paper's theorem on "
        f"balanced features; {CONDITIONS}). Source: proved: {PAPER}.",
        dict(setting, p="uniform"),
        {"T_eps_step": {f"v{k + 1}": b["Teps"][k] for k in range(K)},
         "error_final": b["err"][-1].tolist(), "loss_final": float(b["loss"][-1])},
        fig, "proved"))
    ok = all(n == 2 for n in nph) and reach
    claims.append(Claim(
        "balanced_two_phases", status(ok),
        "Balanced features: the attention weights go through two phases on the way to near-zero error (the "
        "paper's analysis 'over two phases'). Measured as changes of the competing rates of A_k and B_{k,n} "
        "(incontext.phase_boundaries): 2 phases = 1 boundary. Source: expected: the paper proves two phases of "
        f"its own proof's definition ({PAPER}); the detector's count is a proxy (numbers: evidence).",
        dict(setting, p="uniform"),
        {"phases_per_query": nph,
         "boundaries_step": {f"v{k + 1}": [e["t"] for e in b["phases"][k]] for k in range(K)},
         "boundary_kinds": {f"v{k + 1}": [e["kind"] for e in b["phases"][k]] for k in range(K)},
         "A_B_at_boundaries_query_v1": [{"step": e["t"], "A_1": float(b["A"][e["t"], 0]),
                                         "B_1n": [float(x) for x in b["B"][e["t"], 0]]}
                                        for e in b["phases"].get(0, []) if e["t"] < len(b["A"])],
         "A_final": b["A"][-1].tolist(), "B_final_query_v1": b["B"][-1, 0].tolist(),
         "evidence": PHASES_ARE_THE_PROOFS + f"Measured: {nph} phases per query (the paper's 2 for each)."},
        fig, "expected"))
    m = runs["imbalanced"]
    T1, Tm = m["Teps"][0], [m["Teps"][k] for k in range(1, K)]
    first = T1 is not None and all(x is not None for x in Tm) and T1 < min(Tm)
    claims.append(Claim(
        "imbalanced_dominant_first", status(first),
        "Imbalanced features: GD from Q = 0 brings the query tokens of the dominant feature v1 to near-zero "
        "error first (T_eps(v1) < T_eps(v_k), k > 1), and the under-represented ones later (every query reaches "
        f"eps; the paper's theorem on imbalanced features; {CONDITIONS}). Source: proved: {PAPER}.",
        dict(setting, p=m["p"].tolist()),
        {"T_eps_step": {f"v{k + 1}": m["Teps"][k] for k in range(K)},
         "error_final": m["err"][-1].tolist()},
        fig, "proved"))
    ok = first and len(m["phases"][0]) == 0
    claims.append(Claim(
        "imbalanced_dominant_one_phase", status(ok),
        "Imbalanced features: the dominant feature's queries converge in one phase (no phase boundary of the "
        "competing rates for query v1). Source: expected: the paper proves one phase of its own proof's "
        f"definition ({PAPER}); the detector's count is a proxy (numbers: evidence).",
        dict(setting, p=m["p"].tolist()),
        {"phases_query_v1": len(m["phases"][0]) + 1,
         "boundaries_query_v1": [(e["t"], e["kind"]) for e in m["phases"][0]],
         "evidence": PHASES_ARE_THE_PROOFS + f"Measured: {len(m['phases'][0]) + 1} phase(s) for query v1 "
                                             "(the paper's 1)."},
        fig, "expected"))
    nphm = [len(m["phases"][k]) + 1 for k in range(1, K)]
    ok = all(n == 4 for n in nphm) and all(x is not None for x in Tm)
    claims.append(Claim(
        "imbalanced_underrepresented_four_phases", status(ok),
        "Imbalanced features: the query tokens of the under-represented features v_k (k > 1) reach near-zero "
        "error via four phases of the attention weights (4 phases = 3 boundaries of the competing rates). "
        f"Source: expected: the paper proves four phases of its own definition ({PAPER}), which cannot be "
        "checked here (numbers: evidence).",
        dict(setting, p=m["p"].tolist()),
        {"phases_per_query": {f"v{k + 1}": len(m["phases"][k]) + 1 for k in range(1, K)},
         "boundaries": {f"v{k + 1}": [(e["t"], e["kind"], e["to"]) for e in m["phases"][k]] for k in range(1, K)},
         "A_B_at_boundaries_query_v2": [{"step": e["t"], "A_2": float(m["A"][e["t"], 1]),
                                         "B_2n": [float(x) for x in m["B"][e["t"], 1]]}
                                        for e in m["phases"].get(1, []) if e["t"] < len(m["A"])],
         "T_eps_step": {f"v{k + 1}": m["Teps"][k] for k in range(1, K)},
         "A_final": m["A"][-1].tolist(), "B_final_query_v2": m["B"][-1, 1].tolist(),
         "phases_per_query_other_settings": runs.get("variants", {}),
         "evidence": FOUR_PHASE_EVIDENCE + f" Measured here: {nphm} phases for the queries v2..v{K}."},
        fig, "expected"))
    return claims


def _example_runs(K: int = 4) -> dict:
    """Constructed runs for the example of :func:`claims_from` (no training)."""
    A, B = np.zeros((3, K)), np.zeros((3, K, K))
    base = {"A": A, "B": B, "err": np.zeros((1, K)), "loss": np.zeros(3)}
    return {"balanced": dict(base, p=np.full(K, 1.0 / K), phases={k: [] for k in range(K)},
                             Teps=dict.fromkeys(range(K), 1)),
            "imbalanced": dict(base, p=np.full(K, 1.0 / K), phases={k: [] for k in range(K)},
                               Teps=dict.fromkeys(range(K), 1))}


def _figure(out, runs):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pathlib import Path

    fig, ax = plt.subplots(2, 3, figsize=(15, 8))
    K = runs["balanced"]["A"].shape[1]
    panels = [("balanced", 0, "balanced, query v1"), ("imbalanced", 0, "imbalanced, query v1 (dominant)"),
              ("imbalanced", 1, "imbalanced, query v2 (under-represented)")]
    for j, (lbl, k, title) in enumerate(panels):
        R = runs[lbl]
        eta = R["desc"].training.eta
        tt = R["t"] * eta
        a = ax[0, j]
        a.plot(tt, R["A"][:, k], "k", lw=2, label=f"A_{k + 1}")
        for n in range(K):
            if n != k:
                a.plot(tt, R["B"][:, k, n], label=f"B_{{{k + 1},{n + 1}}}")
        for e in R["phases"][k]:
            a.axvline(e["t"] * eta, color="r", ls=":", lw=1)
        a.set_title(title)
        a.set_xscale("symlog", linthresh=1.0)
        a.set_xlim(left=0)
        a.set_xlabel("time t = eta x step")
        a.legend(fontsize=8)
        b = ax[1, j]
        b.semilogy(R["t"][R["sub"]] * eta, R["err"][:, k], "k", label="error | query feature in context")
        b.semilogy(R["t"][R["sub"]] * eta, R["err_all"][:, k], "k--", lw=1, label="error, all prompts")
        b.axhline(EPS, color="gray", lw=0.8)
        if R["Teps"][k] is not None:
            b.axvline(R["Teps"][k] * eta, color="g", lw=1, label="T_eps")
        for e in R["phases"][k]:
            b.axvline(e["t"] * eta, color="r", ls=":", lw=1)
        b.set_xscale("symlog", linthresh=1.0)
        b.set_xlim(left=0)
        b.set_xlabel("time t = eta x step")
        b.legend(fontsize=8)
    fig.suptitle("Huang, Cheng, Liang: A_k, B_{k,n} and the query error (red dotted: measured phase boundaries)")
    fig.tight_layout()
    p = Path(out) / "incontext_phases.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return str(p)
