"""The one registration API: how a paper (the shipped ones and a user's own package) plugs into the engine.

The engine knows no paper. A paper's package registers what it adds, here,
and the engine, the ``meanfield model ...`` verbs and the ``meanfield``
command find it through this module only:

* a **family** (:func:`register_family`): a name used as ``family = "NAME"``
  in a description, the dataclass whose fields are its parameters (and the
  CLI flags ``--field-name``), and a builder from those parameters to a
  :class:`~meanfield.engine.description.Description`; optional hooks refuse
  options the family ignores, refuse absurd sizes before anything is built,
  write the family's own run-file schema and plot its run files;
* a **fast path** (:func:`register_fast_path`): hand kernels for a family,
  named with the test that holds them equal to the engine's generic path
  (the engine's own runs never switch to a fast path silently);
* a **claims set** (:func:`register_claims`): what ``meanfield model check
  NAME`` runs (``fn(path, out, quick, log) -> (claims, meta)``);
* a **command** (:func:`register_command`): a top-level subcommand of
  ``meanfield`` (``meanfield mixture ...`` and ``meanfield induction ...`` are
  two), given as a function that adds its parser to the subparsers;
* the **core hooks** (:func:`register_run_check`, :func:`register_ensemble_system`):
  the schema check of a system's run files (``meanfield bound``) and a
  system's chunked-ensemble adapter (sweeps, ``EnsembleProblem``), kept in
  ``meanfield.core.hooks`` so that core/ finds them without importing the engine.

Every callable may be given as the object or lazily as ``"package.module:attr"``
(resolved on first use), so that registering costs an import of a small
module only: ``import meanfield`` and ``meanfield --help`` load no numba,
sympy or CUDA for it.

Discovery (:func:`load_plugins`, called by every lookup): the shipped papers
(the modules listed in ``meanfield.models.PLUGINS``), then every module of the
entry-point group ``meanfield.plugins`` of the installed distributions, then
the modules a description names in its top-level ``plugins = [...]`` list, or
a module the user imports. A plug-in module registers at import.

Example
-------
A family of one feature whose only sequence is ``[x]`` with label +1::

    # my_pkg/my_family.py
    from dataclasses import dataclass
    from meanfield.engine import registry

    @dataclass(frozen=True)
    class Params:
        steps: int = 10

    def build(params, name, source):
        from meanfield.engine.description import description_from_dict
        ...  # return a Description
        return description_from_dict({...}, source=source)

    registry.register_family("one_token", params=Params, build=build)

and in a description ``plugins = ["my_pkg.my_family"]`` with ``family =
"one_token"``. A runnable version is in ``docs/engine.md`` ("Add your own
family").

>>> from meanfield.engine import registry
>>> "mixture" in registry.families()
True
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import threading
from dataclasses import dataclass
from typing import Any, Callable

from ..core import hooks
from ..core.config import ConfigError
from ..core.hooks import lookup as _lookup  # the one load-get-resolve of a registered table (core's hooks use it too)
from ..core.hooks import resolve  # noqa: F401 (part of this API; one resolver for the registry and core's hooks)

__all__ = ["Family", "FastPath", "Claims", "Command", "register_family", "register_fast_path", "batch_fast_path",
           "register_claims",
           "register_command", "register_run_plot", "register_data_size", "data_size", "feature_count", "family", "families", "fast_paths", "claims", "commands",
           "run_plot", "register_run_panels", "run_panels", "register_run_check", "register_bound_names", "register_ensemble_system", "load_plugins", "resolve"]

#: the entry-point group a distribution names its plug-in modules in (setup.cfg ``[options.entry_points]``)
ENTRY_POINT_GROUP = "meanfield.plugins"
#: the package whose ``PLUGINS`` tuple lists the shipped papers' plug-in modules (found by name, like an entry point)
SHIPPED = "meanfield.models"
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")

Ref = Any  # an object or "package.module:attr"


@dataclass(frozen=True)
class Family:
    """A registered family of data and model (see :func:`register_family`)."""

    name: str
    params: Ref
    build: Ref
    check_options: Ref = None
    size_first: Ref = None
    run_file: Ref = None
    plot: Ref = None
    summary: str = ""
    field_help: Ref = None  # field -> one-line meaning (``model run FILE --help``)

    def params_class(self):
        """The parameter dataclass (resolved)."""
        return resolve(self.params)

    def build_description(self, values: dict, name: str, source: str | None = None):
        """Build the description from ``[parameters]`` values (the ``build`` hook)."""
        return resolve(self.build)(values, name, source)

    def hook(self, name: str) -> Callable | None:
        """The resolved hook ``name`` (``build``, ``check_options``, ...) or None."""
        ref = getattr(self, name)
        return None if ref is None else resolve(ref)


@dataclass(frozen=True)
class FastPath:
    """Hand kernels for a family (see :func:`register_fast_path`)."""

    family: str
    name: str
    run: Ref
    verified_by: str
    summary: str = ""
    batch: Ref = None


@dataclass(frozen=True)
class Claims:
    """A paper's claims set, run by ``meanfield model check NAME``."""

    name: str
    check: Ref
    summary: str = ""


