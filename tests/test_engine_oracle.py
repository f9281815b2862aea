"""The engine against the explicit network generated from the same description.

``meanfield.engine.oracle`` trains plain numpy weights (W_K, W_Q, M_V in R^{m x d},
readouts r in R^m, neurons w in R^d, merged W in R^{d x d}, signs) with its own
forward and hand-written backward pass on tokens embedded in R^d (d > P,
E^T E = Gamma); the engine (``meanfield.engine.system``) runs the reduced Gram
dynamics. Both start from the same initial weights (the engine's sampled
factors, plus an orthogonal part the loss never sees) and must agree to 1e-10
relative (rounding, amplified over 200 steps by a stable GD: every run checked
here has a monotonically decreasing loss, so nothing amplifies rounding
exponentially) for the mixture description and for random descriptions
covering the class. The oracle itself is checked against finite differences
and, for the mixture description, against today's fast path
(``meanfield.models.mixture.run``), which shares no code with it.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from meanfield.engine import oracle as orc
from meanfield.engine.description import description_from_dict

RTOL = 1e-10
STEPS = 200
WIDTHS = (1, 3, 50)


# ------------------------------------------------------------------ random descriptions

def random_raw(seed: int, m: int | None = 3, eta: float = 0.05, steps: int = STEPS, staged: bool | None = None,
               pad: bool = True, onehot: bool = False, rates: bool = False, heldout: bool = False,
               positions: bool = False) -> dict:
    """A random description within the class (as the TOML table): random dictionary
    Gram, random weighted sequences of different lengths with counts, 1-3 heads
    with random attention/kq/query/value choices, a random loss, signs fixed or
    trainable, and (``staged``) stages training subsets of the groups; ``rates``: learning rates
    per group, per stage and schedules (``meanfield.engine.rates``; drawn from a stream of their own,
    so the rest of the description is the one without rates); ``heldout``: a held-out set
    (``meanfield.engine.heldout``): for even seeds a ``[test]`` table of sequences drawn like the
    training ones from a stream of their own, for odd seeds a seeded ``train_frac`` split of ``[data]``;
    ``positions``: absolute positional features (``meanfield.engine.positions``: added with a random
    Gram to the tokens for even seeds, concatenated for odd) and a causal mask on every head with a
    query at a position (no head may output the token then: its P would change)."""
    rng = np.random.default_rng(seed)
    zero_rng = np.random.default_rng(10_000 + seed)
    P = int(rng.integers(2, 5))
    feats = [f"f{i}" for i in range(P)]
    Lr = 0.3 * rng.normal(size=(P, P)) + np.eye(P)
    gram = (Lr @ Lr.T).tolist()
    loss = ["logistic", "squared", "cross_entropy"][seed % 3]
    C = 1 if loss == "logistic" else (3 if loss == "cross_entropy" else 2)
    heads = []
    for j in range(int(rng.integers(1, 4))):
        value = ["neuron", "linear", "matrix", "token"][(seed + j) % 4]
        h = dict(name=f"h{j}", attention=["softmax", "linear"][(seed + j) % 2],
                 kq=["separate", "merged"][(seed // 2 + j) % 2], query=["mean", "last", "fixed"][(seed + 2 * j) % 3],
                 scale=float(rng.uniform(0.5, 2)), value=value, sign=float(rng.choice([-1, 1])),
                 train_sign=bool(j % 2))
        if h["query"] == "fixed":
            h["query_vector"] = rng.normal(size=P).tolist()
        if h["query"] == "last":
            h["query_self"] = bool(rng.integers(0, 2))
        if value == "neuron":
            h["n_neurons"] = int(rng.integers(1, 3))
        if value != "token":
            h["outputs"] = C
        heads.append(h)
    if any(h["value"] == "token" for h in heads):
        C = P
        for h in heads:
            if h["value"] != "token":
                h["outputs"] = P
        if loss == "logistic":
            loss = "squared"

    def draw_rows(rng, n, zero_rng):
        rows = []
        for s in range(n):
            L = int(rng.integers(2, 5))
            toks = [(0.6 * rng.normal(size=P)).round(3).tolist() for _ in range(L)]
            if onehot:  # signed one-hot tokens (one feature each, as the mixture's data): the kernels' one-feature paths
                toks = [(np.sign(t[int(np.argmax(np.abs(t)))]) * np.eye(P)[int(np.argmax(np.abs(t)))]).tolist()
                        for t in toks]
            counts = rng.integers(1, 3, size=L)
            # padding: a position with count 0 is absent (the prompts of multiset models use it); drawn from a
            # stream of its own so the rest of the description is unchanged; the first and last positions stay
            # (a last-position query that is not its own key still has a key)
            if pad:
                counts[1:-1][zero_rng.random(max(L - 2, 0)) < 0.4] = 0
            counts = counts.tolist()
            if loss == "logistic":
                t = float(rng.choice([-1, 1]))
            elif loss == "squared":
                t = rng.normal(size=C).tolist() if C > 1 else float(rng.normal())
            else:
                t = int(rng.integers(0, C))
            rows.append(dict(tokens=toks, counts=counts, target=t, weight=float(rng.uniform(0.5, 2))))
        return rows

    rows = draw_rows(rng, int(rng.integers(3, 6)), zero_rng)
    params = dict(eta=eta, steps=steps, omega=0.5, omega_v=0.5, sigma_r=1.0, seed=seed, record_every=1,
                  neuron_init="gaussian:0.3")
    if m is not None:
        params["width"] = m
    raw = dict(name=f"random{seed}", dictionary=dict(features=feats, gram=gram), data=dict(rows=rows), heads=heads,
               model=dict(loss=loss), parameters=params)
    if staged if staged is not None else seed % 2 == 1:
        a = steps // 3
        raw["training"] = {"stages": [{"name": "values", "train": ["values"], "steps": a},
                                      {"name": "attention", "train": ["attention", "readout", "signs"], "steps": a},
                                      {"name": "all", "train": ["attention", "values", "readout", "signs"],
                                       "steps": steps - 2 * a}]}
    if rates:
        _add_rates(raw, seed, eta)
    if positions:
        _add_positions(raw, seed)
    if heldout:
        hr = np.random.default_rng(30_000 + seed)
        if seed % 2 == 0:
            raw["test"] = {"rows": draw_rows(hr, int(hr.integers(2, 7)), np.random.default_rng(40_000 + seed))}
        else:
            raw["data"].update(train_frac=0.6, split_seed=int(hr.integers(0, 100)))
    return raw


def _add_positions(raw, seed):
    pr = np.random.default_rng(50_000 + seed)
    P = len(raw["dictionary"]["features"])
    L = max(len(r["tokens"]) for r in raw["data"]["rows"])
    A = 0.3 * pr.normal(size=(L, L)) + np.eye(L)
    B = 0.3 * pr.normal(size=(P, L))   # added: cross = C B, gram = B^T B + A A^T with Gamma = C C^T (positive definite)
    C = np.linalg.cholesky(np.array(raw["dictionary"]["gram"]))
    pos = {"mode": "added" if seed % 2 == 0 else "concatenated", "gram": (A @ A.T).tolist()}
    if seed % 2 == 0:
        pos["cross"] = (C @ B).tolist()
        pos["gram"] = (B.T @ B + A @ A.T).tolist()
    raw["positions"] = pos
    for h in raw["heads"]:
        assert h["value"] != "token"
        if h["query"] == "fixed":
            h["query_vector"] = h["query_vector"] + pr.normal(size=L).round(3).tolist()
        else:
            h["mask"] = "causal"
            h["rpe"] = True  # trainable relative positional biases b[l - i]
    if seed % 3 == 0:  # the biases at a rate of their own
        raw["parameters"]["group_eta"] = f"positions={raw['parameters']['eta'] * pr.uniform(0.5, 3.0):.4f}"


#: seeds with no token-output head (their descriptions take positions; see random_raw)
POS_SEEDS = (0, 1, 4, 12, 16, 33)


#: run-level schedules of the random descriptions with rates, by seed % 6 (stages add step:30:0.7)
RATE_SCHEDULES = (None, "cosine:0.2", "warmup:15+cosine", "step:40:0.8", "inverse:50", "warmup:10")
#: SEEDS have a merged head each (one attention rate); 25 (staged, linear) and 8 (neuron) have none
RATE_SEEDS = (0, 1, 4, 5, 10, 14, 25, 8)


def _add_rates(raw, seed, eta):
    """Group rates eta x U(0.3, 1.6) for a random subset of the groups (keys and queries
    apart unless a head is merged: then one attention rate), a run schedule, and for staged
    descriptions a stage step size (a number), a stage table of group rates with its default,
    and a stage schedule."""
    rng = np.random.default_rng(20_000 + seed)
    merged = any(h.get("kq") == "merged" for h in raw["heads"])
    groups = (["attention"] if merged else ["keys", "queries"]) + ["values", "readout", "signs"]
    pick = [g for g in groups if rng.random() < 0.7] or groups[:1]
    if not merged and "keys" not in pick:
        pick.append("keys")  # keys and queries at different rates in every unmerged description
    raw["parameters"]["group_eta"] = ",".join(f"{g}={eta * rng.uniform(0.3, 1.6):.4f}" for g in pick)
    sched = RATE_SCHEDULES[seed % len(RATE_SCHEDULES)]
    if sched is not None:
        raw["parameters"]["eta_schedule"] = sched
    st = raw.get("training", {}).get("stages")
    if st:
        st[0]["eta"] = round(eta * rng.uniform(0.5, 1.5), 4)
        st[1]["eta"] = {"default": round(eta * rng.uniform(0.5, 1.5), 4), "readout": round(eta * 1.3, 4),
                        "values": round(eta * 0.6, 4)}
        st[2]["eta_schedule"] = "step:30:0.7"


#: seeds whose descriptions together cover every choice of the class (checked below)
SEEDS = (0, 1, 4, 5, 10, 14)


def _desc(raw):
    return description_from_dict(raw)


def test_random_descriptions_cover_the_class():
    seen = {k: set() for k in ("attention", "kq", "query", "value", "loss", "train_sign", "heads", "staged",
                               "query_self")}
    for seed in SEEDS:
        raw = random_raw(seed)
        d = _desc(raw)
        for h in d.model.heads:
            for k in ("attention", "kq", "query", "value", "train_sign"):
                seen[k].add(getattr(h, k))
            if h.query == "last":
                seen["query_self"].add(h.query_self)
        seen["loss"].add(d.model.loss)
        seen["heads"].add(len(d.model.heads) > 1)
        seen["staged"].add(len(d.training.stages) > 1)
        assert d.dictionary.gram is not None and d.data.counts is not None
        seen.setdefault("zero_count", set()).add(bool((np.asarray(d.data.counts) == 0).any()))
    assert seen["attention"] == {"softmax", "linear"}
    assert seen["kq"] == {"separate", "merged"}
    assert seen["query"] == {"mean", "last", "fixed"}
    assert seen["value"] == {"neuron", "linear", "matrix", "token"}
    assert seen["loss"] == {"logistic", "squared", "cross_entropy"}
    assert seen["train_sign"] == {True, False}
    assert True in seen["heads"]
    assert seen["query_self"] == {True, False}
    assert seen["staged"] == {True, False}
    assert True in seen["zero_count"]  # padded positions (count 0) inside sequences


def test_random_descriptions_with_rates_cover_the_groups():
    """The random descriptions with rates (below) cover every rate construct: keys and queries at
    different rates, every group with a rate of its own, a stage step size as a number and as a
    table's default, a stage table of group rates, a run schedule of every kind and a stage schedule."""
    from meanfield.engine.rates import RATE_GROUPS, stage_group_rates

    seen = {k: set() for k in ("kq_apart", "groups", "stage_eta", "stage_table", "run_schedule", "stage_schedule",
                               "merged")}
    for seed in RATE_SEEDS:
        d = _desc(random_raw(seed, rates=True))
        tr = d.training
        seen["merged"].add(any(h.kq == "merged" for h in d.model.heads))
        seen["groups"].update(g for g, _ in tr.group_eta)
        for st in tr.stages:
            r = stage_group_rates(tr, st)
            seen["kq_apart"].add(r["keys"] != r["queries"])
            seen["stage_eta"].add(st.eta is not None)
            seen["stage_table"].add(bool(st.group_eta))
            if st.eta_schedule:
                seen["stage_schedule"].add(st.eta_schedule.split(":")[0])
        seen["run_schedule"].update(p.split(":")[0] for p in (tr.eta_schedule or "constant").split("+"))
    assert seen["groups"] == set(RATE_GROUPS) - {"positions", "embeddings"}  # those: the descriptions with positions, test_engine_embeddings
    assert seen["kq_apart"] == {True, False} and seen["merged"] == {True, False}
    assert seen["stage_eta"] == {True, False} and seen["stage_table"] == {True, False}
    assert seen["run_schedule"] | seen["stage_schedule"] == {"constant", "step", "cosine", "warmup", "inverse"}
    assert seen["stage_schedule"] == {"step"}


