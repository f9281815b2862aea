"""``meanfield model derive|run|sweep|plot|bound MODEL.toml [flags]``: any described model on the command line.

:func:`add_parser` adds the ``model`` system to the top-level parser
(``meanfield.cli``). A description declares its parameters; every parameter
is a flag ``--field-name`` that overrides the file (a registered family's
are the fields of its parameter dataclass, ``meanfield.engine.registry``; a
general description's are the fields of
:class:`meanfield.engine.description.RunParams` and its declared parameters).
A flag the model does not declare is refused (one line, exit 2). ``MODEL``
may be a path or the name of a shipped description in ``meanfield/models/``.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from ..core.config import ConfigError

MODELS_DIR = Path(__file__).resolve().parent.parent / "models"
FORCE_HELP = "run even when the estimated memory or time (from the description's sizes) is beyond this machine"


def _param_fields() -> list[str]:
    """Every flag of the model verbs: the registered families' parameter
    names (``meanfield.engine.registry``) and the general descriptions' run
    knobs (:class:`meanfield.engine.description.RunParams`)."""
    from . import registry
    from .description import RunParams

    names = registry.parameter_names()
    names += [f.name for f in dataclasses.fields(RunParams) if f.name not in names]
    return names


def _add_param_flags(p) -> None:
    g = p.add_argument_group("model parameters (override the description's [parameters]; each model declares its own: "
                             "a general description's declared parameters, e.g. N = 20, are flags too: --N 30)")
    for name in _param_fields():
        if "--" + name.replace("_", "-") in p._option_string_actions:  # the verb's own option (particles' --d)
            continue
        g.add_argument("--" + name.replace("_", "-"), dest="param_" + name, default=None, metavar="V")


def model_path(text: str) -> Path:
    p = Path(text)
    if p.exists():
        return p
    shipped = MODELS_DIR / f"{text}.toml"
    if shipped.exists():
        return shipped
    own = MODELS_DIR / text / f"{text}.toml"  # a paper's own description in its folder (models/induction/induction.toml)
    if text.isidentifier() and own.is_file():
        return own
    names = sorted({f.stem for f in MODELS_DIR.glob("*.toml")} | {f.stem for f in MODELS_DIR.glob("*/*.toml")
                                                                  if f.stem == f.parent.name})
    raise ConfigError(f"model: no such file {text!r} and no shipped description of that name; shipped: "
                      f"{', '.join(names)}")


def _declared_parser(base):
    """A verb parser that also takes the flags a description declares
    (``--name V`` or ``--name=V`` for a name that is no option of the verb):
    they land in ``args.declared`` and are checked against the model's
    parameters when it is loaded (an undeclared one: one line, exit 2)."""

    class _ModelVerbParser(base):
        def parse_known_args(self, args=None, namespace=None):
            words = list(sys.argv[1:] if args is None else args)
            if "-h" in words or "--help" in words:
                self._model_help(words)
            declared, rest, i = {}, [], 0
            while i < len(words):
                a = words[i]
                name, eq, val = a[2:].partition("=") if a.startswith("--") and len(a) > 2 else ("", "", "")
                if name and name not in ("help",) and "--" + name not in self._option_string_actions:
                    if not eq:
                        if i + 1 >= len(words) or (words[i + 1].startswith("--") and len(words[i + 1]) > 2):
                            self.error(f"argument --{name}: expected one argument")
                        val = words[i + 1]
                        i += 1
                    declared[name.replace("-", "_")] = val
                else:
                    rest.append(a)
                i += 1
            ns, extras = super().parse_known_args(rest, namespace)
            ns.declared = declared
            return ns, extras

        def _model_help(self, words):
            """--help with a model named: its own parameters (meanfield.engine.help)."""
            from . import help as model_help

            first = None
            for w in words:
                if w.startswith("-"):
                    continue
                try:
                    path = model_path(w)
                except ConfigError as e:
                    first = first or e
                    continue
                if path.is_file():
                    model_help.apply(self, path)
                return
            if first is not None:  # a model named but not found: say so, not the mixture's flags
                self.exit(2, f"meanfield: error: {first}\n")

    return _ModelVerbParser


def _overrides(args, raw, path) -> dict:
    """The flags given (the fixed ones and the declared ones), checked
    against the model's parameters: its config's fields and, for a general
    description, its declared parameters."""
    from .description import declared_parameters, parameter_class

    allowed = {f.name for f in dataclasses.fields(parameter_class(raw))} | set(declared_parameters(raw))
    given = {name: getattr(args, "param_" + name) for name in _param_fields()
             if getattr(args, "param_" + name, None) is not None}
    given.update(getattr(args, "declared", None) or {})
    from ..core.config import check_cli_values

    check_cli_values(given)
    for name in given:
        if name not in allowed:
            import difflib

            flag, flags = "--" + name.replace("_", "-"), ["--" + a.replace("_", "-") for a in sorted(allowed)]
            near = difflib.get_close_matches(flag, flags, n=3)
            raise ConfigError(f"{flag}: not a parameter of model {path.name}"
                              + (f" (did you mean {', '.join(near)}?)" if near else "")
                              + f"; its {len(flags)} parameters: meanfield model run {getattr(args, 'model', path.stem)} --help")
    return given


def description_from_args(args, size: dict | None = None):
    """Load MODEL with the flags given as overrides (one-line errors). An
    option the run would ignore is refused (``meanfield.engine.edges``);
    with ``size`` (keywords ``particles_d`` (True: the default d), ``copies``,
    ``width``) the run's estimated memory and time are checked too, before
    a family builds its data (``--force`` goes past)."""
    from ..core.guard import read_config_text
    from .description import description_from_dict
    from .edges import check_engine_size, check_options, description_size_first, family_size_first

    path = model_path(args.model)
    raw = read_config_text(path, "model")  # size-capped, UTF-8, nesting-checked (a directory or /dev/zero: one line)
    from .description import check_raw_numbers

    check_raw_numbers(raw)  # a number in quotes in the file (flags are text: checked as flags)
    flags = _overrides(args, raw, path)
    force = bool(getattr(args, "force", False))
    family = raw.get("family") if isinstance(raw.get("family"), str) else None
    if family is not None:  # a registered family: its own option and size checks, before it builds anything
        check_options(raw, flags)
        if size is not None:
            family_size_first(raw, flags, force, **size)
    elif size is not None:  # from the declared parameters, before the features and data are built
        description_size_first(raw, flags, force, **size)
    desc = description_from_dict(raw, flags, source=str(path))
    from .twolayer_desc import TwoLayerDescription

    if isinstance(desc, TwoLayerDescription):
        if getattr(args, "func", None) not in (_cmd_run, _cmd_width_sweep, _cmd_particles):
            raise ConfigError("model: a two-layer description takes `model run` (and, with a wide head, "
                              "`width-sweep`, `particles`) only: docs/engine.md, 'Two-layer attention'")
        return desc
    if family is None:
        check_options(raw, flags, desc)
        if size is not None:
            size = dict(size)
            width = size.pop("width", None)
            if width is not None:
                desc = dataclasses.replace(desc, init=dataclasses.replace(desc.init, width=width))
            d = size.get("particles_d")
            if d is True:
                size["particles_d"] = desc.dictionary.P + 2
            check_engine_size(desc, force, **size)
    return desc


def _particles_d(args):
    from ..core.config import as_int

    _family_d(args)
    return as_int("d", args.d, lo=1) if args.d is not None else True


def _family_d(args) -> None:
    """A description with a data family (icl_regression) declares its own d (the input dimension):
    there ``--d`` is that parameter, and the explicit network's ambient dimension is the default P + 2."""
    if args.d is None:
        return
    from .description import read_raw

    raw = read_raw(model_path(args.model))
    data = raw.get("data") if isinstance(raw, dict) else None
    if isinstance(data, dict) and data.get("family") is not None:
        args.declared = dict(getattr(args, "declared", None) or {}, d=args.d)
        args.d = None


