"""The induction system's data sets and schedule from a config (``meanfield.models.induction.setup``): the
seeds of the training, held-out, fresh and minibatch sequences, the data sets, and the stages of the
schedule in the shared vocabulary, read by the induction description (``description``: the engine's generic
two-layer network, what every induction run trains on).
"""

from __future__ import annotations

import numpy as np

from ...core import harness
from ...core.criteria import parse_criterion
from .config import InductionConfig
from .criteria import CRITERIA
from .data import InductionData, generate, load_data

PHASE_NAMES = ("c", "w", "a")


def train_seed(cfg: InductionConfig) -> tuple[int, ...]:
    return (cfg.seed, 0)


def test_seed(cfg: InductionConfig) -> tuple[int, ...]:
    return (cfg.seed, 1)


def fresh_seed(cfg: InductionConfig, step: int) -> tuple[int, ...]:
    """Seed of the fresh batch used by GD step ``step`` (0-based) in sampling = fresh."""
    return (cfg.seed, 2, int(step))


def epoch_seed(cfg: InductionConfig, epoch: int) -> tuple[int, ...]:
    """Seed of the permutation of the training set in epoch ``epoch`` (0-based), sampling = minibatch."""
    return (cfg.seed, 3, int(epoch))


def minibatch_indices(cfg: InductionConfig, n: int, step: int) -> np.ndarray:
    """The training-set indices GD step ``step`` (0-based) uses in sampling =
    minibatch: epoch e = step // nb (nb = ceil(n / batch) batches per epoch)
    permutes 0..n-1 with seed :func:`epoch_seed` and step takes its
    (step mod nb)-th slice of ``batch`` (the last one shorter)."""
    nb = -(-n // cfg.batch)
    e, k = divmod(int(step), nb)
    perm = np.random.default_rng(list(epoch_seed(cfg, e))).permutation(n)
    return np.sort(perm[k * cfg.batch: (k + 1) * cfg.batch])


def train_data(cfg: InductionConfig) -> InductionData:
    if cfg.train_file is not None:
        ds = load_data(cfg.train_file)
        return ds.subset(slice(0, cfg.n_train)) if ds.N > cfg.n_train else ds
    return generate(cfg.n_train, cfg.d, cfg.L, cfg.pa, cfg.alpha, train_seed(cfg))


def test_data(cfg: InductionConfig) -> InductionData | None:
    if cfg.n_test == 0:
        return None
    return generate(cfg.n_test, cfg.d, cfg.L_test, cfg.pa, cfg.alpha, test_seed(cfg))


def group_mode(group: str) -> tuple[float, float, float]:
    """The stage mode (rate_c, rate_w, rate_a) of a parameter group string
    such as ``"c"``, ``"cw"`` or ``"cwa"``."""
    return tuple(1.0 if ch in group else 0.0 for ch in PHASE_NAMES)


def stage_specs(cfg: InductionConfig) -> list[harness.StageSpec]:
    """The stages of the schedule in the shared vocabulary: what each trains
    (a group string), its length (steps for gd, time for flow / rk4), its
    criterion and its GD step size."""
    gd = cfg.method == "gd"
    if cfg.schedule == "simultaneous":
        return [harness.StageSpec("cwa", cfg.steps if gd else cfg.t_end,
                                  parse_criterion("criterion", cfg.criterion, CRITERIA), "simultaneous",
                                  cfg.eta if gd else None)]
    return [harness.StageSpec(group, cfg.stage_steps[k] if gd else cfg.stage_times[k],
                              parse_criterion("stage_criteria", cfg.stage_criteria[k], CRITERIA), group,
                              cfg.stage_etas[k] if gd else None)
            for k, group in enumerate(cfg.phases)]