# ------------------------------------------------------------------ the oracle on its own

@pytest.mark.parametrize("seed", SEEDS + (2, 3))
def test_oracle_backward_matches_finite_differences(seed):
    d = _desc(random_raw(seed))
    E = orc.embedding(d.dictionary.Gamma, d.P + 2, seed)
    on = orc.Oracle(d, E)
    rng = np.random.default_rng(seed)
    params = orc.weights_from_engine_init(d, E, seed_orth=seed)
    for p in params:  # move off the special initial values (W = 0, ...)
        for k in p:
            p[k] = p[k] + 0.3 * rng.normal(size=np.shape(p[k]))
    _, g, _ = on.loss_grads(params)
    for _ in range(2):
        dirs = [{k: rng.normal(size=np.shape(v)) for k, v in p.items()} for p in params]
        h = 1e-6
        lp = on.forward([{k: v + h * dd[k] for k, v in p.items()} for p, dd in zip(params, dirs)])[0]
        lm = on.forward([{k: v - h * dd[k] for k, v in p.items()} for p, dd in zip(params, dirs)])[0]
        fd = (lp - lm) / (2 * h)
        an = sum(float(np.sum(gj[k] * dd[k])) for gj, dd in zip(g, dirs) for k in gj)
        # central difference: error O(h^2 L''') + rounding O(eps |L| / h) ~ 1e-10
        assert abs(fd - an) <= 1e-7 * max(1.0, abs(an)), (fd, an)


