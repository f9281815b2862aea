"""derive from the CLI: the counts the rebuttal confirms, and the symmetry reduction."""

import json

import pytest

from meanfield.cli import main


def test_derive_json_counts(capsys):
    assert main(["mixture", "derive", "--K", "2", "--L", "3", "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    for h in ("+", "-"):
        counts = {kind: d["heads"][h][kind]["count"] for kind in d["heads"][h]}
        assert counts == {"score": 16, "key_self_score": 10, "query_self_score": 10, "neuron": 4}, counts


def test_derive_reduce_symmetry_json(capsys):
    assert main(["mixture", "derive", "--K", "2", "--L", "3", "--reduce-symmetry", "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["counts"]["full"] == 80 and 0 < d["counts"]["independent"] < 80


def test_derive_bad_input(capsys):
    assert main(["mixture", "derive", "--K", "1"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    with pytest.raises(SystemExit) as e:  # argparse choices: one line, exit 2
        main(["mixture", "derive", "--format", "pdf"])
    assert e.value.code == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
