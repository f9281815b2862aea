"""Every numba kernel of the package is cached on disk (issue 27 item 6: no cold start after
``meanfield warm``): a kernel compiled without ``cache=True`` would compile again in every new process.

Two independent checks: the source (every ``njit`` / ``jit`` decorator or call written in the
package, and in the code it generates, names ``cache=True``), and the objects (every CPU
dispatcher reachable from the package's modules after import has an on-disk cache). Exempt:
``inline="always"`` helpers (never compiled on their own: numba inlines them into their cached
callers) and the GPU's ``cuda.jit`` (compiled at launch, not on the CPU)."""

from __future__ import annotations

import ast
import importlib
import re
import pkgutil
from pathlib import Path

import meanfield

PKG = Path(meanfield.__file__).resolve().parent


def _jit_calls(tree: ast.AST, names: tuple):
    """(line, call) of every call of one of ``names`` (``njit``, ``numba.njit``, ...) and every bare
    decorator ``@njit`` in a module (``cuda.jit`` excluded)."""
    for node in ast.walk(tree):
        for d in getattr(node, "decorator_list", []):  # a bare @njit / @numba.njit: no options at all
            if isinstance(d, (ast.Name, ast.Attribute)) and _name(d) in names:
                yield d.lineno, None
        if isinstance(node, ast.Call) and _name(node.func) in names:
            yield node.lineno, node


def _name(f) -> str:
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
        return f"{f.value.id}.{f.attr}"
    return ""


def _cached(call) -> bool:
    if call is None:
        return False
    kw = {k.arg: k.value for k in call.keywords}
    if isinstance(kw.get("inline"), ast.Constant) and kw["inline"].value == "always":
        return True  # inlined into its (cached) callers, never compiled alone
    return isinstance(kw.get("cache"), ast.Constant) and kw["cache"].value is True


def test_every_jit_in_the_source_names_cache_true():
    bad = []
    n = 0
    for path in sorted(PKG.rglob("*.py")):
        src = path.read_text()
        tree = ast.parse(src, str(path))
        names = ("njit", "numba.njit", "numba.jit")
        if re.search(r"from numba import [^\n]*\bjit\b", src):  # a plain jit(...) is numba's only if imported so
            names += ("jit",)
        for line, call in _jit_calls(tree, names):
            n += 1
            if not _cached(call):
                bad.append(f"{path.relative_to(PKG.parent)}:{line}")
        # generated kernel sources (written as text by the package): every decorator line caches too
        for i, text in enumerate(path.read_text().splitlines(), 1):
            s = text.strip()
            if s.startswith(("w(\"@njit", "w('@njit", "w(\"@jit", "w('@jit")) and "cache=True" not in s:
                bad.append(f"{path.relative_to(PKG.parent)}:{i} (generated)")
    assert n > 20, n  # the scan finds the kernels (a broken scan would pass vacuously)
    assert not bad, "numba kernels without cache=True: " + ", ".join(bad)


def test_every_cpu_dispatcher_after_import_has_a_disk_cache():
    import sys

    from numba.core.registry import CPUDispatcher

    for mod in pkgutil.walk_packages([str(PKG)], "meanfield."):
        if mod.name.endswith("__main__"):  # runs the command line
            continue
        try:
            importlib.import_module(mod.name)
        except ImportError:  # an optional extra (CUDA, dask, torch) that is not installed
            continue
    from meanfield.core import activations

    found = {id(o): f"meanfield.core.activations._CPU[{n}]" for n, o in activations._CPU.items()}
    objs = {id(o): o for o in activations._CPU.values()}
    for name, mod in list(sys.modules.items()):
        if name.startswith("meanfield"):
            for attr, obj in list(vars(mod).items()):
                if isinstance(obj, CPUDispatcher):
                    objs[id(obj)] = obj
                    found.setdefault(id(obj), f"{name}.{attr}")
    bad = [found[i] for i, d in objs.items()
           if d.targetoptions.get("inline") != "always" and type(d._cache).__name__ == "NullCache"]
    assert len(objs) > 20, len(objs)  # kernels were found (a broken walk would pass vacuously)
    assert not bad, "numba dispatchers without an on-disk cache: " + ", ".join(sorted(bad))
