"""Wide bilinear heads of the two-layer class (case (b) 1 of docs/engine.md; meanfield.engine.twolayer_wide):
the engine steps the joint Gram Q = U^T U of U = [W_Q, W_K]; the explicit network
(meanfield.engine.twolayer_oracle, torch float64, autograd, no shared code) steps the weights W_Q, W_K
themselves. Held equal over 200 full-batch GD steps to 1e-10 at widths m = 1, 3, 50 (the Gram of the
network's weights against the engine's state), at infinite width (the network started from weights whose
Gram is exactly omega^2 I: by the closure theorem its Gram follows the infinite-width trajectory), and the
flow's right-hand side against autograd; refusals in one line."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from meanfield.core.errors import ConfigError
from meanfield.engine.twolayer import markov_law
from meanfield.engine.twolayer_net import Head, Net, gd, loss_grad
from meanfield.engine.twolayer_wide import flow_rhs, initial_gram, initial_weights

torch = pytest.importorskip("torch")
from meanfield.engine.twolayer_oracle import Oracle  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TOL = 1e-10


def spec_of(net: Net, m: int) -> dict:
    """The oracle's spec: every wide head at width m (the weights explicit)."""
    return {"S": net.S, "L": net.L, "readout": net.readout, "selector": net.selector,
            "layers": [[dict(score=h.score, lags=h.lags, softmax=h.softmax, normalise=h.normalise, value=h.value,
                             value_matrix=h.value_matrix, width=None if h.width is None else m,
                             query=list(h.query), key=list(h.key)) for h in hs]
                       for hs in net.layers]}


#: a Gram block -> the oracle's two weight matrices (the halves of U, in the Gram's column order)
HALVES = {".Q": (".WQ", ".WK"), ".QV": (".WOt", ".MV")}


def _gram(name):
    return next(((name[: -len(k)], v) for k, v in HALVES.items() if name.endswith(k)), (None, (None, None)))


def starts(net: Net, rng, U: dict):
    """(engine theta0, oracle theta0): the same narrow blocks; a wide Gram = U^T U, the oracle's weights U's halves."""
    th, orc = [], []
    for name, shape in net.blocks:
        base, _ = _gram(name)
        if base is not None:
            u = U[name]
            D = shape[0] // 2
            th.append((u.T @ u).ravel())
            orc += [u[:, :D].ravel(), u[:, D:].ravel()]
        else:
            v = rng.normal(0, 0.4, int(np.prod(shape)))
            th.append(v)
            orc.append(v)
    return np.concatenate(th), np.concatenate(orc)


def gram_of(net: Net, o: Oracle, flat: np.ndarray) -> np.ndarray:
    """The engine layout of the oracle's parameters: each pair of wide weights -> their joint Gram."""
    ps = o.from_flat(flat)
    out = []
    for name, shape in net.blocks:
        base, (a, b) = _gram(name)
        if base is not None:
            u = np.hstack([ps[base + a].detach().numpy(), ps[base + b].detach().numpy()])
            out.append((u.T @ u).ravel())
        else:
            out.append(ps[name].detach().numpy().ravel())
    return np.concatenate(out)


