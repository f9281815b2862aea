"""The engine: one-layer attention on a finite token dictionary, reduced exactly by Gram closure.

A model is a :class:`~meanfield.engine.description.Description` (Python
dataclasses, or a TOML file read by :func:`load`); the engine reduces it to
Gram blocks (``meanfield.engine.reduce``), runs its exact GD map or flow
(``meanfield.engine.kernels``, ``meanfield.engine.system``) and writes run
files. See ``docs/engine.md``. Imports here are lazy: ``import meanfield``
stays light (no numba compile, no sympy).

What belongs here: the general machine (descriptions, the Gram-closure
state, the generic kernels, the symbolic derivation, the explicit-network
oracle, finite width, batched runs, the ``meanfield model`` verbs) and the
one registration API (:mod:`meanfield.engine.registry`) through which every
paper, and a user's own package, adds families, fast paths, claims and
commands. What does not: anything that names a paper (its family builder,
variables, fast kernels, claims: ``meanfield.models.<paper>``) and generic
machinery without descriptions (``meanfield.core``). The engine imports only
``meanfield.core``.
"""

from __future__ import annotations


_LAZY = {
    "description": ("Description", "Dictionary", "Data", "Head", "Model", "Init", "Training", "StageSpec",
                    "RunParams", "load_description", "description_from_dict", "make_data"),
    "api": ("derive", "run", "Run", "run_to_file"),
    "batched": ("run_batch", "BatchRun", "initial_states"),
    "finite": ("particles", "particles_to_file", "width_sweep"),
}
__all__ = ["load"] + [n for names in _LAZY.values() for n in names]


def __dir__():
    return sorted(set(globals()) | set(__all__))


def load(path, **overrides):
    """Read a TOML description; keyword overrides replace its parameters.

    Parameters
    ----------
    path : str or Path
        the description (TOML).
    **overrides
        parameter values (the CLI flags): ``K=3, width=5``.

    Returns
    -------
    Description

    Example
    -------
    >>> import meanfield.engine as me
    >>> me.load("meanfield/models/incontext.toml", K=2).name   # doctest: +SKIP
    'incontext'
    """
    from .description import load_description

    return load_description(path, overrides)


def __getattr__(name):
    if name in ("Description", "Dictionary", "Data", "Head", "Model", "Init", "Training", "StageSpec",
                "RunParams", "load_description", "description_from_dict", "make_data"):
        from . import description

        return getattr(description, name)
    if name in ("derive", "run", "Run", "run_to_file"):
        from . import api

        return getattr(api, name)
    if name in ("run_batch", "BatchRun", "initial_states"):
        from . import batched

        return getattr(batched, name)
    if name in ("particles", "particles_to_file", "width_sweep"):
        from . import finite

        return getattr(finite, name)
    raise AttributeError(name)
