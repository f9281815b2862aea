"""The documentation site (issue 25): the generated references cover what the
code accepts, and the tutorial notebook runs.

* The description reference (``docs/description.md``, generated from
  :mod:`meanfield.engine.schema`) lists exactly the keys the loader accepts:
  the loader itself is asked, table by table, by giving it an unknown key and
  reading the allowed keys from its one-line error (an independent path: the
  loader's own tables, not the schema module).
* The CLI reference lists every subcommand of ``meanfield`` (walked from the
  parser, and checked against each system's ``--help``).
* The model catalogue has a row for every shipped description.
* The tutorial notebook ``docs/tutorial.ipynb`` executes with nbclient
  (marked ``docs``: ``.ci/run`` runs it after ``make docs``).
"""

from __future__ import annotations

import copy
import importlib.util
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from meanfield.core.config import ConfigError
from meanfield.engine.description import description_from_dict, load_description
from meanfield.engine.parsing import OUT_OF_CLASS as _OUT_OF_CLASS

ROOT = Path(__file__).resolve().parents[1]
MAJORITY = ROOT / "docs" / "examples" / "majority.toml"


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _allowed(raw: dict, where, key="zz_not_a_key") -> set:
    """The keys the loader accepts at ``where`` (a path into the raw description), read from its error."""
    raw = copy.deepcopy(raw)
    node = raw
    for w in where:
        node = node[w]
    node[key] = 1
    with pytest.raises(ConfigError) as e:
        description_from_dict(raw)
    msg = str(e.value)
    assert f"unknown key '{key}'" in msg, msg
    return set(re.search(r"allowed: (.*)$", msg).group(1).split(", ")) - set(_OUT_OF_CLASS)


def _loader_tables() -> dict:
    raw = tomllib.loads(MAJORITY.read_text())
    staged = copy.deepcopy(raw)
    staged["training"] = {"stages": [{"name": "s1", "train": ["attention"], "steps": 10}]}
    staged["parameters"].pop("steps")
    with pytest.raises(ConfigError) as e:
        load_description(MAJORITY, {"zz_not_a_key": 1})
    knobs = set(re.search(r"run knobs: (.*)$", str(e.value)).group(1).split(", "))
    return {
        "top level": _allowed(raw, []),
        "[parameters]": knobs,
        "[dictionary]": _allowed(raw, ["dictionary"]),
        "[data]": _allowed(raw, ["data"]),
        "[data] rows = [ {...} ]": _allowed(raw, ["data", "rows", 0]),
        "[[heads]]": _allowed(raw, ["heads", 0]),
        "[model]": _allowed(raw, ["model"]),
        "[training]": _allowed(raw, ["training"]) if "training" in raw else _allowed(
            {**raw, "training": {}}, ["training"]),
        "[[training.stages]]": _allowed(staged, ["training", "stages", 0]),
    }


def test_description_reference_lists_every_key_the_loader_accepts():
    from meanfield.engine.schema import markdown, reference

    documented = {table: {k.name for k in keys} for table, _, keys in reference()}
    accepted = _loader_tables()
    assert set(accepted) == set(documented), (sorted(accepted), sorted(documented))
    for table, keys in accepted.items():
        assert keys == documented[table], (table, "accepted, not documented:", keys - documented[table],
                                           "documented, not accepted:", documented[table] - keys)
        for k in documented[table]:
            assert all(getattr(key, "meaning") for key in dict((t, ks) for t, _, ks in reference())[table])
    text = markdown()
    for table, keys in accepted.items():
        for k in keys:
            assert f"| `{k}` |" in text, (table, k)
    for k in _OUT_OF_CLASS:
        assert f"| `{k}` |" in text, k


def test_description_reference_fails_on_an_undocumented_field(monkeypatch):
    from meanfield.engine import schema

    monkeypatch.delitem(schema._HEAD, "scale")
    with pytest.raises(KeyError, match="heads.scale"):
        schema.reference()


