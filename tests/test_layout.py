"""The package layout (docs/layout.md): cli > models (the papers) > engine > core.

* No shims: the old top-level alias modules (``meanfield.config``, ...,
  ``meanfield.escape``) and the old paper paths (``meanfield.mixture``,
  ``meanfield.induction``) are gone (import from ``meanfield.core.*`` and
  ``meanfield.models.<paper>``); no module swaps itself in ``sys.modules``.
* The arrows (read from the source with ``ast``, every import, also inside
  functions): the core imports nothing above it; the engine imports only
  the core; a paper imports no other paper. ``lint-imports`` (the same
  rules as import-linter contracts in setup.cfg, run by ``make test``) holds,
  and fails on a wrong arrow.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "meanfield"

#: the removed paths (docs/changelog.md): no module of these names may exist
REMOVED = ("meanfield.config", "meanfield.integrate", "meanfield.io", "meanfield.report", "meanfield.sweep",
           "meanfield.ensemble", "meanfield.ensemble_cli", "meanfield.bounds", "meanfield.guard", "meanfield.outcome",
           "meanfield.escape", "meanfield.mixture", "meanfield.induction", "meanfield.models.checks",
           "meanfield.engine.families", "meanfield.models.mixture.dense",
           "meanfield.models.mixture.ensemble_plot")

PAPERS = sorted(p.name for p in (ROOT / "models").iterdir() if (p / "__init__.py").exists())


@pytest.mark.parametrize("name", REMOVED)
def test_removed_path_is_gone(name):
    """No file of that module in the package (read from the tree: an editable
    install of another checkout may still resolve the old name)."""
    rel = Path(*name.split(".")[1:])
    assert not (ROOT / rel).with_suffix(".py").exists() and not (ROOT / rel / "__init__.py").exists(), name
    spec = importlib.util.find_spec(name) if importlib.util.find_spec(name.rsplit(".", 1)[0]) else None
    assert spec is None or not str(spec.origin).startswith(str(ROOT)), spec


def test_no_module_is_a_shim():
    """No module swaps itself in sys.modules (an alias of another)."""
    shims = sorted(str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py")
                   if "sys.modules[__name__]" in p.read_text(encoding="utf-8"))
    assert not shims, shims


def test_every_paper_is_a_package_with_a_plugin():
    from meanfield import models

    assert {"mixture", "induction", "incontext", "maxmargin", "multiclass"} <= set(PAPERS)
    assert sorted(m.split(".")[2] for m in models.PLUGINS) == PAPERS


def test_every_paper_is_in_the_independence_contract():
    """setup.cfg's import-linter contract "papers" lists every package under models/ (a paper left out
    of it could import another paper without lint-imports noticing)."""
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(ROOT.parent / "setup.cfg", encoding="utf-8")
    listed = sorted(m.strip().rsplit(".", 1)[1] for m in cfg["importlinter:contract:papers"]["modules"].split()
                    if m.strip())
    assert listed == PAPERS


def _all_imports(path: Path, mod: str, is_pkg: bool = False) -> set[str]:
    """Absolute names imported anywhere in a module (module level and inside functions)."""
    out = set()
    pkg = mod if is_pkg else mod.rsplit(".", 1)[0]
    for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(n, ast.Import):
            out.update(a.name for a in n.names)
        elif isinstance(n, ast.ImportFrom):
            if n.level:
                base = pkg.split(".")[: len(pkg.split(".")) - (n.level - 1)]
                b = ".".join(base + ([n.module] if n.module else []))
            else:
                b = n.module or ""
            out.update(f"{b}.{a.name}" for a in n.names)
            out.add(b)
    return out


def _module_name(p: Path, root: Path = ROOT) -> tuple[str, bool]:
    parts = list(p.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def _wrong_arrows(root: Path = ROOT) -> list[str]:
    """Every import against the layers: core -> anything above it; engine ->
    models / cli; a paper -> another paper; core/engine -> cli."""
    bad = []
    top = ("meanfield.cli", "meanfield.warm", "meanfield.__main__")
    for p in sorted(root.rglob("*.py")):
        mod, is_pkg = _module_name(p, root)
        for name in sorted(_all_imports(p, mod, is_pkg)):
            if not name.startswith("meanfield.") or name == "meanfield.__version__":  # the root package: no layer
                continue
            if mod.startswith("meanfield.core") and not name.startswith("meanfield.core"):
                bad.append(f"{mod} -> {name}")
            elif mod.startswith("meanfield.engine") and not name.startswith(("meanfield.core", "meanfield.engine")):
                bad.append(f"{mod} -> {name}")
            elif mod.startswith("meanfield.models."):
                mine = ".".join(mod.split(".")[:3])
                if name.startswith("meanfield.models.") and not (name == mine or name.startswith(mine + ".")):
                    bad.append(f"{mod} -> {name}")
                elif name.startswith(top):
                    bad.append(f"{mod} -> {name}")
    return bad


def test_the_arrow_finder_fails_on_a_wrong_arrow(tmp_path):
    pkg = tmp_path / "meanfield"
    for sub in ("core", "engine", "models/a", "models/b"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "models" / "__init__.py").write_text("")
    (pkg / "core" / "x.py").write_text("def f():\n    from ..engine import y\n")  # lazy: still an arrow
    (pkg / "engine" / "y.py").write_text("from ..core import x\nfrom ..models.a import z\n")
    (pkg / "models" / "a" / "z.py").write_text("from ...engine import y\nfrom ..b import w\n")
    (pkg / "models" / "b" / "w.py").write_text("from ...core import x\nfrom . import v\n")
    assert _wrong_arrows(pkg) == ["meanfield.core.x -> meanfield.engine", "meanfield.core.x -> meanfield.engine.y",
                                  "meanfield.engine.y -> meanfield.models.a", "meanfield.engine.y -> meanfield.models.a.z",
                                  "meanfield.models.a.z -> meanfield.models.b", "meanfield.models.a.z -> meanfield.models.b.w"]


def test_no_wrong_arrow_in_the_package():
    bad = _wrong_arrows()
    assert not bad, "imports against the layers (docs/layout.md):\n" + "\n".join(bad)


def test_engine_and_core_import_no_paper():
    """No import statement in engine/ or core/ names a paper's module (the
    module path of every ``import`` / ``from ... import``, also inside functions)."""
    hits = []
    for sub in ("engine", "core"):
        for p in sorted((ROOT / sub).glob("*.py")):
            for n in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
                mods = [a.name for a in n.names] if isinstance(n, ast.Import) else (
                    [n.module or ""] if isinstance(n, ast.ImportFrom) else [])
                for m in mods:
                    if any(w in m.split(".") for w in ["mixture", "induction", "models"] + PAPERS):
                        hits.append(f"{p.relative_to(ROOT)}:{n.lineno}: {m}")
    assert not hits, hits


def _lint_imports(root: Path) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("lint-imports")
    if not exe.exists():
        pytest.skip("import-linter is not installed (pip install 'meanfield[test]')")
    return subprocess.run([str(exe), "--config", str(root / "setup.cfg"), "--no-cache"], capture_output=True, text=True,
                          cwd=root, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"}, timeout=600)


def test_lint_imports_contracts_hold_and_fail_on_a_wrong_arrow(tmp_path):
    repo = ROOT.parent
    r = _lint_imports(repo)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 kept, 0 broken" in r.stdout, r.stdout
    copy = tmp_path / "repo"
    shutil.copytree(ROOT, copy / "meanfield", ignore=shutil.ignore_patterns("__pycache__", "*.nbi", "*.nbc"))
    shutil.copy(repo / "setup.cfg", copy / "setup.cfg")
    with open(copy / "meanfield" / "engine" / "plot.py", "a") as fh:
        fh.write("\nfrom ..models.mixture import config  # a wrong arrow\n")
    r = _lint_imports(copy)
    assert r.returncode != 0 and "meanfield.engine.plot -> meanfield.models.mixture.config" in r.stdout, r.stdout


def test_no_file_in_the_package_is_over_800_lines():
    long = {str(p.relative_to(ROOT)): n for p in sorted(ROOT.rglob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 800}
    assert not long, f"split these along their seams (developers' guide: no file over 800 lines): {long}"
