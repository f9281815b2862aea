"""The full two-layer transformer of the official code (``meanfield.models.induction.full``):
hand-written gradients against central finite differences, the layout, and
training through the shared steppers."""

import numpy as np
import pytest

from meanfield.core import integrate
from meanfield.models.induction import full as F
from meanfield.models.induction.data import generate


def _fd(theta, tok, arch, loss, h=1e-6):
    out = np.zeros_like(theta)
    for i in range(theta.size):
        e = np.zeros_like(theta)
        e[i] = h
        out[i] = (F.loss_and_grad(theta + e, tok, arch, loss)[0] - F.loss_and_grad(theta - e, tok, arch, loss)[0]) / (2 * h)
    return out


@pytest.mark.parametrize("loss", ["official-ce", "nll"])
@pytest.mark.parametrize("self_attend", [True, False])
def test_full_gradients_match_finite_differences(loss, self_attend):
    arch = F.FullArch(d=3, H=3, M=2, D=2, self_attend=self_attend)
    tok = generate(4, 3, 8, (1, 2), 0.5, (1,)).tokens
    rng = np.random.default_rng(0)
    th = arch.init(2.0, 0.1, 1.0, 1.5, 0.5) + rng.normal(0, 0.3, arch.n_params)
    _, g = F.loss_and_grad(th, tok, arch, loss, chunk=3)  # two chunks
    fd = _fd(th, tok, arch, loss)
    scale = np.max(np.abs(fd))
    for k, s in arch.slices().items():
        np.testing.assert_allclose(g[s], fd[s], rtol=0, atol=1e-8 * max(scale, 1.0), err_msg=k)
    assert np.all(np.abs(g[arch.slices()["q"]]) > 0)  # the query-key path carries gradient


def test_gradient_check_can_fail():
    """A wrong backward (layer-norm gain gradient dropped) is caught by the same comparison."""
    arch = F.FullArch(d=3, H=2, M=2, D=1)
    tok = generate(3, 3, 6, (1,), 0.5, (2,)).tokens
    th = arch.init(1.0, 0.0, 1.0, 2.0, 0.7) + np.random.default_rng(1).normal(0, 0.2, arch.n_params)
    _, g = F.loss_and_grad(th, tok, arch)
    g[arch.slices()["g"]] = 0.0
    assert np.max(np.abs(g - _fd(th, tok, arch, "official-ce"))) > 1e-4


def test_layout_init_and_attention_by_lag():
    arch = F.FullArch(d=3, H=3, M=3, D=2)
    th = arch.init()
    p = arch.unpack(th)
    assert p["w"][0, 0] == 3.0 and p["w"][0, 1] == 0.1 and np.allclose(p["c"], 0.01) and p["a"] == 0.01
    assert np.allclose(p["o"][1], 0.01 * np.eye(3)) and np.allclose(p["g"], 1.0)
    assert np.array_equal(arch.pack(p), th)
    tok = generate(20, 3, 12, (1, 2), 0.3, (3,)).tokens
    att = F.attention_by_lag(th, tok, arch, max_lag=6)
    # head h (windows h+1..h+3) puts most of its mass on its start lag h+1, none beyond its window
    assert list(att.argmax(axis=1)) == [1, 2, 3]
    assert np.allclose(att[0, 4:], 0.0) and att[2, 0] > 0  # lag 0: the official self-attention
    m = arch.group_mask(["c", "qk"])
    assert m[arch.slices()["c"]].all() and m[arch.slices()["q"]].all() and not m[arch.slices()["o"]].any()


def test_training_through_the_shared_gd_map_lowers_the_loss():
    arch = F.FullArch(d=3, H=3, M=3, D=2)
    tok = generate(60, 3, 16, (1, 2), 0.1, (4,)).tokens
    sysm = F.FullSystem(tok, arch)
    y0 = arch.init()
    stage = integrate.Stage(1, arch.group_mask(F.GROUPS), 30, None, "joint", eta=1.0)
    traj = integrate.GDMap(1.0).solve(sysm, y0.copy(), [stage], integrate.SaveAt(every=10))
    Y = traj.arrays()["y"]
    assert traj.status == "complete" and Y.shape[0] == 4
    assert F.loss_and_grad(Y[-1], tok, arch)[0] < F.loss_and_grad(Y[0], tok, arch)[0]


