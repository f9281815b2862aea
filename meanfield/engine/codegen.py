"""Generated code from sympy derivations: opaque activation functions, the numba printer, loading.

What lives here is the machinery a named-variable derivation (a paper's own,
e.g. ``meanfield.models.mixture.symbolic`` and ``symmetry_symbolic``) uses to
turn its closed-form expressions into LaTeX and standalone numba source, so
that no paper keeps its own copy:

* opaque sympy functions :class:`relu`, :class:`relu_prime`,
  :class:`sigmoid_neg`, :class:`logloss` with their derivatives declared
  (relu' = ``relu_prime``, l' = -``sigmoid_neg``), checked against sympy's own
  derivative by :func:`check_opaque_derivatives`;
* :func:`code` (one expression as Python source, the opaque functions printed
  as calls to the helpers of :data:`HELPERS`), :func:`cse_lines` (common
  subexpressions as assignment lines), :data:`HELPERS` and :data:`IMPORTS`
  (the source of a generated module's scalar helpers and imports: a generated
  file is standalone, it imports nothing of the package);
* :func:`long_sum` (a sum as aligned LaTeX lines, a few terms per line);
* :func:`load_generated` (import a generated file under a name fixed by its
  location, so that numba's on-disk cache is valid across runs).

The engine's own description derivation (``meanfield.engine.symbolic``,
``symbolic_entries``) lambdifies to numpy instead and does not need these.
This module imports sympy at import time; ``meanfield.engine`` does not import it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import sys
from pathlib import Path

import sympy as sp
from sympy.printing.pycode import PythonCodePrinter

__all__ = ["relu", "relu_prime", "sigmoid_neg", "logloss", "check_opaque_derivatives", "code", "cse_lines",
           "HELPERS", "IMPORTS", "long_sum", "load_generated"]


# ----------------------------------------------------------------- opaque functions

def _wrap_pow(tex, exp):
    return rf"\left({tex}\right)^{{{exp}}}" if exp else tex


class relu(sp.Function):
    """max(u, 0); derivative :class:`relu_prime` (relu'(0) = r0 at run time)."""

    nargs = 1

    def fdiff(self, argindex=1):
        return relu_prime(self.args[0])

    def _latex(self, printer, exp=None):
        return _wrap_pow(rf"\mathrm{{relu}}\left({printer._print(self.args[0])}\right)", exp)


class relu_prime(sp.Function):
    """1 if u > 0, 0 if u < 0, r0 if u == 0 (never differentiated)."""

    nargs = 1

    def _latex(self, printer, exp=None):
        return _wrap_pow(rf"\mathrm{{relu}}'\left({printer._print(self.args[0])}\right)", exp)


class sigmoid_neg(sp.Function):
    """1 / (1 + exp(z)) = -l'(z) (never differentiated)."""

    nargs = 1

    def _latex(self, printer, exp=None):
        # sigma(t) = 1 / (1 + exp(-t)), so 1 / (1 + exp(z)) = sigma(-z)
        return _wrap_pow(rf"\sigma\left({printer._print(-self.args[0])}\right)", exp)


class logloss(sp.Function):
    """l(z) = log(1 + exp(-z)); l'(z) = -sigmoid_neg(z)."""

    nargs = 1

    def fdiff(self, argindex=1):
        return -sigmoid_neg(self.args[0])

    def _latex(self, printer, exp=None):
        return _wrap_pow(rf"\ell\left({printer._print(self.args[0])}\right)", exp)


def check_opaque_derivatives() -> None:
    """Raise AssertionError unless the declared derivative of :class:`logloss` is sympy's own
    derivative of log(1 + exp(-z)) (the one derivative that is declared rather than derived).

    Returns
    -------
    None

    Example
    -------
    >>> check_opaque_derivatives()
    """
    z = sp.Symbol("z", real=True)
    explicit = sp.log(1 + sp.exp(-z))
    assert sp.simplify(sp.diff(explicit, z) + 1 / (1 + sp.exp(z))) == 0
    assert sp.diff(logloss(z), z) == -sigmoid_neg(z)


# ----------------------------------------------------------------- Python source

class _CodePrinter(PythonCodePrinter):
    def _print_relu(self, e):
        return f"_relu({self._print(e.args[0])})"

    def _print_relu_prime(self, e):
        return f"_relu_prime({self._print(e.args[0])}, r0)"

    def _print_logloss(self, e):
        return f"_softplus_neg({self._print(e.args[0])})"

    def _print_sigmoid_neg(self, e):
        return f"_sigmoid_neg({self._print(e.args[0])})"


def code(expr) -> str:
    """One sympy expression as Python source; the opaque functions become calls to the helpers of
    :data:`HELPERS` (``relu_prime`` reads the generated function's argument ``r0``).

    Parameters
    ----------
    expr : sympy expression

    Returns
    -------
    str

    Example
    -------
    >>> x = sp.Symbol("x")
    >>> code(relu(x) + logloss(2 * x))
    '_softplus_neg(2*x) + _relu(x)'
    """
    return _CodePrinter({"standard": "python3"}).doprint(expr)


def cse_lines(names, exprs, prefix: str, indent: str = "    ") -> list[str]:
    """Assignment lines ``name = ...`` for ``exprs``, their common subexpressions first (sympy ``cse``,
    canonical order: the same text every run), named ``prefix0``, ``prefix1``, ...

    Parameters
    ----------
    names : list of str
        the left-hand sides, one per expression.
    exprs : list of sympy expressions
    prefix : str
        the names of the shared subexpressions.
    indent : str

    Returns
    -------
    list of str

    Example
    -------
    >>> x, y = sp.symbols("x y")
    >>> cse_lines(["a", "b"], [sp.exp(x + y) + 1, 3 * sp.exp(x + y)], "t", indent="")
    ['t0 = math.exp(x + y)', 'a = t0 + 1', 'b = 3*t0']
    """
    reps, red = sp.cse(exprs, symbols=sp.numbered_symbols(prefix), order="canonical")
    lines = [f"{indent}{s} = {code(e)}" for s, e in reps]
    lines += [f"{indent}{nm} = {code(e)}" for nm, e in zip(names, red)]
    return lines


#: the imports of a generated numba module (one line each, as written)
IMPORTS = ("import math", "", "import numpy as np", "from numba import njit")

#: the scalar helpers a generated module defines for the opaque functions (its source, standalone)
HELPERS = '''
@njit(cache=True)
def _relu(u):
    return u if u > 0.0 else 0.0


@njit(cache=True)
def _relu_prime(u, r0):
    if u > 0.0:
        return 1.0
    if u < 0.0:
        return 0.0
    return r0


@njit(cache=True)
def _softplus_neg(z):
    """log(1 + exp(-z)), stable for both signs."""
    if z > 0.0:
        return math.log1p(math.exp(-z))
    return -z + math.log1p(math.exp(z))


@njit(cache=True)
def _sigmoid_neg(z):
    """1 / (1 + exp(z)) = -d/dz log(1 + exp(-z)), stable for both signs."""
    if z > 0.0:
        e = math.exp(-z)
        return e / (1.0 + e)
    return 1.0 / (1.0 + math.exp(z))
'''


# ----------------------------------------------------------------- LaTeX

def long_sum(expr, per_line: int, tex) -> str:
    r"""A sum as LaTeX over several aligned lines (``\\`` then ``&\qquad``), ``per_line`` terms a
    line, the terms expanded and in sympy's canonical order, signs pulled in front.

    Parameters
    ----------
    expr : sympy expression
    per_line : int
    tex : callable
        one term (sympy) -> its LaTeX (the caller's symbol names).

    Returns
    -------
    str

    Example
    -------
    >>> x, y = sp.symbols("x y")
    >>> print(long_sum(x - 2 * y, 1, sp.latex))
    x\\
      &\qquad - 2 y
    """
    terms = sp.Add.make_args(sp.expand(expr)) if expr != 0 else ()
    if not terms:
        return "0"
    terms = sorted(terms, key=sp.default_sort_key)
    parts = []
    for k, t in enumerate(terms):
        if t.could_extract_minus_sign():
            s = ("-" if k == 0 else " - ") + tex(-t)
        else:
            s = ("" if k == 0 else " + ") + tex(t)
        parts.append(s)
    lines = ["".join(parts[i:i + per_line]).lstrip() for i in range(0, len(parts), per_line)]
    return "\\\\\n  &\\qquad ".join(lines)


# ----------------------------------------------------------------- loading

def load_generated(path):
    """Import a generated ``.py`` file (e.g. ``derivations/generated/mixture_K2_L3.py``) as a module.

    The module is registered in ``sys.modules`` under a name fixed by the file's
    location, so numba's on-disk cache (``cache=True``), which re-imports the
    defining module by name when it loads a cached function, works across runs.
    (Loading the file under varying or unregistered names can make numba fail
    with ``ModuleNotFoundError`` on a cache written by another load.)

    Parameters
    ----------
    path : str or Path

    Returns
    -------
    module
        the same module object on a second call with the same file.

    Example
    -------
    >>> gen = load_generated("derivations/generated/mixture_K2_L3.py")  # doctest: +SKIP
    >>> gen.STATE_SIZE  # doctest: +SKIP
    200
    """
    path = Path(path).resolve()
    digest = hashlib.sha1(str(path.parent).encode()).hexdigest()[:10]
    name = f"_meanfield_generated_{re.sub(r'[^0-9A-Za-z_]', '_', path.stem)}_{digest}"
    mod = sys.modules.get(name)
    if mod is not None and getattr(mod, "__file__", None) == str(path):
        return mod
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules[name]
        raise
    return mod
