"""A vectorisable exp for the trajectory-vectorised batches (lanes): :func:`exp_lane`.

The C library's ``math.exp`` is a call LLVM cannot vectorise: inside a loop
over lanes it stays one scalar call per lane. :func:`exp_lane` is straight-line
arithmetic (Cody-Waite reduction, a degree-13 polynomial in explicit fused
multiply-adds, two exact powers of two) that vectorises, within one ulp of
``math.exp`` (not bit for bit). Used by the mixture's hand-written lanes
(``meanfield.models.mixture.vectorised``, its ``EXP``) and by the engine's
lane kernels (``meanfield.engine.lanes``, ``vector_exp=True``); ``exp_libm``
is the C library's exp for the builds that keep it.
"""

from __future__ import annotations

import math

from llvmlite import ir as llvm_ir
from numba import njit
from numba.core import types as nbtypes
from numba.extending import intrinsic

_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01  # fdlibm's split of ln 2: k * _LN2_HI is exact for |k| < 2^11
_LN2_LO = 1.90821492927058770002e-10
_MAGIC = 6755399441055744.0  # 1.5 * 2^52: x + _MAGIC rounds x to an integer held in the low mantissa bits
_MAGIC_BITS = 0x4338000000000000
#: Taylor coefficients 1/j! of exp on |r| <= ln2 / 2 (degree 13: truncation below 1e-17 relative)
_C = (1.0, 1.0, 0.5, 1.0 / 6, 1.0 / 24, 1.0 / 120, 1.0 / 720, 1.0 / 5040, 1.0 / 40320, 1.0 / 362880,
      1.0 / 3628800, 1.0 / 39916800, 1.0 / 479001600, 1.0 / 6227020800)


@intrinsic
def _bits(typingctx, x):
    """The int64 with the bits of the float64 x (an LLVM bitcast: vectorises)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], llvm_ir.IntType(64))

    return nbtypes.int64(nbtypes.float64), codegen


@intrinsic
def _from_bits(typingctx, k):
    """The float64 with the bits of the int64 k (an LLVM bitcast)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], llvm_ir.DoubleType())

    return nbtypes.float64(nbtypes.int64), codegen


@intrinsic
def _fma(typingctx, a, b, c):
    """a * b + c with one rounding (LLVM's fma intrinsic: a vector FMA inside a loop over lanes)."""
    def codegen(context, builder, signature, args):
        d = llvm_ir.DoubleType()
        fn = builder.module.declare_intrinsic("llvm.fma", [d], llvm_ir.FunctionType(d, [d, d, d]))
        return builder.call(fn, args)

    return nbtypes.float64(nbtypes.float64, nbtypes.float64, nbtypes.float64), codegen


@njit(cache=True, nogil=True, inline="always")
def exp_lane(x):
    """exp(x) in straight-line arithmetic that LLVM vectorises inside a loop
    over lanes (no library call): x = k ln 2 + r (k = round(x / ln 2),
    Cody-Waite), a degree-13 Taylor polynomial of exp(r) (Horner's rule in
    fused multiply-adds, :func:`_fma`: one rounding a coefficient), times 2^k as two
    exact powers of two (so that results below 2^-1022 are subnormal, as the C
    library's). Within one ulp of ``math.exp`` (not bit for bit); exp(0) = 1
    exactly; NaN stays NaN, x < -745.2 gives 0, x > 709.79 inf.

    Parameters
    ----------
    x : float

    Returns
    -------
    float
        exp(x) to one ulp.

    Examples
    --------
    >>> from meanfield.core.lane_exp import exp_lane
    >>> exp_lane(0.0), abs(exp_lane(1.0) - 2.718281828459045) <= 4.5e-16
    (1.0, True)
    """
    xc = -746.0 if x < -746.0 else (710.0 if x > 710.0 else x)
    t = xc * _LOG2E + _MAGIC
    kf = t - _MAGIC
    k = _bits(t) - _MAGIC_BITS
    k1 = _bits(kf * 0.5 + _MAGIC) - _MAGIC_BITS  # about k / 2 (rounded to even): 2^k1 and 2^(k - k1) are normal
    f1 = _from_bits((k1 + 1023) << 52)
    f2 = _from_bits((k - k1 + 1023) << 52)
    r = (xc - kf * _LN2_HI) - kf * _LN2_LO
    p = _C[13]
    p = _fma(p, r, _C[12])
    p = _fma(p, r, _C[11])
    p = _fma(p, r, _C[10])
    p = _fma(p, r, _C[9])
    p = _fma(p, r, _C[8])
    p = _fma(p, r, _C[7])
    p = _fma(p, r, _C[6])
    p = _fma(p, r, _C[5])
    p = _fma(p, r, _C[4])
    p = _fma(p, r, _C[3])
    p = _fma(p, r, _C[2])
    p = _fma(p, r, _C[1])
    p = _fma(p, r, _C[0])
    v = p * f1 * f2
    v = 0.0 if x < -745.2 else v
    v = math.inf if x > 709.79 else v
    return x if x != x else v


@njit(cache=True, nogil=True, inline="always")
def exp_libm(x):
    """``math.exp`` (the C library's; the exact option of the lane builds).

    Parameters
    ----------
    x : float

    Returns
    -------
    float
        ``math.exp(x)``.

    Examples
    --------
    >>> import math
    >>> from meanfield.core.lane_exp import exp_libm
    >>> exp_libm(1.0) == math.exp(1.0)
    True
    """
    return math.exp(x)


@njit(cache=True, nogil=True)
def lanes_exp(X, out):
    """out[w] = :func:`exp_lane` (X[w]) for every w (a loop LLVM vectorises).

    Parameters
    ----------
    X, out : numpy.ndarray
        (W,) float64 arguments and results.

    Returns
    -------
    None

    Examples
    --------
    >>> import numpy as np
    >>> from meanfield.core.lane_exp import lanes_exp
    >>> out = np.empty(2)
    >>> lanes_exp(np.array([0.0, -1e4]), out)
    >>> out.tolist()
    [1.0, 0.0]
    """
    for w in range(X.shape[0]):
        out[w] = exp_lane(X[w])
