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
               pad: bool = True, onehot: bool = False) -> dict:
    """A random description within the class (as the TOML table): random dictionary
    Gram, random weighted sequences of different lengths with counts, 1-3 heads
    with random attention/kq/query/value choices, a random loss, signs fixed or
    trainable, and (``staged``) stages training subsets of the groups."""
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
    rows = []
    for s in range(int(rng.integers(3, 6))):
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
    return raw


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
    return sorted(str(p) for p in (root / "meanfield" / "models").glob("*.toml")) + [
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
