"""The explicit finite-width network of a description as a particle system; width sweeps (``meanfield.engine.finite``).

``meanfield model particles MODEL.toml --width M [--d D] --out F.h5`` trains the
explicit network generated from the description (``meanfield.engine.oracle``:
numpy weights in R^d, its own forward and backward pass) with full-batch GD on
the description's stages, criteria and record grid, and writes a run file of
the engine's schema (for the mixture description: today's mixture run file,
``S``, ``A``, ``B``, ``w``, ``loss``, ...): the recorded states are the
projections of the explicit weights on the dictionary (Gram blocks
E^T M_a^T M_b E, w~ = E^T w, W~ = E^T W E), so every reader and plot of engine
runs takes them. The run starts from the engine's initial Gram at width m
(``reduce.initial_weights``: the weights restricted to span(E)) plus an
orthogonal part the loss never sees; d defaults to P + 2 (the smallest
ambient space with room outside span(E) and then some).

``meanfield model width-sweep MODEL.toml --widths 16,64,256 --seeds 3 --out F.h5``
runs the engine at infinite width once and the particle system at every
(m, seed); it reports per width the sup-over-time error of every named
variable group and the loss (mean, min, max over seeds), a fitted error
exponent with a 95% confidence interval (``meanfield.core.widths.fit_exponent``),
the ReLU kink events of the infinite-width run (``meanfield.core.widths.kink_events``) and
whether the finite-width runs land on the other side of one (then no exponent
is reported, as in ``meanfield mixture width-sweep``), and the largest relative
difference between each particle run and the engine's reduced run at the same
finite width (a closure cross-check, ~1e-14). Writes F.h5, F.json, F.png.

API: :func:`particles` (an engine :class:`~meanfield.engine.runs.Run` of the
projected states), :func:`particles_to_file`, :func:`width_sweep`,
:class:`ParticleSystem` (the ``meanfield.core.integrate`` system holding the weights).
Methods flow and rk4 integrate the gradient flow of the explicit weights
themselves (:class:`FlowParticleSystem`, records projected afterwards; every
record holds the weights while the run lasts, so a very wide flow run is
refused with the memory estimate).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..core.config import ConfigError, as_int
from ..core.errors import raise_if_signalled
from . import oracle as orc
from .description import Description
from .particle_system import FlowParticleSystem, ParticleSystem

def default_d(desc: Description) -> int:
    return desc.P + 2


def _check(desc: Description, d: int | None) -> int:
    if desc.init.width is None:
        raise ConfigError("width: the explicit network needs a finite width m (--width M)")
    if desc.dictionary.trainable:
        raise ConfigError("dictionary.trainable: not for the explicit network of particles / width-sweep (its "
                          "oracle holds E fixed); run the engine, whose state with trainable embeddings is exact at every m")
    if desc.init.init_from is not None:
        raise ConfigError("init_from: not for the explicit network (a run file holds the weights' Gram, which does "
                          "not determine the weights); run the engine")
    d = default_d(desc) if d is None else as_int("d", d, lo=1)
    if d <= desc.P:
        raise ConfigError(f"d: the ambient dimension must be > P = {desc.P} (the number of features); got {d}")
    # the m x d weights: W_K and W_Q of a separate head, M_V of a matrix value (a merged W is d x d)
    wide = sum((h.kq == "separate") * 2 + (h.value == "matrix") for h in desc.model.heads)
    mem = 8.0 * float(desc.init.width) * d * 1.5 * wide
    if desc.training.method != "gd":
        mem *= 1 + 2 * 1000  # the flow keeps the weights of every record (about 1000 by default) until the end
    if mem > 8e9:
        raise ConfigError(f"width: {desc.init.width} x d = {d} needs about {mem / 1e9:.1f} GB of weights; "
                          "choose a smaller --width or --d")
    return d


def make_particles(desc: Description, d: int | None = None, embed_seed=None, batch=None,
                   batch_seed=None) -> ParticleSystem:
    """The initialised particle system of a finite-width GD description: embedding
    E (d x P) from ``default_rng(embed_seed)`` (default: the init seed), weights from
    the engine's initial Gram plus an orthogonal part (seed: the init seed + 1);
    ``batch``: online SGD on sampled prompt batches (icl_regression data only,
    ``meanfield.engine.icl_particles``)."""
    d = _check(desc, d)
    if getattr(desc.training, "normalise", "none") != "none":
        from ..core.config import ConfigError

        raise ConfigError("normalise: the explicit network (particles) runs plain GD only; use normalise = none "
                          "or the engine's own run (exact at every width)")
    if getattr(desc.training, "ridge", 0.0):
        from ..core.config import ConfigError

        raise ConfigError("ridge: the explicit network (particles) trains without the penalty; use ridge = 0 or "
                          "the engine's own run (exact at every width)")
    seed = desc.init.seed if embed_seed is None else embed_seed
    E = orc.embedding(desc.dictionary.Gamma, d, [int(seed), 7])
    params = orc.weights_from_engine_init(desc, E, seed_orth=[int(desc.init.seed), 11])
    if batch is not None or batch_seed is not None:  # a seed without a batch is refused there
        from .icl_particles import check_batch, make_system

        return make_system(desc, E, params, *check_batch(desc, batch, batch_seed))
    if desc.training.method != "gd":
        return FlowParticleSystem(desc, E, params, desc.training.max_abs)
    return ParticleSystem(desc, E, params, desc.training.max_abs)


def _solve(desc: Description, psys, monitor=None):
    """The particle system's trajectory as the solver leaves it (flow: records of
    the flat weights; GD: projected states)."""
    from .system import save_at, solver, stages

    y0 = psys.y0 if isinstance(psys, FlowParticleSystem) else psys.projection()
    return solver(desc).solve(psys, y0, stages(desc), save_at(desc), monitor)


def _projected(desc: Description, psys, traj):
    """``traj`` with projected records: as is for GD; for the flow a copy whose
    records are the projections of the recorded weights (``traj`` is not changed)."""
    if not isinstance(psys, FlowParticleSystem):
        return traj
    return replace(traj, y=[orc.pack(desc, psys.E, psys.unflat(v)) for v in traj.y])


def particles(desc: Description, d: int | None = None, embed_seed=None, monitor=None, batch=None, batch_seed=None):
    """Train the explicit finite-width network of a description and project its states.

    The network is generated from the description (wide W_K, W_Q in R^{m x d}
    with the tokens embedded in R^d, ``m = desc.init.width``) and trained by
    plain numpy full-batch GD (or RK4 of its flow): an implementation
    independent of the reduced dynamics, against which they are tested.

    Parameters
    ----------
    desc : Description
        A description with a finite width (``load(path, width=16)``).
    d : int or None
        Embedding dimension of the tokens (default: enough for the Gram
        matrix, see ``default_d``).
    embed_seed : int or None
        Seed of the random embedding E with E^T E = Gamma (default: the
        description's seed).
    monitor : meanfield.core.integrate.Monitor or None
        Progress and interruption (None: none).
    batch : int or None
        Online SGD on sampled prompt batches of this size (icl_regression
        data); None: full-batch GD.
    batch_seed : int or None
        Seed of the sampled batches.

    Returns
    -------
    Run
        An engine run of the projected states (the same names as
        :func:`meanfield.engine.run`: ``r.S["h", "plus", "blank"]``, ``r.loss``),
        with the particle system as ``r.particles``.

    Raises
    ------
    ConfigError
        Infinite width, a ``d`` too small for the Gram matrix, a size beyond
        the machine.

    Examples
    --------
    >>> import meanfield.engine as me
    >>> desc = me.load("docs/examples/majority.toml", width=16, seed=2, steps=200)
    >>> net = me.particles(desc)            # the explicit network, m = 16
    >>> red = me.run(desc)                  # the reduced dynamics, same init
    >>> float(abs(net.loss - red.loss).max()) < 1e-9
    True
    """
    from .runs import in_memory
    from .system import system_of

    psys = make_particles(desc, d, embed_seed, batch, batch_seed)
    r = in_memory(desc, system_of(desc), _projected(desc, psys, _solve(desc, psys, monitor)))
    r.particles = psys
    return r


def particles_to_file(desc: Description, out, d: int | None = None, embed_seed=None, progress: bool = True,
                      checkpoint_s: float = 60.0, batch=None, batch_seed=None):
    """:func:`particles` written as a run file (what ``meanfield model particles`` does).

    The file has the engine's schema with attrs ``particles`` = 1, ``d`` and
    ``embed_seed``; it is written through the shared harness
    (``meanfield.core.harness.run_to_file``): progress on stderr for long
    runs, a checkpoint every ``checkpoint_s`` seconds (status interrupted,
    naming the step or time reached; one that fails is a warning and the run
    goes on), SIGINT/SIGTERM end the run with a valid file (status
    interrupted), a blow-up with status diverged.

    Parameters
    ----------
    desc : Description
        A description with a finite width.
    out : str or Path
        The run file (``.h5`` or ``.hdf5``).
    d, embed_seed, batch, batch_seed
        As in :func:`particles`.
    progress : bool
        Print progress for runs longer than 2 s.
    checkpoint_s : float
        Seconds between checkpoints.

    Returns
    -------
    tuple of (Run, Path)
        The projected run (as :func:`particles`; ``r.status`` is
        ``complete``, ``diverged`` or ``interrupted``) and the path written.

    Raises
    ------
    ConfigError
        A path that is not ``.h5`` or cannot be written, and the errors of
        :func:`particles`.

    Examples
    --------
    >>> import meanfield.engine as me
    >>> desc = me.load("docs/examples/majority.toml", width=16, seed=2, steps=200)
    >>> r, path = me.particles_to_file(desc, "runs/majority_net16.h5", progress=False)
    >>> r.status, path.name
    ('complete', 'majority_net16.h5')
    """
    from ..core import harness
    from .runs import in_memory, save
    from .system import system_of

    out = Path(out)
    if out.suffix not in (".h5", ".hdf5"):
        raise ConfigError(f"out: must be a path ending in .h5 or .hdf5, got {str(out)!r}")
    dd = _check(desc, d)
    attrs = {"particles": 1, "d": int(dd), "embed_seed": int(desc.init.seed if embed_seed is None else embed_seed)}
    psys = make_particles(desc, dd, embed_seed, batch, batch_seed)
    if "icl" in desc.data.extra:  # how the explicit network was trained, what its loss is
        from .icl_particles import attrs_of, check_batch

        attrs.update(attrs_of(desc, *check_batch(desc, batch, batch_seed)))
    system = system_of(desc)

    def result(traj):
        r = in_memory(desc, system, _projected(desc, psys, traj))
        r.particles = psys
        return r

    return harness.run_to_file(
        desc.training, lambda mon: _solve(desc, psys, mon),
        lambda r, status=None, message=None: save(out, desc, r, status=status, message=message, extra_attrs=attrs),
        progress=progress, checkpoint_s=checkpoint_s, label="particles ", result=result)


# ------------------------------------------------------------------ width sweep


def _groups(run) -> dict[str, np.ndarray]:
    """Recorded quantities by name: every named block over heads (T, ...), and the loss."""
    out: dict[str, list] = {}
    for key, arr in run.obs["blocks"].items():
        _, nm = key.split(":", 1)
        out.setdefault(nm, []).append(np.asarray(arr).reshape(len(arr), -1))
    q = {nm: np.concatenate(v, axis=1) for nm, v in out.items()}
    q["loss"] = np.asarray(run.loss)[:, None]
    return q


def _finite_job(job):
    """One (m, seed): the particle run, its errors against the infinite-width records,
    the sides of its pre-activations in each kink event, the closure cross-check."""
    from .runs import run as engine_run

    desc, inf, events, d = job
    t0 = time.perf_counter()
    r = particles(desc, d)
    q = _groups(r)
    t_inf = inf["t"]
    common, ia, ib = np.intersect1d(np.round(r.t, 12), np.round(t_inf, 12), return_indices=True)
    err_t = {}
    for nm, ref in inf["q"].items():
        if nm in q:
            dlt = np.abs(q[nm][ia] - ref[ib])
            err_t[nm] = dlt.max(axis=1) if dlt.size else np.zeros(0)
    u = np.asarray(r.obs["u"]).reshape(len(r.t), r.obs["u"].shape[1], -1)
    sides = []
    for e in events:
        sel = (r.t >= e["t_start"] - 1e-12) & (r.t <= e["t_end"] + 1e-12)
        uu = u[sel, e["sample"], e["col"]]
        sides.append([int(np.sum(uu > 0)), int(np.sum(uu < 0)), int(np.sum(uu == 0))])
    red = engine_run(desc, background=False)
    n = min(len(red.y), len(r.y))
    scale = np.maximum(np.abs(red.y[:n]).max(axis=1, keepdims=True), 1.0)
    rel = float(np.max(np.abs(r.y[:n] - red.y[:n]) / scale)) if n else math.nan
    return {"width": desc.init.width, "seed": desc.init.seed, "status": r.status, "n_common": int(len(common)),
            "err_t": err_t, "t": common, "sides": sides, "reduced_rel_diff": rel,
            "elapsed_s": time.perf_counter() - t0}


#: A quantity is named as not decreasing with m when its mean sup error falls, from the smallest width to the
#: largest, by less than m^NOT_DECREASING: the midpoint, on a log scale, between the mean-field rate m^-1/2 and
#: no decrease at all (the nearer of the two hypotheses). Asking for any decrease (err at the largest width >=
#: err at the smallest) decided between two O(1) errors that differ by a few percent (0.709 at m = 16, 0.690 at
#: m = 256 for the multi-class neurons), i.e. by the seeds' spread and the rounding (CPU, SIMD summation order)
#: that the unstable trajectory amplifies: a machine-dependent verdict.
NOT_DECREASING = -0.25


def check_sweep_size(widths, seeds, force: bool = False) -> tuple[list[int], int]:
    """The ceilings of a width sweep's sizes (``meanfield.core.limits``), the
    same for ``meanfield model width-sweep`` and ``meanfield.width_sweep``.

    Parameters
    ----------
    widths : iterable
        The widths m (at most ``MAX_LIST`` values, each an integer >= 1).
    seeds : int or str
        Seeds per width (1 .. ``MAX_SEEDS``).
    force : bool
        Go past the memory estimate of the particle runs.

    Returns
    -------
    tuple of (list of int, int)
        The widths and the seed count.

    Raises
    ------
    ConfigError
        One line naming the field and its allowed values.

    Example
    -------
    >>> check_sweep_size([4, 8], 2)
    ([4, 8], 2)
    """
    import itertools

    from ..core.config import as_list
    from ..core.limits import MAX_LIST, MAX_SEEDS, check_list, check_size

    if isinstance(widths, (str, int)):
        widths = as_list("widths", str(widths))
    elif not hasattr(widths, "__len__"):  # a generator: never more than the ceiling's worth of it
        widths = list(itertools.islice(widths, MAX_LIST + 1))
    widths = [as_int("widths", v, lo=1) for v in check_list("widths", widths)]
    n_seeds = as_int("seeds", seeds, lo=1, hi=MAX_SEEDS)
    n_jobs = float(len(widths)) * n_seeds  # each particle run holds a description and its errors: >= 10 KiB
    check_size({"bytes": 10240.0 * n_jobs, "seconds": 0.0}, "size", bool(force),
               f" (width-sweep: {n_jobs:.3g} particle runs, {len(widths)} widths x {n_seeds} seeds)")
    return widths, n_seeds


def width_sweep(desc: Description, widths, seeds: int, out, d: int | None = None, tol_rel: float = 1e-9,
                workers: int | None = 1, executor=None, progress: bool = True, log=print) -> dict:
    """Finite widths against infinite width: the error of the explicit network at every (m, seed).

    Runs the infinite-width reduced dynamics once and the explicit network
    (:func:`particles`) at every width and seed, measures the sup-norm error
    of each recorded variable over the run, fits the exponent of its decay in
    m and names kinks (pre-activations tied at the ReLU kink) where the error
    does not decay. Interrupted (SIGINT / SIGTERM: KeyboardInterrupt), it
    writes ``out`` at once with status ``interrupted`` and everything finished
    so far (:func:`meanfield.core.widths.write_interrupted`) and re-raises.

    Parameters
    ----------
    desc : Description
        The model (its width is ignored: every width in ``widths`` is run).
    widths : iterable of int
        The widths m; the exponent's interval needs three or more (with two,
        the slope through the two points and no interval).
    seeds : int
        Seeds 0..seeds-1 per width.
    out : str or Path
        The run file of the errors (``.h5``); ``out.json`` and ``out.png``
        (the figure) are written beside it.
    d : int or None
        Embedding dimension (as in :func:`particles`).
    tol_rel : float
        Relative tolerance below which an error counts as rounding.
    workers : int or None
        Processes for the (m, seed) points (None: one per core).
    executor : optional
        A ``concurrent.futures`` executor to use instead.
    progress : bool
        Print progress.
    log : callable
        Where the summary lines go (``print``).

    Returns
    -------
    dict
        The summary written to ``out.json``: per quantity the errors per
        width and seed (``errors``), the fitted exponents with their
        intervals, the kinks found, and ``files`` (the .h5, .json and .png
        written).

    Raises
    ------
    ConfigError
        Bad widths or seeds, a path that is not ``.h5``.

    Examples
    --------
    >>> import meanfield.engine as me
    >>> desc = me.load("docs/examples/majority.toml", width=16, seed=2, steps=200)
    >>> s = me.width_sweep(desc, [4, 16, 64], seeds=2, out="runs/majority_widths.h5", progress=False,
    ...                    log=lambda line: None)
    >>> [f.rsplit(".", 1)[1] for f in s["files"]]
    ['h5', 'json', 'png']
    """
    from ..core.sweep import Progress, map_points
    from ..core.widths import write_interrupted, written_on_signal
    from .runs import run as engine_run

    out = Path(out)
    if out.suffix not in (".h5", ".hdf5"):
        raise ConfigError(f"out: must end in .h5 or .hdf5, got {str(out)!r}")
    widths = sorted({as_int("widths", m, lo=1) for m in widths})
    if not widths:
        raise ConfigError("widths: give positive integers, e.g. --widths 16,64,256")
    seeds = as_int("seeds", seeds, lo=1)
    inf_desc = replace(desc, init=replace(desc.init, width=None))
    for m in widths:
        _check(replace(desc, init=replace(desc.init, width=m)), d)
    t0 = time.perf_counter()
    ident = {"format": "meanfield-width-sweep", "format_version": 1, "system": "engine", "model": desc.name,
             "config": json.dumps(desc.parameters.to_dict() if hasattr(desc.parameters, "to_dict") else {},
                                  sort_keys=True, default=str)}

    r_inf, q_inf, jobs, finished = None, {}, [], []

    def interrupted():  # like a run: a valid file with everything done so far
        if r_inf is None:
            write_interrupted(out, ident, widths, seeds, None, [], 0, [])
        else:
            write_interrupted(out, ident, widths, seeds, r_inf.t, finished, len(jobs),
                              [nm for nm in q_inf if all(nm in r["err_t"] for r in finished)])

    log(f"[width-sweep] {desc.name}: infinite width ...")
    with written_on_signal(interrupted):
        r_inf = engine_run(inf_desc)
        q_inf = _groups(r_inf)
        events = _kinks_at_infinity(desc, r_inf, tol_rel)
        inf = {"t": r_inf.t, "q": q_inf}
        jobs = [(replace(desc, init=replace(desc.init, width=m, seed=s)), inf, events, d) for m in widths
                for s in range(seeds)]
        log(f"[width-sweep] {len(jobs)} particle runs (widths {widths}, {seeds} seeds), {len(events)} kink "
            "events at infinite width ...")
        bar = Progress(len(jobs), label="width-sweep", quiet=not progress)
        res = map_points(_finite_job, jobs, executor=executor, workers=workers, progress=bar,
                         on_result=lambda i, r: (finished.append(r), raise_if_signalled()))
        return _summarise(desc, out, ident, widths, seeds, d, tol_rel, t0, r_inf, q_inf, events, res)


def _kinks_at_infinity(desc, r_inf, tol_rel) -> list:
    """The kink events of the infinite-width run over (sample, head x value row) (the engine's u: (T, n, H, rows))."""
    from ..core.widths import kink_events

    u = np.asarray(r_inf.obs["u"])
    H, R = u.shape[2], u.shape[3]
    heads = [h.name for h in desc.model.heads]
    active = [(k, j) for k, h in enumerate(desc.model.heads) if h.value == "neuron"
              for j in range(h.outputs * h.n_neurons)]
    events = []
    if active:
        cols = [k * R + j for k, j in active]
        uu = u.reshape(len(u), u.shape[1], H * R)[:, :, cols]
        names = [f"{heads[k]}[{j}]" if R > 1 else heads[k] for k, j in active]
        for e in kink_events(r_inf.t, uu, tol_rel, heads=names):
            e["col"] = cols[names.index(e["head"])]
            events.append(e)
    return events


def _summarise(desc, out, ident, widths, seeds, d, tol_rel, t0, r_inf, q_inf, events, res) -> dict:
    """The finished width sweep's verdict, file, JSON and figure (:func:`width_sweep`)."""
    from ..core.widths import (exponent_verdict, fit_exponent, kink_split_message, kink_splits, sup_errors,
                               write_outputs)

    kinks = kink_splits(events, res, desc.model.relu_prime_at_zero,
                        lambda i: desc.data.names[i] if desc.data.names else f"x{i}")
    split_events = [k for k in kinks if k["split"]]
    quantities = [nm for nm in q_inf if all(nm in r["err_t"] for r in res)]
    sup = sup_errors(res, widths, quantities)
    # wide weights (the only ones whose initial Gram depends on m): W_K, W_Q (kq = separate), M_V and r (value matrix)
    wide = any(h.kq == "separate" or h.value == "matrix" for h in desc.model.heads)
    fits = {nm: fit_exponent(widths, sup[nm]) for nm in quantities} if wide else {}
    lead = next((nm for nm in ("S", "W", "w") if nm in quantities), quantities[0])
    statuses = [r["status"] for r in res]
    summary = {
        "model": desc.name, "widths": widths, "seeds": seeds, "d": d if d is not None else default_d(desc),
        "quantities": quantities, "lead": lead,
        "errors": {nm: np.nanmean(sup[nm], axis=1).tolist() for nm in quantities},
        "errors_min": {nm: np.nanmin(sup[nm], axis=1).tolist() for nm in quantities},
        "errors_max": {nm: np.nanmax(sup[nm], axis=1).tolist() for nm in quantities},
        "exponent": None, "exponent_ci": None, "exponents": {},
        "kinks": kinks, "kink_tolerance_rel": tol_rel, "infinite_width_status": r_inf.status,
        "reduced_max_rel_diff": {str(m): max(r["reduced_rel_diff"] for r in res if r["width"] == m)
                                 for m in widths},
        "finite_width_statuses": {s: statuses.count(s) for s in set(statuses)},
    }
    if not wide:
        worst = max((float(np.nanmax(sup[nm])) for nm in quantities), default=0.0)
        summary["message"] = (f"model {desc.name} has no wide weights (merged W, neurons and linear values are "
                              "narrow): the width m does not enter its dynamics, so there is no exponent; the "
                              f"explicit networks equal the infinite-width run to {worst:.1e} at every m")
        summary["exponents"] = {nm: None for nm in quantities}
    elif split_events:
        summary["message"] = kink_split_message(split_events, "break the tie with a neuron init (e.g. --neuron-init "
                                                              "const:...)")
        summary["exponents"] = {nm: None for nm in quantities}
    else:
        summary.update(exponent_verdict(fits, lead))
        # a quantity whose mean error does not fall at the mean-field rate is named, whatever the lead says (e.g.
        # attention frozen: S keeps its m^-1/2 init error while the neurons leave by O(1)): see NOT_DECREASING
        err = summary["errors"]
        flat = [nm for nm in quantities if len(widths) > 1 and err[nm][0] > 0
                and err[nm][-1] > err[nm][0] * (widths[-1] / widths[0]) ** NOT_DECREASING]
        summary["not_decreasing"] = flat
        if flat:
            summary["message"] += "; NOT decreasing with m at the mean-field rate: " + ", ".join(
                f"{nm} (m^{fits[nm]['exponent']:.3f}; sup error {summary['errors'][nm][0]:.3g} at m = {widths[0]}, "
                f"{summary['errors'][nm][-1]:.3g} at m = {widths[-1]})" for nm in flat)
    summary["elapsed_s"] = time.perf_counter() - t0
    data = {"widths": np.array(widths), "seeds": np.arange(seeds), "t": r_inf.t,
            "sup_error": {nm: sup[nm] for nm in quantities},
            "infinite": {nm: q_inf[nm] for nm in quantities}}
    attrs = {**ident,
             "status": "complete" if all(s == "complete" for s in statuses + [r_inf.status]) else "incomplete",
             "message": summary["message"], "kinks": json.dumps(kinks), "kink_split": int(bool(split_events)),
             "exponent": summary["exponent"] if summary["exponent"] is not None else math.nan,
             "summary": json.dumps(summary)}
    return write_outputs(out, summary, attrs, data, **_figure_kw(summary))


def _figure_kw(summary: dict) -> dict:
    """The engine's look of the shared width-sweep figure (``meanfield.core.widths.figure``)."""
    return dict(quantities=summary["quantities"], lead=summary["lead"], xlabel="width m (explicit network)",
                title_prefix=f"{summary['model']}: ",
                title=f"{summary['model']}: particles vs infinite width ({summary['seeds']} seeds)",
                title_fontsize=10, legend_fontsize=7, integer_ticks=True)
