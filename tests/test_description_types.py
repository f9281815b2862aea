"""A number in quotes is refused (issue 26): ``steps = "100"`` in a description
was read as 100. The cases are generated from the description schema
(``meanfield.engine.schema.reference``, the table the docs are built from):
every number-typed key of every table, and every number-typed field of a
family's parameters, set to a string, must be one line naming the key and
its type; the same description with the number unquoted loads."""

from __future__ import annotations

import copy
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from meanfield.core.config import ConfigError, _numeric_kind, field_types
from meanfield.engine.description import description_from_dict
from meanfield.engine.description import parameter_class
from meanfield.engine.schema import check_description_numbers
from meanfield.engine.schema import reference

BASE = {"dictionary": {"features": ["a", "b"]},
        "data": {"rows": [{"tokens": ["a", "b"], "target": 1}, {"tokens": ["b", "a"], "target": -1}]},
        "heads": [{"name": "h"}], "model": {"loss": "logistic"}, "parameters": {"steps": 3},
        "training": {"stages": [{"steps": 3}]}}

#: where a key of each schema table lives in BASE
WHERE = {"[parameters]": lambda r: r["parameters"], "[data]": lambda r: r["data"],
         "[dictionary]": lambda r: r["dictionary"],
         "[data] rows = [ {...} ]": lambda r: r["data"]["rows"][0], "[[heads]]": lambda r: r["heads"][0],
         "[[training.stages]]": lambda r: r["training"]["stages"][0]}


def _cases():
    out = []
    for table, _, keys in reference():
        for k in keys:
            if _numeric_kind(k.type) == "scalar":
                out.append((table, k.name, k.type))
    return out


CASES = _cases()


def test_the_schema_has_number_keys_in_every_table_we_know():
    tables = {t for t, _, _ in CASES}
    assert tables <= set(WHERE), tables - set(WHERE)  # a new table with number keys: say where it lives
    assert {("[parameters]", "steps"), ("[[training.stages]]", "steps"), ("[[heads]]", "scale"),
            ("[data] rows = [ {...} ]", "weight")} <= {(t, k) for t, k, _ in CASES}
    assert len(CASES) > 25, len(CASES)


def test_the_base_description_loads():
    description_from_dict(copy.deepcopy(BASE))


@pytest.mark.parametrize("table,key,typ", CASES, ids=[f"{t}.{k}" for t, k, _ in CASES])
def test_a_string_for_a_number_key_is_refused(table, key, typ):
    raw = copy.deepcopy(BASE)
    WHERE[table](raw)[key] = "1"
    with pytest.raises(ConfigError) as e:
        check_description_numbers(raw)
    msg = str(e.value)
    assert f".{key}: must be a TOML number" in msg and "'1'" in msg, msg
    assert "\n" not in msg and len(msg) < 250


def test_a_reference_and_width_inf_stay_allowed():
    raw = copy.deepcopy(BASE)
    raw["parameters"].update({"width": "inf", "S": 4})
    raw["training"]["stages"][0]["steps"] = "$S"
    check_description_numbers(raw)
    description_from_dict(raw)


def _family_cases():
    from meanfield.engine import registry

    registry.load_plugins()
    cls = registry.family("mixture").params_class()
    return [(f, t) for f, t in field_types(cls).items() if _numeric_kind(t) == "scalar"]


@pytest.mark.parametrize("field,typ", _family_cases())
def test_a_family_parameter_as_a_string_is_refused(field, typ):
    raw = {"family": "mixture", "parameters": {field: "2"}}
    with pytest.raises(ConfigError, match=rf"parameters\.{field}: must be a TOML number"):
        check_description_numbers(raw, parameter_class(raw))


@pytest.mark.parametrize("system", ["mixture", "induction"])
def test_a_config_file_with_a_quoted_number_is_refused(tmp_path, system):
    (tmp_path / "c.toml").write_text('steps = "100"\n')
    r = subprocess.run([sys.executable, "-m", "meanfield", system, "run", "--config", "c.toml", "--out", "x.h5"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr[-2000:]
    assert "config.steps: must be a TOML number (int)" in lines[0], lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.toml"]


def test_a_description_file_with_a_quoted_steps_is_refused_from_python_and_the_cli(tmp_path):
    import meanfield.engine as me

    text = (Path(__file__).resolve().parents[1] / "meanfield" / "models" / "incontext.toml").read_text()
    assert "\nsteps = 3000" in text
    (tmp_path / "q.toml").write_text(text.replace("\nsteps = 3000", '\nsteps = "100"'))
    with pytest.raises(ConfigError, match=r"parameters\.steps: must be a TOML number \(int\), got the string '100'"):
        me.load(str(tmp_path / "q.toml"))
    r = subprocess.run([sys.executable, "-m", "meanfield", "model", "run", "q.toml", "--out", "x.h5"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "parameters.steps: must be a TOML number" in lines[0], r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q.toml"]
    r = subprocess.run([sys.executable, "-m", "meanfield", "model", "run", "q.toml", "--steps", "100", "--out",
                        "x.h5"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr  # the file is still wrong when a flag overrides the key
