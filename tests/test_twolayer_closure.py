"""The closure statement of docs/engine.md ("Two-layer attention"), cases 4 and 2, on explicit
weights. Case 4: a hidden-to-hidden matrix M_K2 (m x m) between a wide layer-1 value
U_V1 = M_V1 E and a wide layer-2 query U_Q2 = M_Q2 E. Two networks that agree on the scores
S = U_Q2^T M_K2 U_V1 and on the Grams of U_Q2, U_V1, M_K2 U_V1, M_K2^T U_Q2 (the Krylov
vectors of depth 1) agree after one GD step and differ after later ones: the state grows with
the steps. Case 2: a layer-2 query reading the layer-1 value by an inner product
(S = U_Q2^T U_V1): two networks with the same joint Gram at widths 40 and 7 step the same."""

from __future__ import annotations

import numpy as np


def _step(MQ, MK, MV, E, S_star, eta):
    """One GD step on L = 0.5 ||S - S*||^2 with S = (MQ E)^T MK (MV E); returns the new weights and S."""
    UQ, UV = MQ @ E, MV @ E
    S = UQ.T @ MK @ UV
    G = S - S_star                       # dL/dS
    gQ = (MK @ UV @ G.T) @ E.T           # dL/dMQ
    gK = UQ @ G @ UV.T                   # dL/dMK
    gV = (MK.T @ UQ @ G) @ E.T           # dL/dMV
    MQ, MK, MV = MQ - eta * gQ, MK - eta * gK, MV - eta * gV
    return MQ, MK, MV, (MQ @ E).T @ MK @ (MV @ E)


def _run(MQ, MK, MV, E, S_star, eta, steps):
    out = []
    for _ in range(steps):
        MQ, MK, MV, S = _step(MQ, MK, MV, E, S_star, eta)
        out.append(S)
    return out


def test_hidden_to_hidden_matrix_does_not_close():
    rng = np.random.default_rng(0)
    m, d, P, eta = 40, 5, 3, 0.1
    E = np.linalg.qr(rng.normal(size=(d, P)))[0]
    MQ, MV = rng.normal(size=(m, d)) / np.sqrt(m), rng.normal(size=(m, d)) / np.sqrt(m)
    MK = rng.normal(size=(m, m)) / np.sqrt(m)
    UQ, UV = MQ @ E, MV @ E
    # N changes MK off span(UV) only: N UV = 0 and UQ^T N = 0, so S and every Gram of UQ, UV,
    # MK UV, MK^T UQ are unchanged ...
    basis = np.linalg.qr(np.concatenate([UQ, UV, MK @ UV, MK.T @ UQ], axis=1))[0]
    proj = np.eye(m) - basis @ basis.T
    N = proj @ rng.normal(size=(m, m)) @ proj
    MK2 = MK + N
    S_star = rng.normal(size=(P, P))
    assert np.allclose((MQ @ E).T @ MK2 @ (MV @ E), UQ.T @ MK @ UV, atol=1e-13)
    for A, B in [(MK @ UV, MK2 @ UV), (MK.T @ UQ, MK2.T @ UQ)]:
        assert np.allclose(A.T @ A, B.T @ B, atol=1e-13)
    # ... so the first step agrees (it needs the Krylov vectors of depth 1 only), but a later one
    # needs MK^T MK UV, MK MK^T UQ, ..., where the two differ: no finite Gram state
    r1, r2 = _run(MQ, MK, MV, E, S_star, eta, 4), _run(MQ, MK2, MV, E, S_star, eta, 4)
    assert np.abs(r1[0] - r2[0]).max() <= 1e-12
    assert max(np.abs(a - b).max() for a, b in zip(r1, r2)) > 1e-4


def test_inner_product_reading_closes():
    # case 2: S = UQ^T UV (the layer-2 query reads the wide layer-1 value by an inner product). Two networks
    # with the same joint Gram of (UQ, UV) but different widths (40 and 7) and different weights off span(E)
    # have the same S after every GD step, as the closure theorem says
    rng = np.random.default_rng(1)
    d, P, eta = 5, 3, 0.1
    E = np.linalg.qr(rng.normal(size=(d, P)))[0]
    off = np.eye(d) - E @ E.T
    S_star = rng.normal(size=(P, P))

    def run(MQ, MV, steps=6):
        out = []
        for _ in range(steps):
            UQ, UV = MQ @ E, MV @ E
            G = UQ.T @ UV - S_star
            MQ, MV = MQ - eta * (UV @ G.T) @ E.T, MV - eta * (UQ @ G) @ E.T
            out.append((MQ @ E).T @ (MV @ E))
        return out

    m = 40
    UQ, UV = rng.normal(size=(m, P)) / np.sqrt(m), rng.normal(size=(m, P)) / np.sqrt(m)
    U = np.concatenate([UQ, UV], axis=1)
    w, V = np.linalg.eigh(U.T @ U)
    small = np.zeros((7, 2 * P))
    small[: 2 * P] = (V * np.sqrt(np.clip(w, 0, None))).T  # small.T @ small == U.T @ U
    Ea = lambda Ux, k: Ux @ E.T + rng.normal(size=(k, d)) @ off  # weights with the given U, random off span
    ra = run(Ea(UQ, m), Ea(UV, m))
    rb = run(Ea(small[:, :P], 7), Ea(small[:, P:], 7))
    assert max(np.abs(a - b).max() for a, b in zip(ra, rb)) <= 1e-12