def _mixture_state(y, P):
    n2 = P * P
    S = y[:2 * n2].reshape(2, P, P)
    A = y[2 * n2:4 * n2].reshape(2, P, P)
    B = y[4 * n2:6 * n2].reshape(2, P, P)
    w = y[6 * n2:].reshape(2, P)
    return S, A, B, w


@pytest.mark.parametrize("m", WIDTHS)
@pytest.mark.parametrize("schedule", ["simultaneous", "three-stage"])
def test_oracle_of_mixture_description_equals_todays_fast_path(m, schedule):
    """Independent of the engine's kernels: the explicit network generated from the
    mixture description against ``meanfield.models.mixture.run`` at the same finite width."""
    from meanfield.models.mixture.family import mixture_description
    from meanfield.models.mixture.config import make_config
    from meanfield.models.mixture.run import run as mixture_run

    kw = dict(K=2, L=3, width=m, seed=m, steps=STEPS, record_every=1, schedule=schedule,
              neuron_init="const:0.01,0.01,0,0")
    if schedule == "three-stage":
        kw["stage_steps"] = [60, 60, 80]
    cfg = make_config(kw)
    d = mixture_description(cfg)
    Y = mixture_run(cfg).arrays()["y"]
    E = orc.embedding(d.dictionary.Gamma, d.P + 3, m)
    on = orc.Oracle(d, E)
    res = on.run(orc.weights_from_engine_init(d, E, seed_orth=m + 1))
    assert len(res["states"]) == len(Y) == STEPS + 1
    P = d.P
    err = 0.0
    for st, y in zip(res["states"], Y):
        S, A, B, w = _mixture_state(y, P)
        scale = max(1.0, float(np.abs(y).max()))
        for h in range(2):
            for name, ref in (("S", S[h]), ("A", A[h]), ("B", B[h])):
                err = max(err, float(np.abs(st[h][name] - ref).max()) / scale)
            err = max(err, float(np.abs(st[h]["w"][0, 0] - w[h]).max()) / scale)
    assert err <= RTOL
    assert np.all(np.diff(res["loss"]) <= 1e-12)


