"""A start that the dynamics cannot leave by symmetry (issue 26).

At infinite width the engine starts from the expectation of the initial Gram
(``omega^2 Gamma`` blocks, S = 0, zero neurons): a point with every symmetry of
the description (of its data, dictionary and heads). GD maps a symmetric state to
a symmetric state, so the whole run stays on the symmetric subspace; where that
subspace pins trained parameters to 0 (in the multi-class mixture the class
permutations, acting on each group's simplex, pin the scores between group
identifiers and class signals), the run goes on for ever at a tie it cannot break,
however long it is trained.

:func:`pinned_entries` finds such parameters without knowing the symmetry: it
advances the GD map with every trained group on (``PROBE_STEPS`` steps) from the
start and from the start perturbed by ``EPS`` (relative; a congruence
``(I + EPS Z)^T Q (I + EPS Z)`` of each head's Gram, so it stays a Gram, and
``EPS`` times the block's scale of noise on the narrow blocks). An entry of a
trained block that is 0 and does not move at all from the start (below ``TOL``
times the largest movement) while it moves from the perturbed start (above
``EPS * 1e-3`` times it: a first-order response to the perturbation, far above
rounding) is pinned by an exact symmetry of the start: no structural zero (a
pair of features that never interacts) moves in either run.
:func:`pinned_ties` asks the same of the margins: a sample whose margin is 0 at the start and stays
exactly 0 while it moves from the perturbed start is a tie that GD cannot break (the flat line);
parameter pins alone can be harmless (the infinite-width isotropy keeps S in the span the query
allows, independent groups keep K^T V = 0), tied margins are not.
:func:`refuse_symmetric_start` turns tied margins into one line (exit 2) naming what to change;
``symmetry = "allow"`` (``--symmetry allow``) runs anyway.
"""

from __future__ import annotations

import numpy as np

from ..core.config import ConfigError

PROBE_STEPS = 4
PROBE_ETA = 0.5
EPS = 1e-6
TOL = 1e-12
#: the trained group of each block kind: attention (S, A, B, W), values (V, w), readout (r), signs (a)
_GROUP = {"S": "attention", "A": "attention", "B": "attention", "W": "attention", "w": "values", "a": "signs"}


def _block_group(name: str) -> str:
    if name in _GROUP:
        return _GROUP[name]
    if name.startswith("r") or ".r" in name:
        return "readout"
    return "values"  # V.V, K.V, ...: blocks with the value matrix


def _perturb(y, lay, rng):
    """The start perturbed by EPS: each head's Gram by a congruence, the narrow blocks by EPS x scale noise."""
    from .reduce import H_N, H_QOFF

    yp = y.copy()
    for k in range(len(lay.heads)):
        N, off = int(lay.hi[k, H_N]), int(lay.hi[k, H_QOFF])
        if N > 0 and off >= 0:
            Q = y[off:off + N * N].reshape(N, N)
            M = np.eye(N) + EPS * rng.standard_normal((N, N))
            yp[off:off + N * N] = (M.T @ Q @ M).ravel()
    for b in lay.blocks:
        if b.kind != "gram":
            n = int(np.prod(b.shape))
            seg = y[b.offset:b.offset + n]
            yp[b.offset:b.offset + n] = seg + EPS * max(1.0, float(np.abs(seg).max())) * rng.standard_normal(n)
    return yp


def _names(desc, lay, b):
    feats = list(desc.dictionary.features)
    C = np.asarray(getattr(desc.dictionary, "C", np.eye(lay.P)))
    named = C.shape == (lay.P, lay.P) and np.allclose(C, np.eye(lay.P))

    def nm(i, w):
        return feats[i] if named and w == lay.P and i < len(feats) else str(i)
    return nm


def pinned_entries(desc, y0=None, system=None, seed: int = 0) -> list[str]:
    """The trained parameters that the start pins by symmetry, as ``"head:block[row, col]"`` strings
    (empty: none). ``y0``: the start (default: the description's initial state).

    Parameters
    ----------
    desc : Description
    y0 : array, optional
    system : EngineSystem, optional (the description's; built when not given)
    seed : int
        the perturbation's seed.

    Returns
    -------
    list of str

    Example
    -------
    >>> from meanfield.engine.description import load_description   # doctest: +SKIP
    >>> pinned_entries(load_description("mixture_multiclass"))[:1]   # doctest: +SKIP
    ['+:S[c1, v1_1]']
    """
    from .reduce import initial_state
    from .system import mode_of, system_of

    system = system or system_of(desc)
    lay = system.pk.lay
    y0 = initial_state(desc, lay) if y0 is None else np.asarray(y0, float)
    groups = sorted({g for s in desc.training.stages for g in s.train})
    if not groups:
        return []
    mode = mode_of(groups)
    eta = min(float(desc.training.eta), PROBE_ETA)
    ys, yp0 = y0.copy(), _perturb(y0, lay, np.random.default_rng(seed))
    yp = yp0.copy()
    with np.errstate(all="ignore"):
        if system.gd_advance(ys, PROBE_STEPS, eta, mode, None)[1] == 2:
            return []
        if system.gd_advance(yp, PROBE_STEPS, eta, mode, None)[1] == 2:
            return []
    ms, mp = np.abs(ys - y0), np.abs(yp - yp0)
    out = []
    blocks = [b for b in lay.blocks if _block_group(b.name) in groups]
    scale = max((float(lay.get(mp, b.head, b.name).max()) for b in blocks), default=0.0)
    if not scale > 0:
        return []
    for b in blocks:
        s, p, z = lay.get(ms, b.head, b.name), lay.get(mp, b.head, b.name), lay.get(np.abs(y0), b.head, b.name)
        hit = (s <= TOL * scale) & (z <= TOL * scale) & (p >= 1e-3 * EPS * scale)
        if b.kind == "gram" and b.rows == b.cols:
            hit = np.triu(hit)
        if not hit.any():
            continue
        idx = np.argwhere(hit)
        if b.kind == "gram":
            nm_r, nm_c = _names(desc, lay, b), _names(desc, lay, b)
            out += [f"{b.head}:{b.name}[{nm_r(int(i), b.shape[0])}, {nm_c(int(j), b.shape[1])}]" for i, j in idx]
        else:
            out += [f"{b.head}:{b.name}[{', '.join(map(str, map(int, ix)))}]" for ix in idx]
    return out


