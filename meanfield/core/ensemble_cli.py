"""Command-line glue of ``meanfield.core.ensemble`` (light: imports numba, h5py
and dask only when a command runs): the chunked flags of ``mixture sweep`` and
``model sweep`` (one definition, :func:`add_sweep_flags`; the choice of chunks
or one run per point, :func:`use_chunked`; one handler, :func:`cmd_sweep`) and
the ``sweep-plot`` verb of both (:func:`add_plot_parser`)."""

from __future__ import annotations

import sys
from pathlib import Path

from .config import ConfigError, as_int


def parse_keep(text: str | None, n: int) -> list[int]:
    """``--keep-records``: ``I,J,...`` (flat point indices) or ``every:K``."""
    if not text:
        return []
    t = text.strip()
    if t.startswith("every:"):
        k = as_int("keep_records", t[6:], lo=1)
        return list(range(0, n, k))
    out = []
    for v in t.split(","):
        try:
            i = int(v)
        except ValueError:
            raise ConfigError(f"keep_records: expected I,J,... (point indices) or every:K, got {text!r}") from None
        if not 0 <= i < n:
            raise ConfigError(f"keep_records: point indices in 0..{n - 1}, got {i}")
        out.append(i)
    return out


def cmd_sweep(args, base: dict, params: dict, system=None) -> int:
    """``meanfield mixture sweep`` and ``meanfield model sweep MODEL`` as chunks
    (the default when the points share a shape, :func:`use_chunked`): the grid
    ``params`` over ``base`` as an ensemble of ``system`` (None: the mixture;
    ``meanfield.engine.sweep.ModelEnsemble`` for a described model)."""
    from .ensemble import EnsembleProblem, check_scheduler, paths, solve

    check_scheduler(args.scheduler)
    cs = as_int("chunk_size", args.chunk_size, lo=1) if args.chunk_size else None
    from .config import check_workers

    workers = check_workers(args.workers) if args.workers else None
    P = paths(Path(args.out))
    if args.scheduler and workers:
        raise ConfigError("workers: not with --scheduler (the cluster has its workers; local:N sets N)")
    prob = EnsembleProblem(base, axes=params, system=system)
    prob.keep_records = tuple(parse_keep(args.keep_records, prob.size))
    r = solve(prob, P["dir"], backend=args.backend or "cpu", scheduler=args.scheduler, workers=workers, chunk_size=cs,
              progress=not args.quiet)
    counts = ", ".join(f"{v} {k}" for k, v in r.counts.items())
    print(f"{r.path}: {r.status}: {r.n_done}/{r.n_points} points done ({counts}); {r.n_chunks} chunks of "
          f"{r.chunk_size} points, {r.n_chunks_run} run now, {r.elapsed_s:.1f} s")
    for e in r.errors[:5]:
        print(f"meanfield: {e}", file=sys.stderr)
    if r.errors:
        print(f"meanfield: {len(r.errors)} chunks failed; rerun the same command to retry them", file=sys.stderr)
    return 130 if r.status == "interrupted" else (1 if r.errors else 0)


def cmd_sweep_plot(args) -> int:
    from .ensemble_plot import sweep_plot

    fig = sweep_plot(Path(args.sweep), args.x, args.y, z=args.z, hue=args.hue, agg=args.agg, out=args.out,
                     select=args.select)
    print(f"figure: {fig}")
    return 0


def add_sweep_flags(sw) -> None:
    """The chunked-ensemble flags of ``mixture sweep`` and ``model sweep``."""
    sw.add_argument("--per-point", action="store_true",
                    help="one run file per point (OUT/sweep.json + OUT/points/NNNN.h5) instead of the default chunks "
                         "of batched trajectories (OUT/sweep.h5); the default anyway when the points do not share "
                         "one shape (a note says why)")
    sw.add_argument("--chunked", action="store_true",
                    help="the default when the points share one shape: the grid as chunks of batched trajectories "
                         "(meanfield.core.ensemble), OUT/sweep.h5 with one array per output over the grid axes; "
                         "given explicitly, a grid that cannot run so is refused instead of run point by point")
    sw.add_argument("--scheduler", default=None,
                    help="chunked: a dask.distributed cluster, tcp://HOST:8786 or local:N (N local workers); "
                         "needs pip install 'meanfield[dask]'")
    sw.add_argument("--chunk-size", default=None, help="chunked: points per chunk (default: a chunk takes ~5 s, "
                                                       "from a timed probe)")
    sw.add_argument("--keep-records", default=None,
                    help="chunked: also keep the full run files of these points (I,J,... flat indices or every:K)")


