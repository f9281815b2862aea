"""check_keys (names of a config dataclass read once per class) and make_config's defaults (read once at
import): the same keys refused with the same message as from dataclasses.fields, the same config built."""

import dataclasses

import pytest

from meanfield.core.config import ConfigError, check_keys
from meanfield.core.limits import unknown_name
from meanfield.models.induction.config import InductionConfig
from meanfield.models.mixture.config import MixtureConfig, make_config


def _expected(cls, key):
    names = [f.name for f in dataclasses.fields(cls)]
    return str(unknown_name("config", "key", key, names, "the command's --help (one flag per key)"))


@pytest.mark.parametrize("cls", [MixtureConfig, InductionConfig])
@pytest.mark.parametrize("key", ["omga", "zzz_nothing_like_it", "k", 3])
def test_unknown_key_message(cls, key):
    for _ in range(2):  # first call reads the fields, the second the cached names
        with pytest.raises(ConfigError) as e:
            check_keys(cls, {key: 1}, "config")
        assert str(e.value) == _expected(cls, key)
    check_keys(cls, {f.name: None for f in dataclasses.fields(cls)}, "config")  # every field is a key


def test_names_are_per_class():
    @dataclasses.dataclass
    class A:
        x: int = 0

    @dataclasses.dataclass
    class B:
        y: int = 0

    check_keys(A, {"x": 1}, "config")
    check_keys(B, {"y": 1}, "config")
    with pytest.raises(ConfigError):
        check_keys(B, {"x": 1}, "config")
    with pytest.raises(ConfigError):
        check_keys(A, {"y": 1}, "config")


def test_defaults_are_the_dataclass_defaults():
    assert make_config() == make_config({}) == MixtureConfig()
    c = make_config({"steps": "200"}, omega=0.05)
    assert c == dataclasses.replace(MixtureConfig(), steps=200, omega=0.05)
    assert make_config() == MixtureConfig()  # a config built does not change the defaults of the next
