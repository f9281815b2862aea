"""The exact Gaussian population dynamics of the engine held to an explicit network, and the icl_zfb acceptance run.

* ``test_engine_equals_explicit_network``: an explicit network written here
  (numpy weights W_K, W_Q, W_V in R^{m x P}, readout r in R^m, narrow W and w,
  trainable signs; E = I) with its own forward of the population loss through
  the moment tensors (the moments are held to Monte Carlo and quadrature in
  ``tests/test_icl_moments.py``) and its own chain rule to the explicit
  weights, trained by GD on that exact population gradient for 200 steps from
  the engine's initial weights; the engine's Gram-closure run (every Gram
  block U^T U, every narrow block, the loss) equals it to 1e-10 at m = 1, 3, 50.
  Nothing of ``meanfield.engine.population`` / ``kernels`` is used for it.
* the rank-m manifold (docs/engine.md, "Finite width"): the same explicit network over 5000 GD
  steps of five width-m heads in the saddle-to-saddle regime (m = 1, 3, 50; 1e-10, rank <= m to
  1e-10), the width-1 gradient flow against the network's own flow (scipy DOP853), the projection
  as the nearest rank-m Gram and its warm start equal to a full eigen-decomposition, the run-file
  attribute and the refusal of a higher-rank start.
* ``test_icl_zfb_acceptance``: the shipped description converges to the
  closed-form minimum L* = (1/2)(tr Lambda - tr(Lambda Gamma^{-1} Lambda)),
  Gamma = (1 + 1/N) Lambda + tr(Lambda)/N I, to 1e-6 relative (computed here
  from the formula, not from the engine).
"""

from __future__ import annotations

import numpy as np
import pytest

import meanfield.engine as me
from meanfield.engine.description import description_from_dict
from meanfield.engine.gaussian import GaussianPrompts
from meanfield.engine.reduce import H_AOFF, H_N, H_QOFF, H_VOFF, H_WOFF, initial_state, initial_weights, layout


def spd(rng, d, scale=1.0):
    A = rng.normal(size=(d, d)) * 0.4 + np.eye(d)
    return scale * (A @ A.T) / d + 0.2 * np.eye(d)


HEADS = [  # (kq, value, train_sign)
    ("separate", "linear", False),
    ("separate", "matrix", True),
    ("merged", "linear", False),
]


def description(d, N, Lam, Sw, sigma, m, steps, eta, kinds=HEADS, **init):
    heads = [{"name": f"h{j}", "attention": "linear", "kq": kq, "query": "last", "query_self": False,
              "value": val, "scale": 0.7 + 0.2 * j, "sign": (-1.0) ** j, "train_sign": ts}
             for j, (kq, val, ts) in enumerate(kinds)]
    pars = {"steps": steps, "eta": eta, "width": m, "seed": 4, "omega": 0.6, "record_every": 1}
    if any(v == "matrix" for _, v, _ in kinds):
        pars |= {"omega_v": 0.6, "sigma_r": 0.8}
    if any(v == "linear" for _, v, _ in kinds):
        pars["neuron_init"] = "gaussian:0.4"
    if any(k.startswith("record_") for k in init):
        del pars["record_every"]
    raw = {"name": "t", "data": {"family": "icl_regression", "d": d, "N": N, "cov": Lam.tolist(),
                                 "task_cov": Sw.tolist(), "noise": sigma},
           "heads": heads, "model": {"loss": "squared"}, "parameters": pars | init}
    return description_from_dict(raw)


