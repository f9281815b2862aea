"""``meanfield plot R1.h5 R2.h5 --label width``: the overlay of run files, written as one figure."""

from __future__ import annotations

from pathlib import Path

from .run import label_of, open_run, plot_runs


def write_overlay(paths, out=None, label=None, entries=None, logy: bool = True) -> Path:
    """``meanfield plot R1.h5 R2.h5 --label width``: :func:`plot_runs` of run
    files, written atomically as one figure.

    Parameters
    ----------
    paths : list of str or Path
        run files of any system.
    out : str or Path, optional
        the figure (.png, .pdf or .svg); default ``<first run>_overlay.png``
        beside the first run.
    label : str, optional
        an attribute or resolved parameter that tells the runs apart (every
        run must have it).
    entries : list of str, optional
        state entries to draw too.
    logy : bool
        logarithmic loss axis.

    Returns
    -------
    Path

    Raises
    ------
    ConfigError
        one line: an unreadable run, a label no run has, an unknown entry, a bad ``out``.

    Example
    -------
    >>> write_overlay(["runs/w16.h5", "runs/winf.h5"], label="width")   # doctest: +SKIP
    PosixPath('runs/w16_overlay.png')
    """
    import io

    from .errors import ConfigError
    from .guard import check_output_file
    from .io import write_bytes_atomic

    paths = [Path(p) for p in paths]
    if not paths:
        raise ConfigError("runs: give at least one run file")
    out = Path(out) if out is not None else paths[0].with_name(paths[0].stem + "_overlay.png")
    check_output_file(out, "out", (".png", ".pdf", ".svg"))
    runs = []
    for p in paths:
        try:
            runs.append(open_run(p))
        except (FileNotFoundError, ValueError, OSError) as e:
            raise ConfigError(f"runs: {p} is not a readable run file ({str(e).splitlines()[0][:120]})") from None
        if len(runs[-1].t) == 0:
            raise ConfigError(f"runs: {p} has no records")
    if label is not None and not callable(label):
        missing = [str(r.path) for r in runs if label_of(r, label).endswith("= ?")]
        if missing:
            raise ConfigError(f"label: no attribute or parameter {label!r} in {missing[0]} (e.g. width, eta, seed, "
                              "or a parameter of its description)")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plot_runs(runs, label=label, entries=entries, logy=logy)
    buf = io.BytesIO()
    fig.savefig(buf, dpi=110, format=out.suffix[1:])
    plt.close(fig)
    return write_bytes_atomic(out, buf.getbuffer())
