"""One induction-head run, from a validated config to an HDF5 run file.

Every run trains on the engine's generic two-layer network: :func:`run` builds
the config's two-layer description (``description.build``, what ``meanfield
model run induction`` runs) and integrates it with the shared steppers of
``meanfield.core.integrate``; :func:`stages` turns a schedule into stages;
:func:`save` writes the public run format (:func:`meanfield.core.io.write_run`,
``system = "induction"``), the states in the induction layout (c, w, a). The
hand-written numba kernels that ran it before are retired to
``benchmarks/induction_hand_kernels.py`` (a speed peer of ``make bench``).

Stage modes are ``(train_c, train_w, train_a)`` masks (1 / 0): GD takes
``theta[group] -= eta * mask_group * grad[group]`` with the shared
:class:`~meanfield.core.integrate.GDMap`, each phase with its own step size
(``Stage.eta``: eta_1, eta_2, eta_3; simultaneous: eta), so the time ``t`` of a GD
run is the gradient-flow time, the sum of the step sizes taken; the flow is
``d theta/dt = -mask * grad``.

Run file (``meanfield.core.io`` common attributes plus):

* datasets, T records: ``t`` (T,), ``step`` (T,), ``stage`` (T,) (stage (phase) 1..3,
  or 1 for simultaneous), ``theta`` (T, n_params) (layout of
  ``meanfield.models.induction.model``), ``c`` (T, nS), ``c_weight`` (T, nS) =
  c_S^2 / sum c^2, ``w`` (T, H, M), ``rpe`` (T, H, M) = full-window RPE
  softmax per head, ``a`` (T,), ``loss_train`` (T,) (the training loss, all
  n_train sequences, guarded: what GD minimises), ``loss_test_all`` (T,)
  (held-out, all n_test sequences, guarded: a sequence whose target never
  occurs in its context counts -log(yhat_floor) = 690.78 with loss nll),
  ``loss_test_seen`` (T,) (held-out, only the n_test_seen sequences whose
  target occurs in the context: the number the claims and the figures use),
  ``loss_test`` (T,) (= loss_test_all, the name older files used) (NaN when
  n_test = 0), ``clipped_train`` / ``clipped_test`` (T,) (how many
  sequences the log(0) guard clipped);
* ``subsets`` (nS,) strings ("{}", "{1}", "{1,2}": 1-based heads, canonical
  order), ``subset_members`` (nS, max(D, 1)) 0-based heads padded with -1,
  ``lags`` (H, M) the lag of each RPE weight;
* attributes: d, L, L_test, pa, alpha, H, M, D, first_lags, start_lags,
  method, schedule, sampling, loss, n_train, n_test, n_test_seen, batch, seed, train_seed,
  test_seed, kernel_path, yhat_floor, stage_names, stage_ends,
  stopped_at_step, stopped_at_t, warnings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...core import harness, integrate
from ...core.criteria import criterion_args
from ...core.io import write_run
from .config import InductionConfig
from .model import Arch, init_params, rpe_softmax, subset_label, unpack

EXIT_CODES = harness.EXIT_CODES  # one table for every system (meanfield.core.harness)
from .setup import (PHASE_NAMES, epoch_seed, fresh_seed, group_mode, minibatch_indices, stage_specs,  # noqa: E402,F401
                    test_data, test_seed, train_data, train_seed)


@dataclass
class Sequences:
    """A set of token sequences (N, L + 1): the target is the last column."""

    tokens: np.ndarray

    @property
    def N(self) -> int:
        return int(self.tokens.shape[0])

    def subset(self, idx) -> "Sequences":
        return Sequences(self.tokens[idx])


@dataclass
class Problem:
    """Everything a run needs besides the config: architecture, data sets, initial state."""

    cfg: InductionConfig
    arch: Arch
    train: Sequences
    test: Sequences | None
    theta0: np.ndarray
    test_seen: Sequences | None = None  # the held-out sequences whose target occurs in the context

    @staticmethod
    def build(cfg: InductionConfig) -> "Problem":
        arch = cfg.arch()
        train = Sequences(np.asarray(train_data(cfg).tokens, dtype=np.int64))
        te = test_data(cfg)
        test = None if te is None else Sequences(np.asarray(te.tokens, dtype=np.int64))
        theta0 = init_params(arch, cfg.w_plus, cfg.w_minus, cfg.c_init, cfg.a_init, cfg.start_lags)
        seen = None
        if test is not None:
            from .theory import seen_mask

            m = seen_mask(test.tokens)
            seen = test.subset(np.flatnonzero(m)) if m.any() else None
        return Problem(cfg, arch, train, test, theta0, seen)


def stages(cfg: InductionConfig) -> list[integrate.Stage]:
    """Stages of the schedule; lengths are steps (gd) or times (flow, rk4)."""
    return harness.stages_of(stage_specs(cfg), mode=group_mode)


def solver(cfg: InductionConfig):
    """The solver of the config's method (``harness.solver_of``): with gd every
    stage carries its own step size (``Stage.eta``)."""
    return harness.solver_of(cfg)


#: default number of records over the horizon: each induction record evaluates
#: the loss on every train and test sequence, a mixture record copies a small state
RECORDS = 200


def save_at(cfg: InductionConfig) -> integrate.SaveAt:
    """The recording grid, by the shared rules (``harness.save_at_of``,
    ``docs/conventions.md``, "One vocabulary"): every ``record_every`` steps,
    ``record_log`` log-spaced points (flow: from 1/100 of the smallest step
    size), every ``record_dt``; the default is about :data:`RECORDS` = 200
    records over the horizon (the mixture's 1000)."""
    eta = cfg.eta if cfg.schedule == "simultaneous" else min(cfg.stage_etas)
    return harness.save_at_of(cfg, records=RECORDS, eta=eta)


def phase_log_grid(cfg: InductionConfig, every: int, n_log: int) -> integrate.SaveAt:
    """GD record grid of a three-stage run: every ``every`` steps in phases 1
    and 2, and ``n_log`` log-spaced steps counted from the start of phase 3.
    The points assume every phase runs its full length (a criterion that ends
    phase 1 or 2 early shifts phase 3 against the grid)."""
    if cfg.method != "gd" or cfg.phases != PHASE_NAMES:
        raise ValueError("phase_log_grid: needs method gd and schedule three-stage (c,w,a)")
    n1, n2, n3 = cfg.stage_steps
    pts = [np.arange(every, n1 + n2, every, dtype=np.int64)]
    if n3 > 0:
        pts.append(n1 + n2 + np.unique(np.round(np.geomspace(1, n3, n_log)).astype(np.int64)))
    return integrate.SaveAt(points=np.unique(np.concatenate(pts)))


def generic_run(cfg: InductionConfig, saveat: integrate.SaveAt | None = None, monitor=None,
                theta0: np.ndarray | None = None) -> integrate.Trajectory:
    """Train ``cfg`` as its two-layer description (family ``induction``, ``description.build``: the engine's
    generic two-layer network, what ``meanfield model run induction`` runs) from ``theta0`` (induction layout;
    default the config's init) on the record grid ``saveat`` (default: the config's, :func:`save_at`); the
    states come back in the induction layout (``model.pack``: c, w, a), so the run file and the checkers read
    them as before. Every setting builds: fixed, fresh and minibatch sampling (the description's ``batches``),
    nll with any floor and the official cross-entropy, gd, flow and rk4, every induction criterion (its
    ``criteria``), a held-out set of another length.

    Parameters
    ----------
    cfg : InductionConfig
    saveat : SaveAt or None
    monitor : Monitor or None
        Progress, signals, checkpoints (the core harness).
    theta0 : ndarray or None

    Returns
    -------
    Trajectory
    """
    import dataclasses

    from ...engine.twolayer_run import TwoLayerSystem
    from .description import build
    from .generic import to_generic
    from .model import pack

    import warnings

    with warnings.catch_warnings():  # the config's warnings were issued when it was made
        warnings.simplefilter("ignore")
        desc = build(dataclasses.asdict(cfg), "induction", None)
    system = TwoLayerSystem(desc)
    y0 = desc.theta0 if theta0 is None else to_generic(theta0, cfg.arch())
    traj = harness.solve(desc.training, system, y0, harness.stages_of(desc.stages),
                         saveat if saveat is not None else save_at(cfg), monitor)
    names = [name for name, _ in desc.net.blocks]
    cut = np.cumsum([0] + [int(np.prod(shape)) for _, shape in desc.net.blocks])
    iw = [k for k, n in enumerate(names) if n.startswith("layer1.")]
    ic, ia = names.index("selector.c"), names.index("readout.a")

    def induction_layout(y):
        y = np.asarray(y)
        return pack(y[cut[ic]:cut[ic + 1]], np.concatenate([y[cut[k]:cut[k + 1]] for k in iw]), y[cut[ia]])

    traj.y = [induction_layout(y) for y in traj.y]
    traj.path = "generic"
    return traj


def run(cfg: InductionConfig, problem: Problem | None = None, theta0: np.ndarray | None = None,
        monitor: integrate.Monitor | None = None, saveat: integrate.SaveAt | None = None) -> integrate.Trajectory:
    """Train for ``cfg`` (from ``theta0`` if given) and return the trajectory
    (the state y of each record is the flat parameter vector theta, induction layout).
    ``saveat`` replaces the config's record grid (e.g. log-spaced records
    inside phase 3: :func:`phase_log_grid`). It runs on the engine's generic two-layer
    network (:func:`generic_run`); ``problem`` is accepted for the callers that built one."""
    return generic_run(cfg, saveat, monitor, theta0=theta0)


def observables(pb: Problem, Y: np.ndarray) -> dict[str, np.ndarray]:
    """Per-record quantities of the run file from the states Y (T, n_params)."""
    cfg = pb.cfg
    arch = pb.arch
    c, w, a = unpack(Y, arch)
    c2 = c * c
    T = Y.shape[0]
    lt = np.empty(T)
    le = np.full(T, np.nan)
    ls = np.full(T, np.nan)
    ct = np.zeros(T, dtype=np.int64)
    ce = np.zeros(T, dtype=np.int64)
    from .generic import losses_by_sequence

    cap = -math.log(cfg.yhat_floor)

    def per(th, seqs):
        return losses_by_sequence(th, seqs.tokens, arch, cfg.yhat_floor, cfg.loss)

    for i in range(T):  # the engine's generic network evaluates every record's losses
        lt_i = per(Y[i], pb.train)
        lt[i] = lt_i.mean()
        ct[i] = int((lt_i >= cap).sum()) if cfg.loss == "nll" else 0
        if pb.test is not None:
            pe = per(Y[i], pb.test)
            le[i], ce[i] = pe.mean(), (int((pe >= cap).sum()) if cfg.loss == "nll" else 0)
        if pb.test_seen is not None:
            ls[i] = per(Y[i], pb.test_seen).mean()
    return {
        "c": c, "c_weight": c2 / c2.sum(axis=-1, keepdims=True), "w": w, "rpe": rpe_softmax(w), "a": a,
        "loss_train": lt, "loss_test_all": le, "loss_test_seen": ls, "loss_test": le,
        "clipped_train": ct, "clipped_test": ce,
    }


def save(path: str | Path, cfg: InductionConfig, traj: integrate.Trajectory, problem: Problem | None = None,
         status: str | None = None, message: str | None = None, extra_attrs: dict | None = None) -> Path:
    """Write the run file (format in the module docstring)."""
    pb = problem or Problem.build(cfg)
    arch = pb.arch
    arr = traj.arrays()
    Y = arr["y"] if arr["y"].size else np.empty((0, arch.n_params))
    obs = observables(pb, Y)
    data = {
        "t": arr["t"], "step": arr["step"], "stage": arr["stage"], "theta": Y,
        **obs,
        "subsets": np.array([subset_label(S) for S in arch.subsets], dtype=object),
        "subset_members": arch.members, "lags": arch.lags,
        **self_contained_data(pb),
    }
    attrs = {
        "d": cfg.d, "L": cfg.L, "L_test": cfg.L_test, "pa": list(cfg.pa), "alpha": cfg.alpha,
        "H": cfg.H, "M": cfg.M, "D": cfg.D, "first_lags": list(arch.first), "start_lags": list(cfg.start_lags),
        "method": cfg.method, "schedule": cfg.schedule, "sampling": cfg.sampling, "n_train": pb.train.N,
        "n_test": 0 if pb.test is None else pb.test.N, "batch": cfg.batch, "seed": cfg.seed,
        "n_test_seen": 0 if pb.test_seen is None else pb.test_seen.N, "loss": cfg.loss,
        "train_seed": list(train_seed(cfg)), "test_seed": list(test_seed(cfg)),
        "train_file": cfg.train_file or "", "kernel_path": getattr(traj, "path", "generic"),
        "yhat_floor": cfg.yhat_floor,
        "stage_names": ["simultaneous"] if cfg.schedule == "simultaneous" else list(cfg.phases),
        "stage_ends": traj.stage_ends,
        "stopped_at_step": int(arr["step"][-1]) if arr["step"].size else 0,
        "stopped_at_t": float(arr["t"][-1]) if arr["t"].size else 0.0,
        "warnings": list(cfg.warnings()) + list(traj.warnings),
    }
    attrs.update(self_contained_attrs(cfg))
    attrs.update(extra_attrs or {})
    return write_run(path, system="induction", config=cfg.to_dict(), status=status or traj.status,
                     message=message or traj.message, data=data, attrs=attrs)


#: the training sequences are stored in the run file up to this many tokens (above: only their counts; the
#: sequences are regenerated from ``train_seed``)
MAX_STORED_TOKENS = 4_000_000


def self_contained_data(pb: Problem) -> dict:
    """The datasets that make an induction run file self-contained
    (``docs/run-files.md``): ``initial_state`` (c, w, a at theta0, a group of
    its own), and ``training_set`` with ``counts`` (how often each token value
    0..d-1 occurs in the training sequences) and ``tokens`` (the sequences,
    (n_train, L + 1) in the smallest integer type; left out above
    :data:`MAX_STORED_TOKENS`, then ``tokens_stored = 0``)."""
    c, w, a = unpack(pb.theta0, pb.arch)
    tok = np.asarray(pb.train.tokens)
    counts = np.bincount(tok.ravel().astype(np.int64), minlength=pb.cfg.d)
    ts = {"counts": counts, "tokens_stored": np.int8(tok.size <= MAX_STORED_TOKENS)}
    if tok.size <= MAX_STORED_TOKENS:
        ts["tokens"] = tok.astype(np.min_scalar_type(max(int(pb.cfg.d) - 1, 0)))
    return {"initial_state": {"c": np.asarray(c), "w": np.asarray(w), "a": np.asarray(a)}, "training_set": ts}


def self_contained_attrs(cfg: InductionConfig) -> dict:
    """``description`` (the resolved config) and ``description_hash`` (sha256
    of its canonical JSON) of an induction run file."""
    import hashlib
    import json

    d = cfg.to_dict()
    return {"description": d,
            "description_hash": hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()}


def run_to_file(cfg: InductionConfig, out: str | Path, progress: bool = True, checkpoint_s: float = 60.0):
    """Run and write ``out`` through the shared harness
    (``meanfield.core.harness.run_to_file``): progress on stderr for long
    runs, a checkpoint file (status "interrupted") every ``checkpoint_s``
    seconds so that even a killed process leaves a valid file. Returns
    (trajectory, path)."""
    pb = Problem.build(cfg)
    return harness.run_to_file(
        cfg, lambda mon: run(cfg, pb, monitor=mon),
        lambda traj, status=None, message=None: save(out, cfg, traj, pb, status=status, message=message),
        progress=progress, checkpoint_s=checkpoint_s, label="induction: ")
