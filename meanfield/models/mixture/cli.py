"""``meanfield mixture <verb> [options]``: the mixture system's commands (registered in ``.plugin``).

:func:`add_parser` adds the ``mixture`` subcommand to the top-level parser
(``meanfield.cli``, through ``meanfield.engine.registry.register_command``).
Every flag of ``run`` (and ``particles``, ``sweep``, ``width-sweep``,
``escape``) is a field of :class:`meanfield.models.mixture.config.MixtureConfig`
(:data:`RUN_FLAGS`). Exit codes: 0 success, 1 a check or bound failed, 2 bad
input (one line naming the field), 3 a run diverged, 130 interrupted.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from ...core.config import ConfigError, check_cli_values, flag_of, load_toml


# flag name -> config field, derived from the MixtureConfig dataclass (as the induction CLI does):
# every field ``name`` is the flag ``--name-with-dashes`` (``--K``, ``--L``, ``--p`` keep their case);
# every flag is a string validated by make_config
def _mixture_run_flags() -> dict:
    from ...core.config import dataclass_flags
    from .config import MixtureConfig  # numpy only (the kernels load when a config is made)

    return dataclass_flags(MixtureConfig)


RUN_FLAGS = _mixture_run_flags()

RUN_HELP = {
    "--K": "number of groups (>= 2)", "--L": "tokens per sample (>= 2)",
    "--p": "group weights, comma-separated (default uniform)",
    "--omega": "attention init scale (> 0)", "--eta": "GD step size (> 0); flow time unit for defaults",
    "--method": "gd (exact GD map) | flow (adaptive Dormand-Prince) | rk4 (fixed step --dt)",
    "--steps": "GD steps (simultaneous schedule)", "--t-end": "flow end time (simultaneous schedule)",
    "--dt": "rk4 step (default eta)", "--rtol": "flow relative tolerance", "--atol": "flow absolute tolerance",
    "--h-min": "flow: smallest adaptive step; below it steps are forced (ReLU kinks); default 1e-4 * horizon",
    "--max-abs": "stop as diverged when a state entry exceeds this in absolute value (default 1e6)",
    "--schedule": "simultaneous | three-stage", "--stage-steps": "N1,N2,N3: GD steps per stage (caps)",
    "--stage-times": "T1,T2,T3: flow time per stage (caps)",
    "--stage-criteria": "C1,C2,C3 ending each stage early, e.g. 'consistent_margin>=0.5,inconsistent_margin>=0.5,loss<=1e-2' (or none)",
    "--stage3": "what stage 3 trains: neurons | both", "--criterion": "stop criterion of the simultaneous schedule",
    "--width": "inf (S=0, A=B=omega^2 I) or an attention width m (sampled init)",
    "--seed": "seed of the sampled init", "--neuron-init": "zero | const:V1,...,VP (or 2P values) | gaussian:SIGMA",
    "--relu-prime-at-zero": "ReLU'(0): 0 | 0.5 | 1", "--record-every": "record every N (solver) steps",
    "--record-log": "record N log-spaced steps/times", "--record-dt": "record every DT time units (flow, rk4)",
    "--label-prob": "P(y = +1), in (0, 1) (default 0.5)",
    "--label-noise": "label flip probability, in [0, 0.5) (default 0)",
    "--feature-gram": ("non-orthogonal features: cc:RHO,vv:RHO,cv:RHO,cvx:RHO (or a full matrix in TOML); cc "
                       "<c_j, c_k>, vv <v_j, v_k> (j != k), cv <c_k, v_k> (same group), cvx <c_j, v_k> (j != k)"),
    "--noise-sigma": "Gaussian noise on every token of a finite training set (needs --n-train)",
    "--n-train": "finite training set of N noisy sequences (empirical risk)",
    "--ambient-d": "ambient dimension of the training set's tokens (default 2K+4)",
    "--data-seed": "seed of the training set", "--n-neurons": "neurons per head (mean-field over neurons)",
    "--softmax-scale": "1 (default) | 1/sqrt(m): the original model's logit factor (finite --width only); "
                       "S, A, B are then recorded divided by sqrt(m)",
}

#: the meaning of each MixtureConfig field (the family's ``field_help``: ``model run mixture --help``)
FIELD_HELP = {field: RUN_HELP[flag] for flag, field in RUN_FLAGS.items() if flag in RUN_HELP}

BACKEND_HELP = ("cpu | cuda | auto: cuda runs batched trajectories on an NVIDIA GPU (pip install "
                "'meanfield[cuda]'); auto picks cuda only when a GPU is present")


def _add_run_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="TOML file of config fields (flags override it)")
    p.add_argument("--force", action="store_true",
                   help="run even when the estimated memory or time (from the config) is beyond this machine")
    from ...core.config import add_dataclass_flags
    from .config import MixtureConfig

    add_dataclass_flags(p, MixtureConfig, {field: RUN_HELP.get(flag) for flag, field in RUN_FLAGS.items()})


def _config_from_args(args):
    from .config import make_config

    from ...core.guard import check_applicable

    data = _toml_config(args)
    flags = {f: getattr(args, f) for f in RUN_FLAGS.values()}
    check_cli_values(flags)
    cfg = make_config(data, **flags)
    check_applicable({**data, **{k: v for k, v in flags.items() if v is not None}}, cfg)  # ignored keys: errors
    _check_first_stage(flags, cfg)
    return cfg


def _toml_config(args) -> dict:
    """The --config TOML file (empty without one), its number-typed fields refused as strings."""
    if not getattr(args, "config", None):
        return {}
    from ...core.config import check_toml_numbers, field_types
    from .config import MixtureConfig

    data = load_toml(args.config)
    check_toml_numbers("config", data, field_types(MixtureConfig), {"width": ("inf",)})
    return data


def _check_first_stage(flags: dict, cfg) -> None:
    """The command line's refusal of a three-stage plan whose stage 1 trains no
    step while the neurons start at zero (the scores' gradient goes through
    the neurons: stage 2 would never move). From Python the same plan is an
    evaluate-at-the-start run and stays accepted."""
    name = "stage_steps" if cfg.method == "gd" else "stage_times"
    if flags.get(name) is None or cfg.schedule != "three-stage" or cfg.neuron_init != "zero":
        return
    plan = cfg.stage_steps if cfg.method == "gd" else cfg.stage_times
    if not plan[0] > 0:
        raise ConfigError(f"{flag_of(name)} ({name}): stage 1 must train (> 0) when neuron_init is zero (stage 2 "
                          f"moves the scores through the neurons, which would stay 0)")


def _cmd_run(args) -> int:
    from .batched import check_batchable, resolve_backend, run_batch
    from .run import EXIT_CODES, run_to_file, save

    from ...core.guard import check_output_dir, check_output_file
    from .sizes import check_mixture_size

    cfg = _config_from_args(args)
    out = check_output_file(args.out, "out", (".h5", ".hdf5"))  # before the work, not after it
    if args.plot:
        check_output_dir(args.plot, "plot")
    elif args.fig_format is not None:  # an option the command would ignore is an error
        raise ConfigError("format: only with --plot DIR (the figure format)")
    est = check_mixture_size(cfg, args.force)
    from ...core.guard import check_disk, first_use_notice
    from .sizes import COMPILE_S

    check_disk(out, est["bytes"] / 3.0, "out", args.force)  # the file holds one copy of the records
    from . import kernels

    first_use_notice(kernels.gd_advance if cfg.method == "gd" else kernels.flow_rhs, kernels.loss_and_grads,
                     seconds=COMPILE_S)
    if resolve_backend(args.backend) == "cuda":
        check_batchable(cfg, "cuda")
        traj = run_batch([cfg], "cuda")[0]
        path = save(out, cfg, traj)
    else:
        traj, path = run_to_file(cfg, out, progress=not args.quiet)
    print(f"{path}: {traj.status}: {traj.message}")
    from ...core.outcome import outcome_lines  # what happened: stage ends, criteria that never fired, final numbers

    print("\n".join(outcome_lines(path)))
    if traj.status == "diverged":
        from ...core.guard import cli_log

        cli_log().warning("run diverged; %s keeps every record up to the step named above", path)
    if args.plot:
        from .plot import plot_run

        for f in plot_run(path, Path(args.plot), fmt=args.fig_format or "png"):
            print(f"figure: {f}")
    return EXIT_CODES[traj.status]


def _cmd_particles(args) -> int:
    from ...core.config import as_int
    from .particles import particles_to_file
    from .run import EXIT_CODES

    from ...core.guard import check_output_file
    from .sizes import check_mixture_size

    cfg = _config_from_args(args)
    out = check_output_file(args.out, "out", (".h5", ".hdf5"))
    d = as_int("d", args.d, lo=2) if args.d is not None else None
    check_mixture_size(cfg, args.force, particles_d=d or 2 * cfg.K + 1)
    es = as_int("embed_seed", args.embed_seed, lo=0) if args.embed_seed is not None else None
    th = as_int("threads", args.threads, lo=1) if args.threads is not None else None
    traj, path = particles_to_file(cfg, out, d=d, progress=not args.quiet, embed_seed=es, threads=th)
    print(f"{path}: {traj.status}: {traj.message}")
    from ...core.outcome import outcome_lines

    print("\n".join(outcome_lines(path)))
    return EXIT_CODES[traj.status]


def _cmd_derive(args) -> int:
    from . import symbolic

    K = _int_arg("K", args.K, 2)
    L = _int_arg("L", args.L, 2)
    fmts = ["latex", "json", "python"] if args.format == "all" else [args.format]
    from ...core.guard import check_output_dir
    from .sizes import derive_estimate

    if args.out:
        check_output_dir(args.out, "out")
    derive_estimate(K, L, fmts, args.reduce_symmetry, force=args.force)
    render, write = symbolic.render, symbolic.write
    if args.reduce_symmetry:
        from . import symmetry_symbolic

        render, write = symmetry_symbolic.render, symmetry_symbolic.write
    for fmt in fmts:
        if args.out:
            print(write(K, L, fmt, Path(args.out)))
        else:
            sys.stdout.write(render(K, L, fmt))
            if len(fmts) > 1:
                sys.stdout.write("\n")
    return 0


def _int_arg(name, v, lo):
    from ...core.config import as_int

    return as_int(name, v, lo=lo)


def _cmd_plot(args) -> int:
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


def _cmd_check(args) -> int:
    from .claims import check_suite

    from ...core.report import gating

    from ...core.guard import check_output_dir

    check_output_dir(args.out, "out")
    claims, report = check_suite(Path(args.out), quick=args.quick)
    gate = gating(claims)
    print("the paper's claims (proved / shown; the exit code depends on these):")
    for c in gate:
        print(f"{c.status}  [{c.source}] {c.name}: {c.statement}")
    print("the authors' expectations (expected; reported, not gating):")
    for c in claims:
        if c.source == "expected":
            print(f"{c.status}  [expected] {c.name}: {c.statement}")
    return 0 if all(c.passed for c in gate) else 1


def _cmd_bound(args) -> int:
    from ...core.bound_files import run_bounds_cli

    tmin, tmax = args.tmin, args.tmax  # a number or a stage time (T1, T2, T2 + 100): checked by bounds
    exprs = [args.expr] if args.expr else []
    if not exprs and not args.file:
        raise ConfigError("bound: give an expression or --file BOUNDS.toml")
    return run_bounds_cli(args.run, exprs, args.during, tmin, tmax, file=args.file)


def _base_from_args(args) -> dict:
    """Config overrides from --config and the run flags, not yet validated."""
    data = _toml_config(args)
    flags = {f: getattr(args, f) for f in RUN_FLAGS.values() if getattr(args, f) is not None}
    check_cli_values(flags)
    data.update(flags)
    if "stage_steps" in flags or "stage_times" in flags:
        from .config import make_config

        _check_first_stage(flags, make_config(data))
    return data


def _workers(args):
    from ...core.config import check_workers

    return check_workers(args.workers)


def _cmd_sweep(args) -> int:
    import dataclasses

    from .config import MixtureConfig, make_config
    from ...core.sweep import SweepSpec, parse_params, run_sweep, sweep_paths

    from ...core.guard import check_output_dir, check_output_file
    from .sizes import check_mixture_size

    base = _base_from_args(args)
    base_cfg = make_config(base)  # the base must be valid on its own
    from ...core.guard import check_applicable

    check_applicable(base, base_cfg)
    params = parse_params(args.param or [], [f.name for f in dataclasses.fields(MixtureConfig)])
    if str(args.out).endswith(".json"):
        check_output_file(args.out, "out", (".json",))
    else:
        check_output_dir(args.out, "out")
    n_points = 1
    for v in params.values():
        n_points *= len(v)
    check_mixture_size(base_cfg, args.force, copies=n_points)
    from ...core.ensemble_cli import cmd_sweep, use_chunked

    if use_chunked(args, base, params):  # chunks of batched trajectories, one sweep.h5 (meanfield.core.ensemble)
        return cmd_sweep(args, base, params)
    idx = run_sweep(SweepSpec(base, params, Path(args.out)), workers=_workers(args), progress=not args.quiet,
                    backend=args.backend, batched=args.batched)
    n_ok = sum(1 for e in idx["points"] if e["result"] and e["result"]["status"] == "complete")

    print(f"{sweep_paths(Path(args.out))[0]}: {idx['status']}: {idx['n_done']}/{idx['n_points']} points done, "
          f"{n_ok} complete")
    return 130 if idx["status"] == "interrupted" else 0


def _cmd_width_sweep(args) -> int:
    from ...core.config import as_float, as_int, as_list
    from .widths import width_sweep

    from ...core.guard import check_list

    widths = [as_int("widths", v, lo=1) for v in check_list("widths", as_list("widths", args.widths))]
    from ...core.guard import MAX_SEEDS

    seeds = as_int("seeds", args.seeds, lo=1, hi=MAX_SEEDS)
    tol = as_float("kink_tol", args.kink_tol, positive=True)
    base = _base_from_args(args)
    if base.get("width") not in (None, "inf"):
        raise ConfigError("width: not with width-sweep (use --widths)")
    pm = as_int("particles_up_to", args.particles_up_to, lo=0)
    from ...core.guard import check_output_file
    from .sizes import check_mixture_size
    from .config import make_config

    check_output_file(args.out, "out", (".h5", ".hdf5"))
    check_mixture_size(make_config({**base, "width": max(widths)}), args.force, copies=len(widths) * seeds + 1)
    s = width_sweep(base, widths, seeds, Path(args.out), tol_rel=tol, workers=_workers(args),
                    progress=not args.quiet, log=(lambda *a: None) if args.quiet else print, particles_up_to=pm,
                    backend=args.backend)
    print(f"{'m':>8} " + " ".join(f"{q + ' err':>12}" for q in ("S", "A", "B", "w", "loss")))
    for i, m in enumerate(s["widths"]):
        print(f"{m:>8} " + " ".join(f"{s['errors'][q][i]:>12.4g}" for q in ("S", "A", "B", "w", "loss")))
    print(s["message"])
    for m, dv in s["particles_max_rel_diff"].items():
        print(f"particle cross-check m={m}: explicit network vs reduced, max relative deviation {dv:.2e}")
    for f in s["files"]:
        print(f"wrote {f}")
    return 0


def _cmd_construct(args) -> int:
    from ...core.config import as_float, as_int
    from .construct import construct

    K = as_int("K", args.K, lo=2)
    L = as_int("L", args.L, lo=2)
    beta = as_float("beta", args.beta, nonneg=True)
    b = as_float("b", args.b, positive=True)
    d = as_int("d", args.d, lo=2 * K) if args.d is not None else None
    from ...core.guard import check_output_file
    from .sizes import construct_estimate

    if args.out:
        check_output_file(args.out, "out", (".h5", ".hdf5"))
    construct_estimate(K, L, d or 2 * K, force=args.force)
    r = construct(K, L, beta=beta, b=b, d=d)
    print(f"Lemma 6.1 construction, K={K}, L={L}: two heads, width m = {2 * K}, ambient d = {r['d']}, "
          f"beta = {beta:g}, b = {b:g}")
    print(f"  samples: {r['samples'].n} (all of them, exact)")
    print(f"  minimum margin y f(X) on the explicit network: {r['min_margin']:.6g} (at {r['argmin']})")
    print(f"  beta -> infinity limit of the minimum margin: {r['limit_margin']:.6g}")
    print(f"  max |explicit - reduced| margin: {np.max(np.abs(r['margins'] - r['margins_reduced'])):.2e}")
    if args.out:
        from ...core.io import write_h5_atomic

        write_h5_atomic(Path(args.out), {"format": "meanfield-construction", "system": "mixture", "K": K, "L": L,
                                         "beta": beta, "b": b, "min_margin": r["min_margin"]},
                        {"W_K": r["W_K"], "W_Q": r["W_Q"], "w": r["w"], "E": r["E"], "S": r["S"],
                         "w_reduced": r["w_reduced"], "margins": r["margins"]})
        print(f"  weights written to {args.out}")
    ok = r["min_margin"] > 0
    print("every sample is classified with a positive margin" if ok else "NOT every sample is classified")
    return 0 if ok else 1


def _cmd_study(args) -> int:
    from ...core.config import as_int, as_list
    from ...core.guard import check_output_dir
    from . import studies

    # one rule for inapplicable options: a flag the chosen study ignores is an error naming it
    k_only = {"K": args.K, "L": args.L, "steps": args.steps, "widths": args.widths, "seeds": args.seeds}
    if args.name != "k-mixtures":
        for k, v in k_only.items():
            if v is not None:
                raise ConfigError(f"{k}: not used by study {args.name} (only by study k-mixtures)")
    elif args.quick:
        raise ConfigError("quick: not used by study k-mixtures (set --K, --steps, --widths, --seeds instead)")
    check_output_dir(args.out if args.name == "k-mixtures" or args.out != "runs/study_k_mixtures"
                     else f"runs/study_{args.name}", "out")
    for k, default in (("K", "3,4,8"), ("L", "3"), ("steps", "4000"), ("widths", "16,64,256,1024,4096"),
                       ("seeds", "4")):  # an empty value given is refused below, not replaced by the default
        if getattr(args, k) is None:
            setattr(args, k, default)

    if args.name == "robustness":
        from .robustness import robustness_study

        out = Path(args.out if args.out != "runs/study_k_mixtures" else "runs/study_robustness")
        rep = robustness_study(out, quick=args.quick)
        for c in rep["claims"]:
            print(f"{c['status']}  [expected] {c['name']}: {c['numbers']['mechanism']}")
        print(f"report: {out / 'report.md'}")
        return 0
    if args.name != "k-mixtures":
        from .extensions import run_extension_study

        out = Path(args.out if args.out != "runs/study_k_mixtures" else f"runs/study_{args.name}")
        try:
            run_extension_study(args.name, out, quick=args.quick)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        print(f"report: {out / 'report.md'}")
        return 0
    from ...core.guard import MAX_SEEDS, check_list
    from .sizes import check_mixture_size
    from .config import make_config

    Ks = [as_int("K", v, lo=2) for v in check_list("K", as_list("K", args.K))]
    widths = [as_int("widths", v, lo=1) for v in check_list("widths", as_list("widths", args.widths))]
    L, steps = as_int("L", args.L, lo=2), as_int("steps", args.steps, lo=1)
    seeds = as_int("seeds", args.seeds, lo=1, hi=MAX_SEEDS)
    for K in Ks:  # every run of the study estimated before the first: one per K, then 2 x seeds per width at Ks[0]
        cfg = make_config({}, K=K, L=L, steps=steps, record_every=max(1, steps // 400))
        check_mixture_size(cfg, what="size", copies=1.0 + (2.0 * seeds * len(widths) + 2 if K == Ks[0] else 0))
    check_mixture_size(make_config({}, K=Ks[0], L=L, steps=steps, record_every=steps, width=max(widths)),
                       copies=2.0 * seeds * len(widths))
    rep = studies.k_mixtures(Ks, Path(args.out), L=L, steps=steps, widths=widths, seeds=seeds)
    for r in rep["rows"]:
        print(f"K={r['K']}: same-group {r['same_group_mean']:.4g}, between-group {r['between_group_mean']:.4g}")
    return 0


def _cmd_demo(args) -> int:
    from ...core.guard import check_output_dir
    from .demo import demo

    check_output_dir(args.out, "out")
    return demo(Path(args.out), quick=args.quick)


def _cmd_escape(args) -> int:
    from ...core.config import as_float
    from .escape import cli as escape_cli

    if args.run_file:  # the config is the run file's: a run flag next to --from would be silently ignored
        given = (["config"] if getattr(args, "config", None) else []) + [
            f for f in RUN_FLAGS.values() if getattr(args, f) is not None]
        if given:
            raise ConfigError(f"{given[0]}: not used with --from (the run file's config is used); drop it or --from")
    if args.stage in ("2", "3") and args.schedule is None and not args.run_file:
        # stages 2 and 3 are stages of the three-stage schedule: its flags (--stage-steps, --stage3) apply
        data = load_toml(args.config) if getattr(args, "config", None) else {}
        if "schedule" not in data:
            args.schedule = "three-stage"
    cfg = None if args.run_file else _config_from_args(args)
    eps = as_float("eps", args.eps, positive=True)
    theta = as_float("theta", args.theta, positive=True)
    from ...core.config import as_list
    from ...core.guard import MAX_OMEGAS, check_list
    from .sizes import check_mixture_size

    omegas = None
    if args.omegas is not None:  # "" is an empty list, refused (not the default list)
        omegas = [as_float("omegas", v, positive=True)
                  for v in check_list("omegas", as_list("omegas", args.omegas), 1, MAX_OMEGAS)]
    if cfg is not None:  # the stage runs plus one run per omega, estimated before any of them
        check_mixture_size(cfg, args.force, copies=2.0 + len(omegas or (1, 2, 3, 4)))
    return escape_cli(cfg, args.stage, run_path=args.run_file, json_path=args.json, eps=eps, omegas=omegas,
                      theta=theta)


def add_parser(systems, verb: str | None = None) -> None:
    """Add ``meanfield mixture`` and its verbs to the top-level subparsers ``systems``; ``verb``: build that
    verb's parser alone, the others by name (``meanfield.core.cliparse.only_verb``)."""
    from ...core.cliparse import only_verb

    mix = systems.add_parser("mixture", help="K-mixture of linear classification, two-headed transformer (seed 000)")
    verbs = only_verb(mix.add_subparsers(dest="verb", required=True, parser_class=type(mix)), verb)

    r = verbs.add_parser("run", help="integrate the reduced dynamics and write an HDF5 run file")
    _add_run_flags(r)
    r.add_argument("--out", default="runs/run.h5", help="output run file (.h5), written atomically")
    r.add_argument("--plot", metavar="DIR", help="also write figures to DIR")
    r.add_argument("--format", dest="fig_format", choices=["png", "pdf", "svg"], default=None,
                   help="figure format with --plot: png (default) | pdf | svg (vector, for papers)")
    r.add_argument("--quiet", action="store_true", help="no progress line")
    r.add_argument("--backend", default="cpu", help=BACKEND_HELP)
    r.set_defaults(func=_cmd_run)

    pa = verbs.add_parser("particles", help="train the EXPLICIT finite-width network (W_K, W_Q in R^{m x d}) by GD; "
                                             "same run file, observables by projection")
    _add_run_flags(pa)
    pa.add_argument("--d", default=None, help="ambient dimension (>= 2K; default 2K+1)")
    pa.add_argument("--embed-seed", default=None, help="seed of the random orthonormal feature embedding")
    pa.add_argument("--threads", default=None, help="accepted and ignored: the explicit network is the engine's numpy "
                                                     "network (BLAS threads: OPENBLAS_NUM_THREADS)")
    pa.add_argument("--out", default="runs/particles.h5")
    pa.add_argument("--quiet", action="store_true")
    pa.set_defaults(func=_cmd_particles)

    d = verbs.add_parser("derive", help="sympy derivation of the closed-form dynamics")
    d.add_argument("--K", default="2")
    d.add_argument("--L", default="3")
    d.add_argument("--format", choices=["latex", "json", "python", "all"], default="latex")
    d.add_argument("--out", help="write files to this folder instead of printing")
    d.add_argument("--force", action="store_true", help="run even when the estimated time is too large")
    d.add_argument("--reduce-symmetry", action="store_true",
                   help="exact symmetry reduction (group of the default config, orbit variables, closed ODE); "
                        "JSON reports counts.independent and counts.full")
    d.set_defaults(func=_cmd_derive)

    p = verbs.add_parser("plot", help="figures of a run file (like the paper's Figure 1)")
    p.add_argument("run", help="run file (.h5)")
    p.add_argument("--out", default=None, help="folder for the figures (default: beside the run file)")
    p.add_argument("--format", dest="fig_format", choices=["png", "pdf", "svg"], default="png",
                   help="figure format: png | pdf | svg (vector, for papers)")
    p.set_defaults(func=_cmd_plot)

    c = verbs.add_parser("check", help="rerun the paper's claims; report.md, report.json, figures; exit 0 iff every "
                                       "proved / shown claim passes (expected ones are listed separately)")
    c.add_argument("--out", default="runs/check", help="report folder")
    c.add_argument("--quick", action="store_true", help="reduced version (seconds)")
    c.set_defaults(func=_cmd_check)

    sw = verbs.add_parser("sweep", help="a grid over config fields, in parallel, resumable")
    _add_run_flags(sw)
    sw.add_argument("--param", action="append", metavar="NAME=VALUES",
                    help="a config field and its values: A:B:log:N, A:B:lin:N or V1,V2,... (repeatable)")
    sw.add_argument("--out", default="runs/sweep", help="a folder (sweep.h5 and chunks/; with --per-point sweep.json + "
                                                        "points/) or FILE.json (per point)")
    sw.add_argument("--workers", default=None, help="local processes (default: all cores)")
    sw.add_argument("--quiet", action="store_true", help="no progress bar")
    sw.add_argument("--backend", default="cpu", help=BACKEND_HELP)
    sw.add_argument("--batched", action="store_true",
                    help="one run file per point (as --per-point), the points run as batches of trajectories with "
                         "numba threads (GD/RK4 points)")
    from ...core.ensemble_cli import add_plot_parser, add_sweep_flags

    add_sweep_flags(sw)
    sw.set_defaults(func=_cmd_sweep)
    add_plot_parser(verbs)

    ws = verbs.add_parser("width-sweep", help="finite widths against infinite width: errors, exponent, kinks")
    _add_run_flags(ws)
    ws.add_argument("--widths", default="64,256,1024,4096", help="attention widths m, comma-separated")
    ws.add_argument("--seeds", default="4", help="seeds per width")
    ws.add_argument("--kink-tol", default="1e-9", help="|u| <= this x max(1, max|u|) counts as at the ReLU kink")
    ws.add_argument("--particles-up-to", default="0",
                    help="also train the explicit network (particle sampler) for widths m <= this, as a cross-check")
    ws.add_argument("--out", default="runs/width_sweep.h5", help="FILE.h5; FILE.json and FILE.png are written beside")
    ws.add_argument("--workers", default=None, help="local processes (default: all cores)")
    ws.add_argument("--quiet", action="store_true")
    ws.add_argument("--backend", default="cpu", help=BACKEND_HELP)
    ws.set_defaults(func=_cmd_width_sweep)

    co = verbs.add_parser("construct", help="explicit weights classifying every sample (Lemma 6.1); min margin")
    co.add_argument("--K", default="2")
    co.add_argument("--L", default="3")
    co.add_argument("--beta", default="20", help="attention scale (margins approach their limit as beta grows)")
    co.add_argument("--b", default="1", help="neuron scale")
    co.add_argument("--d", default=None, help="ambient dimension (>= 2K; default 2K)")
    co.add_argument("--out", default=None, help="write the weights to this HDF5 file")
    co.add_argument("--force", action="store_true", help="run even when the estimated memory or time is too large")
    co.set_defaults(func=_cmd_construct)

    st = verbs.add_parser("study", help="studies beyond the paper, each a report with figures")
    st.add_argument("name", choices=["k-mixtures", "imbalance", "gram", "noise", "neurons", "label-noise",
                                     "robustness"],
                    help="k-mixtures: Appendix A.4 (scores vs K, asymmetries vs m); the reviewers' extensions: "
                         "imbalance, gram (non-orthogonal features), noise (noisy finite training set), neurons "
                         "(several neurons per head), label-noise; robustness: perturbations of the symmetric "
                         "start, solved fraction, mechanism, phase diagram")
    st.add_argument("--quick", action="store_true", help="extension studies: fewer points")
    st.add_argument("--K", default=None, help="k-mixtures: group counts (default 3,4,8)")
    st.add_argument("--L", default=None, help="k-mixtures: tokens per sample (default 3)")
    st.add_argument("--steps", default=None, help="k-mixtures: GD steps (default 4000)")
    st.add_argument("--widths", default=None,
                    help="k-mixtures: finite widths for the asymmetry part (default 16,64,256,1024,4096)")
    st.add_argument("--seeds", default=None, help="k-mixtures: seeds per width (default 4)")
    st.add_argument("--out", default="runs/study_k_mixtures")
    st.set_defaults(func=_cmd_study)

    from ...core.bound_parse import FUNCTIONS, atom_forms, variables

    b = verbs.add_parser("bound", help="check an inequality over a run: holds / violated, worst slack, first violation",
                         description="Expressions use the paper's names. Variables: " + ", ".join(variables())
                                     + ". Bracketed forms: " + atom_forms() + ". Operators + - * / ** and functions "
                                     + " ".join(FUNCTIONS) + ". Exit 0 if every bound holds, 1 if one is violated, "
                                     "2 on bad input.")
    b.add_argument("run", help="run file (.h5)")
    b.add_argument("expr", nargs="?", help='the inequality, e.g. "loss <= log(2) * exp(-(t - T2) / 1000)"')
    b.add_argument("--file", help="a TOML file of [[bound]] tables (name, expr, during, tmin, tmax)")
    b.add_argument("--during", default="all", help="all | stage1 | stage2 | stage3")
    b.add_argument("--tmin", default=None)
    b.add_argument("--tmax", default=None)
    b.set_defaults(func=_cmd_bound)

    m = verbs.add_parser("demo", help="the paper's K=2, L=3 story: runs, figures and a summary")
    m.add_argument("--out", default="runs/demo")
    m.add_argument("--quick", action="store_true", help="shorter runs")
    m.set_defaults(func=_cmd_demo)

    es = verbs.add_parser("escape", help="linearise a stage at its saddle: spectrum, escape slope in log(1/omega), "
                                         "intercept, growing direction, kinks")
    _add_run_flags(es)
    es.add_argument("--stage", default="2", help="2: the attention stage at (S, A, B) = 0 with the stage-1 neurons; "
                                                 "3: stage 3 at the end of stage 2 (reports that it is no saddle); "
                                                 "simultaneous: the plateau before the scores move (moving saddle)")
    es.add_argument("--from", dest="run_file", default=None, metavar="RUN.h5",
                    help="take the stage-1 (stage-2) end state from this three-stage run file instead of running")
    es.add_argument("--json", default=None, metavar="FILE.json", help="also write the numbers to this JSON file")
    es.add_argument("--eps", default="1e-6", help="start of the unstable-manifold run for the intercept")
    es.add_argument("--omegas", default=None, help="--stage 2: also run this omega sweep and compare its slope with "
                                                    "the prediction; --stage simultaneous: omegas to run and predict "
                                                    "(default 1e-4,1e-3,1e-2,1e-1)")
    es.add_argument("--theta", default="0.1", help="--stage simultaneous: the scores have moved when max |S| >= THETA")
    es.set_defaults(func=_cmd_escape)
