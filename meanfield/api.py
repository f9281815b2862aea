"""The public Python API of meanfield (``import meanfield as mf``)::

    import meanfield as mf
    desc = mf.load("incontext", K=3, N=10, steps=200)   # a shipped name or a TOML path; keyword overrides
    desc = mf.set_parameters(desc, p1=0.55)             # the same description, other parameters
    r = mf.run(desc)                                    # a meanfield.Run (tqdm progress; progress=False: none)
    r.plot(); r.to_xarray(); r.state(50.0)
    mf.run(desc, out="runs/ic.h5")                      # the same, written as a run file
    mf.plot_runs(["runs/a.h5", "runs/b.h5"], label="width")
    mf.derive(desc)["latex"]                            # the ODE of each state entry (small models)

Every function is also a command (``meanfield model run|particles|width-sweep|check|derive``,
``meanfield plot``); bad input raises :class:`meanfield.core.errors.ConfigError`
with the one line the command prints. Nothing here is imported by
``import meanfield`` until it is used (no numba, sympy or xarray at import).
"""

from __future__ import annotations

from pathlib import Path


def _desc(model, overrides=None):
    """A Description from a Description, a TOML path or a shipped name."""
    from .engine.objects import Description

    if isinstance(model, Description):
        if overrides:
            return set_parameters(model, **overrides)
        return model
    return load(model, **(overrides or {}))


def _sized(model, overrides=None, **size):
    """:func:`_desc` under the command's ceilings (``meanfield.core.limits``):
    the estimated memory and time of the work, ``size`` as the command's
    (``particles_d``: True for the default d, ``copies``, ``width``), checked
    from the file before a general description's data are built and again
    from the description; one-line ConfigError, the command's own."""
    import dataclasses

    from .engine.edges import check_engine_size, description_size_first, family_size_first
    from .engine.objects import Description
    from .engine.twolayer_desc import TwoLayerDescription

    if not isinstance(model, (Description, TwoLayerDescription)):
        from .core.guard import read_config_text
        from .engine.cli import model_path

        raw = read_config_text(model_path(str(model)), "model")
        flags = {k: v for k, v in (overrides or {}).items() if v is not None}
        if isinstance(raw.get("family"), str):
            family_size_first(raw, flags, False, **size)
        else:
            description_size_first(raw, flags, False, **size)
    desc = model if isinstance(model, TwoLayerDescription) and not overrides else _desc(model, overrides)
    if isinstance(desc, TwoLayerDescription):  # its own run checks its own sizes
        return desc
    size = dict(size)
    width = size.pop("width", None)
    sized = desc if width is None else dataclasses.replace(desc, init=dataclasses.replace(desc.init, width=width))
    if size.get("particles_d") is True:
        size["particles_d"] = desc.dictionary.P + 2
    check_engine_size(sized, False, **size)
    return desc


def load(model, **overrides):
    """Load a model description.

    Parameters
    ----------
    model : str or Path
        a TOML file, or the name of a shipped description (``incontext``,
        ``maxmargin``, ``mixture``, ``mixture_multiclass``).
    **overrides
        parameter values (the model's declared parameters and the run knobs,
        the same as the command's flags): ``K=3, steps=500, width=16``.

    Returns
    -------
    meanfield.engine.description.Description
        (a ``meanfield.engine.twolayer_desc.TwoLayerDescription`` for a two-layer description,
        ``[model] class = "twolayer"``, or the shipped ``induction``)

    Raises
    ------
    ConfigError
        one line naming the field (an undeclared parameter, a wrong type, ...).

    Examples
    --------
    >>> import meanfield as mf
    >>> desc = mf.load("incontext", K=3, N=6, steps=20)
    >>> desc.name, dict(desc.declared)["K"]
    ('incontext', 3)
    """
    import dataclasses

    from .engine.cli import model_path
    from .engine.description import load_description

    path = model_path(str(model))
    ov = {k: v for k, v in overrides.items() if v is not None}
    d = load_description(path, ov)
    if not hasattr(d, "overrides"):  # a two-layer description (meanfield.engine.twolayer_desc)
        return d
    return dataclasses.replace(d, overrides=tuple(sorted(ov.items())))


