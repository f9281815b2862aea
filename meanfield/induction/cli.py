"""``meanfield induction run|data``: the induction-head system on the command line.

:func:`add_parser` adds the ``induction`` system to the top-level parser's
subparsers (``meanfield.cli``); each verb's handler returns the exit code
(0 complete, 2 bad input via :class:`meanfield.config.ConfigError`, which the
main CLI prints as one line, 3 diverged, 130 interrupted).

Every field of :class:`~meanfield.induction.config.InductionConfig` is a
flag ``--field-name`` (underscores become dashes; tuples are comma-separated);
``--config FILE.toml`` gives fields in a file (flat keys or a ``[run]``
table), flags override it.
"""

from __future__ import annotations

import dataclasses
import sys
import warnings
from pathlib import Path

from ..config import ConfigError, as_float, as_int, as_list, load_toml

HELP = {
    "d": "vocabulary size (>= 2)", "L": "context length; sequences have L+1 tokens (L > every lag)",
    "pa": "parent lags, comma-separated (default 1,2: a trigram chain; n-gram: 1..n-1)",
    "alpha": "Dirichlet concentration of each kernel row (> 0)",
    "n_train": "training sequences (fixed data set; in sampling fresh: the set the train loss is reported on)",
    "n_test": "held-out sequences (0: none)", "L_test": "held-out context length (default L)",
    "sampling": "fixed (empirical risk on n_train sequences) | fresh (a new Monte Carlo batch every GD step)",
    "batch": "sequences per fresh batch (sampling fresh)",
    "train_file": "HDF5 data file (meanfield induction data) to train on instead of generating",
    "seed": "seed: train (seed,0), test (seed,1), fresh batch of step k (seed,2,k)",
    "H": "heads", "M": "RPE window length per head", "D": "largest subset size of the selector (<= H)",
    "first_lags": "first lag of each head's window, comma-separated (default 1 for all)",
    "start_lags": "lag each head starts on (default head h on lag h)",
    "w_plus": "init RPE weight on the start lag", "w_minus": "init RPE weight elsewhere",
    "c_init": "init of every c_S (nonzero)", "a_init": "init of the classifier scalar a",
    "yhat_floor": "log(0) guard: loss = -log(max(y_hat, yhat_floor)), in [1e-300, 1)",
    "method": "gd | flow (adaptive Dormand-Prince) | rk4 (fixed step --dt)",
    "schedule": "three-phase (1: c, 2: w, 3: a) | joint",
    "eta": "GD step size (joint)", "steps": "GD steps (joint)", "t_end": "flow time (joint; default steps*eta)",
    "phase_etas": "E1,E2,E3: GD step size per phase", "phase_steps": "N1,N2,N3: GD steps per phase (caps)",
    "phase_times": "T1,T2,T3: flow time per phase (default phase_steps*phase_etas)",
    "phase_criteria": "C1,C2,C3 ending each phase early, e.g. 'c_top>=0.99,rpe_top>=0.95,grad_a<=1e-6' (or none)",
    "criterion": "stop criterion of the joint schedule (loss, grad_norm, grad_c, grad_w, grad_a, a, c_top, rpe_top)",
    "dt": "rk4 step (default the smallest step size)", "rtol": "flow relative tolerance",
    "atol": "flow absolute tolerance", "max_abs": "stop as diverged when a parameter exceeds this in absolute value",
    "record_every": "record every N (solver) steps", "record_log": "record N log-spaced steps/times",
    "record_dt": "record every DT time units (flow, rk4)",
}


def _fields():
    from .config import InductionConfig

    return [f.name for f in dataclasses.fields(InductionConfig)]


def _flag(field: str) -> str:
    return "--" + field.replace("_", "-")


def add_run_flags(p) -> None:
    p.add_argument("--config", help="TOML file of config fields (flags override it)")
    for f in _fields():
        p.add_argument(_flag(f), dest=f, default=None, metavar=f.upper() if len(f) > 1 else f, help=HELP.get(f))


def config_from_args(args):
    """The validated config of parsed ``run`` arguments; warnings go to stderr, one line each."""
    from .config import make_config

    data = load_toml(args.config) if getattr(args, "config", None) else {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = make_config(data, **{f: getattr(args, f) for f in _fields()})
    for w in caught:
        print(f"meanfield: warning: {w.message}", file=sys.stderr)
    return cfg


def _check_out(out: str) -> Path:
    p = Path(out)
    if p.suffix not in (".h5", ".hdf5"):
        raise ConfigError(f"out: must be a path ending in .h5 or .hdf5, got {out!r}")
    return p


def cmd_run(args) -> int:
    from .run import EXIT_CODES, run_to_file

    cfg = config_from_args(args)
    out = _check_out(args.out)
    traj, path = run_to_file(cfg, out, progress=not args.quiet)
    print(f"{path}: {traj.status}: {traj.message}")
    if traj.status == "diverged":
        print(f"meanfield: run diverged; {path} keeps every record up to the step named above", file=sys.stderr)
    return EXIT_CODES[traj.status]


def cmd_data(args) -> int:
    from .data import generate, save_data

    out = _check_out(args.out)
    N = as_int("n", args.n, lo=1)
    d = as_int("d", args.d, lo=2)
    L = as_int("L", args.L, lo=1)
    pa = [as_int("pa", v, lo=1) for v in as_list("pa", args.pa)]
    if not pa or len(set(pa)) != len(pa):
        raise ConfigError(f"pa: must be distinct positive integers, got {args.pa!r}")
    if L <= max(pa):
        raise ConfigError(f"L: must be > max(pa) = {max(pa)}, got {L}")
    alpha = as_float("alpha", args.alpha, positive=True)
    seed = tuple(as_int("seed", v, lo=0) for v in as_list("seed", args.seed))
    if not seed:
        raise ConfigError("seed: needs at least one non-negative integer")
    ds = generate(N, d, L, pa, alpha, seed, kernels=args.kernels)
    path = save_data(out, ds)
    print(f"{path}: {ds.N} sequences, d={d}, L={L}, pa={tuple(sorted(pa))}, alpha={alpha:g}, seed={seed}"
          + (", with kernels" if args.kernels else ""))
    return 0


def add_parser(systems):
    """Add ``induction run`` and ``induction data`` to the top-level subparsers ``systems``."""
    ind = systems.add_parser("induction", help="induction heads on in-context n-gram Markov chains (seed 002)")
    verbs = ind.add_subparsers(dest="verb", required=True, parser_class=type(ind))

    r = verbs.add_parser("run", help="train TF(M,H,d,D) (three-phase or joint; GD or flow) and write an HDF5 run file")
    add_run_flags(r)
    r.add_argument("--out", default="runs/induction.h5", help="output run file (.h5), written atomically")
    r.add_argument("--quiet", action="store_true", help="no progress line")
    r.set_defaults(func=cmd_run)

    g = verbs.add_parser("data", help="generate a fixed data set of n-gram sequences and write it to HDF5")
    g.add_argument("--n", default="10000", help="number of sequences")
    g.add_argument("--d", default="3", help=HELP["d"])
    g.add_argument("--L", default="100", help=HELP["L"])
    g.add_argument("--pa", default="1,2", help=HELP["pa"])
    g.add_argument("--alpha", default="1.0", help=HELP["alpha"])
    g.add_argument("--seed", default="0", help="seed (an int, or comma-separated ints: SeedSequence entropy)")
    g.add_argument("--kernels", action="store_true", help="also store every sequence's kernel (N, d**|pa|, d)")
    g.add_argument("--out", default="runs/induction_data.h5", help="output data file (.h5)")
    g.set_defaults(func=cmd_data)
    return ind