class Explicit:
    """The explicit network on the population loss: weights per head
    {WK, WQ (m x P) | W (P x P)} and {w (P) | WV (m x P), r (m)}, sign a."""

    def __init__(self, law, heads, params):
        self.heads = heads
        self.p = params
        mom = law.moments()
        P, d = law.P, law.d
        self.P, self.d = P, d
        self.Mq = mom.M                          # E[(G (x) x_q)(G (x) x_q)^T]
        self.mv = mom.m.ravel()                  # E[G (x) x_q y_q]
        self.c0 = mom.c0

    def parts(self, p, h):
        S = p["WK"].T @ p["WQ"] if "WK" in p else p["W"]        # z_i^T S z_q is the attention logit
        v = p["WV"].T @ p["r"] if "WV" in p else p["w"]         # the value read at the y-row
        return S, v

    def loss_grads(self):
        P, d = self.P, self.d
        T = np.zeros((P, P, d))
        parts = []
        for p, h in zip(self.p, self.heads):
            S, v = self.parts(p, h)
            c = p["a"] * h["scale"]
            T += c * np.einsum("a,bj->abj", v, S[:, :d])           # z_q = (x_q, 0): only S's x columns are read
            parts.append((S, v, c))
        t = T.ravel()
        gT = (self.Mq @ t - self.mv).reshape(P, P, d)
        loss = 0.5 * (t @ self.Mq @ t - 2 * self.mv @ t + self.c0)
        grads = []
        for p, h, (S, v, c) in zip(self.p, self.heads, parts):
            dS = np.zeros((P, P))
            dS[:, :d] = c * np.einsum("a,abj->bj", v, gT)
            dv = c * np.einsum("bj,abj->a", S[:, :d], gT)
            g = {}
            if "WK" in p:
                g["WK"] = p["WQ"] @ dS.T
                g["WQ"] = p["WK"] @ dS
            else:
                g["W"] = dS
            if "WV" in p:
                g["WV"] = np.outer(p["r"], dv)
                g["r"] = p["WV"] @ dv
            else:
                g["w"] = dv
            if h["train_sign"]:
                g["a"] = h["scale"] * float(np.einsum("a,bj,abj->", v, S[:, :d], gT))
            grads.append(g)
        return loss, grads

    def step(self, eta):
        loss, grads = self.loss_grads()
        for p, g in zip(self.p, grads):
            for k, x in g.items():
                p[k] = p[k] - eta * x
        return loss

    def project(self, lay, size):
        """The engine's flat state of the explicit weights (Q = U^T U, narrow blocks, signs)."""
        y = np.zeros(size)
        for k, p in enumerate(self.p):
            cols = [p[n] if p[n].ndim == 2 else p[n][:, None] for n in ("WK", "WQ", "WV", "r") if n in p]
            if cols:
                U = np.concatenate(cols, axis=1)
                N = int(lay.hi[k, H_N])
                y[int(lay.hi[k, H_QOFF]):int(lay.hi[k, H_QOFF]) + N * N] = (U.T @ U).ravel()
            if "W" in p:
                y[int(lay.hi[k, H_WOFF]):int(lay.hi[k, H_WOFF]) + self.P ** 2] = p["W"].ravel()
            if "w" in p:
                y[int(lay.hi[k, H_VOFF]):int(lay.hi[k, H_VOFF]) + self.P] = p["w"]
            if lay.hi[k, H_AOFF] >= 0:
                y[int(lay.hi[k, H_AOFF])] = p["a"]
        return y


def explicit_from_engine_init(desc, lay, law, kinds=HEADS):
    """Explicit weights from the engine's sampled factors U (columns K, Q, V, r) and its narrow initial blocks."""
    U = initial_weights(desc, lay)
    y0 = initial_state(desc, lay)
    P = law.P
    params = []
    for k, (kq, val, ts) in enumerate(kinds):
        p = {}
        c = 0
        if kq == "separate":
            p["WK"], p["WQ"] = U[k][:, 0:P].copy(), U[k][:, P:2 * P].copy()
            c = 2 * P
        else:
            p["W"] = y0[int(lay.hi[k, H_WOFF]):int(lay.hi[k, H_WOFF]) + P * P].reshape(P, P).copy()
        if val == "matrix":
            p["WV"], p["r"] = U[k][:, c:c + P].copy(), U[k][:, c + P].copy()
        else:
            p["w"] = y0[int(lay.hi[k, H_VOFF]):int(lay.hi[k, H_VOFF]) + P].copy()
        p["a"] = float((-1.0) ** k)
        params.append(p)
    heads = [{"scale": 0.7 + 0.2 * j, "train_sign": ts} for j, (kq, val, ts) in enumerate(kinds)]
    return Explicit(law, heads, params)