def _rec(att_start, att_end, cw_end, head_lags, subset, lag_set):
    return [{"t": 0.0, "att": np.asarray(att_start), "c_weight": np.full(7, 1 / 7)},
            {"t": 1.0, "att": np.asarray(att_end), "c_weight": np.asarray(cw_end), "head_lags": head_lags,
             "subset": subset, "lag_set": lag_set,
             "copier_mass": [float(np.asarray(att_end)[h, head_lags[h]]) for h in range(3)]}]


def test_same_heads_claim_pass_and_fail():
    start = np.array([[0, 0.8, 0.1, 0.1, 0], [0, 0, 0.8, 0.1, 0.1], [0, 0, 0, 0.8, 0.2]])
    end = np.array([[0, 0.95, 0.05, 0, 0], [0, 0, 0.95, 0.05, 0], [0, 0, 0, 0.8, 0.2]])
    cw = [0, 0, 0, 0, 1.0, 0, 0]
    simp = _rec(start, end, cw, [1, 2, 3], [1, 2], [1, 2])
    ok = F.check_full_same_heads({"simplified": simp, "full": simp}, (1, 2), 3)
    assert ok.passed and ok.source == "expected" and ok.numbers["full_selects_parents"]
    # the full model selects heads {2, 3}: lag set {2, 3}
    other = _rec(start, end, [0, 0, 0, 0, 0, 0, 1.0], [1, 2, 3], [2, 3], [2, 3])
    assert not F.check_full_same_heads({"simplified": simp, "full": other}, (1, 2), 3).passed
    # same selection but head 2 copies lag 3 in the full model
    moved = _rec(start, end, cw, [1, 3, 3], [1, 2], [1, 3])
    assert not F.check_full_same_heads({"simplified": simp, "full": moved}, (1, 2), 3).passed
    # same lags, but the full model's copier mass shrank: it did not build the heads
    shrank = _rec(start, start * 0.9, cw, [1, 2, 3], [1, 2], [1, 2])
    bad = F.check_full_same_heads({"simplified": simp, "full": shrank}, (1, 2), 3)
    assert not bad.passed and bad.numbers["copier_mass_grew"] == {"simplified": True, "full": False}


def test_full_study_tiny(tmp_path):
    from meanfield.cli import main

    res = F.full_study(tmp_path / "s", log=lambda *a: None, quick=True,
                       settings={"L": 8, "n_train": 40, "steps": 6, "record_every": 3, "probe": 20})
    rep = (tmp_path / "s" / "report.md").read_text()
    assert res["claim"].name == "full_model_same_heads" and "| full |" in rep
    assert (tmp_path / "s" / "full_vs_simplified.png").stat().st_size > 0
    assert len(res["records"]["full"]) == 3 and len(res["records"]["simplified"]) == 3
    assert main(["induction", "full", "--quick", "--steps", "0", "--out", str(tmp_path / "x")]) == 2
    assert main(["induction", "full", "--quick", "--loss", "mse", "--out", str(tmp_path / "x")]) == 2


def test_full_verb_refuses_a_file_as_out(tmp_path, capsys):
    from meanfield.cli import main

    f = tmp_path / "afile"
    f.write_text("x")
    assert main(["induction", "full", "--quick", "--out", str(f)]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_match_mass_counts_matching_histories():
    tok = np.array([[0, 1, 2, 0, 1, 2, 0, 1, 0]])  # L = 8, query history (x_8, x_7) = (1, 0)
    pl = np.full((1, 8), 1 / 8)
    mm, chance = F.match_mass(pl, tok, (1, 2))
    # positions l with (x_{l-1}, x_{l-2}) = (1, 0): l = 3 and l = 6 (1-based)
    assert mm == pytest.approx(2 / 8) and chance == pytest.approx(2 / 8)
    pl = np.zeros((1, 8))
    pl[0, [2, 5]] = 0.5
    assert F.match_mass(pl, tok, (1, 2))[0] == pytest.approx(1.0)
    assert F.match_mass(pl, tok, (1,))[0] == pytest.approx(1.0)  # x_{l-1} = 1 at l = 3, 6 (and 9 is the query)
