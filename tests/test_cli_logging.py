"""Messages through ``logging`` (issue 14, item 8): the command-line modules
print no bare messages to stderr; notes, warnings and progress go through the
``meanfield`` logger (``-v`` / ``-q``), the command's results stay on stdout."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI_MODULES = ["meanfield/cli.py", "meanfield/models/induction/cli.py", "meanfield/engine/cli.py",
               "meanfield/engine/edges.py", "meanfield/core/outcome.py"]


def _stderr_prints(path: Path) -> list[int]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print":
            for kw in node.keywords:
                if kw.arg == "file" and "stderr" in ast.unparse(kw.value):
                    out.append(node.lineno)
    return out


def test_no_bare_prints_to_stderr_in_the_cli_modules():
    bad = {m: _stderr_prints(ROOT / m) for m in CLI_MODULES}
    assert not any(bad.values()), bad


class _Keep(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records = []

    def emit(self, record):
        self.records.append(record)


def test_induction_warnings_go_through_the_meanfield_logger(capsys):
    from meanfield.cli import build_parser
    from meanfield.models.induction.cli import config_from_args

    keep = _Keep()
    log = logging.getLogger("meanfield")
    log.addHandler(keep)
    try:
        config_from_args(build_parser().parse_args(["induction", "run", "--n-train", "40", "--n-test", "0", "--L",
                                                    "12", "--schedule", "joint", "--out", "x.h5"]))
    finally:
        log.removeHandler(keep)
    warns = [r for r in keep.records if r.levelno == logging.WARNING]
    assert warns and all(r.getMessage().startswith("warning: ") for r in warns), [r.getMessage() for r in warns]
    err = capsys.readouterr().err  # and printed once, as "meanfield: warning: ..." on the current stderr
    assert err.count("meanfield: warning: ") == len(warns), err
