"""Stage-time detection from a recorded mixture trajectory.

Documented criteria (all thresholds are arguments; defaults in
:data:`DEFAULTS`), evaluated on the recorded states, so a time is resolved to
the record grid (record every step, or use stage criteria, for exact steps):

* ``T1`` (neuron stage done). Three-stage runs: the end of stage 1 (Algorithm 1
  ends the neuron stage by construction). Simultaneous runs: the first record
  at which every consistent sample has margin >= ``margin`` AND the neuron
  gradient is small, |dLoss/dw~| <= ``grad_ratio`` x |dLoss/dw~| at t = 0.
* ``T2`` (attention stage done): the first record at or after T1 at which
  every inconsistent sample has margin >= ``margin``.
* ``T_loss``: the first record at which loss <= ``loss_level``.

A time that is never reached is NaN. :func:`stage_times_of` is the rule (given
the neuron-gradient norm per record: the fast path's, the engine's);
:func:`stage_times` computes that norm with the fast kernels. Both return the
times and the criteria used; ``run.save`` stores them as attributes T1, T2, T_loss and
``stage_time_criteria`` (JSON) on every run file.
"""

from __future__ import annotations

import math

import numpy as np

from . import kernels
from .data import SampleSet
from ...core.stagetimes import DEFAULTS, stage_times_of  # noqa: F401 - the one rule (DEFAULTS: its thresholds)



def grad_w_norm(samples: SampleSet, S, A, B, w, relu_prime_at_zero: float = 1.0) -> np.ndarray:
    """|dLoss/dw~| (both heads, Euclidean) at every record."""
    out = np.empty(len(S))
    for i in range(len(S)):
        y = kernels.pack(S[i], A[i], B[i], w[i])
        _, _, dw, _, _ = kernels.loss_and_grads(y, samples.P, samples.idx, samples.sgn, samples.y, samples.weight,
                                                float(relu_prime_at_zero))
        out[i] = math.sqrt(float(np.sum(dw * dw)))
    return out


def stage_times(t, loss, margin, consistent, S, A, B, w, samples: SampleSet, schedule: str,
                stage_ends: list | None = None, relu_prime_at_zero: float = 1.0,
                margin_level: float | None = None, grad_ratio: float | None = None,
                loss_level: float | None = None, step=None) -> dict:
    """{"T1", "T2", "T_loss", "criteria"} for one recorded fast-path trajectory
    (``margin``/``consistent`` already restricted to the samples that count):
    :func:`stage_times_of` with the neuron-gradient norm from the fast kernels."""
    g = None if schedule == "three-stage" else grad_w_norm(samples, S, A, B, w, relu_prime_at_zero)
    return stage_times_of(t, loss, margin, consistent, g, schedule, stage_ends, None, margin_level, grad_ratio,
                          loss_level, step=step)
