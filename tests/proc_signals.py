"""Test helper: has a child process installed its signal handler yet?

Tests that interrupt a ``meanfield`` command wait until it catches SIGTERM
(Linux: the SigCgt mask of /proc/PID/status), so the signal lands where the
test means it to, not before the handler exists. Without /proc the wait
gives up after ``no_proc_s`` seconds and the test goes on.
"""

from __future__ import annotations

import signal
import time


def catches(pid: int, sig: int = signal.SIGTERM) -> bool:
    """True once process ``pid`` catches ``sig`` (False if /proc cannot say)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    except OSError:
        return False
    return False


def wait_until_catches(proc, sig: int = signal.SIGTERM, timeout: float = 60.0, poll_s: float = 0.05,
                       no_proc_s: float = 8.0) -> bool:
    """Poll until ``proc`` (a Popen) catches ``sig``, exits, or ``timeout``
    passes; True if it catches it."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout and proc.poll() is None:
        if catches(proc.pid, sig):
            return True
        try:
            open(f"/proc/{proc.pid}/status").close()
        except OSError:
            if time.monotonic() - t0 > no_proc_s:
                return False
        time.sleep(poll_s)
    return False