@pytest.mark.parametrize("m", [1, 3, 50])
def test_engine_equals_explicit_network(m):
    rng = np.random.default_rng(20 + m)
    d, N, sigma, steps, eta = 2, 5, 0.2, 200, 0.3
    Lam, Sw = spd(rng, d), spd(rng, d, 0.9)
    desc = description(d, N, Lam, Sw, sigma, m, steps, eta)
    lay = layout(desc)
    run = me.run(desc)
    assert run.status == "complete" and run.y.shape[0] == steps + 1
    net = explicit_from_engine_init(desc, lay, GaussianPrompts(d, N, Lam, Sw, sigma))
    np.testing.assert_allclose(run.y[0], net.project(lay, lay.size), rtol=0, atol=1e-14)
    losses = []
    worst = 0.0
    for s in range(steps + 1):
        ys = net.project(lay, lay.size)
        worst = max(worst, float(np.abs(run.y[s] - ys).max() / max(1.0, np.abs(ys).max())))
        losses.append(net.step(eta) if s < steps else net.loss_grads()[0])
    assert worst <= 1e-10, f"m = {m}: engine vs explicit network, largest relative state difference {worst:.3g}"
    np.testing.assert_allclose(run.loss, losses, rtol=1e-10, atol=1e-14)
    # the run moved: the check is not of a state that stays put
    assert abs(losses[-1] - losses[0]) > 1e-2 * losses[0]
    assert np.abs(run.y[-1] - run.y[0]).max() > 1e-2