def set_parameters(desc, **overrides):
    """The same description with other parameter values (re-resolved from its file).

    Parameters
    ----------
    desc : Description
        loaded by :func:`load` (it needs the file it came from).
    **overrides
        new values; the earlier overrides are kept unless replaced.

    Returns
    -------
    Description

    Examples
    --------
    >>> import meanfield as mf
    >>> d = mf.set_parameters(mf.load("incontext", K=3, N=6), N=8)
    >>> dict(d.declared)["N"], dict(d.declared)["K"]
    (8, 3)
    """
    from .core.errors import ConfigError

    if not desc.source:
        raise ConfigError("desc: set_parameters needs a description loaded from a file (meanfield.load); build a "
                          "Python one again with the new values")
    return load(desc.source, **{**dict(getattr(desc, "overrides", ()) or ()), **overrides})


def run(model, out=None, progress: bool = True, specialise: bool | str = "auto", **overrides):
    """Run a model's exact reduced dynamics.

    Parameters
    ----------
    model : Description, str or Path
        a description (:func:`load`), a TOML file or a shipped name.
    out : str or Path, optional
        also write the run file there (atomically; checkpoints, signals as
        ``meanfield model run``).
    progress : bool
        a ``tqdm.auto`` bar (a widget in a notebook, a text bar in a
        terminal); False: none.
    specialise : bool or "auto"
        True: GD by the loop compiled for this description (``meanfield.engine.specialise``: equal bit
        for bit, faster; about 20 s to compile the first time, then cached); ``"auto"`` (default): that
        loop where one is ready, else the generic loop (never waiting for a compile; after 10 s there, a
        long run has the loop compiled by a second process: ``meanfield.engine.background``); False: the
        generic loop.
    **overrides
        parameter values, as for :func:`load`.

    Returns
    -------
    Run
        status ``complete``, ``diverged`` or ``interrupted`` (SIGINT /
        SIGTERM, e.g. the notebook's stop button, ends it with what was
        reached).

    Examples
    --------
    >>> import meanfield as mf
    >>> r = mf.run("incontext", K=3, N=6, steps=20, progress=False)
    >>> r.status, len(r.t)                  # a record every 10 steps (record_every)
    ('complete', 3)
    """
    from .core.progress import monitor
    from .engine import kernels
    from .engine.runs import in_memory, run_to_file
    from .engine.system import integrate_description, system_of

    from .engine.specialise import choice
    from .engine.twolayer_desc import TwoLayerDescription

    if choice(specialise) == "auto":
        from .engine.background import enabled

        enabled()  # MEANFIELD_BACKGROUND_COMPILE, refused before any notice or work
    desc = _sized(model, overrides)  # the command's ceilings (meanfield.core.limits), before the work
    if isinstance(desc, TwoLayerDescription):  # the two-layer class (meanfield.engine.twolayer_run)
        if specialise is True:
            from .engine.specialise import refuse_twolayer

            refuse_twolayer()
        return _run_twolayer(desc, out, progress)
    if specialise is not True:  # (the specialised loop says so itself when it compiles)
        _notice(desc, kernels, echo=progress)
    if out is not None:
        from .core.guard import check_output_file

        path = check_output_file(out, "out", (".h5", ".hdf5"))
        r, p = run_to_file(desc, path, progress=False,
                           monitor_factory=lambda **kw: monitor(progress, desc=desc.name, **kw), specialise=specialise)
        r.path = Path(p)
        return r
    tr = desc.training
    system = system_of(desc, specialise, background=True)
    with monitor(progress, total=tr.horizon, unit="step" if tr.method == "gd" else "t", desc=desc.name) as mon:
        _, traj = integrate_description(desc, None, mon, system)
        if traj.step:  # the bar ends where the run ended (the last chunk reports no update)
            mon.done = float(traj.step[-1] if tr.method == "gd" else traj.t[-1])
    return in_memory(desc, system, traj)


