"""Stop criteria, in one place: their text form, their parsing, how steppers
test them and how numba kernels receive them.

A criterion is written ``NAME>=VALUE`` or ``NAME<=VALUE`` (``none`` / empty:
no criterion) with NAME from a system's table of criterion names. Parsed, it
is the tuple ``(name, op, value)`` that :class:`meanfield.core.integrate.Stage`
carries; a stepper asks the system for the named quantity and tests it with
:func:`holds`; a numba kernel receives ``(kind, op, threshold)`` from
:func:`criterion_args` (kind = the name's code in the table, 0 for none).

The tables (name -> kernel code):

* :data:`MARGIN_CRITERIA`: the reduced attention models (the mixture system
  and every engine description): loss, the margins of consistent /
  inconsistent / all samples, the neurons' gradient norm;
* :data:`INDUCTION_CRITERIA`: the induction-head model: loss, gradient norms
  (all, per parameter group), the classifier scalar, the selector's and the
  RPE's top weight.

The kernels of each system keep their own ``CRITERIA`` name for the table
they implement (``meanfield.models.mixture.kernels.CRITERIA``,
``meanfield.engine.kernels.CRITERIA``, ``meanfield.models.induction.criteria.CRITERIA``);
tests hold them equal to these.

Never evaluated: a regular expression over the table's names.
"""

from __future__ import annotations

import math
import re

from .errors import ConfigError

MARGIN_CRITERIA = {"loss": 1, "consistent_margin": 2, "inconsistent_margin": 3, "min_margin": 4, "grad_w": 5}
INDUCTION_CRITERIA = {"loss": 1, "grad_norm": 2, "a": 3, "c_top": 4, "rpe_top": 5, "grad_c": 6, "grad_w": 7,
                      "grad_a": 8}

_CRIT_RE = re.compile(r"^\s*([a-z_]+)\s*(>=|<=)\s*([-+0-9.eE]+)\s*$")


def _short(v) -> str:
    from .guard import excerpt

    return excerpt(v)


def parse_criterion(name: str, text, allowed) -> tuple[str, str, float] | None:
    """``"loss<=1e-3"`` -> ("loss", "<=", 0.001); ``none`` / empty -> None.
    ``name`` is the field quoted in errors, ``allowed`` the table of names.

    Parsed with a regular expression over a whitelist of names: never evaluated.
    """
    if text is None:
        return None
    s = str(text).strip()
    if s.lower() in ("", "none", "-"):
        return None
    m = _CRIT_RE.match(s)
    if not m or m.group(1) not in allowed:
        raise ConfigError(
            f"{name}: criterion must be NAME>=VALUE or NAME<=VALUE with NAME in "
            f"{', '.join(allowed)} (or 'none'); got {_short(text)}"
        )
    v = m.group(3)  # ASCII by the pattern; the messages are config.as_float's
    try:
        f = float(v)
    except ValueError:
        raise ConfigError(f"{name}: must be a number, got {_short(v)}") from None
    if not math.isfinite(f):
        raise ConfigError(f"{name}: must be a finite number, got {_short(v)}")
    return m.group(1), m.group(2), f


def holds(value: float, op: str, thresh: float) -> bool:
    """Whether a criterion's quantity ``value`` meets ``op thresh``."""
    return value >= thresh if op == ">=" else value <= thresh


def criterion_args(criterion, criteria) -> tuple[int, int, float]:
    """(kind, op, threshold) of a parsed stage criterion ``(name, op, value)``
    for numba kernels whose criterion codes are ``criteria`` (name -> code);
    kind 0: none; op +1 for >=, -1 for <=."""
    if criterion is None:
        return 0, 1, 0.0
    return criteria[criterion[0]], 1 if criterion[1] == ">=" else -1, float(criterion[2])
