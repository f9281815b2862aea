"""The tolerance a mixture batch in vectorised lanes is held to against single runs (``run.run``, the scalar
kernels): the lanes compute exp within one ulp of the C library's and multiply by each softmax's reciprocal
sum (``meanfield.models.mixture.vectorised``), so over a few hundred steps of a contracting run a state
differs by some 1e-15 of its largest entry (``tests/test_mixture_vectorised.py`` holds it to 1e-13); an
observable of the state (a loss, a margin, a stage time interpolated between records) is a smooth function
of it with constants of order one: 1e-12 of the larger of its value and 1 (a margin near 0 is a difference
of order-one terms: its error is absolute). The diverging points of the tests (eta = 3e4) blow up within a
few steps, before rounding can grow; a chaotic run would not meet this (rounding grows there, as any)."""

import math

import numpy as np

RTOL = 1e-12


def _missing(a) -> bool:
    return a is None or (np.ndim(a) == 0 and isinstance(a, (float, np.floating, np.ndarray)) and math.isnan(a))


def close(a, b) -> bool:
    """a and b (floats, None for a missing value) within RTOL of max(|a|, |b|, 1), or both missing / NaN,
    or equal (infinities)."""
    if _missing(a) or _missing(b):
        return _missing(a) and _missing(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= RTOL * max(abs(a), abs(b), 1.0)


def assert_close(a, b, err_msg=""):
    """Arrays: the same shape, dtype, NaN pattern, infinities and integers; floats element by element as
    :func:`close`."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype, err_msg
    if a.dtype.kind != "f":
        np.testing.assert_array_equal(a, b, err_msg=err_msg)
        return
    np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=err_msg)
    np.testing.assert_array_equal(np.isfinite(a), np.isfinite(b), err_msg=err_msg)
    fin = np.isfinite(a)
    np.testing.assert_array_equal(a[~fin & ~np.isnan(a)], b[~fin & ~np.isnan(a)], err_msg=err_msg)
    x, y = a[fin], b[fin]
    bad = np.abs(x - y) > RTOL * np.maximum(np.maximum(np.abs(x), np.abs(y)), 1.0)
    assert not bad.any(), (f"{err_msg}: {int(bad.sum())} of {bad.size} beyond {RTOL} "
                           f"(e.g. {x[bad][:3]} vs {y[bad][:3]})")
