"""Initial weights of the explicit network (``meanfield.engine.oracle``, which re-exports them):
sampled at width m (:func:`sample_weights`) or from the engine's initial state
(:func:`weights_from_engine_init`)."""

from __future__ import annotations

import math

import numpy as np


def sample_weights(desc, E: np.ndarray, m: int, seed, neurons=None) -> list[dict]:
    """Explicit initial weights at width m (``default_rng(seed)``): W_K, W_Q iid
    N(0, omega^2/m), M_V iid N(0, omega_v^2/m), r_c iid N(0, sigma_r^2/m), merged
    W = 0, neurons ``neurons[j]`` (feature coordinates w~, shape (C, n, P); the
    ambient neuron is the smallest vector with them, w = E Gamma^{-1} w~) or 0;
    signs from the description."""
    rng = np.random.default_rng(seed)
    init = desc.init
    d, P = E.shape
    Gi = np.linalg.inv(E.T @ E)
    out = []
    for j, h in enumerate(desc.model.heads):
        p: dict = {"a": np.array(float(h.sign))}
        if h.kq == "separate":
            p["WK"] = rng.normal(scale=init.omega / math.sqrt(m), size=(m, d))
            p["WQ"] = rng.normal(scale=init.omega / math.sqrt(m), size=(m, d))
        else:
            p["W"] = np.zeros((d, d))
        C = P if h.value == "token" else h.outputs
        if h.value in ("neuron", "linear"):
            wt = np.zeros((C, h.n_neurons, P)) if neurons is None else np.asarray(neurons[j], float).reshape(
                C, h.n_neurons, P)
            p["w"] = np.einsum("cqa,ab,db->cqd", wt, Gi, E)
        elif h.value == "matrix":
            p["MV"] = rng.normal(scale=init.omega_v / math.sqrt(m), size=(m, d))
            p["r"] = rng.normal(scale=init.sigma_r / math.sqrt(m), size=(C, m))
        if h.rpe:
            p["b"] = np.zeros(2 * h.rpe - 1)
        out.append(p)
    return out


# ------------------------------------------------------------ the engine's initial state and layout

def weights_from_engine_init(desc, E: np.ndarray, seed_orth=None, lay=None, U=None) -> list[dict]:
    """Explicit weights that start from the engine's initial state (finite width).

    Wide objects: the engine's sampled factors U_h = [U_K, U_Q, U_V, u_r...]
    (``reduce.initial_weights``, the initial weights only) give
    M_a = U_a Gamma^{-1} E^T + Z (I - E Gamma^{-1} E^T) with Z iid N(0, omega_a^2/m)
    drawn from ``default_rng(seed_orth)`` (an orthogonal part the loss never
    sees; None: no orthogonal part), so M_a E = U_a; readouts r_c = u_rc.
    Narrow objects and signs: the engine's initial values (``reduce.initial_state``),
    neurons as the smallest ambient vectors w = E Gamma^{-1} w~; merged W = E Gamma^{-1} W~ Gamma^{-1} E^T.
    ``U``: per head the wide factors (m x N_h) to use instead (e.g. factors of a Gram read from a run file)."""
    from . import reduce as R

    lay = lay or R.layout(desc)
    m = desc.init.width
    if m is None:
        raise ValueError("weights_from_engine_init: the explicit network needs a finite width m")
    U = R.initial_weights(desc, lay) if U is None else U
    y0 = R.initial_state(desc, lay)
    d, P = E.shape
    Gi = np.linalg.inv(E.T @ E)
    Pi = E @ Gi                       # (d, P): x = Pi w~ has E^T x = w~
    proj_perp = np.eye(d) - E @ Gi @ E.T
    rng = np.random.default_rng(seed_orth) if seed_orth is not None else None
    sc = {"attention": desc.init.omega, "values": desc.init.omega_v}
    out = []
    for k, h in enumerate(desc.model.heads):
        p: dict = {"a": np.array(float(h.sign))}
        cols = {name: (s, w, g) for name, s, w, g in lay.objects[k]}
        for name, key in (("K", "WK"), ("Q", "WQ"), ("V", "MV")):
            if name in cols:
                s, w, g = cols[name]
                M = U[k][:, s:s + w] @ Pi.T
                if rng is not None:
                    M = M + rng.normal(scale=sc[g] / math.sqrt(m), size=(m, d)) @ proj_perp
                p[key] = M
        rs = [cols[f"r{c + 1}"][0] for c in range(h.outputs) if f"r{c + 1}" in cols]
        if rs:
            p["r"] = np.stack([U[k][:, s] for s in rs])
        if h.kq == "merged":
            Wt = lay.get(y0, h.name, "W")
            p["W"] = Pi @ Wt @ Pi.T
        if h.value in ("neuron", "linear"):
            wt = lay.get(y0, h.name, "w")
            p["w"] = np.einsum("cqa,da->cqd", wt, Pi)
        if h.train_sign:
            p["a"] = np.array(float(lay.get(y0, h.name, "a")[0]))
        if h.rpe:
            p["b"] = lay.get(y0, h.name, "b").copy()
        out.append(p)
    return out
