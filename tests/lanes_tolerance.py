"""The tolerance a mixture batch in vectorised lanes is held to against single runs (``run.run``, the scalar
kernels): the lanes compute exp within one ulp of the C library's and multiply by each softmax's reciprocal
sum (``meanfield.models.mixture.vectorised``), so over a few hundred steps of a contracting run a state
differs by some 1e-15 of its largest entry (``tests/test_mixture_vectorised.py`` holds it to 1e-13); an
observable of the state (a loss, a margin, a stage time interpolated between records) is a smooth function
of it with constants of order one: 1e-12 of the larger of its value and 1 (a margin near 0 is a difference
of order-one terms: its error is absolute)."""

import math

import numpy as np

RTOL = 1e-12


def close(a, b) -> bool:
    """a and b (floats, None for a missing value) within RTOL of max(|a|, |b|, 1), or both missing / NaN."""
    na = a is None or (isinstance(a, float) and math.isnan(a))
    nb = b is None or (isinstance(b, float) and math.isnan(b))
    if na or nb:
        return na and nb
    return abs(a - b) <= RTOL * max(abs(a), abs(b), 1.0)


def assert_close(a, b, err_msg=""):
    """Arrays: the same shape, NaN pattern, infinities and integers; floats within RTOL of the larger of the
    array's largest finite entry and 1."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype, err_msg
    if a.dtype.kind != "f":
        np.testing.assert_array_equal(a, b, err_msg=err_msg)
        return
    np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=err_msg)
    fin = np.isfinite(a)
    np.testing.assert_array_equal(a[~fin & ~np.isnan(a)], b[~fin & ~np.isnan(a)], err_msg=err_msg)
    scale = max(float(np.max(np.abs(a[fin]))) if fin.any() else 0.0, 1.0)
    np.testing.assert_allclose(a[fin], b[fin], rtol=0, atol=RTOL * scale, err_msg=err_msg)
