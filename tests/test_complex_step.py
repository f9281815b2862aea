"""The complex-step target of the portable kernels (meanfield.core.activations.complex_step_portable):
the kernels' own source run over complex numbers gives exact derivatives, held here against closed forms
and finite differences; the mixture's full kernels are held against finite differences in test_escape.py."""

import math

import numpy as np
import pytest

from meanfield.core import activations as act
from meanfield.core.activations import Lanes, complex_step_portable

H = 1e-30


def _d(f, x, *args, sign=1.0):
    """d f / dx by one complex step in the direction ``sign`` (a Lanes of one lane)."""
    z = np.array([x + 1j * sign * H]).view(Lanes)
    return float(np.asarray(f(z, *args)).imag[0] / (sign * H))


@pytest.mark.parametrize("x", [-30.0, -2.0, -0.3, 0.0, 0.4, 3.0, 40.0])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_primitives_derivatives_are_their_closed_forms(x, sign):
    """Both branches of the stable forms, and z = 0 exactly (where |z| has a kink but the functions are
    smooth), in both directions of the step."""
    cs = complex_step_portable()
    # d/dz log(1 + e^-z) = -1 / (1 + e^z)
    assert abs(_d(cs.softplus_neg, x, sign=sign) + act.sigmoid_neg(x)) <= 1e-15 * max(1.0, act.sigmoid_neg(x))
    # d/dz 1 / (1 + e^z) = -e^z / (1 + e^z)^2 = -s (1 - s)
    s = act.sigmoid_neg(x)
    assert abs(_d(cs.sigmoid_neg, x, sign=sign) + s * (1 - s)) <= 1e-15
    # the real parts are the real kernels' values
    z = np.array([x + 1j * sign * H]).view(Lanes)
    assert np.asarray(cs.softplus_neg(z)).real[0] == pytest.approx(act.softplus_neg(x), rel=1e-15, abs=0)
    # relu' has derivative 0 away from the kink, and the kernel's value at the kink (whatever the step's sign)
    assert cs.relu_prime(z, 0.5) == act.relu_prime(x, 0.5)


def test_complex_step_is_not_finite_differences():
    """The derivative of log(1 + e^-z) at z = 1 against the closed form: complex step is exact to rounding,
    a forward finite difference of the same function is not (so the check above can fail)."""
    x = 1.0
    exact = -1.0 / (1.0 + math.exp(x))
    cs = _d(complex_step_portable().softplus_neg, x)
    fd = (act.softplus_neg(x + 1e-6) - act.softplus_neg(x)) / 1e-6  # the real kernel's forward difference
    assert abs(cs - exact) <= 1e-16
    assert abs(fd - exact) > 1e-8


def test_lanes_compare_by_the_real_part_and_compute_lane_by_lane():
    z = (np.array([0.5 + 1e-30j, 0.5 - 2e-30j, 0.5 + 0j])).view(Lanes)
    assert z > 0.0 and 0.0 < z and not (z < 0.0) and z >= 0.5 and z <= 0.5
    # a tie of the real parts is a tie, whatever the imaginary part (numpy's complex scalars order
    # lexicographically: there the imaginary part would decide)
    t = np.array([1e-30j]).view(Lanes)
    assert not (t > 0.0) and not (t < 0.0) and t >= 0.0 and t <= 0.0
    assert np.complex128(1e-30j) > 0.0  # the hazard Lanes avoid
    assert not (z == 0.0) and (z * 0.0 == 0.0)
    cs = complex_step_portable()
    e = cs.softplus_neg(z)
    assert isinstance(e, Lanes) and e.shape == (3,)
    assert np.allclose(np.imag(e) / 1e-30, np.array([1.0, -2.0, 0.0]) * -act.sigmoid_neg(0.5), rtol=1e-15, atol=0)


def test_unsupported_math_function_names_itself():
    with pytest.raises(NotImplementedError, match=r"math\.tanh has no complex-step form"):
        act._ComplexStepMath().tanh(0.3)


def test_accept_step_on_the_complex_step_target():
    cs = complex_step_portable()
    y = np.zeros((2, 1), complex).view(Lanes)
    L = lambda *v: np.array(v, complex)[:, None].view(Lanes)  # noqa: E731
    assert cs.accept_step(y, L(1 + 1e-30j, -2.0), 5.0) == 0 and complex(y[0, 0]) == 1 + 1e-30j
    assert cs.accept_step(y, L(1.0, -6.0), 5.0) == 3  # |-6| > 5 by the analytic |x|
    assert cs.accept_step(y, L(complex(math.inf, 0), 0j), 5.0) == 2
    assert complex(y[0, 0]) == 1 + 1e-30j  # the last accepted state kept


def test_compile_portable_overrides_reach_every_function():
    marker = object()
    ns = act.compile_portable(lambda f: f, overrides={"math": marker})
    assert ns.softplus_neg.__globals__["math"] is marker
    assert act.softplus_neg.py_func.__globals__["math"] is math  # the CPU compilation's globals untouched
