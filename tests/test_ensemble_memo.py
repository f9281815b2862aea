"""The chunked ensemble's per-process memo of point configs (meanfield.core.ensemble._point): one entry a
point whatever form its values take (numpy axes from Python, the chunks' JSON values), distinct entries for
values a config tells apart, and a value the config refuses is refused from every form."""

import numpy as np
import pytest

from meanfield.core import ensemble
from meanfield.core.config import ConfigError
from meanfield.core.ensemble import EnsembleProblem, _point, solve
from meanfield.models.mixture.ensemble import MIXTURE


def test_numpy_axes_and_the_chunks_share_one_entry_a_point(tmp_path):
    omegas = np.geomspace(0.01, 0.3, 6)
    prob = EnsembleProblem({"steps": 5, "record_every": 5}, axes={"omega": list(omegas)})
    ensemble._MEMO.clear()
    res = solve(prob, tmp_path / "e", workers=1, chunk_size=3, progress=False)
    assert res.status == "complete"
    keys = [k for k in ensemble._MEMO if "omega" in str(k[1])]
    assert len(keys) == len(omegas), keys  # numpy float64 (validation) and float (chunks): one entry each


def test_values_a_config_tells_apart_get_their_own_entries():
    ensemble._MEMO.clear()
    base = {"steps": 5}
    _point(MIXTURE, base, {"relu_prime_at_zero": 0.0})
    _point(MIXTURE, base, {"relu_prime_at_zero": -0.0})
    _point(MIXTURE, base, {"relu_prime_at_zero": np.float64(-0.0)})
    assert len(ensemble._MEMO) == 2  # -0.0 apart from 0.0 (the config decides what it makes of them)
    assert _point(MIXTURE, base, {"K": 2})[0].K == 2 and _point(MIXTURE, base, {"K": np.int64(2)})[0].K == 2
    assert len(ensemble._MEMO) == 3
    with pytest.raises(ConfigError):  # refused, never the memo's K = 2
        _point(MIXTURE, base, {"K": 2.5})
    for v in (True, np.True_):  # a bool is no step count, in either form
        with pytest.raises(ConfigError):
            _point(MIXTURE, base, {"steps": v})
