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
import shutil
import subprocess
import sys
import tempfile
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


def run_cases(cases, cwd, timeout: float = 600.0, case_alarm: float | None = None,
              workers: int = 1) -> tuple[dict, float]:
    """``case_alarm``: seconds after which a case is stopped (its rc is then ``"timeout"``). ``workers`` > 1:
    the cases split over that many children run at once, each in its own copy of ``cwd`` (cases writing the
    same output name cannot meet); the peak RSS is then the largest child's."""
    env = dict(os.environ, MEANFIELD_DEBUG="", CLI_CASE_ALARM_S=str(case_alarm or ""))
    cases = [list(c) for c in cases]
    parts = [cases[i::workers] for i in range(workers)] if workers > 1 else [cases]
    dirs = [cwd] if workers <= 1 else []
    for i in range(len(dirs), len(parts)):
        d = tempfile.mkdtemp(prefix=f"cases{i}-", dir=os.path.dirname(os.path.abspath(cwd)))
        shutil.copytree(cwd, d, dirs_exist_ok=True)
        dirs.append(d)
    procs = []
    for d, part in zip(dirs, parts):  # every child reads its cases from a file: all start at once
        with tempfile.TemporaryFile("w+") as f:
            json.dump(part, f)
            f.seek(0)
            procs.append(subprocess.Popen([sys.executable, "-c", DRIVER], stdin=f, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True, cwd=d, env=env))
    out, peak = {}, 0.0
    try:
        outs = [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for d in dirs[1:] if workers > 1 else ():
            shutil.rmtree(d, ignore_errors=True)
    for so, se in outs:
        assert "@@RESULTS@@" in so, so[-2000:] + se[-4000:]
        res = json.loads(so.split("@@RESULTS@@", 1)[1])
        out.update({x["id"]: x for x in res[:-1]})
        peak = max(peak, res[-1]["peak_rss_mb"])
    return out, peak
