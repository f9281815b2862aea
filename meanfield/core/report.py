"""The claims-report schema shared by every system's ``check`` verb.

A :class:`Claim` is one checked statement with its setting, the measured
numbers, PASS / FAIL, an optional figure and its ``source``: ``proved`` (a
theorem or lemma of the paper), ``shown`` (a figure or experiment of the
paper) or ``expected`` (what the authors expect, e.g. in their rebuttal, or a
robustness question beyond the paper). A ``check`` verb exits 0 when every
proved / shown claim passes and lists the expected ones separately.
``report.json`` holds ``{"claims": [asdict(claim), ...], ...}``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


SOURCES = ("proved", "shown", "expected")


@dataclass
class Claim:
    """One checked statement of a paper: PASS / FAIL with its numbers.

    Parameters
    ----------
    name : str
        Short identifier (``stage1_neurons_align``).
    status : str
        ``"PASS"`` or ``"FAIL"`` (see :func:`status`).
    statement : str
        The claim in words, as the paper makes it.
    setting : dict
        The setting it was checked in (sizes, step size, seeds, ...).
    numbers : dict
        The measured numbers that decide it (JSON-able).
    figure : str or None
        Path of a figure showing it.
    source : str
        ``proved`` (a theorem or lemma), ``shown`` (a figure or experiment of
        the paper) or ``expected`` (what the authors expect; does not decide
        the exit code).

    Raises
    ------
    ValueError
        For a ``source`` outside ``proved``, ``shown``, ``expected``.

    Examples
    --------
    >>> c = Claim("loss_to_zero", status(0.003 < 0.01), "the loss goes to 0", numbers={"final_loss": 0.003})
    >>> c.passed, c.source
    (True, 'shown')
    """

    name: str
    status: str  # "PASS" | "FAIL"
    statement: str
    setting: dict = field(default_factory=dict)
    numbers: dict = field(default_factory=dict)
    figure: str | None = None
    source: str = "shown"  # "proved" | "shown" | "expected"

    def __post_init__(self):
        if self.source not in SOURCES:
            raise ValueError(f"Claim.source: must be one of {', '.join(SOURCES)}; got {self.source!r}")

    @property
    def passed(self) -> bool:
        """Whether the status is PASS."""
        return self.status == "PASS"


def fit_line(x, y) -> dict:
    """Least-squares line y = slope x + intercept (``scipy.stats.linregress``).

    Parameters
    ----------
    x, y : array_like
        The points, same length (for an exponent: log m and log error).

    Returns
    -------
    dict
        ``slope``, ``intercept``, ``r2`` (NaN when undefined: fewer than 2
        points or constant y), ``slope_se`` (the slope's standard error; NaN
        with 2 points or constant x) and ``residuals`` (list). Constant x (no
        slope to fit) falls back to the minimum-norm least-squares solution.

    Examples
    --------
    >>> f = fit_line([0.0, 1.0, 2.0], [1.0, 3.0, 5.0])
    >>> round(f["slope"], 12), round(f["intercept"], 12), round(f["r2"], 12)
    (2.0, 1.0, 1.0)
    """
    import numpy as np

    x, y = np.asarray(x, float), np.asarray(y, float)
    if x.size < 2:
        return {"slope": math.nan, "intercept": math.nan, "r2": math.nan, "slope_se": math.nan, "residuals": []}
    if np.all(x == x[0]):
        A = np.vstack([x, np.ones_like(x)]).T
        (slope, intercept), *_ = np.linalg.lstsq(A, y, rcond=None)
        se = math.nan
    else:
        from scipy import stats

        fit = stats.linregress(x, y)
        slope, intercept, se = fit.slope, fit.intercept, fit.stderr
    res = y - (slope * x + intercept)
    ss = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum(res**2)) / ss if ss > 0 else math.nan
    return {"slope": float(slope), "intercept": float(intercept), "r2": r2, "slope_se": float(se),
            "residuals": res.tolist()}


def gating(claims) -> list:
    """The claims that decide a check's exit code: the proved and shown ones.

    Parameters
    ----------
    claims : iterable of Claim
        Every claim of a check.

    Returns
    -------
    list of Claim
        Those whose source is ``proved`` or ``shown``; a check exits 0 iff
        all of them pass.

    Examples
    --------
    >>> cs = [Claim("a", "PASS", "..."), Claim("b", "FAIL", "...", source="expected")]
    >>> [c.name for c in gating(cs)]
    ['a']
    """
    return [c for c in claims if c.source != "expected"]


def status(ok: bool) -> str:
    """A claim's status word.

    Parameters
    ----------
    ok : bool
        Whether the claim holds.

    Returns
    -------
    str
        ``"PASS"`` or ``"FAIL"``.

    Examples
    --------
    >>> status(True), status(False)
    ('PASS', 'FAIL')
    """
    return "PASS" if ok else "FAIL"


def jfloat(x):
    """A JSON-friendly float.

    Parameters
    ----------
    x : float, numpy scalar or None
        The value.

    Returns
    -------
    float or None
        ``float(x)``; None for None or NaN (JSON has no NaN).

    Examples
    --------
    >>> jfloat(float("nan")) is None, jfloat(2)
    (True, 2.0)
    """
    if x is None:
        return None
    x = float(x)
    return None if math.isnan(x) else x


def json_ready(o):
    """``o`` with numpy scalars and arrays as Python values, non-finite floats as
    None and dict keys starting with "_" (in-memory objects) dropped: ready for
    ``json.dumps``.

    Parameters
    ----------
    o : object
        Nested dicts, lists, tuples, numpy values.

    Returns
    -------
    object
        The same structure, JSON-serialisable.

    Examples
    --------
    >>> import numpy as np
    >>> json_ready({"a": np.float64(1.5), "b": [float("nan")], "_obj": object()})
    {'a': 1.5, 'b': [None]}
    """
    import numpy as np

    if isinstance(o, dict):
        return {k: json_ready(v) for k, v in o.items() if not k.startswith("_")}
    if isinstance(o, (list, tuple)):
        return [json_ready(v) for v in o]
    if isinstance(o, (np.floating, np.integer)):
        o = o.item()
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, np.ndarray):
        return json_ready(o.tolist())
    return o
