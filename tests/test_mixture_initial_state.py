"""meanfield.models.mixture.init.initial_state: the state written in place at infinite width with zero neurons
equals, bit for bit, the one packed from attention_init and neuron_init (kernels.pack)."""

import dataclasses

import numpy as np
import pytest

from meanfield.models.mixture.config import MixtureConfig, make_config
from meanfield.models.mixture.init import attention_init, initial_state, neuron_init
from meanfield.models.mixture.kernels import pack


def _packed(cfg):
    S, A, B = attention_init(cfg.K, cfg.omega, cfg.width, cfg.seed)
    return pack(S, A, B, neuron_init(cfg.K, cfg.neuron_init, cfg.seed))


@pytest.mark.parametrize("K", [2, 3, 5])
@pytest.mark.parametrize("omega", [1e-3, 0.1, 0.3, 1 / 3, 7.0, 1e-160, 1e150])
def test_in_place_state_equals_the_packed_one(K, omega):
    cfg = dataclasses.replace(MixtureConfig(), K=K, omega=omega)
    y, ref = initial_state(cfg), _packed(cfg)
    assert y.dtype == ref.dtype == np.float64 and y.shape == ref.shape
    assert y.tobytes() == ref.tobytes()  # bit for bit, signed zeros and subnormals included


@pytest.mark.parametrize("over", [{"width": 16}, {"neuron_init": "const:1,2,3,4"}, {"neuron_init": "gaussian:0.1"},
                                  {"omega": np.float64(1e200)}, {"omega": 3}])
def test_other_configs_as_before(over):
    cfg = dataclasses.replace(make_config(omega=0.1), **over)  # np.float64(1e200): omega^2 is inf; 3: an int
    with np.errstate(over="ignore", invalid="ignore"):
        assert initial_state(cfg).tobytes() == _packed(cfg).tobytes()


def test_python_float_overflow_raises_as_before():
    cfg = dataclasses.replace(MixtureConfig(), omega=1e200)  # a Python float's square overflows: OverflowError
    with pytest.raises(OverflowError):
        _packed(cfg)
    with pytest.raises(OverflowError):
        initial_state(cfg)
