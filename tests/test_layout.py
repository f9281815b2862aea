"""The package layout (docs/layout.md): the shared core, the engine, the systems.

* The old import paths ``meanfield.<name>`` of the shared modules are aliases
  for one release: importing one gives the very module object of
  ``meanfield.core.<name>`` (not a copy: monkeypatching and isinstance work
  through either name).
* The core imports no system: no module in ``meanfield/core/`` imports
  ``meanfield.mixture``, ``meanfield.engine`` or ``meanfield.induction`` at
  module level (read from the source with ``ast``; a lazy import inside a
  function is allowed: that is how the core reaches a system named by the
  user, e.g. the sweep registry).
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "meanfield"

#: the old paths kept as aliases for one release (docs/layout.md)
ALIASES = {
    "meanfield.config": "meanfield.core.config",
    "meanfield.integrate": "meanfield.core.integrate",
    "meanfield.io": "meanfield.core.io",
    "meanfield.report": "meanfield.core.report",
    "meanfield.sweep": "meanfield.core.sweep",
    "meanfield.ensemble": "meanfield.core.ensemble",
    "meanfield.ensemble_cli": "meanfield.core.ensemble_cli",
    "meanfield.bounds": "meanfield.core.bounds",
    "meanfield.guard": "meanfield.core.guard",
    "meanfield.outcome": "meanfield.core.outcome",
    "meanfield.escape": "meanfield.core.escape",
}

SYSTEMS = ("meanfield.mixture", "meanfield.engine", "meanfield.induction")

#: core modules allowed a module-level system import (exceptions). Empty: the
#: last ones (core/ensemble.py, core/sweep.py) were freed of their system
#: imports in issue 11 (system adapters). Do not add entries. An entry that no
#: longer imports a system fails the test (tidy the list).
KNOWN: set[str] = set()


@pytest.mark.parametrize("old,new", sorted(ALIASES.items()))
def test_alias_is_the_same_module(old, new):
    assert importlib.import_module(old) is importlib.import_module(new)


def test_every_alias_shim_is_listed_and_holds_no_code():
    """Every top-level module that swaps itself in sys.modules is one of the
    listed aliases, and does nothing else (no code in a shim)."""
    shims = {}
    for p in sorted(ROOT.glob("*.py")):
        src = p.read_text(encoding="utf-8")
        if "sys.modules[__name__]" in src:
            shims[f"meanfield.{p.stem}"] = src
    assert set(shims) == set(ALIASES), set(shims) ^ set(ALIASES)
    for name, src in shims.items():
        body = [n for n in ast.parse(src).body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
        kinds = [type(n).__name__ for n in body]
        assert kinds == ["Import", "ImportFrom", "Assign"], (name, kinds)
        assert f"from .core import {ALIASES[name].rsplit('.', 1)[1]} as _module" in src, name


def _module_level_imports(path: Path, mod: str) -> set[str]:
    """Absolute names imported by the statements at module level (also inside
    module-level if / try blocks, not inside functions or classes)."""
    out = set()
    pkg = mod.rsplit(".", 1)[0]

    def visit(nodes):
        for n in nodes:
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
            elif isinstance(n, (ast.If, ast.Try, ast.With)):
                visit(n.body)
                visit(getattr(n, "orelse", []))
                visit(getattr(n, "finalbody", []))
                for h in getattr(n, "handlers", []):
                    visit(h.body)

    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    return out


def _core_system_imports() -> dict[str, list[str]]:
    bad = {}
    for p in sorted((ROOT / "core").glob("*.py")):
        mod = "meanfield.core" if p.stem == "__init__" else f"meanfield.core.{p.stem}"
        hits = sorted(n for n in _module_level_imports(p, mod if p.stem != "__init__" else mod + ".__init__")
                      if any(n == s or n.startswith(s + ".") for s in SYSTEMS))
        if hits:
            bad[mod] = hits
    return bad


def test_the_finder_sees_relative_and_absolute_system_imports(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import numpy\nfrom ..mixture import run\ntry:\n    import meanfield.engine.kernels\nexcept ImportError:\n"
                 "    pass\ndef g():\n    from ..induction import run\n")
    got = _module_level_imports(f, "meanfield.core.m")
    assert "meanfield.mixture.run" in got and "meanfield.engine.kernels" in got
    assert not any(n.startswith("meanfield.induction") for n in got)  # inside a function: allowed


def test_core_imports_no_system_at_module_level():
    bad = _core_system_imports()
    new = {m: h for m, h in bad.items() if m not in KNOWN}
    assert not new, f"core modules importing a system at module level (docs/layout.md: the core imports no system): {new}"
    stale = sorted(KNOWN - set(bad))
    assert not stale, f"no longer import a system at module level, remove them from KNOWN: {stale}"