@pytest.mark.parametrize("m", [1, 3, 50])
def test_long_run_engine_stays_on_the_rank_m_manifold(m):
    """5000 GD steps of five separate linear-value heads from a small init (the saddle-to-saddle
    regime of icl_saddles: d = 4, N = 32, Lambda = diag(0.4, 0.3, 0.2, 0.1)): the engine's Gram state
    equals the explicit width-m network's (1e-10 relative, every 50 steps) and keeps rank <= m
    (lambda_(m+1) / lambda_1 <= 1e-10). Before the rank-m projection (meanfield.engine.lowrank) the
    m = 1 run left the manifold and this test failed: largest state difference 3.5e-2 (docs/engine.md,
    "Finite width: the rank-m manifold")."""
    from meanfield.engine.lowrank import rank_leak

    steps, eta = 5000, 0.25
    desc, lay, net = _rank_test_setup(m, steps, record_every=50)
    run = me.run(desc)
    assert run.status == "complete" and run.y.shape[0] == steps // 50 + 1
    worst = 0.0
    for s in range(steps + 1):
        if s % 50 == 0:
            ys = net.project(lay, lay.size)
            worst = max(worst, float(np.abs(run.y[s // 50] - ys).max() / max(1.0, np.abs(ys).max())))
        if s < steps:
            net.step(eta)
    leak = max(rank_leak(y, lay, m) for y in run.y)
    assert worst <= 1e-10, f"m = {m}: engine vs explicit network over {steps} steps, largest difference {worst:.3g}"
    assert leak <= 1e-10, f"m = {m}: the Gram state left rank <= m: lambda_(m+1)/lambda_1 = {leak:.3g}"
    assert run.loss[-1] < 0.5 * run.loss[0]  # the run learned: it passed saddles


def _rank_test_setup(m, steps, **over):
    d, N = 4, 32
    Lam, Sw = np.diag([0.4, 0.3, 0.2, 0.1]), np.eye(d)
    kinds = [("separate", "linear", False)] * 5
    desc = description(d, N, Lam, Sw, 0.0, m, steps, 0.25, kinds, seed=1, omega=0.05,
                       neuron_init="gaussian:0.05", **over)
    lay = layout(desc)
    return desc, lay, explicit_from_engine_init(desc, lay, GaussianPrompts(d, N, Lam, Sw, 0.0), kinds)


def test_flow_stays_on_the_rank_one_manifold():
    """The gradient flow (Dormand-Prince, rtol 1e-8) of the same width-1 heads to t = 800 against the
    explicit network's own gradient flow (its weights integrated by scipy's DOP853, rtol 1e-9): losses
    to 1e-6 relative at every record and lambda_2 / lambda_1 <= 1e-10. Before the projection the flow's
    truncation error seeded the second direction (6.7e-10 at t = 100 on icl_saddles' random init) and it
    grew to lambda_2 / lambda_1 = 0.77 by t = 300 (RK4 at dt = 0.5 diverged at t = 276)."""
    from scipy.integrate import solve_ivp

    from meanfield.engine.lowrank import rank_leak

    T_end = 800.0
    desc, lay, net = _rank_test_setup(1, 1, method="flow", t_end=T_end, rtol=1e-8, atol=1e-12, record_dt=50.0)
    run = me.run(desc)
    assert run.status == "complete"
    keys = [(k, n) for k, p in enumerate(net.p) for n in ("WK", "WQ", "w")]
    shapes = [net.p[k][n].shape for k, n in keys]
    sizes = [int(np.prod(sh)) for sh in shapes]

    def unpack(x):
        i = 0
        for (k, n), sh, sz in zip(keys, shapes, sizes):
            net.p[k][n] = x[i:i + sz].reshape(sh)
            i += sz

    def rhs(t, x):
        unpack(x)
        _, grads = net.loss_grads()
        return -np.concatenate([grads[k][n].ravel() for k, n in keys])

    x0 = np.concatenate([net.p[k][n].ravel() for k, n in keys])
    sol = solve_ivp(rhs, (0.0, T_end), x0, method="DOP853", rtol=1e-9, atol=1e-12, t_eval=run.t)
    assert sol.success
    losses = []
    for x in sol.y.T:
        unpack(x)
        losses.append(net.loss_grads()[0])
    np.testing.assert_allclose(run.loss, losses, rtol=1e-6)
    assert max(rank_leak(y, lay, 1) for y in run.y) <= 1e-10
    assert run.loss[-1] < 0.5 * run.loss[0]


def test_projection_is_the_nearest_rank_m_gram():
    """lowrank.project_rank on a rank-m Gram plus a perturbation E: the result is positive semi-definite
    of rank <= m, and no farther from the input than the unperturbed Gram is (the bound of
    docs/engine.md: ||P(Q~) - Q~|| <= ||Q~ - Q*|| for every Q* of rank <= m), so within 2 ||E|| of it."""
    from meanfield.engine.lowrank import project_rank

    rng = np.random.default_rng(3)
    for m, N in ((1, 6), (3, 10), (2, 3)):
        U = rng.standard_normal((m, N))
        Qs = U.T @ U
        E = 1e-6 * rng.standard_normal((N, N))
        y = (Qs + E).ravel()
        project_rank(y, np.array([[N, 0]]), m, 0, 1, np.zeros((1, N, m)), np.zeros(1, bool))
        Pq = y.reshape(N, N)
        ev = np.linalg.eigvalsh(Pq)
        assert np.array_equal(Pq, Pq.T) and ev[0] >= -1e-14 * ev[-1] and abs(ev[-m - 1]) <= 1e-14 * ev[-1]
        assert np.linalg.norm(Pq - (Qs + E)) <= np.linalg.norm(E) * (1 + 1e-9)
        assert np.linalg.norm(Pq - Qs) <= 2 * np.linalg.norm(E)
    # N <= m: nothing to do, the state is not touched
    y = rng.standard_normal(9)
    y0 = y.copy()
    assert project_rank(y, np.array([[3, 0]]), 3, 0, 1, np.zeros((1, 3, 3)), np.zeros(1, bool)) == 0.0
    assert np.array_equal(y, y0)


def test_warm_started_projection_equals_the_full_eigen_decomposition():
    """The projection's warm start (one subspace-iteration step from the previous basis, Rayleigh-Ritz)
    against a full eigen-decomposition every step, along the 2000 GD steps of the width-m heads (the two
    runs' states to 1e-12 relative), and it refuses a basis that no longer spans the state."""
    from meanfield.engine import lowrank
    from meanfield.engine.population import PopulationSystem

    for m in (1, 3):
        desc, lay, _ = _rank_test_setup(m, 1)
        y0 = initial_state(desc, lay)
        warm, cold = PopulationSystem(desc), PopulationSystem(desc)
        ya, yb = y0.copy(), y0.copy()
        worst = 0.0
        for _ in range(20):
            warm.gd_advance(ya, 100, 0.25, 3, None)
            for _ in range(100):  # the same steps, each projected from scratch
                cold.rank_m = 0
                cold.gd_advance(yb, 1, 0.25, 3, None)
                lowrank.project(yb, lay, m)
            worst = max(worst, float(np.abs(ya - yb).max() / np.abs(yb).max()))
        assert worst <= 1e-12, (m, worst)
        assert warm._basis[1].all()  # the warm start was in use
    # a basis orthogonal to the state's range is refused (full eigen-decomposition instead)
    u = np.array([1.0, 0.0, 0.0, 0.0])
    y = (np.outer(u, u) + 1e-12 * np.eye(4)).ravel()
    basis = np.zeros((1, 4, 1))
    basis[0, 1, 0] = 1.0
    lowrank.project_rank(y, np.array([[4, 0]]), 1, 0, 1, basis, np.ones(1, bool))
    np.testing.assert_allclose(y.reshape(4, 4), np.outer(u, u) * (1 + 1e-12), atol=1e-15)
    np.testing.assert_allclose(np.abs(basis[0, :, 0]), u, atol=1e-12)


def zfb_minimum(ev, N):
    Lam = np.diag(ev)
    Gam = (1 + 1 / N) * Lam + np.trace(Lam) / N * np.eye(len(ev))
    return 0.5 * (np.trace(Lam) - np.trace(Lam @ np.linalg.inv(Gam) @ Lam))


def test_icl_zfb_acceptance():
    desc = me.load("meanfield/models/icl_zfb.toml", d=3, N=8, cov="1,0.5,0.25")
    run = me.run(desc)
    Lstar = zfb_minimum([1, 0.5, 0.25], 8)
    assert abs(Lstar - 0.280406976744186) < 1e-15
    assert run.status == "complete"
    assert abs(run.loss[-1] - Lstar) <= 1e-6 * Lstar
    assert run.loss[0] > 2 * Lstar  # it started away from the minimum


def test_icl_zfb_flags_are_parameters():
    """d, N, cov, noise, steps change the run as declared (a different minimum for another d, N, cov)."""
    desc = me.load("meanfield/models/icl_zfb.toml", d=2, N=4, cov="2,0.5", eta=0.1, steps=3000)
    run = me.run(desc)
    assert run.y.shape[0] > 1 and desc.training.stages[0].length == 3000
    assert abs(run.loss[-1] - zfb_minimum([2, 0.5], 4)) <= 1e-6 * zfb_minimum([2, 0.5], 4)
    noisy = me.load("meanfield/models/icl_zfb.toml", d=2, N=4, cov="2,0.5", noise=0.5, steps=10)
    assert noisy.data.extra["population"]["law"].sigma == 0.5


def test_test_time_context_length():
    """N_test: the run file's loss_test is the population loss at the test-time N, here held to the closed form
    of the ZFB predictor x_q^T A h at another N (spec: L(A) = (1/2)[tr Lambda - 2 tr(Lambda A Lambda)
    + tr(A^T Lambda A Gamma' Lambda)], Gamma' = (1 + 1/N') Lambda + tr(Lambda)/N' I) at the end of a converged run."""
    import h5py

    from meanfield.engine.runs import run_to_file

    ev, N, Nt = [1.0, 0.5, 0.25], 8, 20
    desc = me.load("meanfield/models/icl_zfb.toml", N=N, N_test=Nt)
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        r, path = run_to_file(desc, Path(tmp) / "t.h5", progress=False)
        with h5py.File(path) as f:
            lt = f["loss_test"][:]
            lmin_t = float(f.attrs["loss_min_test"])
    Lam = np.diag(ev)
    A = np.linalg.inv((1 + 1 / N) * Lam + np.trace(Lam) / N * np.eye(3))     # the trained predictor (train N)
    Gt = (1 + 1 / Nt) * Lam + np.trace(Lam) / Nt * np.eye(3)
    closed = 0.5 * (np.trace(Lam) - 2 * np.trace(Lam @ A @ Lam) + np.trace(A.T @ Lam @ A @ Gt @ Lam))
    assert abs(lt[-1] - closed) <= 1e-9 * closed
    assert abs(lmin_t - zfb_minimum(ev, Nt)) <= 1e-12 and lt[-1] > lmin_t   # not the best predictor at N'


def test_derive_names_the_data():
    out = me.derive(me.load("meanfield/models/icl_zfb.toml"), latex=False)
    assert out["data"]["exact"] == 1 and abs(out["data"]["loss_min"] - zfb_minimum([1, 0.5, 0.25], 8)) < 1e-12
    out = me.derive(me.load("meanfield/models/icl_zfb.toml", samples=7), latex=False)
    assert out["data"]["exact"] == 0 and "sampled, not exact: 7 prompts" in out["data"]["population"]


def test_run_file_says_when_the_state_is_projected():
    from meanfield.engine.population import PopulationSystem

    for width, said in ((1, True), (None, False), (50, False)):  # 50 >= N = 10: nothing to hold
        over = {"steps": 2} | ({"width": width} if width else {"width": "inf", "symmetry": "allow"})
        desc = me.load("meanfield/models/icl_saddles.toml", **over)
        sysm = PopulationSystem(desc)
        r = me.run(desc)
        attrs = sysm.extra_datasets(r)[1]
        assert ("rank_projection" in attrs) == said, width
        assert sysm.rank_m == (1 if said else 0)


def test_init_from_a_state_of_higher_rank_is_refused(tmp_path, capsys):
    """A width-m population run may not start from a Gram state of rank > m (an infinite-width run's):
    one line naming init_from, exit 2, nothing written; from a width-1 run it starts."""
    from meanfield.cli import main

    inf, w1, out = tmp_path / "inf.h5", tmp_path / "w1.h5", tmp_path / "o.h5"
    base = ["model", "run", "icl_saddles", "--steps", "3", "--quiet"]
    assert main(base + ["--width", "inf", "--symmetry", "allow", "--out", str(inf)]) == 0
    assert main(base + ["--width", "1", "--out", str(w1)]) == 0
    capsys.readouterr()
    assert main(base + ["--width", "1", "--init-from", str(inf), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("meanfield: error: init_from:") and "rank" in err[0], err
    assert not out.exists()
    assert main(base + ["--width", "1", "--init-from", str(w1), "--out", str(out)]) == 0


def test_compile_notice_checks_the_population_kernels(monkeypatch):
    """The first-use notice of an exact-population run looks at the kernels it runs (engine/population.py),
    not the per-sequence engine kernels it never calls (which said "compiling kernels, about 30 s" on
    every run, cached or not)."""
    from meanfield.core import guard
    from meanfield.engine import kernels, population
    from meanfield.engine.runs import compile_notice

    seen = []
    monkeypatch.setattr(guard, "first_use_notice", lambda *d, **kw: seen.append(d) or False)
    compile_notice(me.load("meanfield/models/icl_zfb.toml"))
    compile_notice(me.load("meanfield/models/icl_zfb.toml", method="flow"))
    assert seen[0] == (population.pop_gd_advance,)
    assert seen[1] == (population.pop_loss_grads, kernels.eng_update)
    compile_notice(me.load("docs/examples/majority.toml"))
    assert kernels.loss_and_grads in seen[2]