NETS = {
    # case (b) 3: a layer-1 copier whose value is a wide matrix W_O M_V (back into the stream), read by a wide
    # layer-2 key/query (case 1): two Grams
    "wide value+wide": lambda w: Net(2, 4, ((Head("rpe", (1, 2), value="token", value_matrix=True, width=w),),
                                            (Head("bilinear", width=w, value="token"),)), readout="linear"),
    # a wide stream value matrix under the attention read-out, normalised
    "wide stream value": lambda w: Net(2, 3, ((Head("rpe+bilinear", (0, 1), value="stream", value_matrix=True,
                                                    normalise=True, width=w),),), selector=1, readout="attention"),
    # a layer-1 copier (rpe, token value) feeding a wide layer-2 key/query on the stream (a wide CatFormer layer 2)
    "copier+wide": lambda w: Net(2, 4, ((Head("rpe", (1, 1), value="token"),), (Head("bilinear", width=w),)),
                                 readout="linear"),
    # case (b) 2: a wide layer-1 value kept in the hidden space, h_l = M_V s_l (s_l the copier's average), read
    # by a wide layer-2 query: score (W_Q x_t)^T h_l, i.e. the key reads only the copier's output, W_K = M_V
    "hidden value": lambda w: Net(2, 4, ((Head("rpe", (1, 2), value="token", normalise=True),),
                                         (Head("bilinear", width=w, query=("token", "position"),
                                               key=("layer1.head1",)),)), readout="linear"),
    # the same under the attention read-out (the selector over both heads), the query reading tokens only
    "hidden value+attention": lambda w: Net(2, 3, ((Head("rpe", (1, 1), value="token"),),
                                                   (Head("bilinear", width=w, query="token", key="layer1.head1",
                                                         value="token", normalise=True),)),
                                            selector=2, readout="attention"),
    # a wide layer-1 head with a stream value, a narrow bilinear layer 2, the attention read-out
    "wide+narrow": lambda w: Net(2, 3, ((Head("bilinear", width=w, value="stream"),),
                                        (Head("rpe+bilinear", (0, 1), normalise=True, value="token"),)),
                                 selector=1, readout="attention"),
}


def _law(net):
    law = markov_law(net.S, net.L, (1,), 0.5)
    return law.tokens, np.eye(net.S)[law.tokens[:, net.L]], law.prob