@dataclass(frozen=True)
class Command:
    """A top-level ``meanfield`` subcommand: ``add_parser(systems)`` adds it."""

    name: str
    add_parser: Ref
    order: int = 100


_FAMILIES: dict[str, Family] = {}
_FAST: dict[tuple[str, str], FastPath] = {}
_CLAIMS: dict[str, Claims] = {}
_COMMANDS: dict[str, Command] = {}
_PLOTS: dict[str, Ref] = {}
_PANELS: dict[str, Ref] = {}
_DATA_SIZES: dict[str, Ref] = {}
_FEATURE_COUNTS: dict[str, Ref] = {}
_LOADED: set[str] = set()
_LOCK = threading.RLock()
_BUILTINS_DONE = False


def _put(table: dict, key, value, what: str, replace: bool) -> None:
    old = table.get(key)
    if old is not None and old != value and not replace:
        raise ValueError(f"registry: {what} {key!r} is registered already (give replace=True to replace it)")
    table[key] = value


def register_family(name: str, *, params: Ref, build: Ref, check_options: Ref = None, size_first: Ref = None,
                    run_file: Ref = None, plot: Ref = None, summary: str = "", field_help: Ref = None,
                    replace: bool = False) -> Family:
    """Register a family: ``family = "NAME"`` in a description builds it.

    Parameters
    ----------
    name : str
        The family's name (letters, digits, ``_``).
    params : type or str
        A dataclass: its fields are the family's parameters (the description's
        ``[parameters]`` keys and the ``meanfield model`` flags ``--field-name``).
    build : callable or str
        ``build(values, name, source) -> Description``: ``values`` the
        ``[parameters]`` given (file and flags, as read: strings, numbers),
        ``name`` the description's name, ``source`` its path or None. Bad
        values: raise :class:`meanfield.core.config.ConfigError` naming the field.
    check_options : callable or str, optional
        ``check_options(file_values, flag_values)``: refuse an option the run
        would ignore (one-line ConfigError).
    size_first : callable or str, optional
        ``size_first(values, force, particles_d=None, copies=1.0, width=None)``:
        refuse an absurd size from the parameters alone, before ``build``.
    run_file : callable or str, optional
        ``run_file(desc, run) -> (datasets, attrs)``: the family's own run-file
        schema (default: the engine's).
    plot : callable or str, optional
        ``plot(path, out, fmt="png") -> list of paths``: figures of a run file of
        this family (also registered as the run plot of system ``name``).
    summary : str
        One line for listings.
    field_help : dict or str, optional
        ``field -> one-line meaning`` of the ``params`` fields, shown by
        ``meanfield model run FILE --help`` beside each field's default.
    replace : bool
        Replace an earlier registration of the same name (else ValueError).

    Returns
    -------
    Family

    Example
    -------
    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class P:
    ...     steps: int = 5
    >>> f = register_family("doc_example", params=P, build=lambda values, name, source: None, replace=True)
    >>> [x.name for x in dataclasses.fields(family("doc_example").params_class())]
    ['steps']
    """
    if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", str(name)):
        raise ValueError(f"registry: a family name is letters, digits and _; got {name!r}")
    fam = Family(str(name), params, build, check_options, size_first, run_file, plot, summary, field_help)
    with _LOCK:
        _put(_FAMILIES, fam.name, fam, "family", replace)
        if plot is not None:
            _put(_PLOTS, fam.name, plot, "run plot", True)
    return fam


