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
asked for, so importing meanfield never needs CUDA). A third target is
:func:`complex_step_portable`: the same source run as plain Python over
complex arrays, with ``math`` and ``abs`` replaced by complex-analytic forms,
so that complex-step differentiation (``meanfield.core.escape``) gives the
exact Jacobian of a kernel from the kernel's own source, with no second copy
of its mathematics.

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

import numpy as np
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


def compile_portable(jit, overrides: dict | None = None) -> types.SimpleNamespace:
    """Every registered portable function compiled with the decorator ``jit``
    (e.g. ``numba.cuda.jit(device=True)``), as attributes of a namespace.

    Each function is rebuilt from its own code object over a copy of its
    module's globals in which every portable function (by name, and any other
    global bound to its CPU compilation) is replaced by its ``jit`` version, so
    calls between portable functions stay on the target; ``overrides``
    (name -> object, e.g. ``{"math": ...}``) replaces further globals in every
    copy. Nothing is compiled here; targets compile lazily on first use."""
    cpu_ids = {id(f): name for name, f in _CPU.items()}
    out: dict[str, object] = {}
    module_globals: dict[str, dict] = {}
    for name, fn in _PORTABLE.items():
        g = module_globals.get(fn.__module__)
        if g is None:
            g = module_globals[fn.__module__] = dict(fn.__globals__)
            g.update(overrides or {})
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


def _is_lanes(z) -> bool:
    return isinstance(z, np.ndarray)


class Lanes(np.ndarray):
    """k complex-step evaluations of one kernel at once: where the kernel
    holds a scalar, it holds a row of k complex numbers that share their real
    part (the real state's value) and differ in their imaginary parts (k
    directions). Arithmetic is numpy's, lane by lane; a comparison compares
    the real parts of the first lane (every lane's branch is the real
    kernel's), ``==`` holds when every lane is equal. Build one with
    ``np.asarray(x, complex).view(Lanes)``; state, outputs and scratch of a
    kernel call all get a trailing axis of length k."""

    __hash__ = None

    def _key(self):
        return np.asarray(self).real.flat[0]

    def __lt__(self, o):
        return bool(self._key() < _real_key(o))

    def __le__(self, o):
        return bool(self._key() <= _real_key(o))

    def __gt__(self, o):
        return bool(self._key() > _real_key(o))

    def __ge__(self, o):
        return bool(self._key() >= _real_key(o))

    def __eq__(self, o):
        return bool(np.all(np.asarray(self) == np.asarray(o)))

    def __ne__(self, o):
        return not self.__eq__(o)


def _real_key(x):
    return np.asarray(x).real.flat[0] if isinstance(x, np.ndarray) else np.real(x)


class _ComplexStepMath:
    """``math`` for :func:`complex_step_portable`: each function analytic on
    complex arguments (complex numpy scalars or :class:`Lanes`), equal to
    ``math``'s on real ones. A kernel that calls a ``math`` function without a
    form here fails with one line naming it."""

    inf = math.inf
    nan = math.nan
    pi = math.pi
    e = math.e

    @staticmethod
    def exp(z):
        return np.exp(z if _is_lanes(z) else np.complex128(z))

    @staticmethod
    def log(z):
        return np.log(z if _is_lanes(z) else np.complex128(z))

    @staticmethod
    def log1p(z):
        # first order in Im z (exact for a complex step h << |1 + Re z|): the real part is log1p's,
        # unlike numpy's complex log1p, which is log(|1 + z|)
        z = z if _is_lanes(z) else np.complex128(z)
        re = np.real(z)
        return np.log1p(re) + 1j * (np.imag(z) / (1.0 + re))

    @staticmethod
    def sqrt(z):
        return np.sqrt(z if _is_lanes(z) else np.complex128(z))

    @staticmethod
    def isfinite(z):
        return bool(np.all(np.isfinite(z)))

    @staticmethod
    def ceil(z):
        return math.ceil(_real_key(z))

    def __getattr__(self, name):
        raise NotImplementedError(f"math.{name} has no complex-step form (meanfield.core.activations._ComplexStepMath)")


def _analytic_abs(z):
    # |x| continued analytically from the real axis by the sign of the real part; at a real part of exactly 0
    # the branch of x <= 0 (-z), the side the primitives' `if z > 0.0` takes there: softplus_neg_e(z, exp(-|z|))
    # and sigmoid_neg_e are then the smooth functions they are at 0 (with z at 0, |x| itself has a kink)
    return -z if _real_key(z) <= 0 else z


_COMPLEX_STEP: dict[int, types.SimpleNamespace] = {}


def complex_step_portable() -> types.SimpleNamespace:
    """Every registered portable function as plain Python (no compilation)
    over a copy of its module's globals in which ``math`` is complex-analytic
    (:class:`_ComplexStepMath`) and ``abs`` is |x| continued from the real
    axis. Called with :class:`Lanes` (state, outputs and scratch alike: every
    array with a trailing axis of k lanes; one direction is k = 1), a kernel
    computes F(y + i h v_j) for the k directions v_j by its own source in one
    pass; a comparison compares real parts, so every branch is the one the
    real kernel takes, ties included. ``Im F / h`` is then the exact
    directional derivative wherever the kernel's function is smooth (at a
    kink, e.g. a ReLU pre-activation of exactly 0, it is the one-sided
    derivative of the branch taken): the Jacobians of
    ``meanfield.core.escape``. (Plain complex numpy arrays work too, but numpy
    orders complex scalars lexicographically: at a tie of the real parts the
    imaginary part picks the branch. Use Lanes.) The Python interpreter runs
    it: for small states and sample sets (a pass of the mixture kernel at
    K = 3 takes milliseconds).

    Example
    -------
    >>> import numpy as np
    >>> cs = complex_step_portable()
    >>> z = np.array([0.3 + 1e-30j]).view(Lanes)   # one direction
    >>> d = cs.softplus_neg(z).imag / 1e-30        # d/dz log(1 + e^-z) = -sigmoid_neg(z)
    >>> bool(abs(d[0] + sigmoid_neg(0.3)) < 1e-15)
    True
    """
    ns = _COMPLEX_STEP.get(len(_PORTABLE))
    if ns is None:
        ns = _COMPLEX_STEP[len(_PORTABLE)] = compile_portable(
            lambda f: f, overrides={"math": _ComplexStepMath(), "abs": _analytic_abs})
    return ns


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
