"""``meanfield model check MODEL.toml [--quick] --out DIR``: the claims of a model, dispatched by the description's ``name``.

Each paper registers its checker (``meanfield.engine.registry.register_claims``;
it lives beside the paper's reference code) returning a list of
:class:`meanfield.core.report.Claim` plus metadata; this module
writes ``report.json`` (``{"claims": [...], ...}``, the schema of
``meanfield.core.report``) and ``report.md`` and says which claims gate the exit code
(proved / shown: exit 0 iff they all pass).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict
from pathlib import Path

from ..core.errors import ConfigError




def _json_default(o):
    import numpy as np

    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        f = float(o)
        return None if math.isnan(f) else f
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    return str(o)


def _markdown(name, claims, meta, quick, elapsed) -> str:
    lines = [f"# Claims report: {name}", "",
             f"{'quick' if quick else 'full'} check, {elapsed:.1f} s. " + meta.get("summary", ""), ""]
    lines += ["| claim | source | status |", "|---|---|---|"]
    for c in claims:
        lines.append(f"| {c.name} | {c.source} | {c.status} |")
    lines.append("")
    for c in claims:
        lines += [f"## {c.name}: {c.status} ({c.source})", "", c.statement, ""]
        if isinstance(c.numbers.get("evidence"), str):  # why the label is what it is, in words (issue 26)
            lines += ["Evidence: " + c.numbers["evidence"], ""]
        if c.setting:
            lines += ["Setting: " + json.dumps(c.setting, default=_json_default), ""]
        lines += ["Numbers:", "", "```", json.dumps(c.numbers, indent=1, default=_json_default), "```", ""]
        if c.figure:
            lines += [f"![{c.name}]({Path(c.figure).name})", ""]
    if meta.get("markdown"):  # a checker's own markdown section (e.g. a table), verbatim
        lines += [meta["markdown"], ""]
    for k, v in meta.items():
        if k not in ("summary", "markdown"):
            lines += [f"- {k}: {json.dumps(v, default=_json_default)}"]
    return "\n".join(lines) + "\n"


def _remove_made(made: Path, everything: bool) -> None:
    """Remove the folder ``made`` that :func:`run_check` created: with what the
    checker wrote in it (``everything``: the check was refused, bad input), or
    only where it is still empty (an interrupted or failed check keeps its figures)."""
    import shutil

    if everything:
        shutil.rmtree(made, ignore_errors=True)
        return
    for p in sorted((q for q in made.rglob("*") if q.is_dir()), key=lambda q: -len(q.parts)) + [made]:
        try:
            p.rmdir()  # only an empty folder
        except OSError:
            pass


def run_check(path, out, quick: bool = False, log=print):
    """Load the description's name, call its registered checker, write the reports.

    Parameters
    ----------
    path : str or Path
        The description (TOML).
    out : str or Path
        The report folder (report.json, report.md, figures).
    quick : bool
        The checker's reduced settings.
    log : callable
        Where progress lines go.

    Returns
    -------
    tuple
        (claims, path of report.md).

    Example
    -------
    >>> from meanfield.engine.checks import run_check
    >>> claims, md = run_check("meanfield/models/maxmargin.toml", "runs/check_mm", quick=True)  # doctest: +SKIP
    """
    from ..core.report import gating
    from . import registry
    from .description import _read, description_from_dict

    raw = _read(path)
    name = str(raw.get("name", Path(path).stem))
    entry = registry.claims(name)  # unknown: one line naming the models with claims
    description_from_dict(raw, source=str(path))  # the description as given must be valid (one-line error, exit 2)
    checker = registry.resolve(entry.check)
    from ..core.guard import check_output_dir

    out = check_output_dir(out, "out")  # a file there, a parent that is a file, no write access: one line, exit 2
    made = next((p for p in reversed([out, *out.parents]) if not p.exists()), None)  # the first folder made here
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    try:
        claims, meta = checker(Path(path), out, quick=quick, log=log)
    except BaseException as e:  # a refusal writes nothing: the folders made above go again
        if made is not None:
            _remove_made(made, everything=isinstance(e, ConfigError))
        raise
    elapsed = time.perf_counter() - t0
    gate = gating(claims)
    report = {"model": name, "claims": [asdict(c) for c in claims], "quick": quick, "elapsed_s": elapsed,
              "all_pass": all(c.passed for c in claims), "gating_pass": all(c.passed for c in gate), **meta}
    (out / "report.json").write_text(json.dumps(report, indent=2, default=_json_default))
    (out / "report.md").write_text(_markdown(name, claims, meta, quick, elapsed))
    log(f"[check] {name}: {sum(c.passed for c in gate)}/{len(gate)} proved/shown claims pass, "
        f"{sum(c.passed for c in claims if c.source == 'expected')}/{len(claims) - len(gate)} expected hold "
        f"({elapsed:.1f} s); report: {out / 'report.md'}")
    return claims, out / "report.md"