def register_fast_path(family: str, *, name: str, run: Ref, verified_by: str, summary: str = "",
                       replace: bool = False, batch: Ref = None) -> FastPath:
    """Register hand kernels for ``family``.

    The engine's generic path stays the reference: a fast path is used by the
    commands that name it (e.g. ``meanfield mixture run``), never instead of
    ``meanfield model run``, and ``verified_by`` names the test that holds it
    equal to the generic path (and both to the explicit network). With
    ``batch``, it is also the batch of the family's descriptions:
    :func:`meanfield.engine.run_batch` (the one ensemble path) hands them to
    ``batch(desc, Y0, etas, every, backend, max_bytes)``, which returns the
    arrays of a :class:`meanfield.engine.batched.BatchRun` in the engine's
    state layout, or None where it does not apply (the generic kernels run
    then; ``run_batch(..., fast=False)`` always runs them).

    Parameters
    ----------
    family : str
        The family it accelerates.
    name : str
        The fast path's name.
    run : callable or str
        Its entry point (e.g. ``"pkg.run:run"``).
    verified_by : str
        The test (``tests/test_x.py::test_name``) holding it equal to the generic path.
    summary : str
        One line for listings.
    replace : bool
        Replace an earlier registration.
    batch : callable or str or None
        The family's batched runs (see above).

    Returns
    -------
    FastPath

    Example
    -------
    >>> fp = register_fast_path("doc_example", name="hand", run="math:fsum",
    ...                         verified_by="tests/test_x.py::test_equal", replace=True)
    >>> fast_paths("doc_example")[0].verified_by
    'tests/test_x.py::test_equal'
    """
    if not verified_by:
        raise ValueError("registry: a fast path names the test that holds it equal to the generic path")
    fp = FastPath(str(family), str(name), run, str(verified_by), summary, batch)
    with _LOCK:
        _put(_FAST, (fp.family, fp.name), fp, "fast path", replace)
    return fp


def batch_fast_path(family: str | None):
    """The registered batch of ``family``'s fast path (resolved), or None (no
    family, none registered).

    Parameters
    ----------
    family : str or None
        A description's ``family``.

    Returns
    -------
    callable or None
        ``batch(desc, Y0, etas, every, backend, max_bytes)`` (see :func:`register_fast_path`).

    Example
    -------
    >>> batch_fast_path(None) is None
    True
    """
    if family is None:
        return None
    load_plugins()
    for fp in fast_paths(family):
        if fp.batch is not None:
            return resolve(fp.batch)
    return None


def register_claims(name: str, check: Ref, summary: str = "", replace: bool = False) -> Claims:
    """Register the claims of model ``name`` (a description's ``name``).

    Parameters
    ----------
    name : str
        The description name ``meanfield model check`` dispatches on.
    check : callable or str
        ``check(path, out, quick=False, log=print) -> (claims, meta)``: a list of
        :class:`meanfield.core.report.Claim` and a dict of metadata.
    summary : str
        One line for listings.
    replace : bool
        Replace an earlier registration.

    Returns
    -------
    Claims

    Example
    -------
    >>> c = register_claims("doc_example", "math:fsum", replace=True)
    >>> claims("doc_example").check
    'math:fsum'
    """
    c = Claims(str(name), check, summary)
    with _LOCK:
        _put(_CLAIMS, c.name, c, "claims", replace)
    return c


