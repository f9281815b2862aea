"""Former home of the mixture's dense path; an alias module for one release.

The dense path (feature Gram, finite noisy training sets, several neurons per
head) now runs through the engine: ``meanfield.mixture.run.run`` / ``save`` /
``run_to_file`` of a config with ``cfg.dense`` build the mixture family's
description (``meanfield.engine.families.mixture_description``) and integrate
it with ``meanfield.engine.system``; the run file is the one this module used
to write. Its own kernels, GD map, flow, system, initial state and
observables are gone (the engine's are the same mathematics: see
``meanfield.engine.reduce`` and spec/engine.md). The names below point to
their new homes:

* data in a basis: :class:`DenseData`, :func:`population_data`,
  :func:`basis_of`, :func:`training_data`, :func:`data_of` ->
  ``meanfield.mixture.data``;
* :func:`stage_times` (given the neuron-gradient norm) ->
  ``meanfield.mixture.stagetimes.stage_times_of``;
* :func:`run`, :func:`save` -> ``meanfield.mixture.run``; :func:`simulate` ->
  ``meanfield.mixture.measure.simulate``;
* :data:`CRITERIA` -> ``meanfield.mixture.kernels.CRITERIA``.
"""

from __future__ import annotations

from .data import DenseData, basis_of, data_of, population_data, training_data  # noqa: F401
from .kernels import CRITERIA  # noqa: F401
from .measure import simulate  # noqa: F401
from .run import run, save  # noqa: F401
from .stagetimes import stage_times_of as stage_times  # noqa: F401
