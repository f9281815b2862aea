"""Hooks: the few places where core/ needs a paper's own piece, filled by the plug-ins.

core/ imports nothing above it, yet a few generic operations need something
only a paper knows:

* the schema check of a run file of a given ``system`` attribute
  (:func:`run_check`; used by ``meanfield.core.bounds`` before it evaluates a
  bound on a run of that system);
* a paper's own names in the bound language (:func:`bound_names`: its
  variables, its signed atoms such as ``S+[a,b]``, its feature names; used
  by ``meanfield.core.bound_parse`` and ``meanfield.core.bounds``, which
  name no paper);
* how to read a system's run files (:func:`run_reader`: its state variables,
  named blocks and outcome lines, used by ``meanfield.core.run`` and
  ``meanfield.core.outcome``, which branch on no paper's name);
* the ensemble adapter of a system named by a string
  (:func:`ensemble_system`; ``meanfield.core.sweep.system_of``), and which
  of them ``system=None`` means (:func:`default_ensemble_system`).

A paper registers them through ``meanfield.engine.registry``
(``register_run_check``, ``register_ensemble_system``), which forwards here;
core looks them up here. Every value may be the object or a
``"package.module:attr"`` reference (:func:`resolve`, imported on first use),
so registering costs nothing at start-up.

Before a lookup the plug-ins are loaded (:func:`load`): through the loader
the registry installs when it is imported (:func:`set_loader`), or, when
nothing has imported the registry yet (core used on its own from Python),
by importing the loader named in :data:`LOADER`: a by-name look-up like the
registry's own discovery of the shipped papers, so that no import arrow
points from core/ upwards.

This module imports only the standard library and ``meanfield.core.errors``.

Example
-------
>>> from meanfield.core import hooks
>>> hooks.register_run_check("doc_example", "math:isfinite")
>>> hooks.run_check("doc_example")(1.0)
True
"""

from __future__ import annotations

import importlib
import re
import threading
from typing import Any, Callable

from .errors import ConfigError

__all__ = ["resolve", "set_loader", "load", "lookup", "register_run_check", "run_check", "run_reader",
           "register_ensemble_system",
           "ensemble_system", "ensemble_systems", "default_ensemble_system", "register_bound_names", "bound_names", "registered_run_checks",
           "LOADER"]

#: the plug-in loader used when the registry has not installed itself (``module:function``)
LOADER = "meanfield.engine.registry:load_plugins"
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_LOCK = threading.RLock()
_LOADER: list = []  # the installed loader (at most one)
_RUN_CHECKS: dict[str, Any] = {}
_RUN_READERS: dict[str, Any] = {}
_BOUND_NAMES: dict[str, Any] = {}
#: ensemble systems known by name: name -> adapter or ``"module:attr"`` (``meanfield.core.sweep.SYSTEMS`` is this dict)
ENSEMBLE_SYSTEMS: dict[str, Any] = {}
_DEFAULT: list = []  # the name system=None means


def resolve(ref: Any) -> Any:
    """The object a reference names: ``ref`` itself, or for a string
    ``"package.module:attr"`` that module's attribute (imported now).

    Parameters
    ----------
    ref : object or str
        An object, or ``"package.module:attr"``.

    Returns
    -------
    object

    Example
    -------
    >>> resolve("math:pi") > 3
    True
    """
    if not isinstance(ref, str):
        return ref
    mod, sep, attr = ref.partition(":")
    if not sep or not _MODULE.match(mod) or not attr:
        raise ConfigError(f"plugins: a reference is 'package.module:attr'; got {ref!r}")
    obj = importlib.import_module(mod)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def set_loader(loader: Callable[[], None]) -> None:
    """Install the function that loads every plug-in (the registry's ``load_plugins``).

    Parameters
    ----------
    loader : callable
        Called with no argument before each lookup; must be idempotent.

    Returns
    -------
    None

    Example
    -------
    >>> set_loader(lambda: None)  # doctest: +SKIP
    """
    with _LOCK:
        _LOADER[:] = [loader]


def load() -> None:
    """Load the plug-ins (each registers its hooks at import). Idempotent.

    Returns
    -------
    None

    Example
    -------
    >>> load()
    >>> "mixture" in ensemble_systems()
    True
    """
    with _LOCK:
        if not _LOADER:
            _LOADER[:] = [resolve(LOADER)]
        loader = _LOADER[0]
    loader()


def lookup(table: dict, key) -> Any:
    """``table[key]`` resolved (a ``"module:attr"`` string imported on first use), or None;
    the plug-ins are loaded first. The one load-get-resolve of every registered
    lookup (these hooks and the tables of ``meanfield.engine.registry``).

    Parameters
    ----------
    table : dict
        name -> object or ``"module:attr"``.
    key : str

    Returns
    -------
    object or None

    Example
    -------
    >>> lookup({"pi": "math:pi"}, "pi") > 3
    True
    """
    load()
    ref = table.get(str(key))
    return None if ref is None else resolve(ref)