def test_mixture_family_table_lists_every_config_field():
    import dataclasses

    from meanfield.engine.description import parameter_class

    text = _hooks().mixture_family_markdown()
    for f in dataclasses.fields(parameter_class({"family": "mixture"})):
        assert f"| `{f.name}` |" in text, f.name


def test_cli_reference_lists_every_subcommand():
    hooks = _hooks()
    text = hooks.cli_markdown()
    names = [n for n, _ in hooks.cli_commands()]
    top = subprocess.run([sys.executable, "-m", "meanfield", "--help"], capture_output=True, text=True, timeout=120)
    systems = re.search(r"\{([\w,-]+)\}", top.stdout).group(1).split(",")
    assert systems and all(f"meanfield {s}" in names for s in systems), (systems, names)
    for s in ("mixture", "model", "induction"):
        h = subprocess.run([sys.executable, "-m", "meanfield", s, "--help"], capture_output=True, text=True,
                           timeout=120).stdout
        verbs = re.search(r"\{([\w,-]+)\}", h).group(1).split(",")
        for v in verbs:
            assert f"## `meanfield {s} {v}`" in text, (s, v)
    assert len(names) >= 30, names


def test_catalogue_has_every_shipped_description():
    hooks = _hooks()
    text = hooks.catalogue_markdown()
    paths = hooks.shipped_descriptions()
    assert len(paths) >= 4
    for p in paths:
        name = tomllib.loads(p.read_text()).get("name", p.stem)
        assert f"| `{name}` | `{p.relative_to(ROOT).as_posix()}` |" in text, name
    for name in ("incontext", "maxmargin", "mixture_multiclass"):  # the papers' registered claims
        assert f"`meanfield model check {name}`" in text, name


@pytest.mark.docs  # needs the docs extra (nbformat), installed by make docs: run by .ci/run after it
def test_notebook_page_renders_markdown_code_and_outputs(tmp_path):
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Title"), nbformat.v4.new_code_cell("print(1 + 1)")]
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="2\n")]
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    text = _hooks().notebook_markdown(path)
    assert text.index("# Title") < text.index("```python\nprint(1 + 1)\n```") < text.index("```text\n2\n```")
    nb.cells[1].outputs = [nbformat.v4.new_output("error", ename="ValueError", evalue="x", traceback=[])]
    nbformat.write(nb, path)
    with pytest.raises(ValueError, match="re-execute"):
        _hooks().notebook_markdown(path)