def register_command(name: str, add_parser: Ref, order: int = 100, replace: bool = False) -> Command:
    """Register a top-level subcommand ``meanfield NAME ...``.

    Parameters
    ----------
    name : str
        The subcommand.
    add_parser : callable or str
        ``add_parser(systems[, verb])``: adds ``systems.add_parser(NAME, ...)`` and its verbs (each
        ``set_defaults(func=...)`` returns the exit code; ``verb``: ``meanfield.core.cliparse``).
    order : int
        Position in ``meanfield --help`` (smaller first).
    replace : bool
        Replace an earlier registration.

    Returns
    -------
    Command

    Example
    -------
    >>> def add_parser(systems):  # doctest: +SKIP
    ...     p = systems.add_parser("my-paper", help="my paper's verbs")
    ...     p.set_defaults(func=lambda args: 0)
    >>> register_command("my-paper", add_parser)  # doctest: +SKIP
    """
    cmd = Command(str(name), add_parser, int(order))
    with _LOCK:
        _put(_COMMANDS, cmd.name, cmd, "command", replace)
    return cmd


def register_run_plot(system: str, plot: Ref, replace: bool = True) -> None:
    """Register the figures of run files whose attribute ``system`` is ``system``.

    Parameters
    ----------
    system : str
        The run file's ``system`` attribute.
    plot : callable or str
        ``plot(path, out, fmt="png") -> list of paths``.
    replace : bool
        Replace an earlier registration (default True).

    Returns
    -------
    None

    Example
    -------
    >>> register_run_plot("doc_example", "math:fsum")
    >>> run_plot("doc_example") is not None
    True
    """
    with _LOCK:
        _put(_PLOTS, str(system), plot, "run plot", replace)


def register_run_panels(system: str, panels: Ref, replace: bool = True) -> None:
    """Register which figures the engine's generic panels draw for run files of ``system``.

    Parameters
    ----------
    system : str
        The run file's ``system`` attribute.
    panels : meanfield.engine.plot.RunPanels or str
        The figures (per-head line panels, loss and margins), their titles, stage
        names and feature styles; drawn by ``meanfield.engine.plot.plot_panels``.
    replace : bool
        Replace an earlier registration (default True).

    Returns
    -------
    None

    Example
    -------
    >>> from meanfield.engine.plot import LossMargins, RunPanels
    >>> register_run_panels("doc_example", RunPanels((LossMargins("loss_margins", "consistent"),)))
    >>> run_panels("doc_example").figures[0].stem
    'loss_margins'
    """
    with _LOCK:
        _put(_PANELS, str(system), panels, "run panels", replace)


def run_panels(system: str):
    """The registered :class:`meanfield.engine.plot.RunPanels` of ``system`` (resolved), or None.

    Parameters
    ----------
    system : str

    Returns
    -------
    RunPanels or None

    Example
    -------
    >>> run_panels("no such system") is None
    True
    """
    return _lookup(_PANELS, system)


def register_run_check(system: str, check: Ref, reader: Ref = None) -> None:
    """Register the schema check of run files whose attribute ``system`` is
    ``system`` (``meanfield.core.bounds`` runs it before evaluating a bound),
    and how ``meanfield.open_run`` and the outcome lines read them. Stored in ``meanfield.core.hooks``.

    Parameters
    ----------
    system : str
        The run file's ``system`` attribute.
    check : callable, str or None
        ``check(run, path) -> None``, raising ``ConfigError`` naming the first wrong field (None: none).
    reader : object or str, optional
        State variables, blocks and outcome lines of such files (``meanfield.core.hooks.register_run_check``).

    Returns
    -------
    None

    Example
    -------
    >>> register_run_check("doc_example", "math:isfinite")
    """
    hooks.register_run_check(system, check, reader)