def test_oracle_initial_state_is_the_engines():
    from meanfield.engine import reduce as R

    for seed in SEEDS:
        d = _desc(random_raw(seed, m=5))
        E = orc.embedding(d.dictionary.Gamma, d.P + 2, seed)
        p = orc.weights_from_engine_init(d, E, seed_orth=seed)
        y0 = R.initial_state(d)
        assert np.abs(orc.pack(d, E, p) - y0).max() <= 1e-12 * max(1.0, np.abs(y0).max())
        # the orthogonal part is really there (the weights are not just the projection)
        for h, q in zip(d.model.heads, p):
            if h.kq == "separate":
                perp = q["WK"] - q["WK"] @ E @ np.linalg.solve(E.T @ E, E.T)
                assert np.abs(perp).max() > 1e-3


# ------------------------------------------------------------------ engine == explicit network

def _engine_run(d):
    from meanfield.engine import system as esys

    _, traj = esys.integrate_description(d)
    arr = traj.arrays()
    return arr, traj


def _oracle_run(d, seed):
    E = orc.embedding(d.dictionary.Gamma, d.P + 2, seed)
    on = orc.Oracle(d, E)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = on.run(orc.weights_from_engine_init(d, E, seed_orth=seed + 100), project=lambda p: orc.pack(d, E, p))
    return res, np.array(res["states"]), on, E


def _rel_err(Z, Y):
    n = min(len(Z), len(Y))
    scale = np.maximum(np.abs(Z[:n]).max(axis=1), 1.0)
    return float((np.abs(Z[:n] - Y[:n]).max(axis=1) / scale).max())


@pytest.mark.parametrize("m", WIDTHS)
@pytest.mark.parametrize("seed", SEEDS)
def test_engine_equals_explicit_network_random_descriptions(seed, m):
    d = _desc(random_raw(seed, m=m))
    arr, traj = _engine_run(d)
    res, Z, _, _ = _oracle_run(d, seed)
    assert traj.status == "complete" and res["status"] == "ok"
    assert len(arr["y"]) == len(Z) == STEPS + 1
    assert np.all(np.diff(res["loss"]) <= 1e-12), "the comparison assumes a stable (monotone) GD run"
    assert _rel_err(Z, arr["y"]) <= RTOL
    ends = [e["step"] for e in traj.stage_ends]
    assert ends == [e["step"] for e in res["stage_ends"]]


@pytest.mark.parametrize("m", WIDTHS)
@pytest.mark.parametrize("seed", RATE_SEEDS)
def test_engine_equals_explicit_network_with_group_rates(seed, m):
    """A rate per group, per stage and schedules: the engine's GD map with the block metric
    Gamma_r H / eta (``meanfield.engine.rates``) against the explicit network stepping each weight
    with its group's rate times the schedule (``Oracle.run``), 200 steps, 1e-10."""
    d = _desc(random_raw(seed, m=m, rates=True))
    arr, traj = _engine_run(d)
    res, Z, _, _ = _oracle_run(d, seed)
    assert traj.status == "complete" and res["status"] == "ok"
    assert len(arr["y"]) == len(Z) == STEPS + 1
    assert np.all(np.diff(res["loss"]) <= 1e-12), "the comparison assumes a stable (monotone) GD run"
    assert _rel_err(Z, arr["y"]) <= RTOL


def test_wrong_group_rates_are_caught():
    """The comparison can fail: the engine with the keys' and queries' rates swapped, or with
    the run's schedule dropped, leaves the explicit network."""
    import dataclasses

    seed, m = 25, 3
    d = _desc(random_raw(seed, m=m, rates=True))
    res, Z, _, _ = _oracle_run(d, seed)
    r = dict(d.training.group_eta)
    r["keys"], r["queries"] = r["queries"], r["keys"]
    swapped = dataclasses.replace(d, training=dataclasses.replace(d.training, group_eta=tuple(sorted(r.items()))))
    assert _rel_err(Z, _engine_run(swapped)[0]["y"]) > 1e3 * RTOL
    d4 = _desc(random_raw(4, m=m, rates=True))
    assert d4.training.eta_schedule
    res4, Z4, _, _ = _oracle_run(d4, 4)
    flat = dataclasses.replace(d4, training=dataclasses.replace(d4.training, eta_schedule=None))
    assert _rel_err(Z4, _engine_run(flat)[0]["y"]) > 1e3 * RTOL


def test_random_descriptions_with_heldout_cover_the_kinds():
    """The random descriptions with a held-out set (below) cover a [test] table and a train_frac split,
    every loss, and so a recorded 0-1 error (logistic, cross-entropy) and none (squared)."""
    seen = {"kind": set(), "loss": set(), "error": set()}
    for seed in SEEDS:
        raw = random_raw(seed, heldout=True)
        d = _desc(raw)
        assert d.test is not None and d.test.n >= 1
        seen["kind"].add("table" if "test" in raw else "split")
        seen["loss"].add(d.model.loss)
        seen["error"].add(d.model.loss != "squared")
    assert seen == {"kind": {"table", "split"}, "loss": {"logistic", "squared", "cross_entropy"},
                    "error": {True, False}}


