"""fit_line (meanfield.core.report) against numpy's polyfit, an independent least-squares path."""

import math

import numpy as np

from meanfield.core.report import fit_line


def test_fit_line_equals_polyfit_and_reports_the_slope_error():
    rng = np.random.default_rng(0)
    x = np.linspace(-3, 2, 17)
    y = 1.7 * x - 0.4 + 0.05 * rng.standard_normal(x.size)
    f = fit_line(x, y)
    (s, c), cov = np.polyfit(x, y, 1, cov="unscaled")
    res = y - (s * x + c)
    assert abs(f["slope"] - s) < 1e-12 and abs(f["intercept"] - c) < 1e-12
    assert abs(f["r2"] - (1 - res @ res / np.sum((y - y.mean()) ** 2))) < 1e-12
    se = math.sqrt(cov[0, 0] * (res @ res) / (x.size - 2))  # textbook standard error of the slope
    assert abs(f["slope_se"] - se) < 1e-12 * max(1.0, se)


def test_fit_line_undefined_cases():
    assert math.isnan(fit_line([1.0], [2.0])["slope"])
    assert math.isnan(fit_line([1, 2, 3], [2, 2, 2])["r2"])  # constant y: R^2 undefined
    f = fit_line([1, 1], [1, 2])  # constant x: minimum-norm least squares, no standard error
    assert math.isfinite(f["slope"]) and math.isnan(f["slope_se"])
