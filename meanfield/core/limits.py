"""Ceilings of the resource arguments, and the estimates of the commands
that are not mixture runs (issue 26): every argument that sets an amount of
work or of processes has a stated ceiling here, once, or goes through an
estimate refused before the work starts. Every refusal is a
:class:`meanfield.core.errors.ConfigError` (one line, exit 2).
Re-exported by :mod:`meanfield.core.guard`."""

from __future__ import annotations

import math
import os

from .errors import ConfigError


EXCERPT_CHARS = 60


def excerpt(value, n: int = EXCERPT_CHARS) -> str:
    """``repr(value)`` cut to about ``n`` characters (an error message must not
    quote megabytes of user input back)."""
    r = repr(value) if not isinstance(value, str) else repr(value)
    if len(r) <= n:
        return r
    return f"{r[: n - 10]}...{r[-6:]} ({len(r)} characters)"


#: The one time ceiling (issue 26: "no CLI argument can make a command run past 60 s without a refusal or an
#: explicit opt-in"): a command whose estimated time is beyond 30 s is refused without --force, the estimate in
#: the line. The estimates are good to about a factor 2, so a command accepted without --force ends within about
#: a minute; every shipped default is estimated below it (the largest, induction run and model run incontext, at
#: ~17 s, 25 s measured on the 2-core machine), and the default studies beyond it (induction full, ~23 min;
#: --quick ~1 min) are asked for with --force. A flag set to 1e9 (steps, seeds, sizes) is thus refused at once.
MAX_SECONDS = 30.0