@pytest.mark.docs
def test_tutorial_notebook_executes(tmp_path):
    """Runs every cell of docs/tutorial.ipynb in a fresh kernel, in a scratch
    folder holding what a clone holds (docs/, the package on the path)."""
    import shutil

    import nbformat
    from nbclient import NotebookClient

    work = tmp_path / "clone"
    shutil.copytree(ROOT / "docs", work / "docs", ignore=shutil.ignore_patterns("__pycache__"))
    (work / "runs").mkdir()
    nb = nbformat.read(ROOT / "docs" / "tutorial.ipynb", as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(f"import sys; sys.path.insert(0, {str(ROOT)!r})"))
    NotebookClient(nb, timeout=300, startup_timeout=180, kernel_name="python3",
                   resources={"metadata": {"path": str(work)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, errors


# ------------------------------------------------------------------ docstrings of the API reference

SECTIONS = ("Parameters", "Returns", "Examples")


def api_objects() -> list[str]:
    """Dotted names of every object the API reference (docs/api.md) documents, plus ``meanfield.__all__``."""
    import importlib
    import inspect

    import meanfield

    import meanfield.engine

    names = [f"meanfield.{n}" for n in getattr(meanfield, "__all__", ())]
    # the engine's public names; RunParams (every knob is a row of the generated description reference,
    # which test_description_reference_lists_every_key_the_loader_accepts holds to the loader) and
    # BatchRun (a result container that run_batch returns, its attributes listed in its docstring) excepted
    names += [f"meanfield.engine.{n}" for n in meanfield.engine.__all__ if n not in ("RunParams", "BatchRun")]
    text = (ROOT / "docs" / "api.md").read_text()
    for m in re.finditer(r"^::: ([\w.]+)\n((?:    .*\n)*)", text, flags=re.M):
        target, opts = m.group(1), m.group(2)
        members = re.search(r"members: \[([^\]]*)\]", opts)
        try:
            obj = importlib.import_module(target)
        except ImportError:
            names.append(target)
            continue
        if members:
            names += [f"{target}.{x.strip()}" for x in members.group(1).split(",")]
        else:  # a whole module: its public functions and classes defined there
            names += [f"{target}.{n}" for n, v in vars(obj).items() if not n.startswith("_")
                      and (inspect.isfunction(v) or inspect.isclass(v)) and v.__module__ == obj.__name__]
    return list(dict.fromkeys(names))


def _resolve(dotted: str):
    import importlib

    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for p in parts[i:]:
            obj = getattr(obj, p)
        return obj
    raise ImportError(dotted)


def missing_sections(obj) -> list[str]:
    """The numpy-docstring sections ``obj``'s docstring lacks (a class needs no Returns; a function
    without parameters no Parameters; one returning None no Returns)."""
    import inspect

    doc = inspect.getdoc(obj) or ""
    need = list(SECTIONS)
    if inspect.isclass(obj):
        need.remove("Returns")
        try:
            named = [q for q in inspect.signature(obj).parameters.values()
                     if q.kind not in (q.VAR_POSITIONAL, q.VAR_KEYWORD)]
        except ValueError:  # a builtin's constructor (an exception class): no signature to document
            named = []
        if not named:
            need.remove("Parameters")
    else:
        sig = inspect.signature(obj)
        if not sig.parameters:
            need.remove("Parameters")
        if sig.return_annotation in (None, "None"):
            need.remove("Returns")
    return [s for s in need if not re.search(rf"^{s}\n-{{3,}}$", doc, flags=re.M)]


def test_every_documented_callable_has_parameters_returns_examples():
    names = api_objects()
    assert len(names) >= 25, names
    bad = {}
    for n in names:
        obj = _resolve(n)
        if callable(obj):
            miss = missing_sections(obj)
            if miss:
                bad[n] = miss
    assert not bad, "docstrings without numpy sections:\n" + "\n".join(f"  {k}: {v}" for k, v in bad.items())


def test_missing_sections_can_fail():
    def f(x):
        """One line."""

    def g(x) -> int:
        """Doc.

        Parameters
        ----------
        x : int

        Returns
        -------
        int

        Examples
        --------
        >>> g(1)
        """

    assert missing_sections(f) == list(SECTIONS) and missing_sections(g) == []


@pytest.mark.parametrize("module", ["meanfield.core.report", "meanfield.core.bound_parse", "meanfield.core.bounds", "meanfield.core.bound_files", "meanfield.engine.schema",
                                    "meanfield.api", "meanfield.core.run", "meanfield.core.io", "meanfield.core.errors",
                                    "meanfield.engine", "meanfield.engine.api", "meanfield.engine.runs",
                                    "meanfield.engine.description", "meanfield.engine.objects",
                                    "meanfield.models.mixture.engine_batch", "meanfield.models.induction.suite"])
def test_docstring_examples_run(module, tmp_path, monkeypatch):
    """The Examples of the cheap modules run as doctests (paths relative to a clone's root)."""
    import doctest
    import importlib
    import shutil

    shutil.copytree(ROOT / "docs" / "examples", tmp_path / "docs" / "examples")
    (tmp_path / "runs").mkdir()
    monkeypatch.chdir(tmp_path)
    res = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert res.attempted > 0 and res.failed == 0, res
