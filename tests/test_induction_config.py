"""InductionConfig validation: every bad input is a one-line ConfigError naming the field."""

from __future__ import annotations

import warnings

import pytest

from meanfield.core.config import ConfigError
from meanfield.models.induction.config import InductionConfig, make_config

BAD = [
    ({"d": 1}, "d"),
    ({"d": "x"}, "d"),
    ({"alpha": 0}, "alpha"),
    ({"alpha": -1.5}, "alpha"),
    ({"D": 4}, "D"),
    ({"H": 2, "D": 3}, "D"),
    ({"H": 0}, "H"),
    ({"M": 0}, "M"),
    ({"pa": "0,1"}, "pa"),
    ({"pa": "1,1"}, "pa"),
    ({"pa": ""}, "pa"),
    ({"first_lags": "0,1,1"}, "first_lags"),
    ({"first_lags": "1,1"}, "first_lags"),
    ({"start_lags": "1,2,5"}, "start_lags"),
    ({"L": 2}, "L"),                                 # max(pa) = 2
    ({"L": 3}, "L"),                                 # window 1..3
    ({"L": 5, "first_lags": "1,1,3"}, "L"),          # window 3..5
    ({"L_test": 3}, "L_test"),
    ({"n_train": 0}, "n_train"),
    ({"n_test": -1}, "n_test"),
    ({"batch": 0}, "batch"),
    ({"seed": -1}, "seed"),
    ({"c_init": 0}, "c_init"),
    ({"yhat_floor": 0}, "yhat_floor"),
    ({"yhat_floor": 1.0}, "yhat_floor"),
    ({"method": "adam"}, "method"),
    ({"schedule": "two-phase"}, "schedule"),
    ({"sampling": "streaming"}, "sampling"),
    ({"sampling": "fresh", "method": "flow"}, "sampling"),
    ({"eta": 0}, "eta"),
    ({"stage_etas": "1,2"}, "stage_etas"),
    ({"stage_etas": "1,-2,3"}, "stage_etas"),
    ({"stage_steps": "1,2,x"}, "stage_steps"),
    ({"stage_criteria": "loss<=1,foo>=2,none"}, "stage_criteria"),
    ({"criterion": "loss<1"}, "criterion"),
    ({"record_every": 5, "record_log": 5}, "record"),
    ({"record_dt": 0.1}, "record_dt"),
    ({"max_abs": 0}, "max_abs"),
    ({"train_file": "/nonexistent/file.h5"}, "train_file"),
    ({"bogus": 1}, "config"),
    ({"w_plus": "nan"}, "w_plus"),
]


@pytest.mark.parametrize("raw,field", BAD, ids=[f"{f}:{r}" for r, f in BAD])
def test_bad_input_names_the_field(raw, field):
    with pytest.raises(ConfigError) as e:
        make_config(raw)
    msg = str(e.value)
    assert msg.startswith(field + ":") or msg.startswith(field + " "), msg
    assert "\n" not in msg


def test_defaults_and_resolution():
    cfg = make_config()
    assert isinstance(cfg, InductionConfig)
    assert cfg.first_lags == (1, 1, 1) and cfg.start_lags == (1, 2, 3)
    assert cfg.L_test == cfg.L and cfg.t_end is None and cfg.stage_times is None
    assert cfg.horizon == sum(cfg.stage_steps)
    assert cfg.warnings() == []
    f = make_config(method="flow")
    assert f.stage_times == tuple(n * e for n, e in zip(f.stage_steps, f.stage_etas))
    r = make_config(method="rk4", schedule="simultaneous", eta=0.5, steps=10)
    assert r.dt == 0.5 and r.t_end == 5.0
    c = make_config({"pa": [3, 1], "stage_criteria": "c_top >= 0.9, none, none"}, H=2, D=1)
    assert c.pa == (1, 3) and c.stage_criteria == ("c_top>=0.9", None, None)
    # overrides win, None overrides are ignored
    assert make_config({"d": 4}, d=5, alpha=None).d == 5
    with pytest.warns(UserWarning, match="parent lag 1"):
        assert make_config({"first_lags": "2,2,2"}).start_lags == (2, 2, 3)


def test_invisible_parent_lag_warns():
    with pytest.warns(UserWarning, match="pa: parent lag 5"):
        cfg = make_config(pa="1,5")
    assert len(cfg.warnings()) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make_config(pa="1,3")  # lag 3 is in the windows 1..3


def test_train_file_must_match(tmp_path):
    from meanfield.models.induction.data import generate, save_data

    p = save_data(tmp_path / "set.h5", generate(30, d=3, L=20, pa=(1, 2), seed=1))
    cfg = make_config(train_file=str(p), L=20)
    assert cfg.n_train == 30
    assert make_config(train_file=str(p), L=20, n_train=10).n_train == 10
    with pytest.raises(ConfigError, match="^train_file:"):
        make_config(train_file=str(p), L=30)
    with pytest.raises(ConfigError, match="^n_train:"):
        make_config(train_file=str(p), L=20, n_train=31)
    with pytest.raises(ConfigError, match="^train_file:"):
        make_config(train_file=str(p), L=20, sampling="fresh")
