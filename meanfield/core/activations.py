"""Activation primitives and the one-copy-many-targets mechanism of the kernels.

Every per-step kernel of the package (the engine's generic one,
``meanfield.engine.kernels``, and any paper's hand kernels) is written once as
plain Python functions marked :func:`portable`: scalar loops over
preallocated arrays that never allocate and call nothing but ``math``
functions and each other. :func:`portable` compiles each one for the CPU
(``numba.njit(cache=True)``; the name it returns is the CPU version) and keeps
its Python source in a registry; :func:`compile_portable` compiles the same
source for another target, e.g. ``compile_portable(numba.cuda.jit(device=True))``
for the GPU (``meanfield.core.batched`` builds it only when the CUDA backend is
asked for, so importing meanfield never needs CUDA).

The primitives shared by every kernel: :func:`relu_prime` (ReLU' with a
chosen value at the kink), :func:`softplus_neg` (the logistic loss
``log(1 + exp(-z))``) and :func:`sigmoid_neg` (its negated derivative), each
stable for both signs, and their forms :func:`softplus_neg_e` /
:func:`sigmoid_neg_e` given ``exp(-|z|)``, so that a kernel needing both
computes the exp once. And the one divergence guard of every GD kernel,
:func:`accept_step`: a step's new state is taken only when every entry is
finite and at most ``max_abs`` in absolute value (status codes 2 and 3 of the
kernels otherwise, the last accepted state kept).

Example
-------
>>> from meanfield.core.activations import relu_prime, softplus_neg
>>> relu_prime(0.0, 0.5), round(softplus_neg(0.0), 6)
(0.5, 0.693147)
"""

from __future__ import annotations

import math
import types

from numba import njit

_PORTABLE: dict[str, object] = {}  # name -> plain Python function (definition order)
_CPU: dict[str, object] = {}  # name -> its CPU (njit) compilation


def portable(fn):
    """Register ``fn`` (plain Python, target-agnostic: scalar loops over
    preallocated arrays, ``math`` calls only, no allocation) and return its CPU
    compilation ``numba.njit(cache=True)(fn)``. Other modules may register
    functions too (names must be unique); they are compiled for other targets
    by :func:`compile_portable`."""
    name = fn.__name__
    if name in _PORTABLE and _PORTABLE[name].__code__ is not fn.__code__:
        raise ValueError(f"portable function {name!r} registered twice")
    _PORTABLE[name] = fn
    _CPU[name] = njit(cache=True)(fn)
    return _CPU[name]


def compile_portable(jit) -> types.SimpleNamespace:
    """Every registered portable function compiled with the decorator ``jit``
    (e.g. ``numba.cuda.jit(device=True)``), as attributes of a namespace.

    Each function is rebuilt from its own code object over a copy of its
    module's globals in which every portable function (by name, and any other
    global bound to its CPU compilation) is replaced by its ``jit`` version, so
    calls between portable functions stay on the target. Nothing is compiled
    here; targets compile lazily on first use."""
    cpu_ids = {id(f): name for name, f in _CPU.items()}
    out: dict[str, object] = {}
    module_globals: dict[str, dict] = {}
    for name, fn in _PORTABLE.items():
        g = module_globals.get(fn.__module__)
        if g is None:
            g = module_globals[fn.__module__] = dict(fn.__globals__)
        py = types.FunctionType(fn.__code__, g, name, fn.__defaults__, fn.__closure__)
        py.__qualname__ = fn.__qualname__
        py.__doc__ = fn.__doc__
        out[name] = jit(py)
    for g in module_globals.values():
        for key, val in list(g.items()):
            if id(val) in cpu_ids:
                g[key] = out[cpu_ids[id(val)]]
        g.update(out)
    return types.SimpleNamespace(**out)


@portable
def relu_prime(u, r0):
    if u > 0.0:
        return 1.0
    if u < 0.0:
        return 0.0
    return r0


@portable
def softplus_neg_e(z, e):
    # log(1 + exp(-z)) given e = exp(-|z|) (the exp each branch takes), stable for both signs
    if z > 0.0:
        return math.log1p(e)
    return -z + math.log1p(e)


@portable
def sigmoid_neg_e(z, e):
    # 1 / (1 + exp(z)) = -l'(z) given e = exp(-|z|), stable
    if z > 0.0:
        return e / (1.0 + e)
    return 1.0 / (1.0 + e)


@portable
def softplus_neg(z):
    # log(1 + exp(-z)); a kernel that needs the derivative too shares the exp (softplus_neg_e, sigmoid_neg_e)
    return softplus_neg_e(z, math.exp(-abs(z)))


@portable
def sigmoid_neg(z):
    # 1 / (1 + exp(z)) = -l'(z)
    return sigmoid_neg_e(z, math.exp(-abs(z)))



@portable
def accept_step(y, new, max_abs):
    # the divergence guard of every GD kernel: y <- new[:len(y)] when every entry is finite and |entry| <= max_abs
    # (returns 0); else y is left as it is (the last accepted state) and the code says why: 2 a non-finite
    # entry, 3 an entry above max_abs (the kernels' status codes)
    ny = y.shape[0]
    for i in range(ny):
        if not math.isfinite(new[i]):
            return 2
        if abs(new[i]) > max_abs:
            return 3
    for i in range(ny):
        y[i] = new[i]
    return 0
