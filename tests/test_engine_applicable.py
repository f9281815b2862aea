"""Keys and criteria apply only where documented (docs/engine.md): a margin criterion over no row, query_self
without query = last and run knobs no head uses are one-line errors naming them (CLI: exit 2, nothing written);
a criterion over flagged rows fires where those rows' margins (read from the run file) first reach it."""

import subprocess
import sys

import numpy as np
import pytest

import meanfield
from meanfield.core.errors import ConfigError
from meanfield.engine.cli import model_path



def _cli(args, cwd):
    return subprocess.run([sys.executable, "-m", "meanfield", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


@pytest.mark.parametrize("args,field", [
    (["--criterion", "inconsistent_margin>=0.5"], "criterion: inconsistent_margin applies to the rows not flagged"),
    (["--omega", "0.3"], "omega: has no effect on this model"),
    (["--neuron-init", "const:1,0"], "neuron_init: has no effect on this model"),
    (["--omega-v", "0.2"], "omega_v: has no effect on this model"),
    (["--relu-prime-at-zero", "0"], "relu_prime_at_zero: has no effect on this model"),
])
def test_cli_refuses_what_has_no_effect(tmp_path, args, field):
    r = _cli(["model", "run", "incontext", "--K", "2", "--N", "3", "--steps", "3", "--out", "o.h5", *args], tmp_path)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0], r.stderr
    assert not (tmp_path / "o.h5").exists()


def _desc_text(tmp_path, head_extra="", rows_flags=True, crit=None):
    src = (model_path("incontext").parent.parent.parent / "docs" / "examples" / "majority.toml").read_text()
    if rows_flags:  # the two 4+/3- rows flagged consistent
        src = src.replace("target = 1, weight = 2 }", "target = 1, weight = 2, flags = { consistent = true } }")
        src = src.replace("target = -1, weight = 2 }", "target = -1, weight = 2, flags = { consistent = true } }")
    src = src.replace('query = "mean"          # mean | last | fixed', 'query = "mean"\n' + head_extra)
    p = tmp_path / "m.toml"
    p.write_text(src)
    return p


def test_query_self_without_query_last(tmp_path):
    p = _desc_text(tmp_path, head_extra="query_self = false")
    with pytest.raises(ConfigError, match=r"^heads\[0\]\.query_self: only with query = last"):
        meanfield.load(p)


def test_consistent_margin_fires_on_the_flagged_rows_only(tmp_path):
    p = _desc_text(tmp_path)
    level = 0.2
    r = meanfield.run(p, steps=400, criterion=f"consistent_margin>={level}", record_every=1, progress=False)
    flags = np.asarray(r["samples"]["consistent"], dtype=bool)
    assert flags.sum() == 2
    margin = np.asarray(r["margin"])
    mc = margin[:, flags].min(axis=1)
    first = int(np.argmax(mc >= level))
    assert mc[first] >= level and (first == 0 or mc[first - 1] < level)
    assert r.step[-1] == r.step[first]  # stopped where the flagged rows reached it
    assert margin[first].min() < level  # ... while an unflagged row had not: the others do not count
    # no row flagged: consistent_margin counts every row; inconsistent_margin counts none and is refused
    q = _desc_text(tmp_path, rows_flags=False)
    with pytest.raises(ConfigError, match="^criterion: inconsistent_margin applies to the rows not flagged"):
        meanfield.load(q, criterion="inconsistent_margin>=0.1")


def test_given_knobs_that_apply_are_accepted():
    d = meanfield.load("mixture_multiclass", omega=0.2, neuron_init="zero")  # separate kq, neuron values
    assert d.init.omega == 0.2
