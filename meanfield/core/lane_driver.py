"""The per-lane control of the trajectory-vectorised batches (lanes), once for every system (templates).

A lane driver advances W trajectories in a block (state ``Y[entry, lane]``) with the step/record logic of
``meanfield.core.batched.gd_trajectory`` / ``rk4_trajectory`` kept per lane: its stage, step (or time),
stage end and next stop in (W,) arrays. The arithmetic of a step is the system's (the mixture's hand lanes,
``meanfield.models.mixture.vectorised`` / ``vectorised_rk4``; the engine's generated ones,
``meanfield.engine.lanes_batch`` / ``lanes_rk4``); the decisions taken per lane between the passes are the
same in all four drivers and live here:

* :func:`lane_begin`: a lane's start (its state column, the outputs reset, the record at t = 0);
* :func:`lane_fail`: a lane stopped with its last accepted state (its record, status and stop stage);
* :func:`lane_stage_end`: a stage's end (its record and end step / time / reason);
* :func:`lane_crit_met`: a lane's stop criterion;
* :func:`lane_gd_decide`: gd_trajectory's loop top at an evaluated state (the non-finite loss, the stage's
  criterion, the record points, the stage ends) until the lane steps or stops.

They are plain-Python templates, as the drivers of ``core.batched``: a system rebuilds them over its lane
module's globals (``core.batched.instantiate``, compiled ``njit(cache=True, nogil=True, inline="always")``:
numba inlines them into the driver's loop), where these names resolve: ``lane_record_into``
(``core.batched.record_into`` compiled for a lane's column), ``_next_target`` (``core.batched.next_target``)
and, for :func:`lane_gd_decide`, ``lane_criterion_of(kind, w, loss, cargs)`` (the value of stop criterion
``kind`` of lane w at the evaluated state, from the system's ``cargs``, a tuple the driver passes on).
This module imports nothing.
"""

from __future__ import annotations

import math


def lane_begin(b, w, Y, Y0, n_stages, rec_t, rec_step, rec_stage, rec_y, n_rec, status, stop_stage):
    """Lane w takes trajectory b: Y[:, w] = Y0[b], its outputs reset, the initial record written. Returns
    whether the lane runs (the record fitted and it has a stage)."""
    for i in range(Y0.shape[1]):
        Y[i, w] = Y0[b, i]
    n_rec[b] = 0
    status[b] = 0
    stop_stage[b] = 0
    live = lane_record_into(b, 0.0, 0, 1, Y[:, w], rec_t, rec_step, rec_stage, rec_y, n_rec, status)  # noqa: F821
    return live and n_stages[b] != 0


def lane_fail(b, w, code, t, step, sidx, Y, rec_t, rec_step, rec_stage, rec_y, n_rec, status, stop_stage):
    """Lane w (trajectory b) stops with status ``code`` at its last accepted state Y[:, w] (step, time t,
    stage sidx, 1-based): that state recorded, then the status and stop stage (unless the record buffer was
    full: status 4)."""
    if lane_record_into(b, t, step, sidx, Y[:, w], rec_t, rec_step, rec_stage, rec_y, n_rec, status):  # noqa: F821
        status[b] = code
        stop_stage[b] = sidx


def lane_stage_end(b, w, s, t, step, reason, Y, n_stages, rec_t, rec_step, rec_stage, rec_y, n_rec, status,
                   stop_stage, end_step, end_t, end_reason):
    """Stage s of lane w (trajectory b) ends at (step, t) for ``reason`` (0 its length, 1 its criterion): the
    record, the stage end and the stop stage. Returns whether the lane goes on into stage s + 1 (False: the
    record buffer was full, or s was the last stage)."""
    sidx = s + 1
    if not lane_record_into(b, t, step, sidx, Y[:, w], rec_t, rec_step, rec_stage, rec_y, n_rec,  # noqa: F821
                            status):
        return False
    end_step[b, s] = step
    end_t[b, s] = t
    end_reason[b, s] = reason
    stop_stage[b] = sidx
    return s + 1 < n_stages[b]


def lane_crit_met(kind, w, lossw, cargs, op, thr):
    """Whether stop criterion ``kind`` (!= 0) of lane w holds at the evaluated state: its value
    (``lane_criterion_of``) >= thr (op > 0) or <= thr (op < 0)."""
    cv = lane_criterion_of(kind, w, lossw, cargs)  # noqa: F821
    return (op > 0 and cv >= thr) or (op < 0 and cv <= thr)


