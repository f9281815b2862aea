"""The mixture system's side of ``meanfield.core.ensemble`` (chunked,
resumable ensembles) and of ``meanfield.core.sweep`` (one run file per point).

:data:`MIXTURE` is the adapter object the generic core calls: configs from a
point dict (``make_config``), the batchable check, one batch advanced by the
batched kernel (``meanfield.models.mixture.batched.advance``: numba threads or
CUDA), the per-trajectory summaries (:func:`_summaries`: the arithmetic of
``run.recorded`` and the stage-time rules of ``meanfield.models.mixture.stagetimes``,
in one numba kernel), one trajectory as an ``integrate.Trajectory`` and its
run file (``run.save``). The engine's adapter for any described model is
``meanfield.engine.sweep.ModelEnsemble``."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
from numba import get_num_threads, njit, prange, set_num_threads

from ...core.stagetimes import at_step, crossing
from .kernels import backward_into, forward_into
from .stagetimes import DEFAULTS as _DEF


#: the summary kernel: one pass over each trajectory's records (prange over
#: trajectories) with the arithmetic of ``run.recorded``: losses and margins by
#: ``forward_into``, |dLoss/dw~| by ``backward_into`` and numpy's pairwise sum,
#: the stage-time rules of ``meanfield.core.stagetimes``, whose interpolation and
#: rounding to the step are compiled here from the core's own functions.
#: records x samples x L of a batch below which its summaries run on one thread (about 2 ms of one thread's
#: work at K = 2, L = 3)
SUMMARY_SERIAL_WORK = 1 << 14
_cross = njit(cache=True)(crossing)
_at_step = njit(cache=True)(at_step)


@njit(parallel=True, cache=True)
def _summaries(rec_t, rec_step, gd, rec_y, n_rec, three, stage1_t, r0, P, idx, sgn, lab, weight, consistent, clean,
               margin_lv, grad_ratio, loss_lv, loss_end, margin_end, mm, mmc, mmi, T1, T2, TL):
    B = rec_t.shape[0]
    nS, L = idx.shape
    for b in prange(B):
        u = np.empty((nS, 2))
        margin = np.empty(nS)
        G = np.empty((2, P, P))
        dw = np.empty((2, P))
        logit = np.empty(L)
        p = np.empty(L)
        r8 = np.empty(8)
        n = n_rec[b]
        t1 = stage1_t[b] if three[b] else math.nan
        t2 = math.nan
        tl = math.nan
        g0 = 0.0
        i1 = -1  # first record at or after T1 (-1: T1 not yet known)
        loss = math.nan
        p_loss = math.nan  # the previous record's loss, consistent / inconsistent margins and |dLoss/dw~|
        p_mc = math.nan
        p_mi = math.nan
        p_g = math.nan
        for k in range(n):
            loss = forward_into(rec_y[b, k], P, idx, sgn, lab, weight, u, margin, logit)
            mc = math.inf
            mi = math.inf
            for s in range(nS):
                if clean[s]:
                    if consistent[s]:
                        mc = min(mc, margin[s])
                    else:
                        mi = min(mi, margin[s])
            if not three[b] and math.isnan(t1):
                backward_into(rec_y[b, k], P, idx, sgn, lab, weight, r0[b], u, margin, G, dw, logit, p)
                # |dw| as numpy's np.sum(dw * dw) (pairwise summation), then sqrt
                nn = 2 * P
                if nn < 8:
                    acc = -0.0
                    for q in range(nn):
                        x = dw[q // P, q % P]
                        acc += x * x
                else:
                    for q in range(8):
                        x = dw[q // P, q % P]
                        r8[q] = x * x
                    q = 8
                    while q < nn - nn % 8:
                        for j in range(8):
                            x = dw[(q + j) // P, (q + j) % P]
                            r8[j] += x * x
                        q += 8
                    acc = ((r8[0] + r8[1]) + (r8[2] + r8[3])) + ((r8[4] + r8[5]) + (r8[6] + r8[7]))
                    while q < nn:
                        x = dw[q // P, q % P]
                        acc += x * x
                        q += 1
                g = math.sqrt(acc)
                if k == 0:
                    g0 = g
                if mc >= margin_lv and g <= grad_ratio * g0:
                    if k == 0:
                        t1 = rec_t[b, 0]
                    else:  # interpolated between the records k - 1 and k (stagetimes.first_crossing)
                        ta, tb = rec_t[b, k - 1], rec_t[b, k]
                        tc = ta
                        if not p_mc >= margin_lv:
                            tc = max(tc, _cross(p_mc, mc, margin_lv, ta, tb))
                        if not p_g <= grad_ratio * g0:
                            tc = max(tc, _cross(p_g, g, grad_ratio * g0, ta, tb))
                        t1 = _at_step(tc, ta, tb, float(rec_step[b, k - 1]), float(rec_step[b, k]), gd[b])
                p_g = g
            new_i1 = False
            if i1 < 0 and not math.isnan(t1):
                if rec_t[b, k] >= t1 - 1e-12 * max(1.0, abs(t1)):
                    i1 = k
                    new_i1 = True
            if k > 0:
                ta, tb = rec_t[b, k - 1], rec_t[b, k]
                sa, sb = float(rec_step[b, k - 1]), float(rec_step[b, k])
            if i1 >= 0 and math.isnan(t2) and mi >= margin_lv:
                if new_i1 and k > 0 and p_mi < margin_lv:  # crossed between T1 and this record
                    t2 = max(t1, _at_step(max(ta, _cross(p_mi, mi, margin_lv, ta, tb)), ta, tb, sa, sb, gd[b]))
                elif new_i1 or k == 0:
                    t2 = rec_t[b, k]
                else:
                    t2 = _at_step(max(ta, _cross(p_mi, mi, margin_lv, ta, tb)), ta, tb, sa, sb, gd[b])
            if math.isnan(tl) and loss <= loss_lv:
                tl = rec_t[b, 0] if k == 0 else _at_step(max(ta, _cross(p_loss, loss, loss_lv, ta, tb)), ta, tb, sa,
                                                         sb, gd[b])
            p_loss = loss
            p_mc = mc
            p_mi = mi
        loss_end[b] = loss
        m_all = math.inf
        m_c = math.inf
        m_i = math.inf
        for s in range(nS):
            margin_end[b, s] = margin[s] if n > 0 else math.nan
            m_all = min(m_all, margin[s])
            if consistent[s]:
                m_c = min(m_c, margin[s])
            else:
                m_i = min(m_i, margin[s])
        mm[b] = m_all if n > 0 else math.nan
        mmc[b] = m_c if (n > 0 and m_c < math.inf) else math.nan
        mmi[b] = m_i if (n > 0 and m_i < math.inf) else math.nan
        T1[b] = t1
        T2[b] = t2
        TL[b] = tl


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
    group_fields = "K, L, p, label_prob, label_noise or method"  # what batched._group_key compares

    def probe_point(self, base: dict, over: dict, steps: int):
        """(overrides, factor): the point shortened to ``steps`` GD steps for the
        chunk-size probe (``meanfield.core.ensemble.probe_seconds``), or None
        (not a simultaneous GD run longer than that: it runs whole)."""
        from ...core.config import ConfigError

        c = self.config(base, over)
        if c.method != "gd" or c.schedule != "simultaneous" or c.steps <= steps:
            return None
        short = {**over, "steps": steps}
        if c.record_log is None and c.record_dt is None:
            short["record_every"] = steps
        try:
            self.config(base, short)
        except ConfigError:
            return None
        return short, c.steps / steps

    def estimate_seconds(self, cfg) -> float:
        """One trajectory's compute time from its config alone (``sizes.mixture_estimate``;
        NaN where the solver's steps are not known in advance), for the chunk plan
        (``meanfield.core.ensemble_plan.seconds_per_trajectory``)."""
        from .sizes import mixture_estimate

        e = mixture_estimate(cfg)
        return float(e["seconds"]) if e["steps"] > 0 else math.nan

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

        return batchable(cfg)

    def resolve_backend(self, backend: str) -> str:
        from .batched import resolve_backend

        return resolve_backend(backend)

    def group_key(self, cfg) -> tuple:
        from .batched import _group_key

        return _group_key(cfg)

    def capacity_key(self, c) -> tuple:
        return (c.method, c.schedule, c.steps, c.t_end, c.stage_steps, c.stage_times, c.stage_criteria, c.stage3,
                c.criterion, c.record_every, c.record_log, c.record_dt, c.eta, c.dt, c.K, c.L)

    def record_bytes(self, c) -> float:
        """Bytes of one trajectory's record buffer."""
        from .batched import _pack
        from .kernels import state_size

        ny = state_size(c.P)
        return _pack([c], [np.zeros(ny)])["T"] * ny * 8

    def advance(self, cfgs: list, backend: str):
        from .batched import advance

        return advance(cfgs, backend=backend, max_bytes=math.inf)

    def summaries(self, cfgs: list, r) -> dict:
        """The built-in outputs of one advanced batch (arrays over its trajectories)."""
        from .batched import COMPLETE, samples_of

        s = samples_of(cfgs[0])
        clean = ~s.is_flipped
        B = len(cfgs)
        three = np.array([c.schedule == "three-stage" for c in cfgs], np.bool_)
        done1 = np.where(r.code == COMPLETE, r.stop_stage, r.stop_stage - 1) >= 1
        stage1_t = np.where(done1, r.end_t[:, 0], np.nan)
        r0 = np.array([c.relu_prime_at_zero for c in cfgs], np.float64)
        o = {k: np.empty(B) for k in ("loss_end", "min_margin_end", "min_margin_consistent_end",
                                      "min_margin_inconsistent_end", "T1", "T2", "T_loss")}
        o["margin_end"] = np.empty((B, s.n))
        gd = np.array([c.method == "gd" for c in cfgs], np.bool_)
        # little work (records x samples x L): one thread; a parallel region then costs more than it saves, and
        # far more when the other cores are busy (its barrier waits for them). Every thread count gives each
        # trajectory the same bits (one trajectory per prange iteration, nothing summed across them).
        nt = get_num_threads()
        one = nt > 1 and int(r.n_records.sum()) * s.idx.size < SUMMARY_SERIAL_WORK
        if one:
            set_num_threads(1)
        try:
            _summaries(r.t, r.step, gd, r.y, r.n_records, three, stage1_t, r0, s.P, s.idx, s.sgn, s.y, s.weight,
                       s.consistent.astype(np.bool_), clean.astype(np.bool_), _DEF["margin"], _DEF["grad_ratio"],
                       _DEF["loss_level"], o["loss_end"], o["margin_end"], o["min_margin_end"],
                       o["min_margin_consistent_end"], o["min_margin_inconsistent_end"], o["T1"], o["T2"],
                       o["T_loss"])
        finally:
            if one:
                set_num_threads(nt)
        last = np.maximum(r.n_records - 1, 0)
        ar = np.arange(B)
        o["status"] = r.code
        o["t_end"] = r.t[ar, last]
        o["steps_end"] = r.step[ar, last]
        return o

    def trajectory(self, r, k: int, cfg):
        from .batched import trajectory

        return trajectory(r, k, cfg)

    def save(self, path: Path, cfg, traj) -> None:
        from .run import save

        save(path, cfg, traj)

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