def _run_twolayer(desc, out, progress):
    from .core.progress import monitor
    from .engine import twolayer_run

    if out is not None:
        from .core.guard import check_output_file
        from .core.run import read_file

        path = check_output_file(out, "out", (".h5", ".hdf5"))
        _, p = twolayer_run.run_to_file(desc, path, progress=False,
                                        monitor_factory=lambda **kw: monitor(progress, desc=desc.name, **kw))
        return read_file(p)
    tr = desc.training
    with monitor(progress, total=tr.horizon, unit="step" if tr.method == "gd" else "t", desc=desc.name) as mon:
        return twolayer_run.run(desc, mon)


def _notice(desc, kernels, echo: bool):
    from .engine.runs import compile_notice

    compile_notice(desc, echo=echo)


def particles(model, d=None, out=None, progress: bool = True, batch=None, batch_seed=None, **overrides):
    """Train the explicit finite-width network of a description (numpy weights, its own backward pass).

    Parameters
    ----------
    model : Description, str or Path
        with a finite ``width`` (``width=64``).
    d : int, optional
        the ambient dimension (> P; default P + 2).
    out : str or Path, optional
        also write the projected run file there.
    progress : bool
        a ``tqdm.auto`` bar; False: none.
    batch : int, optional
        icl_regression data: online SGD, every step on a new batch of this
        many sampled prompts (``model particles --batch B``); None: full-batch GD.
    batch_seed : int, optional
        seed of the batches (``--batch-seed``; default 0).
    **overrides
        parameter values, as for :func:`load`.

    Returns
    -------
    Run
        the projected states (Gram blocks of the explicit weights), the same
        entries as :func:`run` of the description.

    Examples
    --------
    >>> import meanfield as mf
    >>> r = mf.particles("incontext", K=3, N=6, steps=5, width=8, progress=False)
    >>> r.status
    'complete'
    """
    from .core.config import as_int
    from .core.progress import monitor
    from .engine import finite

    desc = _sized(model, overrides, particles_d=True if d is None else as_int("d", d, lo=1))
    from .engine.twolayer_desc import TwoLayerDescription

    if isinstance(desc, TwoLayerDescription):  # the explicit torch network at its width (engine.twolayer_particles)
        from .core.errors import ConfigError
        from .engine import twolayer_particles as tlp

        if d is not None or batch is not None or batch_seed is not None:
            raise ConfigError("d: not for a two-layer description's explicit network (no d, batch or batch_seed: "
                              "full batch, the stream in its own basis)")
        if out is not None:
            from .core.io import read_run

            _, p = tlp.particles_to_file(desc, out, progress=False)
            r = read_run(p)
            r.path = Path(p)
            return r
        return tlp.particles(desc)
    if out is not None:
        r, p = finite.particles_to_file(desc, out, d=d, progress=False, batch=batch, batch_seed=batch_seed)
        r.path = Path(p)
        return r
    tr = desc.training
    with monitor(progress, total=tr.horizon, unit="step" if tr.method == "gd" else "t",
                 desc=f"{desc.name} particles") as mon:
        return finite.particles(desc, d, monitor=mon, batch=batch, batch_seed=batch_seed)


