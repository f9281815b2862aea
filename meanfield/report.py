"""The claims-report schema shared by every system's ``check`` verb.

A :class:`Claim` is one checked statement with its setting, the measured
numbers, PASS / FAIL and an optional figure; ``report.json`` holds
``{"claims": [asdict(claim), ...], ...}``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class Claim:
    name: str
    status: str  # "PASS" | "FAIL"
    statement: str
    setting: dict = field(default_factory=dict)
    numbers: dict = field(default_factory=dict)
    figure: str | None = None

    @property
    def passed(self) -> bool:
        return self.status == "PASS"


def status(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def jfloat(x):
    """JSON-friendly float (None for None or NaN)."""
    if x is None:
        return None
    x = float(x)
    return None if math.isnan(x) else x
