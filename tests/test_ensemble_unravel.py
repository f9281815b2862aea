"""meanfield.core.ensemble_store._unravel (EnsembleProblem.point's index) against np.unravel_index: the same
indices for every point of several grids, numpy's answer or error for anything else; the points equal."""

import numpy as np
import pytest

from meanfield.core.ensemble import EnsembleProblem
from meanfield.core.ensemble_store import _unravel


@pytest.mark.parametrize("shape", [(1,), (7,), (3, 4), (2, 1, 5), (4, 3, 2, 2)])
def test_every_index_as_numpy(shape):
    for i in range(int(np.prod(shape))):
        got, ref = _unravel(i, shape), np.unravel_index(i, shape)
        assert tuple(int(x) for x in got) == tuple(int(x) for x in ref) and len(got) == len(shape)


@pytest.mark.parametrize("i", [-1, 12, 100, 2.0, np.int64(3), True, "1"])
def test_other_indices_are_numpys(i):
    shape = (3, 4)
    try:
        ref = np.unravel_index(i, shape)
    except Exception as e:
        with pytest.raises(type(e)) as got:
            _unravel(i, shape)
        assert str(got.value) == str(e)
    else:
        assert tuple(map(int, _unravel(i, shape))) == tuple(map(int, ref))


def test_zero_length_axis_is_numpys():
    with pytest.raises(ValueError):
        _unravel(0, (3, 0))


def test_points_as_before():
    axes = {"omega": [0.1, 0.2, 0.3], "eta": [0.5, 1.0], "seed": [0, 1, 2, 3]}
    prob = EnsembleProblem({"steps": 10}, axes=axes)
    for i in range(prob.size):
        idx = np.unravel_index(i, prob.shape)
        ref = {k: v[j] for (k, v), j in zip(axes.items(), idx)}
        got = prob.point(i)
        assert got == ref and [type(v) for v in got.values()] == [type(v) for v in ref.values()]
    assert prob.points(0, prob.size) == [prob.point(i) for i in range(prob.size)]
    with pytest.raises(ValueError):
        prob.point(prob.size)
