"""core/ reaches a paper's pieces only through meanfield.core.hooks (issue 21): no import of a paper,
the run-file schema check and the ensemble adapter come from the plug-ins' registrations."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from meanfield.core import hooks
from meanfield.core.bounds import evaluate
from meanfield.core.config import ConfigError
from meanfield.core.io import write_run
from meanfield.core.sweep import system_of

ROOT = Path(__file__).resolve().parents[1]


def test_no_line_of_core_or_engine_imports_a_paper():
    """The acceptance grep of issue 21 (``grep -rn mixture meanfield/engine meanfield/core | grep import``
    finds nothing), and no import statement there names a paper package (meanfield.models...)."""
    papers = [p.name for p in (ROOT / "meanfield" / "models").iterdir() if p.is_dir() and (p / "__init__.py").exists()]
    assert "mixture" in papers and "induction" in papers
    bad = []
    for layer in ("core", "engine"):
        for f in sorted((ROOT / "meanfield" / layer).rglob("*.py")):
            for i, line in enumerate(f.read_text().splitlines(), 1):
                if ("import" in line and "mixture" in line) or re.match(r"\s*(from|import)\s+\S*models\b", line):
                    bad.append(f"{f.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not bad, "\n".join(bad)


def _toy_run(path, system):
    write_run(path, system=system, config={"K": 2}, status="complete", message="",
              data={"t": np.array([0.0, 1.0, 2.0]), "loss": np.array([1.0, 0.5, 0.25])})
    return path


def test_bounds_use_the_registered_run_check(tmp_path):
    path = _toy_run(tmp_path / "toy.h5", "toy_hooks_test")
    with pytest.raises(ConfigError, match="this run's system is 'toy_hooks_test'"):
        evaluate("loss <= 1", path)
    seen = []

    def check(run, p):
        seen.append(Path(p).name)
        raise ConfigError(f"{p}: dataset 'w' is missing")

    hooks.register_run_check("toy_hooks_test", check)
    try:
        with pytest.raises(ConfigError, match=r"^run: .*dataset 'w' is missing$"):
            evaluate("loss <= 1", path)
        assert seen == ["toy.h5"]
    finally:
        hooks._RUN_CHECKS.pop("toy_hooks_test", None)


def test_the_mixture_registers_its_run_check_and_ensemble_system(tmp_path):
    from meanfield.models.mixture.schema import validate_mixture_run

    assert hooks.run_check("mixture") is validate_mixture_run
    path = _toy_run(tmp_path / "bad.h5", "mixture")  # a mixture file without its datasets
    with pytest.raises(ConfigError, match="dataset 'features' is missing"):
        evaluate("loss <= 1", path)
    assert system_of(None).name == "mixture" == system_of("mixture").name
    with pytest.raises(ConfigError, match=r"system: one of .*mixture.*; got 'no_such_system'"):
        system_of("no_such_system")


def test_core_alone_loads_the_plugins_by_name():
    """Used without the engine imported, core's lookups still find the papers (hooks.LOADER), and importing
    core's sweep does not import the registry."""
    code = ("import sys, meanfield.core.sweep as s, meanfield.core.bounds\n"
            "assert 'meanfield.engine.registry' not in sys.modules\n"
            "print(s.system_of(None).name)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "mixture"


def _paper_names_compared(src: str) -> list[tuple[int, str]]:
    """(line, name) of every comparison in ``src`` of a value with a string constant that is a paper's
    package name (``x == "mixture"``, ``x in ("engine", "induction")``; a key test ``"icl" in d`` looks up
    a key, it does not compare with a name)."""
    import ast

    papers = {p.name for p in (ROOT / "meanfield" / "models").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    out = []
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Compare):
            eq = all(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops)
            for c in ([node.left] if eq else []) + list(node.comparators):
                consts = c.elts if isinstance(c, (ast.Tuple, ast.List, ast.Set)) else [c]
                for k in consts:
                    if isinstance(k, ast.Constant) and isinstance(k.value, str) and k.value in papers:
                        out.append((node.lineno, k.value))
    return out


def test_core_and_engine_branch_on_no_paper_name():
    """No comparison in core/ or engine/ names a paper (``system == "mixture"``): a paper's run files are read
    through the reader its plug-in registers (``hooks.run_reader``), its outcome lines too."""
    bad = []
    for layer in ("core", "engine"):
        for f in sorted((ROOT / "meanfield" / layer).rglob("*.py")):
            bad += [f"{f.relative_to(ROOT)}:{ln}: {nm}" for ln, nm in _paper_names_compared(f.read_text())]
    assert not bad, "\n".join(bad)
    # the scan finds what it looks for
    assert _paper_names_compared('if run.system == "mixture":\n    pass\n') == [(1, "mixture")]
    assert _paper_names_compared('x = s in ("engine", "induction")\n') == [(1, "induction")]
    assert _paper_names_compared('x = "icl" in extra\n') == []


def test_a_registered_reader_is_what_open_run_and_the_outcome_use(tmp_path):
    """A system registered from outside (no shipped paper): open_run takes its state variables and blocks
    from its reader, the outcome lines from its ``outcome_lines``; without a reader the file has none."""
    import meanfield
    from meanfield.core.outcome import outcome_lines

    class Reader:
        stacked_records = ("Z",)

        @staticmethod
        def state_arrays(run, src, whole):
            return [("Z", np.asarray(src["Z"]), [["h"], ["a", "b"]])]

        @staticmethod
        def blocks(run):
            return {"h:Z": np.asarray(run["Z"])[:, 0]}

        @staticmethod
        def outcome_lines(run):
            return [f"  toy: {len(run['t'])} records"]

    p = tmp_path / "toy.h5"
    write_run(p, system="toy_reader_test", config={}, status="complete", message="",
              data={"t": np.array([0.0, 1.0]), "loss": np.array([1.0, 0.5]),
                    "Z": np.arange(4.0).reshape(2, 1, 2), "initial_state": {"Z": np.zeros((1, 2))}})
    assert meanfield.open_run(p).entries == []  # nothing registered: no state variables
    hooks.register_run_check("toy_reader_test", None, reader=Reader())
    try:
        run = meanfield.open_run(p)
        assert run.entries == ["Z[h,a]", "Z[h,b]"] and run.states.shape == (2, 2)
        assert run.var("h", "Z").tolist() == [[0.0, 1.0], [2.0, 3.0]]
        assert outcome_lines(p)[1:] == ["  toy: 2 records"]
        assert hooks.run_check("toy_reader_test") is None  # a reader alone: bounds still refuse the file
    finally:
        hooks._RUN_READERS.pop("toy_reader_test", None)


def test_a_file_of_no_registered_system_gets_its_stages_from_its_config(tmp_path):
    """outcome_lines of a run file whose system no plug-in registered: the config's criterion names the
    stage (it fired / it never fired), the final numbers follow."""
    from meanfield.core.outcome import outcome_lines

    p = tmp_path / "x.h5"
    write_run(p, system="no_such_system", config={"criterion": "loss<=0.3"}, status="complete", message="",
              data={"t": np.array([0.0, 1.0]), "step": np.array([0, 1]), "loss": np.array([1.0, 0.25]),
                    "margin": np.array([[0.1], [0.2]]), "samples": {"weight": np.array([1.0])}},
              attrs={"stage_ends": [{"stage": 1, "step": 1, "t": 1.0, "reason": "criterion"}]})
    lines = outcome_lines(p)
    assert lines[1] == "  stage 1 (simultaneous): criterion loss<=0.3 fired at step 1, t = 1", lines
    assert lines[2].startswith("  final (t = 1): loss 0.25, min margin 0.2"), lines