def _cmd_derive(args) -> int:
    from .api import derive

    desc = description_from_args(args, size={"copies": 0})  # memory of the samples (--K 1000), no steps
    out = derive(desc, latex=args.format in ("latex", "all"))
    if args.format == "json":
        out.pop("latex", None)
        print(json.dumps(out, indent=2))
    elif args.format == "latex":
        if out.get("latex") is None:
            raise ConfigError("format: latex needs the symbolic derivation (meanfield.engine.symbolic), not available")
        print(out["latex"])
    else:
        print(json.dumps(out, indent=2))
    return 0


def _cmd_run(args) -> int:
    from .runs import EXIT_CODES, run_to_file

    from ..core.guard import check_output_dir, check_output_file

    out = check_output_file(args.out, "out", (".h5", ".hdf5"))  # before the work, not after it
    if args.plot:
        check_output_dir(args.plot, "plot")
    from ..core.guard import read_config_text
    from .twolayer_desc import is_twolayer

    raw = read_config_text(model_path(args.model), "model")
    if is_twolayer(raw):  # the two-layer class: its own knobs (meanfield.engine.twolayer_desc.OVERRIDES)
        from .twolayer_desc import twolayer_from_dict
        from .twolayer_run import cli_run

        given = {name: getattr(args, "param_" + name) for name in _param_fields()
                 if getattr(args, "param_" + name, None) is not None}
        given.update(getattr(args, "declared", None) or {})
        return cli_run(args, out, twolayer_from_dict(raw, given, source=str(model_path(args.model))))
    desc = description_from_args(args, size={})
    from .twolayer_desc import TwoLayerDescription

    if isinstance(desc, TwoLayerDescription):  # a family that builds a two-layer description (models/induction)
        from .twolayer_run import cli_run

        return cli_run(args, out, desc)
    from .packed import check_keys
    from .runs import compile_notice

    check_keys(desc)  # (a refusal before the compile notice: one line)
    if args.specialise == "auto":
        from .background import enabled

        enabled()  # MEANFIELD_BACKGROUND_COMPILE, checked before the compile notice too
    if args.specialise is not True:  # (the specialised loop says so itself when it compiles)
        compile_notice(desc)  # "compiling kernels, about N s, once" on a first use
    r, path = run_to_file(desc, out, progress=not args.quiet, specialise=args.specialise)
    print(f"{path}: {r.status}: {r.message}")
    print("\n".join(outcome_of(path, desc)))
    if r.status == "diverged":
        from ..core.guard import cli_log

        cli_log().warning("run diverged; %s keeps every record up to the step named above", path)
    if args.plot:
        for f in _plot(path, Path(args.plot)):
            print(f"figure: {f}")
    return EXIT_CODES[r.status]


