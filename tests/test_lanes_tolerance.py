"""The tolerance helper of the lanes' comparisons (tests/lanes_tolerance.py) fails where it must."""

import math

import numpy as np
import pytest

from lanes_tolerance import RTOL, assert_close, close


def test_close_accepts_rounding_and_refuses_more():
    assert close(1.0, 1.0 + 0.5 * RTOL) and not close(1.0, 1.0 + 5 * RTOL)
    assert close(1e-3, 1e-3 + 0.5 * RTOL) and not close(1e-3, 1e-3 + 5 * RTOL)  # absolute below 1
    assert not close(1e5, 1e5 * (1 + 5 * RTOL))  # relative above
    assert close(math.inf, math.inf) and not close(math.inf, -math.inf) and not close(math.inf, 1e308)
    assert close(None, math.nan) and close(np.float32("nan"), None) and not close(None, 0.0)
    assert close(np.array(np.nan), None)


def test_assert_close_element_by_element():
    a = np.array([1.0, np.nan, np.inf, 1e-9])
    assert_close(a, a * (1 + 0.5 * RTOL))
    for bad in ([1.0 + 5 * RTOL, np.nan, np.inf, 1e-9], [1.0, 0.0, np.inf, 1e-9], [1.0, np.nan, -np.inf, 1e-9],
                [1.0, np.nan, np.inf, 1e-9 + 5 * RTOL]):
        with pytest.raises(AssertionError):
            assert_close(a, np.array(bad))
    with pytest.raises(AssertionError):
        assert_close(np.array([1, 2]), np.array([1, 3]))
    for x, y in (([1.0], [np.inf]), ([np.inf], [1.0]), ([1.0, 2.0], [1.0, -np.inf])):  # both ways
        with pytest.raises(AssertionError):
            assert_close(np.array(x), np.array(y))
    with pytest.raises(AssertionError):  # element by element: a small entry beside a large one keeps its own scale
        assert_close(np.array([1e6, 1e-3]), np.array([1e6, 1e-3 + 1e-8]))