@pytest.mark.parametrize("name", list(NETS))
@pytest.mark.parametrize("m", [1, 3, 50])
def test_the_gram_map_equals_the_explicit_network_over_200_steps(name, m):
    net = NETS[name](m)
    x, y, p = _law(net)
    rng = np.random.default_rng(m)
    U = {b: initial_weights(s[0] // 2, 0.8, m, seed=(m, i)) for i, (b, s) in enumerate(net.blocks) if _gram(b)[0] is not None}
    th0, orc0 = starts(net, rng, U)
    o = Oracle(spec_of(net, m))
    eta = 0.3
    th, ls = gd(th0, net, x, y, p, eta, 200)
    ref, rls = o.gd(orc0, x, y, p, eta, 200)
    want = gram_of(net, o, ref)
    assert np.abs(th - want).max() <= TOL * max(1.0, np.abs(want).max()), (name, m)
    assert np.abs(ls - rls).max() <= TOL * max(1.0, np.abs(rls).max())
    assert np.abs(th - th0).max() > 1e-3  # the Gram moved


@pytest.mark.parametrize("name", list(NETS))
def test_infinite_width_is_the_network_whose_gram_starts_at_omega_squared(name):
    """At infinite width Q_0 = omega^2 I. A network of m = 50 whose U_0 has orthogonal columns of norm omega has
    exactly that Gram, so its Gram follows the infinite-width trajectory (the map depends on Q only)."""
    net = NETS[name](math.inf)
    x, y, p = _law(net)
    rng = np.random.default_rng(5)
    omega, m = 0.7, 50
    U = {}
    for b, s in net.blocks:
        if _gram(b)[0] is not None:
            q, _ = np.linalg.qr(rng.standard_normal((m, s[0])))
            U[b] = omega * q
            np.testing.assert_allclose(U[b].T @ U[b], initial_gram(s[0] // 2, omega, math.inf), atol=1e-14)
    th0, orc0 = starts(net, rng, U)
    o = Oracle(spec_of(net, m))
    th, _ = gd(th0, net, x, y, p, 0.3, 200)
    ref, _ = o.gd(orc0, x, y, p, 0.3, 200)
    want = gram_of(net, o, ref)
    assert np.abs(th - want).max() <= TOL * max(1.0, np.abs(want).max())


@pytest.mark.parametrize("name", ["copier+wide", "wide value+wide"])
def test_the_flow_right_hand_side_is_the_gram_of_the_weights_flow(name):
    """dQ/dt = -(G^ Q + Q G^) against d(U^T U)/dt = -(U^T dL/dU + dL/dU^T U) with dL/dU by autograd."""
    net = NETS[name](3)
    x, y, p = _law(net)
    rng = np.random.default_rng(2)
    U = {b: initial_weights(s[0] // 2, 1.0, 3, seed=(9, i)) for i, (b, s) in enumerate(net.blocks)
         if _gram(b)[0] is not None}
    th, orc = starts(net, rng, U)
    o = Oracle(spec_of(net, 3))
    ps = o.from_flat(orc)
    gs = torch.autograd.grad(o.loss(ps, x, y, p), list(ps.values()), allow_unused=True)
    grads = {k: (g.numpy() if g is not None else np.zeros(tuple(t.shape))) for (k, t), g in zip(ps.items(), gs)}
    want = []
    for b, s in net.blocks:
        base, (wa, wb) = _gram(b)
        if base is not None:
            u = np.hstack([ps[base + wa].detach().numpy(), ps[base + wb].detach().numpy()])
            gu = np.hstack([grads[base + wa], grads[base + wb]])
            want.append(-(u.T @ gu + gu.T @ u).ravel())
        else:
            want.append(-grads[b].ravel())
    rhs = flow_rhs(th, loss_grad(th, net, x, y, p)[1], net, np.ones(net.size))
    np.testing.assert_allclose(rhs, np.concatenate(want), rtol=0, atol=1e-12)


def _raw(head_extra: dict, steps=30):
    return {"model": {"class": "twolayer"}, "data": {"family": "markov", "d": 2, "L": 3},
            "layers": [{"heads": [{"score": "rpe", "lags": [1, 1], "value": "token"}]},
                       {"heads": [{"score": "bilinear", **head_extra}]}],
            "readout": {"kind": "linear"}, "init": {"seed": 4}, "training": {"steps": steps, "eta": 0.5}}


def test_a_description_with_a_wide_head_runs_and_equals_the_network():
    """The description's init draws U_0 from its seed (twolayer_wide.initial_weights, seed (seed, layer, head));
    its run (the core solver over TwoLayerSystem) equals the explicit network trained from that U_0."""
    from meanfield.engine.twolayer_desc import twolayer_from_dict
    from meanfield.engine.twolayer_run import run

    desc = twolayer_from_dict(_raw({"width": 3, "omega": 0.9}))
    assert [b for b, _ in desc.net.blocks] == ["layer1.head1.w", "layer2.head1.Q", "readout.W"]
    D = desc.net.widths[1]
    u0 = initial_weights(D, 0.9, 3, seed=(4, 1, 0))
    Q0 = desc.theta0[desc.net.offset("layer2.head1.Q"):desc.net.offset("readout.W")].reshape(2 * D, 2 * D)
    assert np.array_equal(Q0, u0.T @ u0)
    r = run(desc)
    assert r.attrs["status"] == "complete"
    th = r["theta"][-1]
    o = Oracle(spec_of(desc.net, 3))
    i, j = desc.net.offset("layer2.head1.Q"), desc.net.offset("readout.W")
    orc0 = np.concatenate([desc.theta0[:i], u0[:, :D].ravel(), u0[:, D:].ravel(), desc.theta0[j:]])
    ref, _ = o.gd(orc0, desc.x, desc.y, desc.p, 0.5, 30)
    want = gram_of(desc.net, o, ref)
    assert np.abs(th - want).max() <= TOL * max(1.0, np.abs(want).max())
    inf = twolayer_from_dict(_raw({"width": "inf", "omega": 0.5}))
    Qi = inf.theta0[i:j].reshape(2 * D, 2 * D)
    assert np.array_equal(Qi, 0.25 * np.eye(2 * D))


@pytest.mark.parametrize("extra, field", [
    ({"score": "rpe", "lags": [1, 1], "width": 3}, "layers[1].heads[0].width: only a bilinear score"),
    ({"width": 0}, "layers[1].heads[0].width"),
    ({"width": "huge"}, "layers[1].heads[0].width"),
    ({"width": 3, "A": 0.1}, "layers[1].heads[0].A: a wide head"),
    ({"omega": 0.5}, "layers[1].heads[0].omega: only with width"),
    ({"width": 3, "omega": -1}, "layers[1].heads[0].omega"),
    ({"reads": "hidden"}, "layers[1].heads[0].reads: a wide matrix acting on the hidden space"),
    ({"width": 3, "value_matrix": True, "V": 0.1}, "layers[1].heads[0].V: a wide head"),
    ({"value_matrix": "maybe"}, "layers[1].heads[0].value_matrix"),
    ({"width": 3, "key": "layer2.head1"}, "layers[1].heads[0].key: 'layer2.head1' is not a block"),
    ({"key": []}, "layers[1].heads[0].key: 'stream' or a list"),
    ({"query": 3}, "layers[1].heads[0].query: 'stream' or a list"),
])
def test_refusals_are_one_line(extra, field):
    from meanfield.engine.twolayer_desc import twolayer_from_dict

    with pytest.raises(ConfigError) as e:
        twolayer_from_dict(_raw(extra))
    msg = str(e.value)
    assert msg.startswith(field) and "\n" not in msg, msg


def test_a_hidden_value_description_runs_and_equals_the_network():
    """Case (b) 2 from a description: key = "layer1.head1" with width = 3 (W_K over the copier's output is
    its wide value M_V, kept in the hidden space and read by W_Q); the run equals the explicit network."""
    from meanfield.engine.twolayer_desc import twolayer_from_dict
    from meanfield.engine.twolayer_run import run

    desc = twolayer_from_dict(_raw({"width": 3, "omega": 0.9, "query": ["token", "position"],
                                    "key": "layer1.head1"}))
    assert desc.net.layers[1][0].key == ("layer1.head1",)
    D = desc.net.widths[1]
    u0 = initial_weights(D, 0.9, 3, seed=(4, 1, 0))
    r = run(desc)
    o = Oracle(spec_of(desc.net, 3))
    i, j = desc.net.offset("layer2.head1.Q"), desc.net.offset("readout.W")
    orc0 = np.concatenate([desc.theta0[:i], u0[:, :D].ravel(), u0[:, D:].ravel(), desc.theta0[j:]])
    ref, _ = o.gd(orc0, desc.x, desc.y, desc.p, 0.5, 30)
    want = gram_of(desc.net, o, ref)
    assert np.abs(r["theta"][-1] - want).max() <= TOL * max(1.0, np.abs(want).max())
    assert np.abs(r["theta"][-1] - r["theta"][0]).max() > 1e-3


def test_the_shipped_example_runs_from_the_command_line(tmp_path):
    ex = ROOT / "docs" / "examples" / "wide_twolayer.toml"
    out = tmp_path / "w.h5"
    r = subprocess.run([sys.executable, "-m", "meanfield", "model", "run", str(ex), "--steps", "20", "--out", str(out),
                        "--quiet"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    import h5py

    with h5py.File(out) as f:
        assert f.attrs["status"] == "complete" and f["variables/layer2.head1/Q"].shape[1:] == (16, 16)


# ------------------------------------------------------------------ the two-layer width sweep

EX = ROOT / "docs" / "examples" / "wide_twolayer.toml"


def _cli(args, cwd):
    return subprocess.run([sys.executable, "-m", "meanfield", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})


def test_width_sweep_of_a_wide_two_layer_model(tmp_path):
    """Finite widths (the exact Gram map from one draw per (m, seed)) against infinite width: the wide Gram's sup
    error decays at the mean-field rate m^-1/2 (the init Gram's fluctuation, carried by a smooth map): the fitted
    exponent's 95% interval contains -1/2; a block the width never reaches is reported equal at every m."""
    import json

    out = tmp_path / "w.h5"
    r = _cli(["model", "width-sweep", str(EX), "--widths", "2,8,32,128", "--seeds", "3", "--steps", "200",
              "--out", str(out), "--quiet"], tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    s = json.loads(out.with_suffix(".json").read_text())
    lo, hi = s["exponent_ci"]
    assert s["lead"] == "layer2.head1.Q" and lo <= -0.5 <= hi, (s["exponent"], s["exponent_ci"])
    assert s["errors"]["layer1.head1.w"] == [0.0] * 4 and "equal at every width" in s["message"]
    assert out.with_suffix(".png").stat().st_size > 0
    import h5py

    with h5py.File(out) as f:
        assert f.attrs["status"] == "complete" and f.attrs["system"] == "twolayer"
        assert f["sup_error/layer2_head1_Q"].shape == (4, 3)


def test_width_sweep_runs_start_from_the_draws_the_explicit_network_uses():
    from meanfield.engine.twolayer_desc import twolayer_from_dict
    from meanfield.engine.twolayer_widths import at_width

    desc = twolayer_from_dict(_raw({"width": 5, "omega": 0.7}))
    D = desc.net.widths[1]
    i, j = desc.net.offset("layer2.head1.Q"), desc.net.offset("readout.W")
    for m, s in ((3, 0), (7, 2)):
        u = initial_weights(D, 0.7, m, seed=(s, 1, 0))
        d = at_width(desc, m, s)
        assert np.array_equal(d.theta0[i:j], (u.T @ u).ravel()) and d.net.layers[1][0].width == m
        assert np.array_equal(d.theta0[:i], desc.theta0[:i]) and np.array_equal(d.theta0[j:], desc.theta0[j:])
    assert np.array_equal(at_width(desc, math.inf).theta0[i:j], (0.7 ** 2 * np.eye(2 * D)).ravel())


@pytest.mark.parametrize("args, field", [
    (["model", "width-sweep", str(ROOT / "meanfield" / "models" / "edelman.toml"), "--widths", "2,4"], "width: no head"),
    (["model", "width-sweep", str(EX), "--widths", "2,4", "--d", "9"], "--d: not a parameter"),
    (["model", "width-sweep", str(EX), "--widths", "0,4"], "widths"),
    (["model", "width-sweep", str(EX), "--widths", "4,1e9"], "widths: m = 1000000000 needs"),  # refused, not OOM
    (["model", "run", str(EX), "--width", "1e9"], "width: m = 1000000000 needs"),
])
def test_width_sweep_refusals(tmp_path, args, field):
    r = _cli([*args, "--out", str(tmp_path / "x.h5")], tmp_path)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and field in lines[0], r.stderr
    assert list(tmp_path.iterdir()) == []


def test_an_interrupted_width_sweep_leaves_a_valid_file(tmp_path, monkeypatch):
    import h5py

    from meanfield.engine import twolayer_run
    from meanfield.engine.twolayer_desc import twolayer_from_dict
    from meanfield.engine.twolayer_widths import width_sweep

    real, calls = twolayer_run.run, []

    def stop_on_the_third(desc, monitor=None):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(desc, monitor)

    monkeypatch.setattr(twolayer_run, "run", stop_on_the_third)
    out = tmp_path / "w.h5"
    with pytest.raises(KeyboardInterrupt):
        width_sweep(twolayer_from_dict(_raw({"width": 3}, steps=5)), [2, 4], 2, out, progress=False,
                    log=lambda *a: None)
    with h5py.File(out) as f:
        assert f.attrs["status"] == "interrupted"
        assert len(f["t"]) == 6  # the infinite-width run finished; one finite run too
    assert not list(tmp_path.glob("*.tmp-*"))


def test_a_signal_that_surfaces_as_systemerror_is_the_interrupt(tmp_path, monkeypatch):
    """A signal landing as a numba kernel returns comes out as SystemError while errors.PENDING holds it: the
    sweep writes its interrupted file as for KeyboardInterrupt; with nothing pending it is a bug and propagates."""
    import h5py

    from meanfield.core import errors
    from meanfield.engine import twolayer_run
    from meanfield.engine.twolayer_desc import twolayer_from_dict
    from meanfield.engine.twolayer_widths import width_sweep

    real, calls, pending = twolayer_run.run, [], [True]

    def fail_on_the_third(desc, monitor=None):
        calls.append(1)
        if len(calls) == 3:
            if pending[0]:
                errors.PENDING["signal"] = 15
            raise SystemError("<built-in function> returned a result with an exception set")
        return real(desc, monitor)

    monkeypatch.setattr(twolayer_run, "run", fail_on_the_third)
    out = tmp_path / "w.h5"
    desc = twolayer_from_dict(_raw({"width": 3}, steps=5))
    try:
        with pytest.raises(KeyboardInterrupt):
            width_sweep(desc, [2, 4], 2, out, progress=False, log=lambda *a: None)
    finally:
        errors.PENDING["signal"] = None
    with h5py.File(out) as f:
        assert f.attrs["status"] == "interrupted" and len(f["done_width"][()]) == 1
    out.unlink()
    calls.clear()
    pending[0] = False
    with pytest.raises(SystemError):
        width_sweep(desc, [2, 4], 2, out, progress=False, log=lambda *a: None)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("heads, readout", [
    # a pattern head (rpe, token value) with its value matrix, then a narrow bilinear head
    (((Head("rpe", (1, 2), value="token", value_matrix=True),), (Head("bilinear", value="token"),)), "linear"),
    # the attention read-out (the fused pattern path is off for a value matrix), a stream value, normalised
    (((Head("rpe", (0, 1), value="token", value_matrix=True, normalise=True),
       Head("bilinear", value="stream", value_matrix=True)),), "attention"),
])
def test_a_narrow_value_matrix_equals_the_explicit_network(heads, readout):
    """The output V u of a trainable value matrix (the narrow object of case (b) 3): loss, gradient and 200 GD
    steps against the torch network to 1e-12 / 1e-10."""
    net = Net(2, 4, heads, selector=2 if readout == "attention" else None, readout=readout)
    x, y, p = _law(net)
    rng = np.random.default_rng(3)
    th0 = rng.normal(0, 0.4, net.size)
    o = Oracle(spec_of(net, 0))
    ps = o.from_flat(th0)
    tl = o.loss(ps, x, y, p)
    gs = torch.autograd.grad(tl, list(ps.values()), allow_unused=True)
    tg = np.concatenate([(g.numpy().ravel() if g is not None else np.zeros(t.numel())) for g, t in zip(gs, ps.values())])
    l, g = loss_grad(th0, net, x, y, p)
    assert abs(l - float(tl.detach())) <= 1e-12 and np.abs(g - tg).max() <= 1e-12
    th, _ = gd(th0, net, x, y, p, 0.3, 200)
    ref, _ = o.gd(th0, x, y, p, 0.3, 200)
    assert np.abs(th - ref).max() <= TOL * max(1.0, np.abs(ref).max())


def test_a_description_with_a_wide_value_matrix():
    """value_matrix = true with width: the block QV is the Gram of [W_O^T, M_V] drawn from (seed, layer, head, 1)."""
    from meanfield.engine.twolayer_desc import twolayer_from_dict

    raw = _raw({"width": 4, "omega": 0.6})
    raw["layers"][0]["heads"][0].update(value_matrix=True, width=5, omega=0.8)
    desc = twolayer_from_dict(raw)
    assert [b for b, _ in desc.net.blocks] == ["layer1.head1.w", "layer1.head1.QV", "layer2.head1.Q", "readout.W"]
    i, j = desc.net.offset("layer1.head1.QV"), desc.net.offset("layer2.head1.Q")
    u = initial_weights(2, 0.8, 5, seed=(4, 0, 0, 1))
    assert np.array_equal(desc.theta0[i:j], (u.T @ u).ravel())
    narrow = _raw({})
    narrow["layers"][0]["heads"][0].update(value_matrix=True, V=[[1.0, 0.5], [0.0, 2.0]])
    d2 = twolayer_from_dict(narrow)
    k = d2.net.offset("layer1.head1.V")
    assert list(d2.theta0[k:k + 4]) == [1.0, 0.5, 0.0, 2.0]


# ------------------------------------------------------------------ model particles: the explicit network at m

@pytest.mark.parametrize("m", [1, 3, 50])
def test_model_particles_equals_model_run_at_the_same_width(tmp_path, m):
    """`model particles FILE --width M` (the torch network trained on its weights, from the draw the
    description's seed makes) against `model run FILE --width M` (the exact Gram map from that draw): every
    record of every block to 1e-10 over 200 steps; the recorded losses too."""
    import h5py

    args = [str(EX), "--width", str(m), "--steps", "200", "--record-every", "10", "--quiet"]
    a, b = tmp_path / "p.h5", tmp_path / "r.h5"
    rp = _cli(["model", "particles", *args, "--out", str(a)], tmp_path)
    rr = _cli(["model", "run", *args, "--out", str(b)], tmp_path)
    assert rp.returncode == 0 and rr.returncode == 0, rp.stderr[-2000:] + rr.stderr[-2000:]
    with h5py.File(a) as f, h5py.File(b) as g:
        assert f.attrs["particles"] == 1 and f.attrs["width"] == m and "particles" not in g.attrs
        th, ref = f["theta"][()], g["theta"][()]
        assert th.shape == ref.shape and len(th) == 21
        assert np.abs(th - ref).max() <= TOL * max(1.0, np.abs(ref).max())
        assert np.abs(f["loss"][()] - g["loss"][()]).max() <= TOL
        assert np.abs(th[-1] - th[0]).max() > 1e-3


def test_particles_in_python():
    import meanfield as mf

    a = mf.particles(str(EX), width=3, steps=20, progress=False)
    b = mf.run(str(EX), width=3, steps=20, progress=False)
    assert a.attrs["particles"] == 1 and np.abs(a["theta"] - b["theta"]).max() <= TOL


@pytest.mark.parametrize("args, field", [
    ([str(EX), "--steps", "5"], "width: the explicit network needs a finite width"),  # the file says inf
    ([str(ROOT / "meanfield" / "models" / "edelman.toml"), "--steps", "5"], "width: no head"),
    ([str(EX), "--width", "3", "--d", "9"], "--d: not a parameter"),
    ([str(EX), "--width", "3", "--method", "flow", "--t-end", "1"], "method: the explicit network"),
    ([str(EX), "--width", "0"], "width"),
])
def test_particles_refusals(tmp_path, args, field):
    r = _cli(["model", "particles", *args, "--out", str(tmp_path / "x.h5")], tmp_path)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and field in lines[0], r.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_hidden_value_example_particles_equal_run_at_finite_width():
    # case (b) 2 shipped (docs/examples/hidden_value_twolayer.toml): the torch network trained on W_Q and the
    # hidden value M_V themselves equals the exact Gram map from the same draw; infinite width runs too
    import meanfield as mf

    ex = str(ROOT / "docs" / "examples" / "hidden_value_twolayer.toml")
    a = mf.particles(ex, width=4, steps=200, progress=False)
    b = mf.run(ex, width=4, steps=200, progress=False)
    assert np.abs(a["theta"] - b["theta"]).max() <= TOL * max(1.0, np.abs(b["theta"]).max())
    inf = mf.run(ex, steps=60, progress=False)
    assert inf.attrs["status"] == "complete" and inf["loss"][-1] < inf["loss"][0]