def outcome_of(path, desc) -> list[str]:
    """The run's "what happened" block (``meanfield.core.outcome``, the one
    summary of every run verb), with the description's stages and criteria."""
    from ..core.outcome import criterion_text, outcome_lines

    stages = [(s.name, criterion_text(s.criterion)) for s in desc.training.stages]
    lines = outcome_lines(path, stages=stages or None)
    sampled = desc.data.extra.get("sampled")
    if sampled:  # a data family on sampled prompts (meanfield.engine.gaussian): never presented as exact
        lines.append(f"  data: {sampled['population']}")
    elif "population" in desc.data.extra:
        from .gaussian import minimum_loss_of

        lines.append(f"  data: exact population (closed-form Gaussian moments); smallest loss of the class "
                     f"{minimum_loss_of(desc.data.extra['population']['law']):.12g} (attribute loss_min)")
    if getattr(desc, "test", None) is not None:  # the held-out set (meanfield.engine.heldout)
        lines.append(_test_line(path))
    return lines


def _test_line(path) -> str:
    """The held-out set's last test loss (and 0-1 error) from a run file."""
    import h5py

    with h5py.File(path, "r") as f:
        if "test_loss" not in f or f["test_loss"].shape[0] == 0:
            return "  test: no records"
        s = f"  test (held out, {f['test_margin'].shape[1]} sequences): loss {float(f['test_loss'][-1]):.6g}"
        if "test_error" in f:
            s += f", 0-1 error {float(f['test_error'][-1]):.4g}"
    return s


