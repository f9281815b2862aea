"""``make bench`` at its smoke size: every section of benchmarks/run_all.py runs (the numbers mean nothing here)."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _bench_path():
    if str(ROOT / "benchmarks") not in sys.path:  # the benchmarks import each other (peers, bench_induction)
        sys.path.append(str(ROOT / "benchmarks"))


def _run_all():
    _bench_path()
    import run_all

    return run_all


def test_bench_smoke_writes_every_section(tmp_path):
    out = tmp_path / "latest.md"
    assert _run_all().main(["--smoke", "--out", str(out)]) == 0
    text = out.read_text()
    for title in ("### 1.", "### 2.", "### 3.", "### 4.", "### 5.", "### 6.", "## Acceptance"):
        assert title in text
    # every row is a number or says skipped (a missing peer), never an error
    assert "mixture.batched.advance" in text and "engine.run_batch" in text


def test_bench_refuses_an_unknown_section(tmp_path, capsys):
    assert _run_all().main(["--smoke", "--only", "nope", "--out", str(tmp_path / "x.md")]) == 2
    assert "--only" in capsys.readouterr().err
    assert not (tmp_path / "x.md").exists()


def test_peers_equal_the_package(tmp_path):
    """The peers are independent implementations: the JAX reduced map equals the package's kernel, and the
    JAX / PyTorch networks' projected weights follow the reduced map (the bench's ratios compare equal work)."""
    import numpy as np

    _bench_path()
    import peers
    from meanfield.models.mixture import kernels
    from meanfield.models.mixture.config import make_config
    from meanfield.models.mixture.data import sample_set
    from meanfield.models.mixture.init import initial_state
    from meanfield.models.mixture.particles import projected_state

    s = sample_set(2, 3)

    def reduced(y, n):
        y = y.copy()
        _, _, loss = kernels.gd_advance(y, n, 0.5, s.P, s.idx, s.sgn, s.y, s.weight, s.consistent, 1.0, True, True,
                                        0, 1, 0.0, np.inf)
        return y, loss

    try:
        _, run, _ = peers.jax_reduced(s)
    except peers.Skipped:
        pytest.skip("jax not installed")
    y0 = initial_state(make_config({}, K=2, L=3))
    y, loss = reduced(y0, 20)
    yj, lj = run(y0, 0.5, 20)
    assert np.max(np.abs(np.asarray(yj) - y)) < 1e-13 and abs(float(lj) - loss) < 1e-13
    E, WK, WQ, w = peers.network_init(s, 16, 1)
    y, _ = reduced(projected_state(E, WK[0], WQ[0], w[0]), 10)
    runn, _ = peers.jax_network(s, E)
    out = runn(WK[0], WQ[0], w[0], 0.5, 10)
    assert np.max(np.abs(projected_state(E, *[np.asarray(a) for a in out[:3]]) - y)) < 1e-12
    try:
        torch = peers._torch()
    except peers.Skipped:
        return
    step = peers.torch_network(s, E)
    prm = [torch.tensor(a[0], requires_grad=True) for a in (WK, WQ, w)]
    for _ in range(10):
        step(prm, 0.5)
    assert np.max(np.abs(projected_state(E, *[a.detach().numpy() for a in prm]) - y)) < 1e-12
    # the check can fail: one step fewer is told apart
    y9, _ = reduced(projected_state(E, WK[0], WQ[0], w[0]), 9)
    assert np.max(np.abs(y9 - y)) > 1e-8


def test_a_missing_peer_is_skipped_not_a_failure(tmp_path, monkeypatch):
    run_all = _run_all()
    import peers

    def missing():
        raise peers.Skipped("not installed (test)")

    monkeypatch.setattr(peers, "_jax", missing)
    monkeypatch.setattr(peers, "_torch", missing)
    monkeypatch.setattr(run_all, "_JR", {})
    out = tmp_path / "latest.md"
    assert run_all.main(["--smoke", "--only", "single,Bs", "--out", str(out)]) == 0
    text = out.read_text()
    assert text.count("skipped") >= 3  # lax.scan, PyTorch, jax.vmap at each B
    assert "mixture fast path" in text