@pytest.mark.parametrize("m", WIDTHS)
@pytest.mark.parametrize("seed", SEEDS)
def test_engine_test_set_equals_explicit_network_on_the_test_set(seed, m):
    """Held-out set (``meanfield.engine.heldout``): the engine's recorded test loss, test margins and
    0-1 error against the explicit network's forward pass on the test sequences at its own weights
    after every step (200 steps, m in {1, 3, 50}); the training trajectory is the one without a test set."""
    from meanfield.engine import heldout, runs

    d = _desc(random_raw(seed, m=m, heldout=True))
    r = runs.run(d)
    td = heldout.test_description(d)
    E = orc.embedding(d.dictionary.Gamma, d.P + 2, seed)
    on, ont = orc.Oracle(d, E), orc.Oracle(td, E)
    res = on.run(orc.weights_from_engine_init(d, E, seed_orth=seed + 100),
                 project=lambda p: (orc.pack(d, E, p), ont.forward(p)))
    Z = np.array([x[0] for x in res["states"]])
    tl = np.array([x[1][0] for x in res["states"]])
    mg = np.array([ont.margins(x[1][1]["f"]) for x in res["states"]])
    assert len(r.test_loss) == len(tl) == STEPS + 1
    assert _rel_err(Z, r.y) <= RTOL
    assert np.abs(r.test_loss - tl).max() <= RTOL * max(1.0, np.abs(tl).max())
    assert np.abs(r.test_margin - mg).max() <= RTOL * max(1.0, np.abs(mg).max())
    if d.model.loss == "squared":
        assert r.test_error is None
    else:
        w = td.data.weight
        ok = np.abs(mg).min(axis=1) > 1e-8  # records with no margin at the tie (where rounding could flip it)
        assert np.array_equal(r.test_error[ok], ((mg[ok] <= 0) @ w) / w.sum())
    plain = dict(random_raw(seed, m=m, heldout=True))
    plain.pop("test", None)
    if seed % 2 == 0:  # a [test] table: without it the same description trains the same way (never trained on)
        assert np.array_equal(runs.run(_desc(plain)).y, r.y)


def _factors(Q, m):
    """Some U (m x N) with U^T U = Q: the top m eigenpairs of the Gram (its rank is <= m)."""
    lam, V = np.linalg.eigh(Q)
    lam, V = lam[::-1][:m], V[:, ::-1][:, :m]
    U = np.zeros((m, Q.shape[0]))
    U[:len(lam)] = (V * np.sqrt(np.maximum(lam, 0.0))).T
    return U