def _plot(path: Path, out: Path) -> list:
    from ..core.guard import excerpt
    from ..core.io import read_run

    try:
        r = read_run(path)
    except (FileNotFoundError, ValueError, OSError) as e:
        raise ConfigError(f"run: {path} is not a readable run file ({e})") from None
    from . import registry

    system = str(r.attrs.get("system", ""))
    plot = registry.run_plot(system)  # a paper's own run-file schema: its figures
    if plot is not None:
        try:
            return plot(path, out)
        except (FileNotFoundError, ValueError) as e:  # an incomplete file of that schema: one line
            raise ConfigError(f"run: {e}") from None
    if "t" not in r or len(r.t) == 0:
        raise ConfigError(f"run: {path} has no records (an incomplete run file)")
    from .plot import plot_engine_run, plot_generic_run

    if r.system != "engine" or "variables" not in r:  # another system's file: meanfield.Run.plot, labelled
        return plot_generic_run(r, out)
    return plot_engine_run(r, path, out)


def _cmd_plot(args) -> int:
    from ..core.guard import check_output_dir

    out = Path(args.out) if args.out else Path(str(Path(args.run).with_suffix("")) + "_figures")
    check_output_dir(out, "out")
    for f in _plot(Path(args.run), out):
        print(f"figure: {f}")
    return 0


def _cmd_sweep(args) -> int:
    from ..core.config import as_int
    from ..core.sweep import parse_params
    from .description import declared_parameters, parameter_class, read_raw
    from .sweep import model_sweep

    from ..core.guard import check_output_dir, check_output_file

    if Path(args.out).suffix == ".json":  # before the work, not after it
        check_output_file(args.out, "out", (".json",))
    else:
        check_output_dir(args.out, "out")
    path = model_path(args.model)
    raw = read_raw(path)
    allowed = [f.name for f in dataclasses.fields(parameter_class(raw))] + list(declared_parameters(raw))
    params = parse_params(args.param or [], allowed)
    n_points = 1
    for v in params.values():
        n_points *= len(v)
    desc = description_from_args(args, size={"copies": n_points})  # the base must be valid on its own
    base = _overrides(args, raw, path)
    from ..core.config import check_workers

    workers = check_workers(args.workers)
    if args.specialise is True:  # refused before anything is written when the base cannot run so
        from .system import system_of

        system_of(desc, specialise=True)
        from .batched import resolve_backend

        if args.per_point or args.batched or resolve_backend(args.backend or "cpu") != "cpu":
            raise ConfigError("specialise: chunked sweeps on the CPU only (not with --per-point, --batched or "
                              "--backend cuda; a single run: model run --specialise)")
    if not args.lanes:
        if args.per_point and not args.batched or args.vector_exp or args.backend == "cuda":
            raise ConfigError("no-lanes: the CPU batches' lanes off (chunked or --batched sweeps on the CPU; not "
                              "with --vector-exp, which runs in the lanes, --per-point or --backend cuda)")
    if args.vector_exp:
        from .batched import resolve_backend

        if args.per_point or args.batched or args.specialise is True or resolve_backend(args.backend or "cpu") != "cpu":
            raise ConfigError("vector-exp: chunked sweeps on the CPU in lanes only (not with --per-point, "
                              "--batched, --specialise or --backend cuda)")
    del desc
    from ..core.ensemble_cli import cmd_sweep, use_chunked
    from .sweep import ModelEnsemble

    system = ModelEnsemble(path, specialise=args.specialise, vector_exp=args.vector_exp, lanes=args.lanes)
    if use_chunked(args, base, params, system):  # chunks of batched engine trajectories, one sweep.h5
        return cmd_sweep(args, base, params, system=system)
    if args.specialise is True or args.vector_exp:
        raise ConfigError(f"{'vector-exp' if args.vector_exp else 'specialise'}: chunked sweeps only; these points "
                          "run one by one (see the note above)")
    idx = model_sweep(path, base, params, Path(args.out), workers=workers, progress=not args.quiet,
                      batched=args.batched, backend=args.backend, specialise=args.specialise, lanes=args.lanes)
    n_ok = sum(1 for e in idx["points"] if e["result"] and e["result"]["status"] == "complete")
    print(f"{Path(args.out) / 'sweep.json' if Path(args.out).suffix != '.json' else args.out}: "
          f"{idx['status']}: {n_ok}/{idx['n_points']} points complete")
    failed = [e for e in idx["points"] if e["result"] and e["result"]["status"] == "failed"]
    if idx["status"] == "complete" and failed:  # said on stderr and in the exit code, not only in sweep.json
        from ..core.guard import cli_log, one_line

        cli_log().warning(one_line(f"{len(failed)} of {idx['n_points']} points failed (first, {failed[0]['path']}: "
                                   f"{failed[0]['result']['message']})", 300))
        return 1
    return 0 if idx["status"] == "complete" else 130


