"""The mixture system's side of ``meanfield.core.ensemble`` (chunked,
resumable ensembles) and of ``meanfield.core.sweep`` (one run file per point).

:data:`MIXTURE` is the adapter object the generic core calls. Its configs are
the mixture's (``make_config``: the field names, checks and run files of
``meanfield mixture``); a chunked batch runs on the ONE ensemble path of the
engine (``meanfield.engine.sweep.DescriptionEnsemble``: the engine's batched
kernel on the mixture description of each config, ``family.mixture_description``,
and the per-trajectory outputs by the code that writes the engine's run file),
so ``meanfield mixture sweep --chunked`` and ``meanfield model sweep
meanfield/models/mixture.toml --chunked`` compute the same numbers with the
same arithmetic. (The mixture's own batched kernel and one-pass summary kernel
were removed: measured 1.40x-2.03x faster, under the 2x rule, and their
arithmetic left a rounding residue off the symmetric subspace S = 0 that the
engine's keeps exactly; ``docs/layout.md``.) The per-point sweep
(``run_batched``) still writes each point with the mixture's batched fast
path (``meanfield.models.mixture.batched``)."""

from __future__ import annotations

import json
import time
from pathlib import Path


def _desc(cfg):
    """The engine description of a mixture config (cached on the frozen config)."""
    from .family import mixture_description

    d = _DESCS.get(cfg)
    if d is None:
        if len(_DESCS) > 4096:
            _DESCS.clear()
        d = _DESCS[cfg] = mixture_description(cfg)
    return d


_DESCS: dict = {}


def _engine():
    from ...engine.sweep import DescriptionEnsemble

    return DescriptionEnsemble()


# ------------------------------------------------------------------ per-point sweeps (meanfield.core.sweep)


def _write_point(cfg_dict: dict, path: Path) -> None:
    from .config import make_config
    from .run import run_to_file

    run_to_file(make_config(cfg_dict), path, progress=False)


def _run_point(job: tuple[dict, str]) -> dict:
    """Worker: run one point (config dict) to its file; return its summary (``core.sweep.run_point``)."""
    from functools import partial

    from ...core.sweep import run_point

    cfg_dict, path = job
    return run_point(partial(_write_point, cfg_dict), path)


def _finished(path: Path, cfg_dict: dict) -> dict | None:
    """The summary of an existing, finished point file with this config, else None (``core.sweep.finished_point``)."""
    from ...core.sweep import finished_point

    want = json.loads(json.dumps(cfg_dict, sort_keys=True, default=list))
    return finished_point(path, lambda a: want == json.loads(a.get("config", "{}")))


def _run_batched(cfgs: list[dict], paths: list[Path], todo: list[int], backend: str, done, bar) -> None:
    """The points ``todo`` as batches of trajectories (chunks of 256)."""
    from ...core.sweep import run_summary
    from .batched import run_batch
    from .config import make_config
    from .run import save

    mcfgs = [make_config(cfgs[i]) for i in todo]
    t0 = time.perf_counter()

    def on_result(k, traj):
        save(paths[todo[k]], mcfgs[k], traj)
        s = run_summary(paths[todo[k]])
        s["elapsed_s"] = time.perf_counter() - t0
        s["backend"] = backend + " (batched)"
        done(k, s)
        bar.update()

    run_batch(mcfgs, backend, chunk_size=256, on_result=on_result)


class MixtureEnsemble:
    """The mixture system as an ensemble system (see
    ``meanfield.core.ensemble.EnsembleSystem``). Stateless: pickles as its
    class, so it travels to local and dask workers."""

    name = "mixture"

    def identity(self) -> dict | None:
        return None  # the chunk keys of the mixture stay those of before the generic core

    def fields(self) -> list[str]:
        from .config import MixtureConfig

        return list(MixtureConfig.__dataclass_fields__)

    def config(self, base: dict, over: dict):
        from .config import make_config

        return make_config(base, **over)

    def batchable(self, cfg) -> str | None:
        from .batched import batchable

        return batchable(cfg) or _engine().batchable(_desc(cfg))

    def resolve_backend(self, backend: str) -> str:
        return _engine().resolve_backend(backend)

    def group_key(self, cfg) -> bytes:
        return _engine().group_key(_desc(cfg))

    def capacity_key(self, c) -> tuple:
        return _engine().capacity_key(_desc(c))

    def record_bytes(self, c) -> float:
        """Bytes of one trajectory's record buffer."""
        return _engine().record_bytes(_desc(c))

    def advance(self, cfgs: list, backend: str):
        return _engine().advance([_desc(c) for c in cfgs], backend)

    def summaries(self, cfgs: list, r) -> dict:
        """The built-in outputs of one advanced batch (arrays over its trajectories)."""
        return _engine().summaries([_desc(c) for c in cfgs], r)

    def trajectory(self, r, k: int, cfg):
        return r.trajectory(k)

    def save(self, path: Path, cfg, traj) -> None:
        """A kept record: the engine's trajectory written in the mixture's schema
        (``run.save`` with the config's description)."""
        from ...engine import runs
        from ...engine.system import system_of

        d = _desc(cfg)
        runs.save(path, d, runs.in_memory(d, system_of(d), traj), engine_tag=False)

    # the per-point sweep (meanfield.core.sweep.run_sweep): one run file per point

    def point_key(self, base: dict, over: dict) -> dict:
        """The point's validated config as a dict (what its run file records)."""
        return self.config(base, over).to_dict()

    def finished(self, path: Path, key: dict) -> dict | None:
        return _finished(path, key)

    def point_runner(self):
        return _run_point

    def run_batched(self, cfgs: list[dict], paths: list, todo: list[int], backend: str, done, bar) -> None:
        _run_batched(cfgs, paths, todo, backend, done, bar)

    def __reduce__(self):
        return (MixtureEnsemble, ())


MIXTURE = MixtureEnsemble()