def width_sweep(model, widths=(16, 64, 256), seeds: int = 3, out="runs/model_widths.h5", d=None, workers: int = 1,
                progress: bool = True, **overrides):
    """The infinite-width run against the explicit network at several widths and seeds (a two-layer
    description with wide heads: against the exact Gram map at each width, ``meanfield.engine.twolayer_widths``).

    Parameters
    ----------
    model : Description, str or Path
    widths : list of int
        at least two; with exactly two the exponent is the slope through two
        points (no interval: two points fix a line).
    seeds : int
        seeds per width.
    out : str or Path
        the .h5 file (.json and .png are written beside it).
    d : int, optional
        ambient dimension.
    workers : int
        local processes.
    progress : bool
    **overrides
        parameter values, as for :func:`load`.

    Returns
    -------
    dict
        the summary (sup errors per width, the exponent and its interval,
        ``files``).

    Examples
    --------
    >>> s = meanfield.width_sweep("incontext", widths=[8, 32], seeds=2, steps=20)   # doctest: +SKIP
    >>> s["exponent"]                                                              # doctest: +SKIP
    """
    from .core.config import as_int
    from .engine.finite import check_sweep_size, width_sweep as _ws

    widths, seeds = check_sweep_size(widths, seeds)  # the command's ceilings (meanfield.core.limits)
    desc = _sized(model, overrides, particles_d=True if d is None else as_int("d", d, lo=1), width=max(widths),
                  copies=len(widths) * seeds + 1)
    from .engine.twolayer_desc import TwoLayerDescription

    if isinstance(desc, TwoLayerDescription):  # wide heads: the exact Gram map at each m (engine.twolayer_widths)
        from .engine.twolayer_widths import width_sweep as _tws

        if d is not None:
            from .core.errors import ConfigError

            raise ConfigError("d: not for a two-layer description (its stream has no ambient dimension to choose)")
        return _tws(desc, list(widths), seeds, Path(out), progress=progress,
                    log=print if progress else (lambda *a, **k: None))
    return _ws(desc, list(widths), seeds, Path(out), d=d, workers=workers, progress=progress,
               log=print if progress else (lambda *a, **k: None))


def check(model, out=None, quick: bool = True, progress: bool = True):
    """Rerun a shipped paper model's claims and write report.md / report.json.

    Parameters
    ----------
    model : str or Path
        ``incontext``, ``maxmargin``, ``mixture_multiclass`` or their TOML files.
    out : str or Path, optional
        output folder (default ``runs/<model>_check``: one per model, so checks
        of two models do not overwrite each other).
    quick : bool
        smaller settings (minutes, not tens of minutes).
    progress : bool
        print the checker's progress lines.

    Returns
    -------
    (list of Claim, Path)
        the claims (``.name``, ``.passed``, ``.source`` proved | shown |
        expected, numbers) and the report's path.

    Examples
    --------
    >>> claims, report = meanfield.check("incontext", out="runs/ic_check")   # doctest: +SKIP
    >>> all(c.passed for c in claims)                                       # doctest: +SKIP
    """
    from .engine.cli import model_path
    from .engine.checks import run_check

    path = model_path(str(model))
    return run_check(path, Path(out if out is not None else f"runs/{path.stem}_check"), quick=quick,
                     log=print if progress else (lambda *a, **k: None))


def derive(model, latex: bool = True, **overrides):
    """The reduced variables of a description: names, counts and the dynamics.

    Parameters
    ----------
    model : Description, str or Path
    latex : bool
        also the LaTeX derivation (``out["latex"]``): for descriptions with at
        most 12 state entries the ODE of each entry, else the general map.
    **overrides
        parameter values, as for :func:`load`.

    Returns
    -------
    dict
        ``variables`` (head, name, kind, shape, count of each), the GD map and flow in words,
        ``parameters`` and ``latex``.

    Examples
    --------
    >>> import meanfield as mf
    >>> [v["name"] for v in mf.derive("incontext", K=2, N=3, latex=False)["variables"]]
    ['W']
    """
    from .engine.api import derive as _derive

    return _derive(_desc(model, overrides), latex=latex)


def warm(names=None) -> float:
    """Compile every kernel family into numba's cache (``meanfield warm``).

    Parameters
    ----------
    names : set of str, optional
        families (``meanfield.warm.FAMILIES``); default all.

    Returns
    -------
    float
        seconds taken.

    Examples
    --------
    >>> meanfield.warm()          # doctest: +SKIP
    """
    from . import cli
    from .warm import warm as _warm

    return _warm(cli.main, names)