def _cmd_bound(args) -> int:
    from ..core.bound_files import run_bounds_cli
    from ..core.config import as_float

    tmin = as_float("tmin", args.tmin) if args.tmin is not None else None
    tmax = as_float("tmax", args.tmax) if args.tmax is not None else None
    exprs = [args.expr] if args.expr else []
    if not exprs and not args.file:
        raise ConfigError("bound: give an expression or --file BOUNDS.toml")
    return run_bounds_cli(args.run, exprs, args.during, tmin, tmax, file=args.file)


def _cmd_check(args) -> int:
    from .checks import run_check
    from ..core.guard import check_output_dir
    from ..core.report import gating

    path = model_path(args.model)
    out = args.out if args.out is not None else f"runs/{path.stem}_check"  # one folder per model: no overwrite
    check_output_dir(out, "out")
    claims, report = run_check(path, Path(out), quick=args.quick)
    return 0 if all(c.passed for c in gating(claims)) else 1


def _cmd_particles(args) -> int:
    from .finite import particles_to_file
    from .runs import EXIT_CODES

    from ..core.guard import check_output_file

    out = check_output_file(args.out, "out", (".h5", ".hdf5"))
    desc = description_from_args(args, size={"particles_d": _particles_d(args)})
    from .twolayer_desc import TwoLayerDescription

    if isinstance(desc, TwoLayerDescription):  # the explicit torch network at the width (engine/twolayer_particles)
        from .twolayer_particles import particles_to_file as twolayer_particles

        for flag in ("d", "batch", "batch_seed"):
            if getattr(args, flag, None) is not None:
                raise ConfigError(f"{flag}: not for a two-layer description's explicit network (full batch, the "
                                  "stream in its own basis)")
        traj, path = twolayer_particles(desc, out, progress=not args.quiet, force=bool(getattr(args, "force", False)))
        print(f"{path}: {traj.status}: {traj.message} (explicit network, m = "
              f"{next(hd.width for _, _, hd in desc.net.heads if hd.width is not None)})")
        return EXIT_CODES[traj.status]
    r, path = particles_to_file(desc, out, d=args.d, progress=not args.quiet, batch=args.batch,
                                batch_seed=args.batch_seed)
    print(f"{path}: {r.status}: {r.message} (explicit network, m = {desc.init.width})")
    print("\n".join(outcome_of(path, desc)))
    return EXIT_CODES[r.status]


def _cmd_width_sweep(args) -> int:
    from ..core.config import as_list
    from .finite import check_sweep_size, width_sweep

    from ..core.guard import check_output_file

    out = check_output_file(args.out, "out", (".h5", ".hdf5"))
    for suffix in (".json", ".png"):  # written beside it
        check_output_file(out.with_suffix(suffix), "out")
    widths, n_seeds = check_sweep_size(as_list("widths", args.widths), args.seeds, bool(args.force))
    desc = description_from_args(args, size={"particles_d": _particles_d(args), "width": max(widths),
                                             "copies": len(widths) * n_seeds + 1})
    from .twolayer_desc import TwoLayerDescription

    if isinstance(desc, TwoLayerDescription):  # wide heads: the exact Gram map at each m (engine/twolayer_widths)
        from .twolayer_widths import width_sweep as twolayer_width_sweep

        s = twolayer_width_sweep(desc, widths, n_seeds, out, progress=not args.quiet, force=bool(args.force))
        for f in s["files"]:
            print(f)
        return 0 if s["infinite_width_status"] == "complete" else 1
    from ..core.config import check_workers

    workers = check_workers(args.workers) or 1
    s = width_sweep(desc, widths, args.seeds, Path(args.out), d=args.d, workers=workers, progress=not args.quiet)
    print(s["message"])
    for f in s["files"]:
        print(f)
    from ..core.outcome import width_sweep_lines

    print("\n".join(width_sweep_lines(s)))
    return 0 if s["infinite_width_status"] == "complete" else 1


