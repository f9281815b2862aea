"""The Python API under the command's ceilings (issue 26): ``meanfield.run``,
``particles`` and ``width_sweep`` refuse the sizes ``meanfield model ...``
refuses, before any work, with the command's own one line (as a
ConfigError). The command's line is taken from ``meanfield.cli.main`` (the
independent path: flags parsed as text), the API's from the exception."""

from __future__ import annotations

import time

import pytest

import meanfield as mf
from meanfield.cli import main

REFUSE_WITHIN_S = 10.0  # estimates only (no data of the refused size is built): seconds on a loaded machine

CASES = [  # (API function, its keywords, the command's flags)
    ("width_sweep", {"seeds": 10**9}, ["model", "width-sweep", "incontext", "--seeds", "1000000000"]),
    ("width_sweep", {"widths": list(range(1, 1500))},
     ["model", "width-sweep", "incontext", "--widths", ",".join(map(str, range(1, 1500)))]),
    ("width_sweep", {"widths": [4, 10**9]}, ["model", "width-sweep", "incontext", "--widths", "4,1000000000"]),
    ("width_sweep", {"widths": [4, 8], "steps": 10**12},
     ["model", "width-sweep", "incontext", "--widths", "4,8", "--steps", "1000000000000"]),
    ("run", {"steps": 10**12}, ["model", "run", "incontext", "--steps", "1000000000000"]),
    ("run", {"N": 10**8}, ["model", "run", "incontext", "--N", "100000000"]),
    ("particles", {"width": 10**9}, ["model", "particles", "incontext", "--width", "1000000000"]),
    ("particles", {"width": 8, "d": 10**9}, ["model", "particles", "incontext", "--width", "8", "--d", "1000000000"]),
]


@pytest.mark.parametrize("fn, kw, argv", CASES, ids=[f"{c[0]}-{'-'.join(c[1])}" for c in CASES])
def test_api_refuses_what_the_command_refuses(tmp_path, capsys, fn, kw, argv):
    out = tmp_path / "x.h5"
    assert main(argv + ["--out", str(out)]) == 2
    cli_line = capsys.readouterr().err.strip().splitlines()
    assert len(cli_line) == 1 and cli_line[0].startswith("meanfield: error: "), cli_line
    t0 = time.perf_counter()
    with pytest.raises(mf.ConfigError) as e:
        getattr(mf, fn)("incontext", out=str(out), progress=False, **kw)
    assert time.perf_counter() - t0 < REFUSE_WITHIN_S
    msg = str(e.value)
    assert "\n" not in msg
    # the same line; only a value's repr differs by type (the command's flags are text: '1000000000')
    assert cli_line[0][len("meanfield: error: "):].replace("'", "") == msg.replace("'", "")
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_api_width_sweep_takes_a_generator_without_listing_it(tmp_path):
    with pytest.raises(mf.ConfigError, match=r"^widths: at most 1000 comma-separated values"):
        mf.width_sweep("incontext", widths=(m for m in range(1, 10**12)), out=str(tmp_path / "w.h5"),
                       progress=False)


def test_api_sizes_within_the_ceilings_still_run(tmp_path):
    r = mf.particles("incontext", K=3, N=6, steps=5, width=8, progress=False)
    assert r.status == "complete"
    s = mf.width_sweep("incontext", widths=[2, 4], seeds=1, steps=10, out=str(tmp_path / "w.h5"), progress=False)
    assert [f.rsplit(".", 1)[1] for f in s["files"]] == ["h5", "json", "png"]
