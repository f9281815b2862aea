"""The papers: one package per paper, each a plug-in of the engine.

What belongs here: a paper's own code (``meanfield/models/<paper>/``): its
data/model family builder, named variables, symmetry reduction, hand fast
kernels, constructions, claims checkers, commands, and the shipped model
descriptions (``meanfield/models/*.toml``, named by the README and
``meanfield model ... NAME``). A paper imports ``meanfield.core`` and
``meanfield.engine``, never another paper; nothing in core/ or engine/
imports a paper (import-linter contracts in setup.cfg).

What does not: generic machinery (integrators, run files, guards, sweeps,
ensembles, bounds, criteria: ``meanfield.core``; descriptions, the closed
state, the generic kernels, the oracle, finite width, the registry:
``meanfield.engine``).

Each paper registers itself through ``meanfield.engine.registry`` in its
``plugin`` module (cheap to import: references are ``"module:attr"``
strings); :data:`PLUGINS` lists the shipped ones for the registry's
discovery (a user's package uses the entry-point group ``meanfield.plugins``
or a description's ``plugins = [...]`` instead).
"""

#: the shipped papers' plug-in modules (imported by ``meanfield.engine.registry.load_plugins``)
PLUGINS = (
    "meanfield.models.mixture.plugin",
    "meanfield.models.induction.plugin",
    "meanfield.models.incontext.plugin",
    "meanfield.models.maxmargin.plugin",
    "meanfield.models.multiclass.plugin",
    "meanfield.models.icl.plugin",
    "meanfield.models.scansnap.plugin",
    "meanfield.models.prompt_attention.plugin",
    "meanfield.models.edelman.plugin",
    "meanfield.models.nichani.plugin",
)