def register_bound_names(system: str, names: Ref) -> None:
    """Register a paper's names in the bound language (``meanfield bound``, ``meanfield.core.bounds``):
    its variables, signed atoms (``S+[a,b]``) and feature names. Stored in ``meanfield.core.hooks``.

    Parameters
    ----------
    system : str
        The run files' ``system`` attribute.
    names : meanfield.core.bound_parse.BoundNames or str
        The names or ``"module:attr"``.

    Returns
    -------
    None

    Example
    -------
    >>> from meanfield.core.bound_parse import BoundNames
    >>> register_bound_names("doc_example", BoundNames({"K": "groups"}, attrs={"K": "K"}))
    """
    hooks.register_bound_names(system, names)


def register_ensemble_system(name: str, adapter: Ref, default: bool = False) -> None:
    """Register a system's chunked-ensemble adapter (``meanfield.core.ensemble.EnsembleSystem``),
    found by ``EnsembleProblem(system=name)`` and the sweeps. Stored in ``meanfield.core.hooks``.

    Parameters
    ----------
    name : str
        The system's name.
    adapter : object or str
        The adapter or ``"module:attr"``.
    default : bool
        What ``system=None`` means (the first registered with True).

    Returns
    -------
    None

    Example
    -------
    >>> register_ensemble_system("doc_example", "math:pi")
    """
    hooks.register_ensemble_system(name, adapter, default=default)


def register_data_size(builder: str, size: Ref = None, feature_count: Ref = None, replace: bool = True) -> None:
    """Register size formulas of a data or feature-name builder named in descriptions
    (``"package.module:function"``), so that ``meanfield model`` refuses an absurd size
    before the builder runs.

    Parameters
    ----------
    builder : str
        The builder as descriptions name it.
    size : callable or str, optional
        ``size(P, args) -> (log of the number of sequences, L)`` for a ``[data]`` builder.
    feature_count : callable or str, optional
        ``feature_count(args) -> number of features`` for a ``[dictionary] features`` builder.
    replace : bool
        Replace an earlier registration (default True).

    Returns
    -------
    None

    Example
    -------
    >>> register_data_size("my_pkg.data:rows", size=lambda P, args: (0.0, 2.0))
    >>> data_size("my_pkg.data:rows")(4, {})
    (0.0, 2.0)
    """
    with _LOCK:
        if size is not None:
            _put(_DATA_SIZES, str(builder), size, "data size", replace)
        if feature_count is not None:
            _put(_FEATURE_COUNTS, str(builder), feature_count, "feature count", replace)


def data_size(builder: str) -> Callable | None:
    """The registered ``size(P, args)`` of a data builder (resolved), or None.

    Parameters
    ----------
    builder : str

    Returns
    -------
    callable or None

    Example
    -------
    >>> data_size("no.such:builder") is None
    True
    """
    return _lookup(_DATA_SIZES, builder)


def feature_count(builder: str) -> Callable | None:
    """The registered ``feature_count(args)`` of a feature-name builder (resolved), or None.

    Parameters
    ----------
    builder : str

    Returns
    -------
    callable or None

    Example
    -------
    >>> feature_count("no.such:builder") is None
    True
    """
    return _lookup(_FEATURE_COUNTS, builder)


# ------------------------------------------------------------------ discovery


def _import_plugin(name: str) -> None:
    if name in _LOADED:
        return
    if not isinstance(name, str) or not _MODULE.match(name):
        raise ConfigError(f"plugins: a plug-in is a module name 'package.module'; got {name!r}")
    try:
        importlib.import_module(name)
    except ImportError as e:
        raise ConfigError(f"plugins: cannot import plug-in module {name!r} ({e})") from None
    _LOADED.add(name)


