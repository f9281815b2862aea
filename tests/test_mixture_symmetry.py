"""Exact symmetry reduction (meanfield.models.mixture.symmetry, symmetry_symbolic).

(a) the group found from the definitions: K=2 L=3 uniform p, zero neurons,
    infinite width: S_2 x Z_2 (order 4), the same from all signed permutations;
    named non-symmetries rejected by the data check AND numerically;
    p = (0.7, 0.3) keeps only the head swap with v -> -v; random inits break it;
(b) the invariant subspace: projector = group average, embed/project, counts;
(c) the reduced right-hand side / GD map / loss equal the projected full ones at
    random points of the subspace (also at ReLU kinks), to 1e-12;
(d) trajectories (GD map, RK4, Dopri5) in orbit variables, embedded back, equal
    the full ones to 1e-12 over >= 200 steps, stop criteria included;
(e) the sympy derivation: committed files current, generated code equal to the
    numeric reduced system, JSON counts (22 of 80), LaTeX well formed.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest

from meanfield.engine.codegen import load_generated
from meanfield.models.mixture import kernels, symbolic, symmetry, symmetry_symbolic
from meanfield.models.mixture.config import MixtureConfig, make_config
from meanfield.models.mixture.data import sample_set
from meanfield.models.mixture.init import initial_state
from meanfield.models.mixture.run import MixtureSystem, run

ROOT = Path(__file__).resolve().parents[1]
GEN = ROOT / "derivations" / "generated"
TOL = 1e-12


def _el(K, perm_groups, vsign, swap):
    perm = tuple(perm_groups) + tuple(K + p for p in perm_groups)
    return symmetry.Element(perm, (1,) * K + tuple([vsign] * K), swap)


# ------------------------------------------------------------------ (a) the group

@pytest.fixture(scope="module")
def default_reduced():
    return symmetry.reduce(make_config(K=2, L=3))


def test_group_K2_L3_uniform_zero_init(default_reduced):
    g = default_reduced.group
    assert g.order == 4 and g.structure() == "S_2 x Z_2"
    expected = {_el(2, (0, 1), 1, False), _el(2, (0, 1), -1, True), _el(2, (1, 0), 1, False),
                _el(2, (1, 0), -1, True)}
    assert set(g.elements) == expected
    assert g.elements[0].is_identity()
    assert g.n_candidates == 2 * 16 * 2 and g.n_data_symmetries == 4
    assert not g.inconsistent and not g.hidden
    assert len(g.generators()) == 2
    nm = g.named
    for name in ("group transposition (1 2)", "heads swapped with every v negated"):
        assert nm[name].accepted and nm[name].numeric_error <= TOL
    for name, why in (("every v negated (labels flip, f does not)", "loss is not preserved"),
                      ("heads swapped alone (f flips, labels do not)", "loss is not preserved"),
                      ("v1 negated (labels of group 1 only)", "some labels are flipped"),
                      ("v1 negated with the heads swapped", "some labels are flipped"),
                      ("c1 negated", "no sample")):
        v = nm[name]
        assert not v.accepted and why in v.reason, (name, v.reason)
        assert v.numeric_error > 1e-3, name  # and the flow really does not commute with it


def test_exhaustive_search_finds_the_same_group_and_nothing_hidden():
    # every signed permutation of the 4 features x head swap, each checked numerically too
    g = symmetry.find_group(2, 3, None, initial_state(make_config(K=2, L=3)), candidate_set="exhaustive",
                            verify="all")
    assert g.n_candidates == 24 * 16 * 2
    assert set(g.elements) == set(symmetry.reduce(make_config(K=2, L=3)).group.elements)
    assert not g.hidden and not g.inconsistent


def test_nonuniform_p_loses_the_group_permutation():
    r = symmetry.reduce(make_config(K=2, L=3, p=[0.7, 0.3]))
    assert r.group.order == 2 and r.group.structure() == "Z_2"
    assert set(r.group.elements) == {_el(2, (0, 1), 1, False), _el(2, (0, 1), -1, True)}
    v = r.group.named["group transposition (1 2)"]
    assert not v.accepted and "weight" in v.reason
    assert r.reduction.n == 40  # head + only: 16 + 10 + 10 + 4


@pytest.mark.parametrize("over, order, n", [
    ({"neuron_init": "gaussian:0.1"}, 1, 80),        # no symmetry left: only A = A^T, B = B^T
    ({"width": 16}, 1, 80),                          # finite width: random scores
    ({"neuron_init": "const:0.1,0.2,0,0"}, 2, 40),   # c1 != c2 breaks the permutation
    ({"neuron_init": "const:0.1,0.1,0.3,0.3"}, 2, 44),  # w_- = w_+ (not R w_+) breaks the swap
    ({"neuron_init": "const:0.1,0.1,0.3,0.3,0.1,0.1,-0.3,-0.3"}, 4, 22),
])
def test_initial_state_selects_the_subgroup(over, order, n):
    r = symmetry.reduce(make_config(K=2, L=3, **over))
    assert r.group.order == order and r.reduction.n == n
    assert np.array_equal(r.embed(r.z0), initial_state(make_config(K=2, L=3, **over)))


@pytest.mark.parametrize("K, L, order", [(3, 3, 12), (3, 4, 12), (4, 3, 48)])
def test_larger_K_uniform(K, L, order):
    r = symmetry.reduce(make_config(K=K, L=L))
    assert r.group.order == order and r.group.structure() == f"S_{K} x Z_2"
    assert r.reduction.n == 22  # 8 scores, 6 + 6 self-scores, 2 neurons for every K
    assert r.reduction.counts()["full"] == symbolic.variables(K, L)["total"]


def test_find_group_rejects_bad_input():
    with pytest.raises(ValueError, match="y0"):
        symmetry.find_group(2, 3, None, np.zeros(5))
    with pytest.raises(ValueError, match="kind"):
        list(symmetry.candidates(2, "all"))


# ------------------------------------------------------------------ (b) the subspace

def test_subspace_linear_algebra(default_reduced):
    red = default_reduced.reduction
    Pm = red.projector()
    assert np.allclose(Pm, red.group_average(), atol=1e-15)
    assert np.allclose(Pm @ Pm, Pm, atol=1e-15) and np.allclose(Pm, Pm.T)
    assert round(np.trace(Pm)) == red.n == 22
    rng = np.random.default_rng(0)
    z = rng.standard_normal(red.n)
    y = red.embed(z)
    assert np.array_equal(red.project(y), z)
    assert np.allclose(red.project_average(y), z, atol=1e-15)
    assert np.allclose(Pm @ y, y, atol=1e-15)
    for e in red.group.elements:
        assert np.array_equal(e.apply(y), y)
    # stacks
    Z = rng.standard_normal((3, red.n))
    assert np.array_equal(red.embed(Z)[1], red.embed(Z[1]))
    c = red.counts()
    assert c == {"independent": 22, "full": 80, "flat_state": 104, "forced_zero_flat": 0,
                 "by_kind": {"score": 8, "key_self_score": 6, "query_self_score": 6, "neuron": 2}}
    assert red.names[:3] == ["S+[c1,c1]", "S+[c1,c2]", "S+[c1,v1]"] and red.names[-2:] == ["w+[c1]", "w+[v1]"]


def test_element_algebra():
    K = 3
    rng = np.random.default_rng(1)
    els = list(symmetry.candidates(K))
    for _ in range(20):
        a, b = els[rng.integers(len(els))], els[rng.integers(len(els))]
        y = rng.standard_normal(kernels.state_size(2 * K))
        assert np.array_equal(a.compose(b).apply(y), a.apply(b.apply(y)))
        assert np.array_equal(a.inverse().apply(a.apply(y)), y)
        assert np.array_equal(a.matrix() @ b.matrix(), a.compose(b).matrix())


# ------------------------------------------------------------------ (c) reduced rhs

def _points(red, rng):
    pts = [rng.standard_normal(red.n) * s for s in (0.3, 1.0, 3.0)]
    z = rng.standard_normal(red.n)
    z[[i for i, k in enumerate(red.kinds) if k == "w"]] = 0.0  # every u exactly 0 (kink)
    pts.append(z)
    z = red.project(initial_state(make_config(K=red.K, L=red.L)))
    z[[i for i, k in enumerate(red.kinds) if k == "w"]] = rng.standard_normal(sum(k == "w" for k in red.kinds))
    pts.append(z)
    return pts


@pytest.mark.parametrize("K, L, p", [(2, 3, None), (2, 3, (0.7, 0.3)), (3, 3, None), (2, 4, None)])
def test_reduced_rhs_equals_projected_full(K, L, p):
    red = symmetry.reduce(make_config(K=K, L=L, p=p)).reduction
    s = sample_set(K, L, p)
    rng = np.random.default_rng(10 * K + L)
    for z in _points(red, rng):
        y = red.embed(z)
        for r0 in (0.0, 0.5, 1.0):
            f = np.empty_like(y)
            loss = kernels.flow_rhs(y, f, s.P, s.idx, s.sgn, s.y, s.weight, r0, True, True)
            assert red.distance(f) <= TOL  # equivariance: the flow stays in the subspace
            fr = red.rhs(z, r0)
            assert np.max(np.abs(fr - red.project(f))) <= TOL * max(1.0, np.max(np.abs(f)))
            for mode in ((True, False), (False, True)):
                f2 = np.empty_like(y)
                kernels.flow_rhs(y, f2, s.P, s.idx, s.sgn, s.y, s.weight, r0, *mode)
                assert np.max(np.abs(red.rhs(z, r0, mode) - red.project(f2))) <= TOL
            g = y.copy()
            kernels.gd_advance(g, 1, 0.4, s.P, s.idx, s.sgn, s.y, s.weight, s.consistent, r0, True, True,
                               0, 1, 0.0, np.inf)
            assert np.max(np.abs(red.gd_map(z, 0.4, r0) - red.project(g))) <= TOL * max(1.0, np.max(np.abs(g)))
            lr, G, dw, margin, U = red.loss_grads(z, r0)
            kl, kG, kdw, km, ku = kernels.loss_and_grads(y, s.P, s.idx, s.sgn, s.y, s.weight, r0)
            assert abs(lr - kl) <= TOL and np.max(np.abs(margin - km)) <= TOL
            for h in red.grad_heads:
                assert np.max(np.abs(G[h] - kG[h])) <= TOL and np.max(np.abs(dw[h] - kdw[h])) <= TOL


# ------------------------------------------------------------------ (d) trajectories

def _compare(cfg, tol=TOL):
    full = run(cfg)
    emb, zt, red = symmetry.run_reduced(cfg)
    a, b = full.arrays(), emb.arrays()
    assert full.status == emb.status == "complete"
    assert np.array_equal(a["step"], b["step"]) and np.allclose(a["t"], b["t"], rtol=0, atol=1e-12)
    assert full.stage_ends == emb.stage_ends
    err = float(np.max(np.abs(a["y"] - b["y"])))
    assert err <= tol, err
    assert red.reduction.distance(a["y"]) <= tol  # the full run stays in the subspace
    assert zt.arrays()["y"].shape[1] == red.reduction.n
    return err, a


@pytest.mark.parametrize("over", [
    dict(),                                                   # the paper's default: K=2, L=3, eta=0.5
    dict(p=[0.7, 0.3]),
    dict(relu_prime_at_zero=0.5),
    dict(schedule="three-stage", stage_steps=(100, 150, 100)),
    dict(K=3, L=4, steps=250),
])
def test_gd_trajectories_agree(over):
    cfg = make_config(**{"steps": 600, "record_every": 1, **over})
    err, a = _compare(cfg)
    assert a["step"][-1] >= 250
    assert np.max(np.abs(a["y"][-1])) > 0.5  # it went somewhere


def test_gd_stop_criteria_agree():
    for crit in ("loss<=0.6", "consistent_margin>=0.5", "grad_w<=0.05"):
        cfg = make_config(steps=3000, record_every=10, criterion=crit)
        full = run(cfg)
        emb, _, _ = symmetry.run_reduced(cfg)
        assert full.stage_ends == emb.stage_ends and full.stage_ends[0]["reason"] == "criterion", crit
        assert np.max(np.abs(full.arrays()["y"] - emb.arrays()["y"])) <= TOL
    # criterion values themselves
    red = symmetry.reduce(make_config())
    s = sample_set(2, 3)
    rng = np.random.default_rng(3)
    z = rng.standard_normal(red.reduction.n)
    fullsys = MixtureSystem(s, 1.0)
    for name in kernels.CRITERIA:
        assert abs(red.system.criterion_value(z, name) - fullsys.criterion_value(red.embed(z), name)) <= TOL


def test_flow_trajectories_agree():
    # RK4 (fixed steps: the same arithmetic up to rounding)
    _compare(make_config(method="rk4", dt=0.5, t_end=150.0, record_dt=0.5))
    # Dopri5 at rtol 1e-13 (the step sizes are chosen from different error norms; both are accurate)
    cfg = make_config(method="flow", t_end=150.0, rtol=1e-13, atol=1e-15, h_min=0.0, record_dt=0.5)
    full = run(cfg)
    emb, zt, red = symmetry.run_reduced(cfg)
    a, b = full.arrays(), emb.arrays()
    assert len(a["t"]) >= 300 and np.array_equal(a["t"], b["t"])
    assert int(a["step"][-1]) >= 200 and int(b["step"][-1]) >= 200
    assert np.max(np.abs(a["y"] - b["y"])) <= TOL


def test_label_extensions_when_available():
    # label noise keeps the group (clean and flipped copies map among themselves);
    # P(y = +1) != 1/2 breaks the head swap, which needs the labels to flip
    if "label_noise" not in {f.name for f in dataclasses.fields(MixtureConfig)}:
        pytest.skip("this MixtureConfig has no label_prob / label_noise")
    r = symmetry.reduce(make_config(label_noise=0.1))
    assert r.group.order == 4 and r.reduction.n == 22 and r.reduction.samples.n == 16
    r = symmetry.reduce(make_config(label_prob=0.6))
    assert r.group.order == 2 and not any(e.swap for e in r.group.elements)
    _compare(make_config(label_noise=0.1, steps=300, record_every=1))
    _compare(make_config(label_prob=0.6, steps=300, record_every=1))


def test_reduce_unpacks_and_maps():
    cfg = make_config()
    r = symmetry.reduce(cfg)
    embed, project, rhs, gd = r
    y0 = initial_state(cfg)
    assert np.array_equal(embed(project(y0)), y0)
    s = sample_set(2, 3)
    y = y0.copy()
    kernels.gd_advance(y, 1, cfg.eta, s.P, s.idx, s.sgn, s.y, s.weight, s.consistent, 1.0, True, True,
                       0, 1, 0.0, np.inf)
    assert np.max(np.abs(embed(gd(project(y0))) - y)) <= TOL
    f = MixtureSystem(s, 1.0).rhs(y, (True, True))
    assert np.max(np.abs(embed(rhs(project(y))) - f)) <= TOL


# ------------------------------------------------------------------ (e) sympy derivation

@pytest.mark.parametrize("fmt", symmetry_symbolic.FORMATS)
def test_generated_files_are_current(fmt):
    path = GEN / symmetry_symbolic.filename(2, 3, fmt)
    assert path.exists(), f"{path} missing: run python derivations/mixture_symmetry.py --K 2 --L 3"
    assert symmetry_symbolic.render(2, 3, fmt) == path.read_text(encoding="utf-8"), (
        f"{path} is stale: run python derivations/mixture_symmetry.py --K 2 --L 3")


def test_write_and_bad_format(tmp_path):
    p = symmetry_symbolic.write(2, 3, "json", tmp_path / "x")
    assert p.name == "mixture_K2_L3_sym.json" and p.read_text() == symmetry_symbolic.render(2, 3, "json")
    with pytest.raises(ValueError, match="fmt"):
        symmetry_symbolic.render(2, 3, "yaml")


def _check_generated(gen, red, seed):
    s = red.samples
    assert (gen.K, gen.L, gen.N_REDUCED, gen.STATE_SIZE, gen.GROUP_ORDER) == (
        red.K, red.L, red.n, red.N, red.group.order)
    assert list(gen.VARIABLES) == red.names
    assert np.array_equal(gen.REP, red.rep) and np.array_equal(gen.ORBIT_OF, red.orbit_of)
    rng = np.random.default_rng(seed)
    sensitive = 0
    for z in _points(red, rng):
        y = red.embed(z)
        outs = {}
        for r0 in (0.0, 0.5, 1.0):
            f = gen.flow_rhs(z, r0)
            assert np.max(np.abs(f - red.rhs(z, r0))) <= TOL
            ff = np.empty_like(y)
            kernels.flow_rhs(y, ff, s.P, s.idx, s.sgn, s.y, s.weight, r0, True, True)
            assert np.max(np.abs(f - red.project(ff))) <= TOL
            for eta in (0.05, 0.5):
                assert np.max(np.abs(gen.gd_map(z, eta, r0) - red.gd_map(z, eta, r0))) <= TOL
            loss, G, dw, margins = gen.loss_grads(z, r0)
            l2, G2, dw2, m2, _ = red.loss_grads(z, r0)
            assert abs(loss - l2) <= TOL and np.max(np.abs(G - G2)) <= TOL
            assert np.max(np.abs(dw - dw2)) <= TOL and np.max(np.abs(margins - m2)) <= TOL
            outs[r0] = f
        sensitive += np.max(np.abs(outs[0.0] - outs[1.0])) > 1e-6
    assert sensitive >= 1  # the kink points really depend on relu'(0)


def test_generated_code_equals_numeric_reduction(default_reduced):
    gen = load_generated(GEN / "mixture_K2_L3_sym.py")
    _check_generated(gen, default_reduced.reduction, seed=5)


@pytest.mark.slow
@pytest.mark.parametrize("K, L", [(3, 3), (2, 4)])
def test_generated_code_other_sizes(K, L, tmp_path):
    path = symmetry_symbolic.write(K, L, "python", tmp_path)
    _check_generated(load_generated(path), symmetry.reduce(make_config(K=K, L=L)).reduction, seed=6)


def test_json_counts_and_members():
    data = json.loads((GEN / "mixture_K2_L3_sym.json").read_text())
    assert data["counts"]["independent"] == 22 and data["counts"]["full"] == 80
    assert data["counts"]["flat_state"] == 104
    assert data["group"]["order"] == 4 and data["group"]["structure"] == "S_2 x Z_2"
    assert len(data["variables"]) == 22
    by = {v["name"]: v for v in data["variables"]}
    mem = {m["name"]: m["sign"] for m in by["S+[c1,v1]"]["members"]}
    assert mem == {"S+[c1,v1]": 1, "S+[c2,v2]": 1, "S-[c1,v1]": -1, "S-[c2,v2]": -1}
    mem = {m["name"]: m["sign"] for m in by["w+[v1]"]["members"]}
    assert mem == {"w+[v1]": 1, "w+[v2]": 1, "w-[v1]": -1, "w-[v2]": -1}
    # every full variable (canonical names of symbolic.variables) appears exactly once
    names = [m["name"] for v in data["variables"] for m in v["members"]]
    full = [n for h in symbolic.variables(2, 3)["heads"].values() for k in h.values() for n in k["names"]]
    assert sorted(names) == sorted(full)
    assert len(data["preactivation_orbits"]) == 4
    assert data["group"]["named_candidates"]["v1 negated (labels of group 1 only)"]["accepted"] is False


def test_latex_structure():
    tex = (GEN / "mixture_K2_L3_sym.tex").read_text()
    assert tex.count(r"\tfrac{d}{dt}") == 22
    assert r"z_{22} &= (w_+^\top v_1) = (w_+^\top v_2) = -(w_-^\top v_1) = -(w_-^\top v_2)" in tex
    assert r"u_+(X_{1}) &= u_+(X_{5}) = u_-(X_{4}) = u_-(X_{8})" in tex
    assert tex.count("{") - tex.count(r"\{") == tex.count("}") - tex.count(r"\}")
    assert re.findall(r"\\begin\{(\w+\*?)\}", tex) == re.findall(r"\\end\{(\w+\*?)\}", tex)
    for line in tex.splitlines():
        assert line.count(r"\left") == line.count(r"\right"), line
    assert "\\documentclass" not in tex
