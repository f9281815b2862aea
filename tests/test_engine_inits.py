"""Initial values of a head's blocks from the description (``meanfield.engine.inits``): init_W, init_w, init_gram.

Each key is checked on the initial state the engine builds (read back through the layout's named blocks, written
here from the value given), and each bad value is one line naming the field.
"""

from __future__ import annotations

import numpy as np
import pytest

from meanfield.core.config import ConfigError
from meanfield.engine.description import description_from_dict
from meanfield.engine.reduce import initial_state, layout


def raw(head, width="inf"):
    h = {"name": "h", "attention": "linear", "query": "last", "query_self": False}
    h.update(head)
    return {"name": "t", "data": {"family": "icl_regression", "d": 2, "N": 4},
            "heads": [h], "model": {"loss": "squared"}, "parameters": {"steps": 3, "width": width}}


def test_init_W_and_w():
    desc = description_from_dict(raw({"kq": "merged", "value": "linear", "init_W": {"identity": 0.3, "on": "x"},
                                      "init_w": {"y": -0.2, "x1": 0.5}}))
    lay = layout(desc)
    y0 = initial_state(desc, lay)
    np.testing.assert_array_equal(lay.get(y0, "h", "W"), np.diag([0.3, 0.3, 0.0]))
    np.testing.assert_array_equal(np.ravel(lay.get(y0, "h", "w")), [0.5, 0.0, -0.2])
    M = [[0.1, 0.2, 0.0], [0.0, 0.3, 0.0], [0.0, 0.0, 0.0]]
    desc = description_from_dict(raw({"kq": "merged", "value": "linear", "init_W": M, "init_w": [1, 2, 3]}))
    y0 = initial_state(desc)
    np.testing.assert_array_equal(layout(desc).get(y0, "h", "W"), M)
    np.testing.assert_array_equal(np.ravel(layout(desc).get(y0, "h", "w")), [1, 2, 3])


def test_init_gram_sets_blocks_and_their_transposes():
    S = [[0.008, 0.0, 0.0], [0.0, 0.008, 0.0], [0.0, 0.0, 0.0]]   # |S_ab| <= sqrt(A_aa B_bb) = omega^2 = 0.01
    desc = description_from_dict(raw({"kq": "separate", "value": "matrix",
                                      "init_gram": {"S": S, "V.r1": [0.0, 0.0, 0.04]}}))
    lay = layout(desc)
    y0 = initial_state(desc, lay)
    np.testing.assert_array_equal(lay.get(y0, "h", "S"), S)
    Q = y0[:int(lay.hi[0, 7]) ** 2].reshape(int(lay.hi[0, 7]), -1)
    np.testing.assert_array_equal(Q, Q.T)
    assert np.linalg.eigvalsh(Q).min() >= -1e-15
    # the blocks not given keep the default expectation omega^2 I
    np.testing.assert_allclose(lay.get(y0, "h", "A"), 0.1 ** 2 * np.eye(3))
    # off the exact saddle of the default infinite-width init (S = 0, R = 0): the population run moves
    import meanfield.engine as me

    r = me.run(desc)
    assert r.loss[-1] < r.loss[0] - 1e-6
    d0 = description_from_dict(raw({"kq": "separate", "value": "matrix"}))
    r0 = me.run(d0)
    assert abs(r0.loss[-1] - r0.loss[0]) <= 1e-15


@pytest.mark.parametrize("head,width,text", [
    ({"kq": "separate", "value": "linear", "init_W": {"identity": 1}}, "inf", "init_W: only with kq = merged"),
    ({"kq": "merged", "value": "matrix", "init_w": [1, 2, 3]}, "inf", "init_w: only with value = linear"),
    ({"kq": "merged", "value": "linear", "init_W": [[1, 2], [3, 4]]}, "inf", "must be a 3x3 matrix"),
    ({"kq": "merged", "value": "linear", "init_W": {"identity": 1, "on": "z"}}, "inf", "unknown feature or group"),
    ({"kq": "merged", "value": "linear", "init_W": {"scale": 1}}, "inf", "unknown key 'scale'"),
    ({"kq": "merged", "value": "linear", "init_w": [1, 2]}, "inf", "must be 3 numbers"),
    ({"kq": "merged", "value": "linear", "init_W": [[1, 0, 0], [0, "a", 0], [0, 0, 0]]}, "inf", "init_W"),
    ({"kq": "separate", "value": "matrix", "init_gram": {"Z": 1.0}}, "inf", "no such Gram block"),
    ({"kq": "separate", "value": "matrix", "init_gram": {"S": [[5, 0, 0], [0, 5, 0], [0, 0, 5]]}}, "inf",
     "positive semidefinite"),
    ({"kq": "separate", "value": "matrix", "init_gram": {"S": [[0.01, 0, 0], [0, 0, 0], [0, 0, 0]]}}, 4,
     "only at infinite width"),
])
def test_bad_initial_values(head, width, text):
    with pytest.raises(ConfigError, match=text) as e:
        desc = description_from_dict(raw(head, width))
        initial_state(desc)
    assert "\n" not in str(e.value)