def memory_limit() -> int:
    """Bytes a command may plan to use: 80% of the machine's physical memory."""
    try:
        return int(0.8 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover
        return 8 << 30


def _fmt_bytes(b: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if b < 1024 or unit == "PiB":
            return f"{b:.3g} {unit}"
        b /= 1024.0
    return f"{b:.3g} PiB"  # pragma: no cover


def _fmt_seconds(s: float) -> str:
    if s < 120:
        return f"{s:.3g} s"
    if s < 2 * 3600:
        return f"{s / 60:.3g} min"
    if s < 2 * 86400:
        return f"{s / 3600:.3g} h"
    return f"{s / 86400:.3g} days"


#: Beyond these no --force is offered or honoured: 16 x this machine's memory (swap cannot hold it) or a
#: year of computing (the estimates are good to a factor 2, so no real run is near either)
HARD_MEMORY_FACTOR = 16.0
HARD_SECONDS = 365 * 86400.0


def check_size(est: dict, what: str, force: bool = False, hint: str = "") -> None:
    """Refuse (ConfigError) when ``est`` (``bytes``, ``seconds``) is beyond
    :func:`memory_limit` or :data:`MAX_SECONDS`, unless ``force``; beyond
    :data:`HARD_MEMORY_FACTOR` x the memory or :data:`HARD_SECONDS`, always
    (without offering ``--force``).

    Example
    -------
    >>> try:
    ...     check_size({"bytes": 1e30}, "size", force=True)
    ... except ConfigError as e:
    ...     print("beyond any run" in str(e), "--force" in str(e))
    True False
    """
    lim = memory_limit()
    b, s = est.get("bytes", 0.0), est.get("seconds", 0.0)
    if not b <= HARD_MEMORY_FACTOR * lim:
        raise ConfigError(f"{what}: needs about {_fmt_bytes(b)} of memory, beyond any run here "
                          f"({_fmt_bytes(lim)} usable){hint}")
    if not s <= HARD_SECONDS:
        raise ConfigError(f"{what}: would take about {_fmt_seconds(s)}, beyond any run (over a year){hint}")
    if force:
        return
    if not b <= lim:
        raise ConfigError(f"{what}: needs about {_fmt_bytes(b)} of memory, more than this machine's "
                          f"{_fmt_bytes(lim)}{hint}; --force runs it anyway")
    if not s <= MAX_SECONDS:
        raise ConfigError(f"{what}: would take about {_fmt_seconds(s)} (estimated), more than "
                          f"{_fmt_seconds(MAX_SECONDS)}{hint}; --force runs it anyway")


# Cost model of one evaluation of reduced attention dynamics (loss and gradients over n samples of L
# tokens, P features), fitted to the benchmark numbers of the mixture's fast kernels in the README
# (3.2 us at K = 2, L = 3; 107 us at K = 8, L = 3; 40 ms at K = 8, L = 6): these reproduce them
# within a factor 2, which is all a refusal threshold needs. The mixture's and the engine's size
# estimates (meanfield.models.mixture.sizes, meanfield.engine.edges) use them.
_T_SAMPLE = 2e-9  # seconds per (sample x token^2 x feature)
_T_MATRIX = 1e-8  # seconds per P^3 (the GD map's matrix products)
_T_CALL = 1e-6

MAX_LIST = 1000  # values in one comma-separated list (--widths, --K of a study, ...)
MAX_SEEDS = 1000  # seeds per width of a width sweep or study (the spread over seeds is settled far sooner)
MAX_HEADS = 256  # induction heads H (the model's features are the subsets of at most D heads)
MAX_OMEGAS = 100  # escape --omegas: one run per omega (a slope needs a few; 100 is far beyond a figure)


MAX_HORIZON = 1e9  # time units of a flow / rk4 run: every shipped model settles by t ~ 1e5 at its defaults


def check_run_numbers(out: dict) -> None:
    """Shared checks of a resolved training's numbers (the mixture config's and
    an engine description's ``parameters``): a horizon a run can reach, an
    initial scale whose square (the initial A = B = omega^2 I) is below the
    divergence threshold ``max_abs``, a stage plan that trains at all.

    Parameters
    ----------
    out : dict
        The resolved fields (``omega``, ``max_abs``, ``t_end``, ``stage_steps``,
        ``stage_times``; absent ones are skipped).

    Returns
    -------
    None
        Raises ConfigError naming the field.

    Example
    -------
    >>> check_run_numbers({"omega": 0.1, "max_abs": 1e6, "t_end": 10.0})
    """
    mx = out.get("max_abs")
    for name in ("omega", "omega_q", "omega_v"):  # initial scales: their squares are initial state entries
        om = out.get(name)
        if om is not None and mx is not None and not (isinstance(om, (int, float)) and abs(om) * abs(om) < mx):
            try:
                got = f"{float(om):.3g}"
            except (TypeError, ValueError):
                continue  # not a number: the field's own check names it
            raise ConfigError(f"{name}: must be below sqrt(max_abs) = {math.sqrt(mx):.3g} (its square, an "
                              f"initial state entry, would already count as diverged), got {got}")
    for name in ("t_end", "stage_times"):
        v = out.get(name)
        if v is None:
            continue
        tot = float(sum(v)) if isinstance(v, (tuple, list)) else float(v)
        if not tot <= MAX_HORIZON:
            raise ConfigError(f"{name}: at most {MAX_HORIZON:.0e} time units in all, got {tot:.3g}")


def max_workers() -> int:
    """Most local worker processes a command may start: 4 per core (more only
    queue for the same cores, and each costs an interpreter's memory)."""
    return 4 * (os.cpu_count() or 1)


def check_list(field: str, items, lo: int = 1, hi: int = MAX_LIST) -> list:
    """A list of values of ``field`` with between ``lo`` and ``hi`` items.

    Parameters
    ----------
    field : str
        The flag named in the message.
    items : list
        The parsed values.
    lo, hi : int
        Fewest and most items.

    Returns
    -------
    list
        ``items``.

    Example
    -------
    >>> check_list("widths", [4, 8])
    [4, 8]
    """
    n = len(items)
    if n < lo:
        raise ConfigError(f"{field}: give at least {lo} comma-separated value{'s' if lo > 1 else ''}, got {n}")
    if n > hi:
        raise ConfigError(f"{field}: at most {hi} comma-separated values, got {n}")
    return items


def unknown_name(where: str, what: str, name, allowed, pointer: str = "--help") -> ConfigError:
    """The one-line error for an unknown ``name`` among ``allowed``: the list
    itself when it is short, else the close matches, the count and where the
    full list is (``pointer``).

    Parameters
    ----------
    where : str
        The field named first in the message.
    what : str
        What ``name`` is ("key", "config field").
    name : object
        The unknown name.
    allowed : iterable of str
        The valid names.
    pointer : str
        Where the full list is shown.

    Returns
    -------
    ConfigError
        To raise.

    Example
    -------
    >>> str(unknown_name("param", "config field", "omga", ["omega", "eta"]))
    "param: unknown config field 'omga'; allowed: omega, eta"
    """
    import difflib

    allowed = [str(a) for a in allowed]
    full = ", ".join(allowed)
    if len(full) <= 120:
        return ConfigError(f"{where}: unknown {what} {excerpt(str(name))}; allowed: {full}")
    near = difflib.get_close_matches(str(name), allowed, n=3)
    return ConfigError(f"{where}: unknown {what} {excerpt(str(name))}"
                       + (f" (did you mean {', '.join(near)}?)" if near else "")
                       + f"; {len(allowed)} allowed, listed by {pointer}")
