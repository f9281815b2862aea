"""``meanfield induction run|data|chi2|check|plot``: the induction-head system on the command line.

:func:`add_parser` adds the ``induction`` system to the top-level parser's
subparsers (``meanfield.cli``); each verb's handler returns the exit code
(0 complete, 2 bad input via :class:`meanfield.core.config.ConfigError`, which the
main CLI prints as one line, 3 diverged, 130 interrupted).

Every field of :class:`~meanfield.models.induction.config.InductionConfig` is a
flag ``--field-name`` (underscores become dashes; tuples are comma-separated);
``--config FILE.toml`` gives fields in a file (flat keys or a ``[run]``
table), flags override it.

``chi2`` prints the modified chi-square mutual information of every lag
subset (:mod:`meanfield.models.induction.theory`); ``check`` reruns the paper's
claims (:mod:`meanfield.models.induction.claims`; exit 0 only if every proved /
shown claim passes, 1 otherwise; the expected ones are listed separately); ``plot`` writes the figures of a run file
(:mod:`meanfield.models.induction.plot`).
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

from ...core.config import ConfigError, add_dataclass_flags, as_float, as_int, as_list, flag_of, load_toml

HELP = {
    "d": "vocabulary size (>= 2)", "L": "context length; sequences have L+1 tokens (L > every lag)",
    "pa": "parent lags, comma-separated (default 1,2: a trigram chain; n-gram: 1..n-1)",
    "alpha": "Dirichlet concentration of each kernel row (> 0)",
    "n_train": "training sequences (fixed data set; in sampling fresh: the set the train loss is reported on)",
    "n_test": "held-out sequences (0: none)", "L_test": "held-out context length (default L)",
    "sampling": "fixed (empirical risk on n_train sequences) | fresh (a new Monte Carlo batch every GD step) | "
                "minibatch (SGD on the n_train sequences: a seeded shuffle per epoch, batches of --batch)",
    "batch": "sequences per GD step (sampling fresh or minibatch)",
    "loss": "nll (the paper's -log y_hat[x_{L+1}]) | official-ce (the official code's CrossEntropyLoss "
            "applied to y_hat as logits)",
    "train_file": "HDF5 data file (meanfield induction data) to train on instead of generating",
    "seed": "seed: train (seed,0), test (seed,1), fresh batch of step k (seed,2,k)",
    "H": "heads", "M": "RPE window length per head", "D": "largest subset size of the selector (<= H)",
    "first_lags": "first lag of each head's window, comma-separated (default 1 for all)",
    "start_lags": "lag each head starts on (default head h on lag h)",
    "w_plus": "init RPE weight on the start lag", "w_minus": "init RPE weight elsewhere",
    "c_init": "init of every c_S (nonzero)", "a_init": "init of the classifier scalar a",
    "yhat_floor": "log(0) guard: loss = -log(max(y_hat, yhat_floor)), in [1e-300, 1)",
    "method": "gd | flow (adaptive Dormand-Prince) | rk4 (fixed step --dt)",
    "schedule": "three-stage (= c,w,a) | simultaneous | any grouping and order of the stages, e.g. w,c,a or cw,a or "
                "cwa (one step size, length and criterion per stage); old names three-phase, joint",
    "eta": "GD step size (simultaneous)", "steps": "GD steps (simultaneous)",
    "t_end": "flow time (simultaneous; default steps*eta)",
    "stage_etas": "E1,E2,...: GD step size per stage", "stage_steps": "N1,N2,...: GD steps per stage (caps)",
    "stage_times": "T1,T2,T3: flow time per stage (default stage_steps*stage_etas)",
    "stage_criteria": "C1,C2,C3 ending each stage early, e.g. 'c_top>=0.99,rpe_top>=0.95,grad_a<=1e-6' (or none)",
    "criterion": "stop criterion of the simultaneous schedule (loss, grad_norm, grad_c, grad_w, grad_a, a, c_top, "
                 "rpe_top)",
    "dt": "rk4 step (default the smallest step size)", "rtol": "flow relative tolerance",
    "atol": "flow absolute tolerance", "max_abs": "stop as diverged when a parameter exceeds this in absolute value",
    "record_every": "record every N (solver) steps", "record_log": "record N log-spaced steps/times",
    "record_dt": "record every DT time units (flow, rk4)",
}



#: chi2's --d: the work of the exact laws grows as d^(3W) (meanfield.models.induction.sizes.chi2_estimate)
CHI2_D_HELP = ("vocabulary size (>= 2; default 3). The exact laws come from the window chain's d^W x d^W "
               "transition matrices (W: the largest lag), so time grows as d^(3W) and memory as d^(2W): at W = 3, "
               "d = 6 takes about a minute with 2000 kernels; a size estimated beyond 10 minutes or the "
               "machine's memory is refused (--force)")

def _fields():
    from .config import InductionConfig

    return [f.name for f in dataclasses.fields(InductionConfig)]


def _aliases() -> dict:
    from .config import FIELD_ALIASES

    return FIELD_ALIASES


def add_run_flags(p) -> None:
    """``--config`` and a flag for every InductionConfig field (and the old
    names), derived from the dataclass by the rule every system uses
    (``meanfield.core.config.add_dataclass_flags``)."""
    from .config import InductionConfig

    p.add_argument("--config", help="TOML file of config fields (flags override it)")
    add_dataclass_flags(p, InductionConfig, HELP, aliases=_aliases())


def _info(msg) -> None:
    """A progress note of a long command (check, full): logger ``meanfield`` (-v / -q)."""
    from ...core.guard import cli_log

    cli_log().info("%s", msg)


def config_from_args(args):
    """The validated config of parsed ``run`` arguments; warnings go to stderr, one line each."""
    from .config import make_config

    data = load_toml(args.config) if getattr(args, "config", None) else {}
    from ...core.config import check_toml_numbers, field_types
    from .config import InductionConfig

    check_toml_numbers("config", data, field_types(InductionConfig))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        flags = {f: getattr(args, f, None) for f in (*_fields(), *_aliases())}
        from ...core.config import check_cli_values

        check_cli_values(flags)
        cfg = make_config(data, **flags)
    from .config import check_applicable

    check_applicable({**data, **{k: v for k, v in flags.items() if v is not None}}, cfg)  # ignored keys: errors
    from ...core.guard import cli_log

    for w in caught:
        cli_log().warning("warning: %s", w.message)
    return cfg


def _check_out(out: str) -> Path:
    from ...core.guard import check_output_file  # before the work: directory, parent a file, unwritable folder

    return check_output_file(out, "out", (".h5", ".hdf5"))


def cmd_run(args) -> int:
    from .run import EXIT_CODES, run_to_file

    from .sizes import check_induction_size

    cfg = config_from_args(args)
    out = _check_out(args.out)
    check_induction_size(cfg, args.force)
    from ...core.guard import first_use_notice
    from ...engine import twolayer_kernels as tk
    from ...engine import twolayer_pattern as tp

    from .sizes import COMPILE_S

    # the engine's two-layer kernels the run trains on
    first_use_notice(tk._fwd, tk._bwd, tk._readout, tp._codes, tp._readout, tp._gather_back, seconds=COMPILE_S)
    traj, path = run_to_file(cfg, out, progress=not args.quiet)
    print(f"{path}: {traj.status}: {traj.message}")
    from ...core.outcome import outcome_lines  # selected parent set, heads' top lags, a, criteria that never fired

    print("\n".join(outcome_lines(path)))
    if traj.status == "diverged":
        from ...core.guard import cli_log

        cli_log().warning("run diverged; %s keeps every record up to the step named above", path)
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
    from .sizes import induction_data_estimate

    induction_data_estimate(N, d, L, len(pa), args.kernels, force=args.force)
    ds = generate(N, d, L, pa, alpha, seed, kernels=args.kernels)
    path = save_data(out, ds)
    print(f"{path}: {ds.N} sequences, d={d}, L={L}, pa={tuple(sorted(pa))}, alpha={alpha:g}, seed={seed}"
          + (", with kernels" if args.kernels else ""))
    return 0


CHI2_FIELDS = ("d", "pa", "alpha", "H", "M", "D", "first_lags")


def cmd_chi2(args) -> int:
    import json

    from .config import make_config
    from .theory import candidate_lags, chi2_table

    if args.json:
        from ...core.guard import check_output_file

        check_output_file(args.json, "json")  # before the work
    data = load_toml(args.config) if args.config else {}
    data = {k: v for k, v in data.items() if k in CHI2_FIELDS}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # parent lags outside the windows are fine here
        cfg = make_config(data, **{f: getattr(args, f) for f in CHI2_FIELDS})
    if args.lags is not None:
        lags = tuple(as_int("lags", v, lo=1) for v in as_list("lags", args.lags))
        if not lags:
            raise ConfigError("lags: needs at least one positive integer")
    else:
        lags = candidate_lags(cfg.M, cfg.first_lags)
    exps = tuple(as_float("exponent", v) for v in as_list("exponent", args.exponent))
    if not exps:
        raise ConfigError("exponent: needs at least one number")
    n = as_int("n_kernels", args.n_kernels, lo=2)
    seed = tuple(as_int("seed", v, lo=0) for v in as_list("seed", args.seed))
    if not seed:
        raise ConfigError("seed: needs at least one non-negative integer")
    from .sizes import chi2_estimate

    chi2_estimate(cfg.d, cfg.pa, lags, cfg.D, n, force=args.force)  # before any kernel is drawn
    res = chi2_table(cfg.d, cfg.pa, cfg.alpha, lags, cfg.D, n, seed, exps)
    print("modified chi-square MI  I~_k(S) = E_pi sum_z mu(z)^k (sum_e mu(e|z)^2/mu(e) - 1)")
    print(f"d={cfg.d}, pa={list(cfg.pa)}, alpha={cfg.alpha:g}, candidate lags {list(res.lags)} "
          f"({'--lags' if args.lags is not None else 'union of the head windows'}), |S| <= {cfg.D}, "
          f"{n} kernels (seed {list(seed)}), exact stationary laws"
          + (f", {res.n_reducible} reducible (Cesaro law)" if res.n_reducible else ""))
    for k in res.exponents:
        m, se = res.mean[k], res.se[k]
        print(f"\nexponent k = {k:g}:  S* = {{{','.join(map(str, res.S_star(k)))}}} "
              f"(ahead of the runner-up by {res.gap_in_se(k):.1f} paired standard errors)")
        print(f"{'rank':>4}  {'S':<12} {'I~':>12} {'+- se':>10}")
        for r, S in enumerate(res.ranking(k), 1):
            i = res.subsets.index(S)
            print(f"{r:>4}  {'{' + ','.join(map(str, S)) + '}':<12} {m[i]:>12.6g} {se[i]:>10.2g}")
    if args.json:
        from ...core.guard import check_output_file

        p = check_output_file(args.json, "json")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(res.to_dict(), indent=2))
        print(f"\n{p}")
    return 0


def cmd_check(args) -> int:
    from .suite import check_suite

    from ...core.guard import check_output_dir

    base = {"seed": as_int("seed", args.seed, lo=0)} if args.seed is not None else None
    check_output_dir(args.out, "out")
    claims, report = check_suite(Path(args.out), quick=args.quick, base=base,
                                 log=(lambda *a: None) if args.quiet else _info)
    from ...core.report import gating

    gate = gating(claims)
    print("the paper's claims (proved / shown; the exit code depends on these):")
    for c in gate:
        print(f"{c.status}  [{c.source}] {c.name}: {c.statement}")
    print("beyond the paper (expected; reported, not gating):")
    for c in claims:
        if c.source == "expected":
            print(f"{c.status}  [expected] {c.name}: {c.statement}")
    print(f"report: {report}")
    return 0 if all(c.passed for c in gate) else 1


def cmd_full(args) -> int:
    from ...core.guard import check_output_dir
    from .full import full_study

    check_output_dir(args.out, "out")
    settings = {}
    if args.steps is not None:
        settings["steps"] = as_int("steps", args.steps, lo=1)
    from .sizes import full_study_estimate
    from .full import FULL_SETTINGS

    S = dict(FULL_SETTINGS["quick" if args.quick else "full"], **settings)
    full_study_estimate(S["steps"], S["n_train"], S["L"], force=args.force)  # before any step
    if args.loss is not None:
        if args.loss not in ("official-ce", "nll"):
            raise ConfigError(f"loss: must be one of official-ce, nll; got {args.loss!r}")
        settings["loss"] = args.loss
    res = full_study(Path(args.out), quick=args.quick, settings=settings, progress=not args.quiet,
                     log=(lambda *a: None) if args.quiet else _info)
    c = res["claim"]
    print(f"{c.status}  [{c.source}] {c.name}: {c.statement}")
    print(f"report: {res['report']}")
    return 0


def cmd_plot(args) -> int:
    from ...core.guard import check_output_dir
    from .plot import plot_run

    check_output_dir(args.out, "out")
    try:
        files = plot_run(Path(args.run), Path(args.out), fmt=args.fig_format)
    except (FileNotFoundError, ValueError) as e:
        raise ConfigError(f"run: {e}") from None
    for f in files:
        print(f"figure: {f}")
    return 0


def add_parser(systems):
    """Add ``induction run|data|chi2|check|plot`` to the top-level subparsers ``systems``."""
    ind = systems.add_parser("induction", help="induction heads on in-context n-gram Markov chains (seed 002)")
    verbs = ind.add_subparsers(dest="verb", required=True, parser_class=type(ind))

    r = verbs.add_parser("run", help="train TF(M,H,d,D) (three-stage or simultaneous; GD or flow) and write an HDF5 run file")
    add_run_flags(r)
    r.add_argument("--out", default="runs/induction.h5", help="output run file (.h5), written atomically")
    r.add_argument("--quiet", action="store_true", help="no progress line")
    r.add_argument("--force", action="store_true",
                   help="run even when the estimated memory or time (from the config) is beyond this machine")
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
    g.add_argument("--force", action="store_true", help="generate even when the estimated size is too large")
    g.set_defaults(func=cmd_data)

    x = verbs.add_parser("chi2", help="modified chi-square MI of every lag subset from the exact stationary laws; S*")
    x.add_argument("--config", help="TOML file (only d, pa, alpha, H, M, D, first_lags are read)")
    for f in CHI2_FIELDS:
        x.add_argument(flag_of(f), dest=f, default=None, metavar=f.upper() if len(f) > 1 else f,
                       help=CHI2_D_HELP if f == "d" else HELP.get(f))
    x.add_argument("--lags", default=None,
                   help="candidate lags, comma-separated (default: the union of the head windows, lags 1..M)")
    x.add_argument("--exponent", default="2",
                   help="exponent k of mu(z) (comma-separated for several; the paper's value is 2)")
    x.add_argument("--n-kernels", dest="n_kernels", default="2000", help="Monte Carlo kernels from the prior")
    x.add_argument("--seed", default="0", help="seed of the kernels (an int or comma-separated ints)")
    x.add_argument("--json", default=None, help="also write the table (means, standard errors, rankings) here")
    x.add_argument("--force", action="store_true", help="run even when the estimated memory or time is too large")
    x.set_defaults(func=cmd_chi2)

    c = verbs.add_parser("check", help="rerun the paper's claims; report.md, report.json, figures, run.h5; "
                                       "exit 0 iff every proved / shown claim passes (expected ones are listed "
                                       "separately)")
    c.add_argument("--out", default="runs/induction_check", help="report folder")
    c.add_argument("--quick", action="store_true", help="smaller data sets and studies (about 30 s)")
    c.add_argument("--seed", default=None, help="seed of every data set and kernel sample (default 0)")
    c.add_argument("--quiet", action="store_true", help="no progress lines")
    c.set_defaults(func=cmd_check)

    p = verbs.add_parser("plot", help="figures of an induction run file: c mass, RPE heatmaps, a(t), losses")
    p.add_argument("run", help="run file (.h5)")
    p.add_argument("--out", default=None, help="figure folder (default RUN_figures)")
    p.add_argument("--format", dest="fig_format", choices=["png", "pdf", "svg"], default="png",
                   help="figure format: png | pdf | svg (vector, for papers)")
    p.set_defaults(func=cmd_plot)

    f = verbs.add_parser("full", help="train the official code's full two-layer transformer (query-key, output-value, "
                                      "layer norm) next to the simplified model; do they pick the same parent set "
                                      "and copier heads? report.md, report.json, figure")
    f.add_argument("--out", default="runs/induction_full", help="report folder")
    f.add_argument("--quick", action="store_true", help="L = 20, 300 sequences, 300 steps (about a minute)")
    f.add_argument("--steps", default=None, help="simultaneous GD steps (default 300 quick; 2000 with L = 20 and 1000 sequences)")
    f.add_argument("--loss", default=None, help="official-ce (default, the official code's) | nll")
    f.add_argument("--quiet", action="store_true", help="no progress lines")
    f.add_argument("--force", action="store_true", help="run even when the estimated time is beyond 10 minutes (the full study: ~23 min)")
    f.set_defaults(func=cmd_full)
    return ind