def pinned_ties(desc, y0=None, system=None, seed: int = 0) -> list[str]:
    """The samples whose margin the start pins at a tie by symmetry: margin 0 (below TOL times the largest
    margin movement) at the start and after PROBE_STEPS GD steps with every group of the model trained, while it moves
    from the EPS-perturbed start (above EPS * 1e-3 times that scale). Only classification losses (logistic,
    cross-entropy: a margin 0 is an undecided prediction). A tie that GD cannot break is what a symmetric
    fixed point costs; a symmetry that only pins parameters the data does not need (the infinite-width
    isotropy, K^T V = 0 between independent groups) pins no margin.

    Parameters
    ----------
    desc : Description
    y0 : array, optional (default: the initial state)
    system : EngineSystem, optional
    seed : int

    Returns
    -------
    list of str: the tied samples' names (or indices)

    Example
    -------
    >>> pinned_ties(load_description("mixture_multiclass"))[:1]   # doctest: +SKIP
    ['g1y1|v2y2']
    """
    from .reduce import initial_state
    from .system import mode_of, system_of

    if desc.model.loss not in ("logistic", "cross_entropy"):
        return []
    system = system or system_of(desc)
    lay = system.pk.lay
    amb = hasattr(system, "reduce")  # trainable embeddings: ambient states (meanfield.engine.embeddings)
    red = system.reduce if amb else (lambda v: v)
    if y0 is None:
        y0 = system.initial_state() if amb else initial_state(desc, lay)
    y0 = np.asarray(y0, float)
    # every group the model has, whatever the schedule trains: a tie is pinned by the start and the data when no
    # training breaks it (a stage that leaves attention fixed keeps ties by design, as the mixture's neuron stage)
    # the probe's step: the description's, at most PROBE_ETA (the pinned subspace is invariant for any step; a
    # huge step would only blow the probe up and make the relative tolerance meaningless)
    mode, eta = mode_of(("attention", "values", "readout", "signs")), min(float(desc.training.eta), PROBE_ETA)
    rng = np.random.default_rng(seed)
    ys, yp = y0.copy(), (system.perturb(y0, rng, EPS) if amb else _perturb(y0, lay, rng))
    with np.errstate(all="ignore"):
        m0 = np.asarray(system.loss_and_grads(red(y0))[3], float)
        if system.gd_advance(ys, PROBE_STEPS, eta, mode, None)[1] == 2:
            return []
        if system.gd_advance(yp, PROBE_STEPS, eta, mode, None)[1] == 2:
            return []
        ms = np.asarray(system.loss_and_grads(red(ys))[3], float)
        mp = np.asarray(system.loss_and_grads(red(yp))[3], float)
    scale = max(float(np.abs(ms - m0).max()), float(np.abs(mp - m0).max()))
    if not (np.all(np.isfinite(ms)) and np.all(np.isfinite(mp)) and scale > 0):
        return []
    hit = (np.abs(m0) <= TOL * scale) & (np.abs(ms) <= TOL * scale) & (np.abs(mp) >= 1e-3 * EPS * scale)
    names = list(getattr(desc.data, "names", None) or [])
    return [names[i] if i < len(names) else str(i) for i in np.nonzero(hit)[0]]


def refuse_symmetric_start(desc, system=None) -> None:
    """Raise ConfigError (one line) when the run starts at infinite width from a symmetric point that pins
    margins at a tie GD cannot break (:func:`pinned_ties`), unless ``symmetry = "allow"``. A finite width
    (a random start) is never refused."""
    if desc.init.width is not None or getattr(desc.parameters, "symmetry", "refuse") == "allow":
        return
    ties = pinned_ties(desc, system=system)
    if ties:
        raise ConfigError(
            f"symmetry: the infinite-width start is symmetric and GD cannot leave it ({len(ties)} samples such as "
            f"{ties[0]} stay tied at margin 0); use a finite --width M or --symmetry allow")