def register_run_check(system: str, check: Any, reader: Any = None) -> None:
    """Register the schema check of run files whose attribute ``system`` is
    ``system``, and how to read them.

    Parameters
    ----------
    system : str
        The run file's ``system`` attribute.
    check : callable, str or None
        ``check(run, path) -> None``, raising ``ConfigError`` naming the first
        wrong field; ``run`` is what ``meanfield.core.io.read_run`` returned.
        None: no check (bounds refuse such files), the reader alone.
    reader : object or str, optional
        How ``meanfield.core.run.Run`` and ``meanfield.core.outcome`` read the
        files (:func:`run_reader`): an object with ``state_arrays(run, src,
        whole) -> [(name, array, axes), ...]`` (the state variables: ``src``
        the run or its ``initial_state`` group, ``whole`` True for the
        records (T, ...)); optional ``blocks(run) -> {"head:name": (T, ...)}``
        (the named blocks behind ``run.S``, ``run.var``), ``outcome_lines(run)
        -> [str]`` (what happened, printed after a run) and
        ``stacked_records`` (record names that repeat the state blocks).

    Returns
    -------
    None

    Example
    -------
    >>> register_run_check("doc_example", "math:isfinite")
    """
    with _LOCK:
        if check is not None:
            _RUN_CHECKS[str(system)] = check
        if reader is not None:
            _RUN_READERS[str(system)] = reader


def run_reader(system: str | None) -> Any:
    """The registered reader of run files of ``system`` (resolved; see
    :func:`register_run_check`), or None (none registered, or no system).

    Parameters
    ----------
    system : str or None

    Returns
    -------
    object or None

    Example
    -------
    >>> run_reader("no such system") is None
    True
    """
    if not system:
        return None
    return lookup(_RUN_READERS, str(system))


def run_check(system: str) -> Callable | None:
    """The registered schema check of run files of ``system`` (resolved), or None.

    Parameters
    ----------
    system : str

    Returns
    -------
    callable or None

    Example
    -------
    >>> run_check("no such system") is None
    True
    """
    return lookup(_RUN_CHECKS, system)


def register_bound_names(system: str, names: Any) -> None:
    """Register a paper's names in the bound language (``meanfield.core.bound_parse.BoundNames``).

    Parameters
    ----------
    system : str
        The run files' ``system`` attribute.
    names : BoundNames or str
        The names, or ``"module:attr"``.

    Returns
    -------
    None

    Example
    -------
    >>> from meanfield.core.bound_parse import BoundNames
    >>> register_bound_names("doc_example", BoundNames({}))
    >>> "doc_example" in bound_names()
    True
    """
    with _LOCK:
        _BOUND_NAMES[str(system)] = names


def bound_names() -> dict:
    """system -> the registered ``BoundNames`` (resolved; plug-ins loaded), in registration order.

    Returns
    -------
    dict

    Example
    -------
    >>> isinstance(bound_names(), dict)
    True
    """
    load()
    with _LOCK:
        items = list(_BOUND_NAMES.items())
    return {k: resolve(v) for k, v in items}


def registered_run_checks() -> list:
    """The systems whose run files have a registered schema check (plug-ins loaded).

    Returns
    -------
    list of str

    Example
    -------
    >>> isinstance(registered_run_checks(), list)
    True
    """
    load()
    return list(_RUN_CHECKS)


def register_ensemble_system(name: str, adapter: Any, default: bool = False) -> None:
    """Make ``EnsembleProblem(system=name)`` and sweeps find an ensemble adapter.

    Parameters
    ----------
    name : str
        The system's name (a run file's ``system`` attribute).
    adapter : object or str
        A ``meanfield.core.ensemble.EnsembleSystem`` or ``"module:attr"``.
    default : bool
        This system is what ``system=None`` means (the first one registered
        with ``default=True`` wins).

    Returns
    -------
    None

    Example
    -------
    >>> register_ensemble_system("doc_example", "math:pi")
    >>> "doc_example" in ensemble_systems()
    True
    """
    with _LOCK:
        ENSEMBLE_SYSTEMS[str(name)] = adapter
        if default and not _DEFAULT:
            _DEFAULT.append(str(name))


def ensemble_systems() -> list[str]:
    """The names of the registered ensemble systems (plug-ins loaded).

    Returns
    -------
    list of str

    Example
    -------
    >>> isinstance(ensemble_systems(), list)
    True
    """
    load()
    return list(ENSEMBLE_SYSTEMS)


def ensemble_system(name: str) -> Any:
    """The adapter registered as ``name`` (resolved); a one-line error naming the known ones otherwise.

    Parameters
    ----------
    name : str

    Returns
    -------
    object

    Example
    -------
    >>> ensemble_system("mixture").name
    'mixture'
    """
    load()
    if name not in ENSEMBLE_SYSTEMS:
        raise ConfigError(f"system: one of {', '.join(ENSEMBLE_SYSTEMS)} or an ensemble system object; got {name!r}")
    return resolve(ENSEMBLE_SYSTEMS[name])


def default_ensemble_system() -> str:
    """The name of the system ``system=None`` means (registered with ``default=True``).

    Returns
    -------
    str

    Example
    -------
    >>> default_ensemble_system()
    'mixture'
    """
    load()
    if not _DEFAULT:
        raise ConfigError("system: none given and no plug-in registered a default ensemble system; "
                          f"one of {', '.join(ENSEMBLE_SYSTEMS) or '(none registered)'}")
    return _DEFAULT[0]
