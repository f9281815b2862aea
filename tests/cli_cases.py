"""Test helper: run many bad-input CLI cases in one fresh interpreter.

Each case is ``(id, argv)``; ``run_cases`` runs ``meanfield.cli.main(argv)``
for every case in one child process (one import, so hundreds of cases take
seconds) with stdout / stderr captured per case, and returns
``(results by id, the child's peak RSS in MiB)``. The child's peak RSS is how
the edge tests show that no absurd size was allocated.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

DRIVER = textwrap.dedent(r"""
    import contextlib, io, json, os, resource, signal, sys, time
    from meanfield.cli import main

    class CaseTimeout(BaseException):  # not an Exception: the CLI's barrier lets it through
        pass

    def on_alarm(signum, frame):
        raise CaseTimeout()

    alarm = float(os.environ.get("CLI_CASE_ALARM_S") or 0)
    signal.signal(signal.SIGALRM, on_alarm)
    cases = json.loads(sys.stdin.read())  # stdin: a case may be longer than one argv string may be
    out = []
    progress = os.environ.get("CLI_CASE_PROGRESS")  # a file that names each case as it starts (debugging)
    for cid, argv in cases:
        if progress:
            with open(progress, "a") as pf:
                pf.write(cid + "\n")
        so, se = io.StringIO(), io.StringIO()
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(so), contextlib.redirect_stderr(se):
            try:
                if alarm:
                    signal.setitimer(signal.ITIMER_REAL, alarm)
                rc = main(argv)
            except SystemExit as e:
                rc = e.code
            except CaseTimeout:
                rc = "timeout"
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        out.append({"id": cid, "rc": rc, "stdout": so.getvalue(), "stderr": se.getvalue(),
                    "seconds": time.perf_counter() - t0})
    out.append({"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})
    print("@@RESULTS@@" + json.dumps(out))
""")


#: one short line (issue 26): the flag, the valid range and a pointer to the full list (--help, a list verb),
#: never a list of every allowed value nor the value given quoted whole; every refusal of every case run here
LINE_CHARS = 200


def long_refusals(results: dict) -> dict:
    """``{case id: line}`` of every refusal (exit 2) among ``results`` (as
    :func:`run_cases` returns them) whose stderr line is :data:`LINE_CHARS`
    characters or more."""
    out = {}
    for cid, x in results.items():
        if x.get("rc") == 2:
            for line in x["stderr"].strip().splitlines():
                if len(line) >= LINE_CHARS:
                    out[cid] = line
    return out


def run_cases(cases, cwd, timeout: float = 600.0, case_alarm: float | None = None) -> tuple[dict, float]:
    """``case_alarm``: seconds after which a case is stopped (its rc is then ``"timeout"``)."""
    env = dict(os.environ, MEANFIELD_DEBUG="", CLI_CASE_ALARM_S=str(case_alarm or ""))
    r = subprocess.run([sys.executable, "-c", DRIVER], input=json.dumps([list(c) for c in cases]), cwd=cwd,
                       capture_output=True, text=True, timeout=timeout, env=env)
    assert "@@RESULTS@@" in r.stdout, r.stdout[-2000:] + r.stderr[-4000:]
    res = json.loads(r.stdout.split("@@RESULTS@@", 1)[1])
    return {x["id"]: x for x in res[:-1]}, res[-1]["peak_rss_mb"]