@pytest.mark.parametrize("m", WIDTHS)
@pytest.mark.parametrize("seed", SEEDS)
def test_init_from_a_run_file_equals_the_explicit_network_and_the_continued_run(seed, m, tmp_path):
    """``init_from`` (``meanfield.engine.initfrom``): 100 steps to a run file, then 100 steps from its
    last state; equal to the 200-step run's second half (the continued run), and to the explicit
    network started from weights whose Gram is the file's state (factors of Q, narrow objects and
    signs from the file), m in {1, 3, 50}, 1e-10."""
    from meanfield.engine import reduce as R
    from meanfield.engine import runs

    raw = random_raw(seed, m=m, staged=False)
    raw["parameters"]["steps"] = STEPS // 2
    runs.run_to_file(_desc(raw), tmp_path / "a.h5", progress=False)
    raw2 = random_raw(seed, m=m, staged=False)
    raw2["parameters"].update(steps=STEPS // 2, init_from=str(tmp_path / "a.h5"))
    d2 = _desc(raw2)
    arr, traj = _engine_run(d2)
    full, _ = _engine_run(_desc(random_raw(seed, m=m, staged=False)))
    assert _rel_err(full["y"][STEPS // 2:], arr["y"]) <= 1e-12
    lay = R.layout(d2)
    y0 = R.initial_state(d2, lay)
    U = []
    for k in range(len(d2.model.heads)):
        N, off = int(lay.hi[k, R.H_N]), int(lay.hi[k, R.H_QOFF])
        U.append(_factors(y0[off:off + N * N].reshape(N, N), m) if N else np.zeros((m, 0)))
    E = orc.embedding(d2.dictionary.Gamma, d2.P + 2, seed)
    on = orc.Oracle(d2, E)
    res = on.run(orc.weights_from_engine_init(d2, E, seed_orth=seed + 100, U=U), project=lambda p: orc.pack(d2, E, p))
    Z = np.array(res["states"])
    assert len(Z) == len(arr["y"]) == STEPS // 2 + 1
    assert _rel_err(Z, arr["y"]) <= RTOL


def test_random_descriptions_with_positions_cover_the_kinds():
    """The random descriptions with positions cover added (with a Gram between tokens and positions)
    and concatenated features, a causal mask and trainable relative positional biases on softmax and
    linear heads with every query (mean) and the last one, and the biases' own rate."""
    seen = set()
    for seed in POS_SEEDS:
        raw = random_raw(seed, positions=True)
        d = _desc(raw)
        mode = raw["positions"]["mode"]
        L = max(len(r["tokens"]) for r in raw["data"]["rows"])
        assert d.P == len(raw["dictionary"]["features"]) + L
        if mode == "added":
            assert np.abs(d.dictionary.Gamma[:d.P - L, d.P - L:]).max() > 0
        seen.add(mode)
        seen.update(f"causal:{h.attention}:{h.query}" for h in d.model.heads if h.mask == "causal")
        seen.update(f"rpe:{h.attention}:{h.query}" for h in d.model.heads if h.rpe)
        seen.update(f"rate:{g}" for g, _ in d.training.group_eta)
    assert {"added", "concatenated", "causal:softmax:mean", "causal:linear:mean", "causal:softmax:last",
            "causal:linear:last", "rpe:softmax:mean", "rpe:linear:mean", "rpe:softmax:last", "rpe:linear:last",
            "rate:positions"} <= seen, seen


@pytest.mark.parametrize("m", WIDTHS)
@pytest.mark.parametrize("seed", POS_SEEDS)
def test_engine_equals_explicit_network_with_positions(seed, m):
    from meanfield.engine import reduce as R

    """Absolute positional features (the enlarged dictionary), causal masks and relative positional
    biases: the engine against the explicit network (whose attention masks keys after the query
    itself and adds b[l - i] to its logits, its own gradient of b), 200 steps, 1e-10; the mask and the
    biases change the run (the comparison can fail)."""
    d = _desc(random_raw(seed, m=m, positions=True))
    arr, traj = _engine_run(d)
    res, Z, _, _ = _oracle_run(d, seed)
    assert traj.status == "complete" and res["status"] == "ok"
    assert len(arr["y"]) == len(Z) == STEPS + 1
    assert _rel_err(Z, arr["y"]) <= RTOL
    raw = random_raw(seed, m=m, positions=True)
    for h in raw["heads"]:
        h.pop("mask", None)
    assert _rel_err(Z, _engine_run(_desc(raw))[0]["y"]) > 1e3 * RTOL
    lay = R.layout(d)
    assert any(np.abs(lay.get(arr["y"][-1], h.name, "b")).max() > 1e-6 for h in d.model.heads if h.rpe)


@pytest.mark.parametrize("seed", SEEDS)
def test_engine_equals_explicit_network_onehot_tokens(seed):
    """Every head choice on signed one-hot tokens (one feature per token, the mixture's kind of data): the
    generated kernels take one-feature shortcuts there (a query reads S[a, b] c_b instead of forming S x_q)
    that dense random tokens never reach; linear attention included (seeds 1, 5 and 14 have it)."""
    d = _desc(random_raw(seed, m=3, steps=60, onehot=True))
    arr, traj = _engine_run(d)
    res, Z, _, _ = _oracle_run(d, seed)
    assert traj.status == "complete" and res["status"] == "ok"
    assert _rel_err(Z, arr["y"]) <= RTOL


@pytest.mark.parametrize("m", WIDTHS)
def test_engine_equals_explicit_network_mixture(m):
    from meanfield.models.mixture.family import mixture_description
    from meanfield.models.mixture.config import make_config

    cfg = make_config(dict(K=2, L=3, width=m, seed=m, steps=STEPS, record_every=1, schedule="three-stage",
                           stage_steps=[60, 60, 80], n_neurons=2, neuron_init="gaussian:0.1"))
    d = mixture_description(cfg)
    arr, traj = _engine_run(d)
    res, Z, _, _ = _oracle_run(d, m)
    assert _rel_err(Z, arr["y"]) <= RTOL


def test_stage_criterion_ends_at_the_same_step():
    """A loss criterion set halfway between the oracle's losses at steps 99 and 100
    of stage 3 (no borderline): both stop there."""
    seed = 5
    raw = random_raw(seed, m=3, staged=True)
    d = _desc(raw)
    res, _, _, _ = _oracle_run(d, seed)
    thr = 0.5 * float(res["loss"][140] + res["loss"][141])
    raw["training"]["stages"][2]["criterion"] = f"loss<={thr!r}"
    d = _desc(raw)
    arr, traj = _engine_run(d)
    res, Z, _, _ = _oracle_run(d, seed)
    assert traj.stage_ends[-1]["reason"] == "criterion" and res["stage_ends"][-1]["reason"] == "criterion"
    assert traj.stage_ends[-1]["step"] == res["stage_ends"][-1]["step"] == 141
    assert _rel_err(Z, arr["y"]) <= RTOL


@pytest.mark.parametrize("seed, name", [(0, "grad_w"), (0, "min_margin"), (4, "grad_w"), (4, "min_margin"),
                                        (12, "min_margin")])
def test_grad_w_and_margin_criteria_stop_at_the_same_step(seed, name):
    """The engine's grad_w and margin criteria (kernels) against the explicit network's
    own (Oracle.criterion_value): a threshold halfway between the network's values at
    steps 60 and 61 (monotone there) stops both at the network's first crossing."""
    raw = random_raw(seed, m=3, staged=False)
    d = _desc(raw)
    E = orc.embedding(d.dictionary.Gamma, d.P + 2, seed)
    on = orc.Oracle(d, E)
    p = orc.weights_from_engine_init(d, E, seed_orth=seed + 100)
    v = []
    for _ in range(80):
        v.append(on.criterion_value(p, name))
        p = on.step(p, d.training.eta, d.training.stages[0].train)
    v = np.array(v)
    op = "<=" if v[61] < v[60] else ">="
    thr = float(0.5 * (v[60] + v[61]))
    hits = np.flatnonzero(v <= thr if op == "<=" else v >= thr)
    assert abs(v[61] - v[60]) > 1e-6 and hits.size and hits[0] > 0
    raw["parameters"]["criterion"] = f"{name}{op}{thr!r}"
    _, traj = _engine_run(_desc(raw))
    assert traj.stage_ends[-1]["reason"] == "criterion" and traj.stage_ends[-1]["step"] == hits[0]


def test_a_wrong_engine_is_caught():
    """The comparison can fail: the engine's GD map without its eta^2 term (an Euler
    step of its own flow, y + eta rhs(y)) leaves the explicit network."""
    from meanfield.engine import system as esys
    from meanfield.engine.reduce import initial_state

    seed, m = 4, 3
    d = _desc(random_raw(seed, m=m, staged=False))
    sysm = esys.system_of(d)
    mode = esys.mode_of(d.training.stages[0].train)
    y = initial_state(d, sysm.pk.lay)
    Y = [y.copy()]
    for _ in range(STEPS):
        y = y + d.training.eta * sysm.rhs(y, mode)
        Y.append(y.copy())
    res, Z, _, _ = _oracle_run(d, seed)
    assert _rel_err(Z, np.array(Y)) > 1e3 * RTOL
    arr, _ = _engine_run(d)
    assert _rel_err(Z, arr["y"]) <= RTOL


# ------------------------------------------------------------------ flow

def _pack_derivative(d, E, on, params, mode_groups):
    """d/dt of the packed state along the explicit gradient flow (each weight moves
    at -lr dLoss/dweight): the packed state is quadratic in the weights, so a
    central difference in the step is exact up to rounding."""
    _, g, _ = on.loss_grads(params)
    h = 1e-3
    plus = on.step(params, h, mode_groups, grads=g)
    minus = on.step(params, -h, mode_groups, grads=g)
    return (orc.pack(d, E, plus) - orc.pack(d, E, minus)) / (2 * h)


@pytest.mark.parametrize("seed", SEEDS)
def test_flow_rhs_equals_explicit_gradient_flow(seed):
    from meanfield.engine import system as esys

    d = _desc(random_raw(seed, m=3))
    sysm = esys.system_of(d)
    E = orc.embedding(d.dictionary.Gamma, d.P + 2, seed)
    on = orc.Oracle(d, E)
    rng = np.random.default_rng(seed)
    params = orc.weights_from_engine_init(d, E, seed_orth=seed)
    for h, p in zip(d.model.heads, params):  # a generic state (a fixed sign stays: the engine holds it as data)
        for k in p:
            if k != "a" or h.train_sign:
                p[k] = p[k] + 0.2 * rng.normal(size=np.shape(p[k]))
    for st in d.training.stages:
        rhs = sysm.rhs(orc.pack(d, E, params), esys.mode_of(st.train))
        ref = _pack_derivative(d, E, on, params, st.train)
        assert np.abs(rhs - ref).max() <= 1e-9 * max(1.0, np.abs(ref).max())


@pytest.mark.parametrize("seed", RATE_SEEDS)
def test_flow_with_group_rates_is_the_explicit_flow_rescaled_per_group(seed):
    """Method flow with group rates: each weight moves at -(rate_g / eta) dLoss/dweight (its
    group's time rescaled by rate / eta); the engine's right-hand side in every stage equals that
    explicit derivative (exact central difference, 1e-9)."""
    from meanfield.engine import system as esys
    from meanfield.engine.rates import stage_base_eta, weight_rates

    raw = random_raw(seed, m=3, rates=True)
    raw["parameters"].update(method="flow", t_end=1.0)
    for k in ("steps", "record_every", "eta_schedule"):
        raw["parameters"].pop(k, None)
    for st in raw.get("training", {}).get("stages", []):
        st["time"] = st.pop("steps") * 0.01
        st.pop("eta_schedule", None)
        if isinstance(st.get("eta"), dict):
            st["eta"].pop("default")
        else:
            st.pop("eta", None)
    d = _desc(raw)
    sysm = esys.system_of(d)
    stages = esys.stages(d)
    E = orc.embedding(d.dictionary.Gamma, d.P + 2, seed)
    on = orc.Oracle(d, E)
    rng = np.random.default_rng(seed)
    params = orc.weights_from_engine_init(d, E, seed_orth=seed)
    for h, p in zip(d.model.heads, params):
        for k in p:
            if k != "a" or h.train_sign:
                p[k] = p[k] + 0.2 * rng.normal(size=np.shape(p[k]))
    _, g, _ = on.loss_grads(params)
    caught = False
    for st, ist in zip(d.training.stages, stages):
        rate = {k: r / stage_base_eta(d.training, st) for k, r in weight_rates(d.training, st).items()}
        hh = 1e-3
        plus = on.step(params, {k: hh * r for k, r in rate.items()}, st.train, grads=g)
        minus = on.step(params, {k: -hh * r for k, r in rate.items()}, st.train, grads=g)
        ref = (orc.pack(d, E, plus) - orc.pack(d, E, minus)) / (2 * hh)
        rhs = sysm.rhs(orc.pack(d, E, params), ist.mode)
        assert np.abs(rhs - ref).max() <= 1e-9 * max(1.0, np.abs(ref).max())
        plain = esys.EngineSystem(sysm.pk).rhs(orc.pack(d, E, params), ist.mode & 15)  # without the rates
        caught = caught or np.abs(plain - ref).max() > 1e-6
    assert caught, "the rates change the flow (the comparison can fail)"


@pytest.mark.parametrize("seed", (0, 1, 2))
def test_flow_equals_solve_ivp_of_the_explicit_network(seed):
    """The engine's flow run (its adaptive solver) against scipy DOP853 on the
    explicit weights' gradient flow, m = 3, t in [0, 2], both at tight tolerances.
    Descriptions whose ReLU pre-activations stay off the kink on [0, 2] (a kink
    makes the right-hand side non-smooth and adaptive solvers crawl)."""
    from scipy.integrate import solve_ivp

    raw = random_raw(seed, m=3, staged=False, pad=False)  # the descriptions known to stay off the kink
    raw["parameters"].update(method="flow", t_end=2.0, rtol=1e-11, atol=1e-13, record_dt=0.5)
    raw["parameters"].pop("steps")
    raw["parameters"].pop("record_every")
    d = _desc(raw)
    arr, traj = _engine_run(d)
    E = orc.embedding(d.dictionary.Gamma, d.P + 2, seed)
    on = orc.Oracle(d, E)
    p0 = orc.weights_from_engine_init(d, E, seed_orth=seed)
    keys = [sorted(p) for p in p0]
    shapes = [[np.shape(p[k]) for k in ks] for p, ks in zip(p0, keys)]

    def flat(ps):
        return np.concatenate([np.ravel(p[k]) for p, ks in zip(ps, keys) for k in ks])

    def unflat(v):
        out, i = [], 0
        for ks, shs in zip(keys, shapes):
            q = {}
            for k, sh in zip(ks, shs):
                n = int(np.prod(sh))
                q[k] = v[i:i + n].reshape(sh)
                i += n
            out.append(q)
        return out

    groups = d.training.stages[0].train

    def f(t, v):
        ps = unflat(v)
        _, g, _ = on.loss_grads(ps)
        nxt = on.step(ps, 1.0, groups, grads=g)  # ps - lr * grad
        return flat(nxt) - v

    t_rec = arr["t"]
    sol = solve_ivp(f, (0.0, float(t_rec[-1])), flat(p0), method="DOP853", t_eval=t_rec, rtol=1e-12, atol=1e-14)
    assert sol.success
    Z = np.array([orc.pack(d, E, unflat(sol.y[:, i])) for i in range(sol.y.shape[1])])
    assert t_rec[-1] == pytest.approx(2.0)
    assert _rel_err(Z, arr["y"]) <= 1e-7
    # and not trivially: the state moved
    assert np.abs(arr["y"][-1] - arr["y"][0]).max() > 1e-2


# ------------------------------------------------------------------ every shipped description

def _shipped():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    # two-layer descriptions have no width: their oracle is meanfield.engine.twolayer_oracle (tests/test_edelman.py)
    return sorted(str(p) for p in (root / "meanfield" / "models").glob("*.toml")
                  if 'class = "twolayer"' not in p.read_text()) + [
        str(root / "docs" / "examples" / "majority.toml")]


def _heavy(path):
    return "incontext" in path  # 7084 exact prompts: 200 steps take ~15 s per width


@pytest.mark.parametrize("m", WIDTHS)
@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.slow) if _heavy(p) else p for p in _shipped()]
                         + [pytest.param(p + "#short") for p in _shipped() if _heavy(p)])
