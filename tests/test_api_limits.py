"""The Python API under the command's ceilings (issue 26): ``meanfield.run``,
``particles`` and ``width_sweep`` refuse the sizes ``meanfield model ...``
refuses, before any work, with the command's own one line (as a
ConfigError). The command's line is taken from ``meanfield.cli.main`` (the
independent path: flags parsed as text), the API's from the exception."""

from __future__ import annotations

import contextlib
import signal
import time

import pytest

import meanfield as mf
from meanfield.cli import main

REFUSE_WITHIN_S = 10.0  # estimates only (no data of the refused size is built): seconds on a loaded machine
STOP_AFTER_S = 60.0  # a refusal that regressed would start the work (1e12 steps): the test stops it here


class _NoAnswer(BaseException):  # not an Exception: neither the CLI's barrier nor the API catches it
    pass


@contextlib.contextmanager
def _stopped_after(seconds: float = STOP_AFTER_S):
    """Run the block under an alarm: past ``seconds`` it is stopped and the test fails (it never hangs)."""
    def on_alarm(signum, frame):
        raise _NoAnswer()

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except _NoAnswer:
        pytest.fail(f"no refusal within {seconds:.0f} s: the work started")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)

CASES = [  # (API function, its keywords, the command's flags)
    ("width_sweep", {"seeds": 10**9}, ["model", "width-sweep", "incontext", "--seeds", "1000000000"]),
    ("width_sweep", {"widths": list(range(1, 1500))},
     ["model", "width-sweep", "incontext", "--widths", ",".join(map(str, range(1, 1500)))]),
    ("width_sweep", {"widths": [4, 10**9]}, ["model", "width-sweep", "incontext", "--widths", "4,1000000000"]),
    ("width_sweep", {"widths": [4, 8], "steps": 10**12},
     ["model", "width-sweep", "incontext", "--widths", "4,8", "--steps", "1000000000000"]),
    ("run", {"steps": 10**12}, ["model", "run", "incontext", "--steps", "1000000000000"]),
    ("run", {"N": 10**8}, ["model", "run", "incontext", "--N", "100000000"]),
    # a width only where weights have it: maxmargin's separate W_K, W_Q (incontext's merged W has none)
    ("particles", {"width": 10**9, "kq": "separate"},
     ["model", "particles", "maxmargin", "--kq", "separate", "--width", "1000000000"]),
    ("particles", {"width": 8, "d": 10**9}, ["model", "particles", "incontext", "--width", "8", "--d", "1000000000"]),
]


@pytest.mark.parametrize("fn, kw, argv", CASES, ids=[f"{c[0]}-{'-'.join(c[1])}" for c in CASES])
def test_api_refuses_what_the_command_refuses(tmp_path, capsys, fn, kw, argv):
    out = tmp_path / "x.h5"
    with _stopped_after():
        assert main(argv + ["--out", str(out)]) == 2
    cli_line = capsys.readouterr().err.strip().splitlines()
    assert len(cli_line) == 1 and cli_line[0].startswith("meanfield: error: "), cli_line
    t0 = time.perf_counter()
    with _stopped_after(), pytest.raises(mf.ConfigError) as e:
        getattr(mf, fn)(argv[2], out=str(out), progress=False, **kw)
    assert time.perf_counter() - t0 < REFUSE_WITHIN_S
    msg = str(e.value)
    assert "\n" not in msg
    # the same line; only a value's repr differs by type (the command's flags are text: '1000000000')
    assert cli_line[0][len("meanfield: error: "):].replace("'", "") == msg.replace("'", "")
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_api_width_sweep_takes_a_generator_without_listing_it(tmp_path):
    """The generator counts what is taken from it and stops past the ceiling + 1 (a regression that lists it
    fails at once, instead of filling the machine's memory with 1e12 widths)."""
    taken = [0]

    def widths():
        for m in range(1, 10**12):
            taken[0] += 1
            if taken[0] > 10_000:
                raise AssertionError("width_sweep listed the generator past the ceiling")
            yield m

    with _stopped_after(), pytest.raises(mf.ConfigError, match=r"^widths: at most 1000 comma-separated values"):
        mf.width_sweep("incontext", widths=widths(), out=str(tmp_path / "w.h5"), progress=False)
    assert taken[0] <= 1001, taken[0]
    assert list(tmp_path.iterdir()) == []


def test_api_sizes_within_the_ceilings_still_run(tmp_path):
    with _stopped_after(240.0):  # a few seconds of work; stopped rather than hung
        _small_runs(tmp_path)


def _small_runs(tmp_path):
    r = mf.particles("incontext", K=3, N=6, steps=5, width=8, progress=False)
    assert r.status == "complete"
    s = mf.width_sweep("incontext", widths=[2, 4], seeds=1, steps=10, out=str(tmp_path / "w.h5"), progress=False)
    assert [f.rsplit(".", 1)[1] for f in s["files"]] == ["h5", "json", "png"]