def add_plot_parser(verbs) -> None:
    sp = verbs.add_parser("sweep-plot", help="lines or a heatmap of a chunked sweep's sweep.h5")
    sp.add_argument("sweep", help="sweep.h5 of `mixture sweep --chunked` or `model sweep --chunked`")
    sp.add_argument("--x", required=True, help="grid axis on the x axis")
    sp.add_argument("--y", required=True, help="an output (lines: T2, loss_end, ...) or a second axis (heatmap)")
    sp.add_argument("--z", default=None, help="heatmap: the output shown in colour")
    sp.add_argument("--hue", default=None, help="lines: one line per value of this axis")
    sp.add_argument("--agg", default="mean", help="how the other axes are aggregated: mean | median | min | max")
    sp.add_argument("--select", action="append", metavar="AXIS=V1,V2",
                    help="keep only these values of an axis (repeatable), e.g. --select eta=0.5,1")
    sp.add_argument("--out", default=None, help="figure file (.png, .pdf, .svg); default beside sweep.h5")
    sp.set_defaults(func=cmd_sweep_plot)


def chunked_requested(args) -> bool:
    """Chunks asked for explicitly: ``--chunked``, ``--scheduler`` (a cluster runs chunks),
    ``--chunk-size`` or ``--keep-records`` (they set how a chunked sweep runs). With ``--per-point``
    or ``--batched`` (one run file per point) they are refused in one line."""
    on = [f for f in ("chunked", "scheduler", "chunk_size", "keep_records") if getattr(args, f, None)]
    for other in ("per_point", "batched"):
        if on and getattr(args, other, False):
            raise ConfigError(f"{other}: not with --{on[0].replace('_', '-')} (--{other.replace('_', '-')} writes "
                              "one run file per point; chunks write OUT/sweep.h5)")
    return bool(on)


def use_chunked(args, base: dict, params: dict, system=None, stream=None) -> bool:
    """Whether ``mixture sweep`` / ``model sweep`` runs as chunks of batched
    trajectories (``OUT/sweep.h5``, :func:`cmd_sweep`) or one run per point
    (``OUT/sweep.json`` + ``points/``). Chunks are the default when every point
    shares one shape (``meanfield.core.ensemble.shared_shape``); the points run
    one by one with ``--per-point`` or ``--batched``, with ``--out FILE.json``,
    in a folder that already holds a per-point sweep (it is continued), and when
    the points do not share a shape; the last three print a note saying so.
    An invalid point: per point too, whose validation names it as before.

    Parameters
    ----------
    args : argparse.Namespace
        The sweep's flags (``per_point``, ``batched``, ``chunked``, ``out``, ...).
    base, params : dict
        The base overrides and the grid.
    system : object, optional
        The ensemble system (None: the mixture's).

    Returns
    -------
    bool

    Example
    -------
    >>> import argparse
    >>> use_chunked(argparse.Namespace(out="runs/x"), {"steps": 10}, {"omega": [0.1, 0.2]})
    True
    """
    from .ensemble import EnsembleProblem, shared_shape

    if chunked_requested(args):
        return True
    if getattr(args, "per_point", False) or getattr(args, "batched", False):
        return False
    stream = stream if stream is not None else sys.stderr
    out = Path(args.out)
    note = None
    if out.suffix == ".json":
        note = f"--out {out.name} is a sweep index: one run file per point"
    elif (out / "sweep.json").exists():
        note = f"{out} holds a per-point sweep (sweep.json): continued point by point"
    else:
        try:
            why = shared_shape(EnsembleProblem(base, axes=params, system=system))
        except ConfigError:
            return False  # the per-point validation names the point, as it always has
        if why is None:
            return True
        note = f"one run file per point (sweep.json + points/), not chunks: {why}"
    if not getattr(args, "quiet", False):
        print(f"meanfield: note: {note}", file=stream)
    return False
