"""The vectorisable exp of the lanes (``meanfield.core.lane_exp.exp_lane``, through ``lanes_exp``) against the
C library's ``math.exp``: within 1 ulp on normal results over -745..709 (and small |x|), within one
subnormal step on subnormal results, the special values (0, -0, NaN, +-inf, underflow, overflow) exactly.
"""

from __future__ import annotations

import math

import numpy as np

from meanfield.core import lane_exp


def _lanes_exp_all(x):
    x = np.ascontiguousarray(x, np.float64)
    out = np.empty_like(x)
    lane_exp.lanes_exp(x, out)
    return x, out


def test_lanes_exp_within_one_ulp_of_the_c_library():
    rng = np.random.default_rng(0)
    x = np.concatenate([-rng.exponential(3.0, 20000), rng.uniform(-745, 709, 20000), -rng.uniform(0, 1e-8, 200),
                        rng.uniform(-1e-8, 1e-8, 200), rng.uniform(-745.1, -708.0, 5000),  # the subnormal range
                        rng.uniform(700.0, 709.78, 2000)])  # up to the overflow
    x, got = _lanes_exp_all(x)
    ref = np.array([math.exp(v) for v in x])
    normal = ref >= 2.2250738585072014e-308
    ulp = np.abs(got[normal] - ref[normal]) / np.spacing(ref[normal])
    assert ulp.max() <= 1.0
    sub = ~normal  # subnormal results: within one subnormal step
    assert sub.sum() > 1000
    assert np.all(np.abs(got[sub] - ref[sub]) <= 2 * 5e-324)


def test_lanes_exp_special_values():
    x = np.array([0.0, -0.0, -np.inf, np.nan, -745.2, -746.0, -1e4, 709.78, 710.0, np.inf, 1.0, -1.0])
    x, got = _lanes_exp_all(x)
    for v, g in zip(x, got):
        r = math.exp(v) if not (v > 709.79) else math.inf
        if math.isnan(v):
            assert math.isnan(g)
        elif r == 0.0 or math.isinf(r) or v == 0.0:
            assert g == r, (v, g, r)
        else:
            assert abs(g - r) <= np.spacing(r), (v, g, r)
