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
        return self.status == "PASS"


def fit_line(x, y) -> dict:
    """Least-squares y = slope x + intercept (``scipy.stats.linregress``):
    slope, intercept, R^2 (NaN when undefined: fewer than 2 points or constant
    y), the slope's standard error and the residuals. Constant x (no slope to
    fit) falls back to the minimum-norm least-squares solution."""
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
    """The claims that decide a check's exit code: the proved and shown ones."""
    return [c for c in claims if c.source != "expected"]


def status(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def jfloat(x):
    """JSON-friendly float (None for None or NaN)."""
    if x is None:
        return None
    x = float(x)
    return None if math.isnan(x) else x