def test_engine_equals_explicit_network_shipped_descriptions(path, m):
    """Every shipped description (and the README's worked example): the explicit
    network (``meanfield.engine.finite.particles``, the oracle driven by the shared GD
    harness on the description's own stages and record grid) equals the engine at
    m = 1, 3, 50 over 200 GD steps (the heavy in-context model: 20 steps unless -m slow)."""
    import meanfield.engine as me

    from dataclasses import replace

    path, short = path.removesuffix("#short"), path.endswith("#short")
    n = 20 if short else STEPS
    d = me.load(path, width=m, steps=n)
    if d.training.method != "gd":
        pytest.skip("the explicit network runs GD only")
    # a description's own stages keep their lengths: cut them to n steps in all
    left, stages = n, []
    for st in d.training.stages:
        stages.append(replace(st, length=min(int(st.length), left)))
        left -= stages[-1].length
    d = replace(d, training=replace(d.training, stages=tuple(stages)))
    r = me.particles(d)
    red = me.run(d)
    assert r.status == red.status == "complete"
    assert np.array_equal(r.step, red.step) and r.step[-1] == sum(s.length for s in d.training.stages)
    assert _rel_err(r.y, red.y) <= RTOL


@pytest.mark.parametrize("seed", (1, 4))
def test_the_part_outside_the_dictionary_stays_put(seed):
    """Explicit GD moves the wide weights only inside span(E) (every gradient row is a
    combination of tokens): W (I - E Gamma^{-1} E^T) is the same after training."""
    d = _desc(random_raw(seed, m=5, steps=50))
    E = orc.embedding(d.dictionary.Gamma, d.P + 3, seed)
    on = orc.Oracle(d, E)
    p0 = orc.weights_from_engine_init(d, E, seed_orth=seed)
    res = on.run(p0)
    perp = np.eye(E.shape[0]) - E @ np.linalg.solve(E.T @ E, E.T)
    moved = 0
    for a, b in zip(p0, res["params"]):
        for k in ("WK", "WQ", "MV"):
            if k in a:
                assert np.abs(a[k] @ perp).max() > 1e-3
                assert np.abs((b[k] - a[k]) @ perp).max() <= 1e-12
                moved = max(moved, float(np.abs(b[k] - a[k]).max()))
    assert moved > 1e-3  # the weights did train


MIXTURE_EXTENSIONS = [dict(feature_gram="cc:0.3,cv:0.2"), dict(n_train=6, noise_sigma=0.1, data_seed=1),
                      dict(n_neurons=3, neuron_init="gaussian:0.1"), dict(label_noise=0.2),
                      dict(K=3, L=4, schedule="three-stage", stage_steps=[60, 60, 80])]


@pytest.mark.parametrize("m", WIDTHS)
@pytest.mark.parametrize("ext", range(len(MIXTURE_EXTENSIONS)))
def test_engine_equals_explicit_network_mixture_extensions(ext, m):
    """The reviewers' extensions as descriptions (feature Gram, a finite noisy training
    set, several neurons, label noise, K = 3 with L = 4 three-stage): explicit network
    == engine over 200 GD steps."""
    from pathlib import Path

    import meanfield.engine as me

    path = Path(__file__).resolve().parents[1] / "meanfield" / "models" / "mixture.toml"
    d = me.load(str(path), width=m, steps=STEPS, record_every=1, **MIXTURE_EXTENSIONS[ext])
    r = me.particles(d)
    red = me.run(d)
    assert r.status == red.status == "complete" and len(r.y) == STEPS + 1
    assert _rel_err(r.y, red.y) <= RTOL