def load_plugins(names=()) -> None:
    """Import the plug-in modules (each registers at import): the shipped
    papers (``meanfield.models.PLUGINS``) and the entry-point group
    ``meanfield.plugins`` once, then ``names`` (module names, e.g. a
    description's ``plugins`` list). Idempotent.

    Parameters
    ----------
    names : iterable of str
        Further plug-in modules.

    Returns
    -------
    None

    Example
    -------
    >>> load_plugins()
    >>> "mixture" in families()
    True
    """
    global _BUILTINS_DONE
    with _LOCK:
        if not _BUILTINS_DONE:
            _BUILTINS_DONE = True
            shipped = getattr(importlib.import_module(SHIPPED), "PLUGINS", ())
            for mod in shipped:
                _import_plugin(mod)
            for mod in _entry_point_modules():
                _import_plugin(mod)
        for mod in names or ():
            _import_plugin(mod)


def _entry_point_modules() -> list[str]:
    try:
        from importlib.metadata import entry_points
    except ImportError:  # pragma: no cover - Python < 3.8
        return []
    try:
        eps = entry_points(group=ENTRY_POINT_GROUP)
    except TypeError:  # pragma: no cover - Python < 3.10
        eps = entry_points().get(ENTRY_POINT_GROUP, [])
    return [ep.value.partition(":")[0] for ep in eps]


# ------------------------------------------------------------------ lookups


def families() -> dict[str, Family]:
    """Every registered family, name -> :class:`Family` (plug-ins loaded).

    Returns
    -------
    dict

    Example
    -------
    >>> sorted(families())[:1] != []
    True
    """
    load_plugins()
    return dict(_FAMILIES)


def family(name: str) -> Family:
    """The family ``name``; a one-line ConfigError listing the known ones.

    Parameters
    ----------
    name : str

    Returns
    -------
    Family

    Example
    -------
    >>> family("mixture").name
    'mixture'
    """
    load_plugins()
    f = _FAMILIES.get(str(name))
    if f is None:
        raise ConfigError(f"family: must be one of {', '.join(sorted(_FAMILIES)) or '(none registered)'} "
                          f"(a plug-in's family: name its module in plugins = [...]); got {name!r}")
    return f


def fast_paths(family_name: str | None = None) -> list[FastPath]:
    """The registered fast paths (of one family).

    Parameters
    ----------
    family_name : str, optional

    Returns
    -------
    list of FastPath

    Example
    -------
    >>> [fp.name for fp in fast_paths("mixture")]
    ['kernels']
    """
    load_plugins()
    return [fp for (f, _), fp in sorted(_FAST.items()) if family_name is None or f == family_name]


def claims(name: str | None = None):
    """The claims set of model ``name`` (None: every one, name -> :class:`Claims`);
    a one-line ConfigError for an unknown name.

    Parameters
    ----------
    name : str, optional

    Returns
    -------
    Claims or dict

    Example
    -------
    >>> "incontext" in claims()
    True
    """
    load_plugins()
    if name is None:
        return dict(_CLAIMS)
    c = _CLAIMS.get(str(name))
    if c is None:
        raise ConfigError(f"model: no claims checker for model {name!r}; models with one: "
                          f"{', '.join(sorted(_CLAIMS))}")
    return c


def commands() -> list[Command]:
    """The registered top-level subcommands, in ``order``.

    Returns
    -------
    list of Command

    Example
    -------
    >>> "mixture" in [c.name for c in commands()]
    True
    """
    load_plugins()
    return sorted(_COMMANDS.values(), key=lambda c: (c.order, c.name))


def run_plot(system: str) -> Callable | None:
    """The figures function of run files of ``system`` (resolved), or None.

    Parameters
    ----------
    system : str

    Returns
    -------
    callable or None

    Example
    -------
    >>> run_plot("no such system") is None
    True
    """
    return _lookup(_PLOTS, system)


def parameter_names() -> list[str]:
    """The union of every family's parameter names (declaration order), for
    the ``meanfield model`` flags.

    Returns
    -------
    list of str

    Example
    -------
    >>> "K" in parameter_names()
    True
    """
    out: dict[str, None] = {}
    for fam in families().values():
        for f in dataclasses.fields(fam.params_class()):
            out.setdefault(f.name, None)
    return list(out)


hooks.set_loader(load_plugins)  # core/ loads the plug-ins through this registry (meanfield.core.hooks)