def add_parser(systems) -> None:
    """Add the ``model`` system (its flags: :func:`_param_fields`)."""
    mp = systems.add_parser("model", help="any model described in a TOML file (the engine): derive, run, plot, bound; "
                                          "shipped: meanfield/models/*.toml (e.g. mixture)")
    verbs = mp.add_subparsers(dest="verb", required=True, parser_class=type(mp))
    with_declared = _declared_parser(type(mp))
    d = verbs.add_parser("derive", help="names and counts of the reduced variables (JSON) and the derivation (LaTeX)")
    d.add_argument("model", help="MODEL.toml or a shipped name (mixture)")
    d.add_argument("--format", choices=["json", "latex", "all"], default="json")
    d.add_argument("--force", action="store_true", help=FORCE_HELP)
    _add_param_flags(d)
    d.__class__ = with_declared  # also takes the flags the description declares
    d.set_defaults(func=_cmd_derive)
    r = verbs.add_parser("run", help="integrate the exact reduced dynamics and write an HDF5 run file")
    r.add_argument("model", help="MODEL.toml or a shipped name (mixture)")
    r.add_argument("--out", default="runs/model.h5", help="output run file (.h5), written atomically")
    r.add_argument("--plot", metavar="DIR", help="also write figures to DIR")
    r.add_argument("--quiet", action="store_true", help="no progress line")
    r.add_argument("--force", action="store_true", help=FORCE_HELP)
    r.add_argument("--specialise", action="store_const", const=True, default="auto",
                   help="GD by the loop compiled for this description (the same kernels with its arrays as "
                        "constants: equal bit for bit, faster; about 20 s to compile once, then cached; "
                        "default: that loop where one is ready, else the generic loop, and after 10 s there "
                        "that loop compiled in a second process; MEANFIELD_BACKGROUND_COMPILE=0: not)")
    r.add_argument("--no-specialise", dest="specialise", action="store_const", const=False,
                   help="the generic loop, even where a specialised loop is ready")
    _add_param_flags(r)
    r.__class__ = with_declared  # also takes the flags the description declares
    r.set_defaults(func=_cmd_run)
    sw = verbs.add_parser("sweep", help="a grid over the model's parameters, in parallel, resumable")
    sw.add_argument("model", help="MODEL.toml or a shipped name (mixture)")
    sw.add_argument("--param", action="append", metavar="NAME=VALUES",
                    help="a parameter and its values: A:B:log:N, A:B:lin:N or V1,V2,... (repeatable)")
    sw.add_argument("--out", default="runs/model_sweep", help="a folder (sweep.h5 and chunks/; with --per-point "
                                                              "sweep.json + points/)")
    sw.add_argument("--workers", default=None, help="local processes (default: all cores)")
    sw.add_argument("--quiet", action="store_true", help="no progress bar")
    sw.add_argument("--force", action="store_true", help=FORCE_HELP)
    sw.add_argument("--batched", action="store_true",
                    help="one run file per point (as --per-point), the points run as batches of trajectories "
                         "(method gd): meanfield.engine.run_batch")
    sw.add_argument("--backend", default=None, help="with --batched or --chunked: cpu (default), cuda or auto")
    sw.add_argument("--specialise", action="store_const", const=True, default="auto",
                    help="chunked, method gd, the CPU: every trajectory through the loop compiled for the "
                         "description (equal bit for bit, faster; about 20 s to compile once, then cached; "
                         "default: that loop where one is ready, else the generic loop)")
    sw.add_argument("--no-specialise", dest="specialise", action="store_const", const=False,
                    help="the generic batch loop, even where a specialised one is ready")
    sw.add_argument("--vector-exp", action="store_true",
                    help="chunked, the CPU: the lanes' exp in vectorised arithmetic (meanfield.core.lane_exp; "
                         "faster where softmax or a logistic / cross-entropy loss runs; outputs equal model run's "
                         "to rounding, not bit for bit)")
    sw.add_argument("--no-lanes", dest="lanes", action="store_false",
                    help="chunked or --batched, the CPU: each trajectory by the per-trajectory drivers, not in "
                         "lanes of trajectories (the same bits, slower; to compare or time them)")
    from ..core.ensemble_cli import add_sweep_flags

    add_sweep_flags(sw)
    _add_param_flags(sw)
    sw.__class__ = with_declared  # also takes the flags the description declares
    sw.set_defaults(func=_cmd_sweep)
    from ..core.ensemble_cli import add_plot_parser

    add_plot_parser(verbs)  # sweep-plot of a chunked sweep's sweep.h5
    p = verbs.add_parser("plot", help="figures of a run file")
    p.add_argument("run", help="run file (.h5)")
    p.add_argument("--out", default=None, help="folder for the PNGs (default: beside the run file)")
    p.set_defaults(func=_cmd_plot)
    c = verbs.add_parser("check", help="rerun a model's registered claims (meanfield.engine.registry): report.md, "
                                       "report.json, figures; exit 0 iff every proved/shown claim passes")
    c.add_argument("model", help="MODEL.toml or a shipped name (incontext, maxmargin, mixture_multiclass)")
    c.add_argument("--out", default=None, help="output folder (default runs/<model>_check, one per model)")
    c.add_argument("--quick", action="store_true", help="smaller settings (minutes, not tens of minutes)")
    c.set_defaults(func=_cmd_check)
    pa = verbs.add_parser("particles", help="train the explicit finite-width network generated from the description "
                                            "(numpy weights, own backward) and write its projected run file")
    pa.add_argument("model", help="MODEL.toml or a shipped name (mixture)")
    pa.add_argument("--out", default="runs/model_particles.h5", help="output run file (.h5)")
    pa.add_argument("--d", default=None, help="ambient dimension d > P (default P + 2)")
    pa.add_argument("--batch", default=None, metavar="B", help="icl_regression data: online SGD, every step on a "
                                                               "new batch of B sampled prompts")
    pa.add_argument("--batch-seed", default=None, metavar="S", help="seed of the batches (default 0)")
    pa.add_argument("--quiet", action="store_true", help="no progress line")
    pa.add_argument("--force", action="store_true", help=FORCE_HELP)
    _add_param_flags(pa)
    pa.__class__ = with_declared  # also takes the flags the description declares
    pa.set_defaults(func=_cmd_particles)
    ws = verbs.add_parser("width-sweep", help="infinite-width engine run against the explicit network at several "
                                              "widths and seeds: sup errors, exponent with CI, kinks, figure")
    ws.add_argument("model", help="MODEL.toml or a shipped name (mixture)")
    ws.add_argument("--widths", default="16,64,256", help="comma-separated widths m")
    ws.add_argument("--seeds", default="3", help="seeds per width")
    ws.add_argument("--d", default=None, help="ambient dimension d > P (default P + 2)")
    ws.add_argument("--out", default="runs/model_widths.h5", help="output (.h5; also .json and .png beside it)")
    ws.add_argument("--workers", default=None, help="local processes (default 1)")
    ws.add_argument("--quiet", action="store_true", help="no progress bar")
    ws.add_argument("--force", action="store_true", help=FORCE_HELP)
    _add_param_flags(ws)
    ws.__class__ = with_declared  # also takes the flags the description declares
    ws.set_defaults(func=_cmd_width_sweep)
    b = verbs.add_parser("bound", help="check an inequality over a run file (as meanfield mixture bound; a general "
                                       "model's run has loss, margin[i], min_margin, t, eta, m, T_loss, ... and its "
                                       "variables by head name: S[h,a,b], w[h,a], u[h,i], var[h,NAME,i,...])")
    b.add_argument("run", help="run file (.h5)")
    b.add_argument("expr", nargs="?", help='the inequality, e.g. "loss <= log(2)"')
    b.add_argument("--file", help="a TOML file of [[bound]] tables (name, expr, during, tmin, tmax)")
    b.add_argument("--during", default="all", help="all | stage1 | stage2 | stage3")
    b.add_argument("--tmin", default=None)
    b.add_argument("--tmax", default=None)
    b.set_defaults(func=_cmd_bound)