def lane_gd_decide(b, w, lossw, cargs, Y, etv, st, step, end, target, jj, live, n_stages, stage_len, crit_kind,
                   crit_op, crit_thr, every, pts, n_pts, rec_t, rec_step, rec_stage, rec_y, n_rec, status,
                   stop_stage, end_step, end_t, end_reason):
    """Lane w (trajectory b, live) at an evaluated state of loss ``lossw``: the decisions of
    ``gd_trajectory`` / the system's gd advance until the lane steps (returns True: one GD step of stage
    st[w]) or stops (False, live[w] False): a non-finite loss (status 2), the stage's criterion (the stage
    ends, reason 1), the stage's length (reason 0), a record point (every[b], pts[b]); st, step, end,
    target, jj, live: the lanes' stage, step, stage end, next stop, next record point and liveness, (W,)
    arrays. The caller sets final_loss[b] = lossw before (the loss at the last evaluated state, what
    gd_trajectory leaves there). Thirty arguments: a call of more makes CPython pass a tuple (*args), which
    numba does not inline. Even inlined, entering it costs a reference count operation per array argument
    (about 0.13 us a lane-step at K = 2, L = 3): the drivers call it only where a lane does not simply step
    (``step[w] == target[w]``, a non-finite loss, its criterion met: :func:`lane_crit_met`)."""
    while True:
        s = st[w]
        code = -1
        if not math.isfinite(lossw):
            code = 2
        elif crit_kind[b, s] != 0 and lane_crit_met(crit_kind[b, s], w, lossw, cargs, crit_op[b, s],  # noqa: F821
                                                    crit_thr[b, s]):
            code = 1
        if code == -1 and step[w] == target[w]:
            code = 0
        if code == -1:
            return True
        # the end of a gd_stage call: gd_trajectory's handling
        t = step[w] * etv[w]
        if code == 2:
            live[w] = False
            lane_fail(b, w, code, t, step[w], s + 1, Y, rec_t, rec_step, rec_stage, rec_y, n_rec, status,  # noqa: F821
                      stop_stage)
            return False
        if code == 1 or step[w] >= end[w]:
            if not lane_stage_end(b, w, s, t, step[w], code, Y, n_stages, rec_t, rec_step, rec_stage,  # noqa: F821
                                  rec_y, n_rec, status, stop_stage, end_step, end_t, end_reason):
                live[w] = False
                return False
            st[w] = s + 1
            end[w] = step[w] + stage_len[b, s + 1]
        else:
            ev = every[b]
            if (ev > 0 and step[w] % ev == 0) or (jj[w] < n_pts[b] and step[w] == pts[b, jj[w]]):
                if not lane_record_into(b, t, step[w], s + 1, Y[:, w], rec_t, rec_step, rec_stage,  # noqa: F821
                                        rec_y, n_rec, status):
                    live[w] = False
                    return False
        target[w], jj[w] = _next_target(b, step[w], end[w], every[b], jj[w], pts, n_pts)  # noqa: F821


#: the templates, in the order a system instantiates them (:func:`instantiate_into`)
TEMPLATES = (lane_begin, lane_fail, lane_stage_end, lane_crit_met, lane_gd_decide)


def instantiate_into(namespace: dict, decorate, tag: str = "", names=None) -> None:
    """Compile the templates over ``namespace`` (a lane module's globals or a build's copy of them) and bind
    each there under its own name (``core.batched.instantiate``; ``tag`` ends the qualified names).

    Parameters
    ----------
    namespace : dict
        The globals the templates resolve ``lane_record_into``, ``_next_target``, ``lane_criterion_of`` in.
    decorate : callable
        The decorator (``numba.njit(cache=True, nogil=True, inline="always")``).
    tag : str
        Suffix of the qualified names (numba's disk cache keys on them).
    names : iterable of str, optional
        Only these templates (default: all of :data:`TEMPLATES`).

    Returns
    -------
    None

    Examples
    --------
    >>> ns = {}
    >>> instantiate_into(ns, lambda f: f, names=("lane_fail",))
    >>> sorted(k for k in ns if k.startswith("lane_"))
    ['lane_fail']
    """
    from .batched import instantiate

    namespace.setdefault("math", math)  # the templates' one module
    for template in TEMPLATES:
        name = template.__name__
        if names is None or name in names:
            namespace[name] = instantiate(template, namespace, name, decorate, tag)
