"""The engine as a system for ``meanfield.core.integrate``: stages, solver, record grid, observables.

:func:`system_of` picks a description's system: :class:`~meanfield.engine.packed.EngineSystem`
(the generic kernels, ``meanfield.engine.packed``) or, for the exact Gaussian
population, ``meanfield.engine.population.PopulationSystem``; a stage's
``mode`` is the bit mask of the parameter groups it trains (1 attention,
2 values, 4 readout, 8 signs). :func:`stages`, :func:`solver` and
:func:`save_at` turn a description's training into the shared vocabulary
(the same record-grid defaults as the mixture system: about 1000 records over
the horizon). :func:`observables` evaluates what a run records.
"""

from __future__ import annotations

import numpy as np

from ..core import integrate
from ..core.config import ConfigError
from . import kernels
from .objects import STAGE_SHIFT, Description
from .packed import EngineSystem, mode_of, pack
from .reduce import initial_state


def system_of(desc: Description, specialise: bool | str = "auto", background: bool = False) -> EngineSystem:
    """The system a description runs on; ``specialise``: True, GD by the loop compiled for this description
    (``meanfield.engine.specialise``; refused in one line where it does not apply); ``"auto"`` (default),
    that loop where one is ready (compiled before: no compile now), else the generic loop; False, the
    generic loop. ``background`` (a single run's, with "auto"): once the run has spent
    ``meanfield.engine.background.AFTER_S`` seconds in the generic loop, that loop compiled in a second
    process and taken from then on (the same state bit for bit); ``MEANFIELD_BACKGROUND_COMPILE`` is
    checked here then (a bad value: ConfigError, one line)."""
    from .specialise import choice

    if choice(specialise) == "auto":
        on = False
        if background:
            from . import background as bg

            on = bg.enabled()  # MEANFIELD_BACKGROUND_COMPILE, before the run (whatever system it runs on)
        system = system_of(desc, False)
        if type(system) is EngineSystem and desc.training.method == "gd":
            system.specialise = "auto"
            system.background = on
        return system
    if specialise:
        from .specialise import check, refuse_twolayer

        if not hasattr(desc, "dictionary"):  # a two-layer description (meanfield.engine.twolayer_desc)
            refuse_twolayer()
        system = system_of(desc)
        if type(system) is not EngineSystem:
            raise ConfigError(f"specialise: the packed finite-dictionary system only; this description runs on "
                              f"{type(system).__name__} (run it without specialise)")
        check(desc, system.pk)
        system.specialise = True
        return system
    if "population" in desc.data.extra:  # the exact population of Gaussian prompts (meanfield.engine.population)
        from .population import PopulationSystem

        return PopulationSystem(desc)
    if desc.dictionary.trainable:  # trainable embeddings: the ambient state (meanfield.engine.embeddings)
        from .embeddings import EmbeddingSystem

        return EmbeddingSystem(desc)
    from .rates import has_rates, rate_arrays

    pk = pack(desc)
    tr = desc.training
    rates = [rate_arrays(pk.lay, tr, s) for s in tr.stages] if has_rates(tr) else None
    return EngineSystem(pk, tr.max_abs, rates)


def stages(desc: Description) -> list[integrate.Stage]:
    """The training's stages for ``meanfield.core.integrate``: ``mode`` = the bit mask of
    the trained groups, plus 16 for normalised GD, plus 32 x the stage's index (its group rates, :class:`EngineSystem`),
    ``eta`` the stage's step size, ``eta_at`` its schedule (``meanfield.engine.rates``)."""
    from .rates import has_rates, schedule_factor, stage_base_eta, stage_schedule

    tr = desc.training
    norm = getattr(tr, "normalise", "none")
    if not has_rates(tr):
        return [integrate.Stage(i + 1, mode_of(s.train, norm), s.length, s.criterion, s.name)
                for i, s in enumerate(tr.stages)]
    out = []
    for i, s in enumerate(tr.stages):
        base = stage_base_eta(tr, s)
        spec, origin, horizon = stage_schedule(tr, i)
        eta_at = None
        if spec is not None:
            def eta_at(k, start, base=base, spec=spec, origin=origin, horizon=horizon):
                return base * schedule_factor(spec, k - (start if origin is None else origin), horizon)
        out.append(integrate.Stage(i + 1, mode_of(s.train, norm) | (i << STAGE_SHIFT), s.length, s.criterion, s.name,
                                   eta=None if tr.method != "gd" else base, eta_at=eta_at))
    return out


def solver(desc: Description):
    """The solver of the training's method (``integrate.solver_of``)."""
    return integrate.solver_of(desc.training)


def save_at(desc: Description) -> integrate.SaveAt:
    """The record grid (``integrate.save_at_of``, the mixture system's rules):
    every N steps, N log-spaced points, every DT, or by default about 1000
    records."""
    return integrate.save_at_of(desc.training)


def integrate_description(desc: Description, y0=None, monitor=None, system: EngineSystem | None = None):
    """Integrate a description; returns (system, meanfield.core.integrate.Trajectory)."""
    system = system or system_of(desc)
    size = getattr(system, "size", system.pk.lay.size)  # trainable embeddings: the ambient state
    if y0 is not None:
        y = np.asarray(y0, dtype=np.float64).copy()
    else:
        y = system.initial_state() if hasattr(system, "initial_state") else initial_state(desc, system.pk.lay)
    if y.shape != (size,):
        raise ValueError(f"y0: must have shape ({size},), got {y.shape}")
    return system, solver(desc).solve(system, y, stages(desc), save_at(desc), monitor)


def observables(desc: Description, system: EngineSystem, Y: np.ndarray) -> dict[str, np.ndarray]:
    """Per record: loss (T,), margin (T, n), u (T, n, H, rows), grad_w (T,)
    (the ``grad_w`` criterion), and every named block in report coordinates
    (``blocks``: "head:name" -> (T, ...))."""
    Y = np.atleast_2d(np.asarray(Y, dtype=np.float64))
    T = Y.shape[0]
    pk = system.pk
    lay = pk.lay
    n = pk.X.shape[0]
    H = len(lay.heads)
    loss = np.empty(T)
    margin = np.empty((T, n))
    u = np.empty((T, n, H, pk.R))
    gw = np.empty(T)
    for k in range(T):
        l, G, gflat, m, uu = system.loss_and_grads(Y[k])
        loss[k], margin[k], u[k] = l, m, uu
        gw[k] = kernels.eng_criterion(5, l, m, pk.consistent, lay.hi, lay.hf, pk.Gam, gflat)
    C = desc.dictionary.C
    blocks = {}
    for b in lay.blocks:
        arr = lay.get(Y, b.head, b.name)
        if b.kind == "gram":
            wa, wb = b.shape
            left = C if wa == lay.P else None
            right = C if wb == lay.P else None
            if left is not None:
                arr = np.einsum("pa,...pq->...aq", left, arr)
            if right is not None:
                arr = np.einsum("...pq,qb->...pb", arr, right)
        elif b.name == "W":
            arr = np.einsum("pa,...pq,qb->...ab", C, arr, C)
        elif b.name == "w":
            arr = np.einsum("pa,...p->...a", C, arr)
        blocks[f"{b.head}:{b.name}"] = arr
    return {"loss": loss, "margin": margin, "u": u, "grad_w": gw, "blocks": blocks}
