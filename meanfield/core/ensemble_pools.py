"""Where the chunks of an ensemble run (``meanfield.core.ensemble``): local processes, this process, dask.

Each pool runs the task function it is given (``meanfield.core.ensemble.run_chunk``)
on one chunk's task dict and yields the finished futures: :class:`Local`
(long-lived spawned worker processes), :class:`InProcess` (chunk after
chunk in this process: one worker, the GPU, tests), :class:`Dask` (a
``dask.distributed`` client: ``local:N`` or a scheduler's address).
:func:`check_scheduler` refuses a malformed scheduler before anything runs.

Example
-------
>>> from meanfield.core.ensemble_pools import InProcess
>>> pool = InProcess(lambda task: task["x"] + 1)
>>> [f.result() for f in pool.as_completed([pool.submit({"x": 1})])]
[2]
"""

from __future__ import annotations

import signal
from concurrent.futures import ProcessPoolExecutor

from .config import ConfigError, as_int


def _worker_init():
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides what an interrupt means


class Local:
    """Long-lived local worker processes (spawned: no forked numba threads)."""

    def __init__(self, workers: int, fn):
        import multiprocessing

        self.fn = fn
        self.ex = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                      initializer=_worker_init)

    def submit(self, task):
        return self.ex.submit(self.fn, task)

    def as_completed(self, futs):
        from concurrent.futures import as_completed

        return as_completed(futs)

    def close(self, abort: bool = False):
        if abort:
            for p in list(getattr(self.ex, "_processes", {}).values()):
                p.terminate()
        self.ex.shutdown(wait=not abort, cancel_futures=True)


class InProcess:
    """This process, chunk after chunk (one worker, the GPU, or tests)."""

    class _Done:
        def __init__(self, fn, task):
            self.fn, self.task = fn, task

        def result(self):
            return self.fn(self.task)

    def __init__(self, fn):
        self.fn = fn

    def submit(self, task):
        return self._Done(self.fn, task)

    def as_completed(self, futs):
        return iter(list(futs))

    def close(self, abort: bool = False):
        pass


class Dask:
    """A dask.distributed client: ``local:N`` (a LocalCluster of N one-thread
    worker processes) or the address of a running scheduler."""

    def __init__(self, scheduler: str, fn):
        self.fn = fn
        try:
            import distributed
        except ImportError:
            raise ConfigError("scheduler: needs dask.distributed; pip install 'meanfield[dask]'") from None
        self.cluster = None
        if scheduler.startswith("local:"):
            import logging

            n = as_int("scheduler", scheduler[len("local:"):], lo=1)
            self.cluster = distributed.LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                                    dashboard_address=":0", silence_logs=logging.ERROR)
            self.client = distributed.Client(self.cluster)
        else:
            try:
                self.client = distributed.Client(scheduler, timeout="20s")
            except (OSError, TimeoutError) as e:
                raise ConfigError(f"scheduler: cannot reach {scheduler} ({type(e).__name__}: "
                                  f"{str(e).splitlines()[0] if str(e) else 'no answer'})") from None
        self._dist = distributed

    @property
    def workers(self) -> int:
        n = sum(self.client.nthreads().values())
        return max(1, n)

    def submit(self, task):
        return self.client.submit(self.fn, task, key=f"meanfield-chunk-{task['key']}", pure=False)

    def as_completed(self, futs):
        return self._dist.as_completed(list(futs))

    def close(self, abort: bool = False):
        try:
            self.client.close()
        finally:
            if self.cluster is not None:
                self.cluster.close()


def check_scheduler(scheduler: str | None) -> None:
    """One-line ConfigError for a malformed ``scheduler`` (before anything runs)."""
    if scheduler is None:
        return
    s = str(scheduler)
    try:
        if s.startswith("local:"):
            as_int("scheduler", s[6:], lo=1)
            return
    except ConfigError:
        pass
    else:
        if (s.startswith("tcp://") or s.startswith("tls://")) and s.split("://", 1)[1].rpartition(":")[2].isdigit():
            return
    raise ConfigError(f"scheduler: expected tcp://HOST:PORT or local:N (N workers >= 1), got {s!r}")
