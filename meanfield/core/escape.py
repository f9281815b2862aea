"""Plateaus and escape times from the linearised dynamics at a saddle.

System-independent: a :class:`Saddle` is a state ``y`` (a flat vector), a
mask ``trained`` over it (the variables the stage trains; the others are held
fixed) and the stage's right-hand side ``rhs(y) -> dy/dt`` (gradient flow)
and/or its GD map ``gd_map(y) -> y'`` with step ``eta``. Nothing here knows
which system it is; the mixture adapter is ``meanfield.models.mixture.escape``.

Exact linearisation by complex-step differentiation. For a real-analytic map
F, F(y + i h e_j) = F(y) + i h J e_j - h^2/2 ... so Im F(y + i h e_j) / h =
J e_j + O(h^2) with NO subtraction: h = 1e-200 (:data:`COMPLEX_STEP_H`)
makes the result J exactly to rounding (unlike finite differences, whose
error is at best ~1e-8 in double precision), and every product of two
imaginary parts (order h^2 = 1e-400) underflows to 0, so the real part of
every intermediate is exactly the real map's number: each direction takes
the real map's branches, ties included. It needs only that the
map takes complex input (e.g. numpy with transposes, not conjugates, or a
system's kernels on ``meanfield.core.activations.complex_step_portable``) and
that it is analytic at ``y``: a ReLU pre-activation at its
kink is not, which is why a saddle carries a ``kinks`` callable and a report
with kinks is marked not valid. Finite differences (:func:`jacobian_fd`) are
kept as an independent check only.

The escape time. Near the saddle, the trained block of the state follows
d(dy)/dt = J dy (flow) or dy' = M dy (GD, M = the GD map's Jacobian). A
displacement ``delta`` of size ``scale**p`` (for the mixture: the initial
self-scores A = B = omega^2 I, p = 2) has a component a = |P1 delta| on the top
eigenspace (P1 = its spectral projector); that component grows like
exp(lambda1 t) (flow) or mu1^n (GD) and the plateau ends when it reaches an
O(1) level theta. Hence

    T(scale) = (p / lambda1) log(1/scale) + (1/lambda1) log(theta / a)      (flow)
    T(scale) = (p eta / ln mu1) log(1/scale) + (eta / ln mu1) log(theta / a)   (GD, T = eta x steps)

with mu1 = 1 + eta lambda1 + O(eta^2) (the first-order value
2 eta / ln(1 + eta lambda1) is reported too). The intercept needs theta; it is
measured once, along the unstable manifold, by :func:`manifold_intercept`
(start at y + eps r, r the growing direction, run the nonlinear dynamics until
the plateau's end criterion holds; then theta / a is replaced by the time it
took). Next-order terms (what a prediction neglects): the next eigenvalue
lambda2 with a nonzero projection of delta (relative slope error of order
(1 - lambda2/lambda1) exp(-(lambda1 - lambda2) T)), the non-growing
components of delta of size scale**p feeding back through the nonlinearity
(relative O(scale**p)), and for GD the one-step resolution of T.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

COMPLEX_STEP_H = 1e-200


@dataclass
class Saddle:
    """A state and the variables a stage trains there.

    ``rhs(y)`` / ``gd_map(y)`` must accept complex arrays (complex-step
    differentiation) when the Jacobian is to be exact; ``kinks(y)`` returns
    human-readable descriptions of the points where the map is not smooth at
    ``y`` (empty list: smooth). ``names[i]`` names state entry ``i``."""

    y: np.ndarray
    trained: np.ndarray
    rhs: Callable | None = None
    gd_map: Callable | None = None
    eta: float | None = None
    names: list[str] | None = None
    kinks: Callable | None = None
    complex_safe: bool = True  # False: the maps are real-only (e.g. numba kernels); Jacobians by finite differences
    lanes: bool = False  # True: the maps also take an (n, k) complex array (k states as columns) -> (n, k)

    def __post_init__(self):
        self.y = np.asarray(self.y, dtype=np.float64)
        self.trained = np.asarray(self.trained, dtype=bool)
        if self.trained.shape != self.y.shape:
            raise ValueError("trained: must be a boolean mask of the state's shape")
        if self.rhs is None and self.gd_map is None:
            raise ValueError("Saddle: give rhs (flow), gd_map (GD) or both")
        if self.gd_map is not None and not (self.eta and self.eta > 0):
            raise ValueError("eta: a GD map needs its step eta > 0")


def saddle_of_system(system, y, mode, trained, eta: float | None = None, names=None, kinks=None) -> Saddle:
    """A saddle from any ``meanfield.core.integrate`` system (``rhs(y, mode)``,
    ``gd_advance(y, nsteps, eta, mode, criterion)``), e.g. the engine's model
    descriptions: the maps are the system's own (real-only numba kernels), so
    the Jacobians come from finite differences (``complex_safe=False``; the
    report says ``jacobian_method: fd``). For exact Jacobians give
    :class:`Saddle` complex-safe maps instead, e.g. the system's ``@portable``
    kernels on ``meanfield.core.activations.complex_step_portable``, as
    ``meanfield.models.mixture.escape`` does."""

    def gd(z):
        w = np.array(z, dtype=np.float64)
        done, code = system.gd_advance(w, 1, float(eta), mode, None)
        if done != 1:
            raise FloatingPointError(f"GD step failed (code {code})")
        return w

    return Saddle(y=np.asarray(y, float), trained=np.asarray(trained, bool),
                  rhs=lambda z: system.rhs(np.ascontiguousarray(z, dtype=np.float64), mode),
                  gd_map=gd if eta else None, eta=eta, names=names, kinks=kinks, complex_safe=False)


def jacobian(fun: Callable, y: np.ndarray, mask: np.ndarray, h: float = COMPLEX_STEP_H,
             lanes: bool = False) -> np.ndarray:
    """d fun(y)[mask] / d y[mask] by complex step (exact to rounding when
    ``fun`` is real-analytic at ``y`` and complex-safe). ``lanes``: ``fun``
    takes every direction at once, an (n, k) complex array of k states as
    columns, and returns (n, k): one evaluation instead of k."""
    y = np.asarray(y, dtype=np.float64)
    cols = np.flatnonzero(mask)
    if cols.size == 0:
        return np.empty((0, 0))
    if lanes:
        Y = np.repeat(y.astype(np.complex128)[:, None], cols.size, axis=1)
        Y[cols, np.arange(cols.size)] += 1j * h
        return np.imag(np.asarray(fun(Y))[cols]) / h
    J = np.empty((cols.size, cols.size))
    yc = y.astype(np.complex128)
    for k, j in enumerate(cols):
        yc[j] = y[j] + 1j * h
        J[:, k] = np.imag(np.asarray(fun(yc))[cols]) / h
        yc[j] = y[j]
    return J


def jvp(fun: Callable, y: np.ndarray, mask: np.ndarray, v: np.ndarray, h: float = COMPLEX_STEP_H) -> np.ndarray:
    """J v on the trained block (J = d fun[mask] / d y[mask]) by one complex
    step along ``v``: exact to rounding, one evaluation of ``fun``."""
    yc = np.asarray(y, dtype=np.float64).astype(np.complex128)
    yc[mask] += 1j * h * np.asarray(v, dtype=np.float64)
    return np.imag(np.asarray(fun(yc))[mask]) / h


def tangent_log_growth(steps, x0: np.ndarray, mask: np.ndarray, norm: Callable | None = None):
    """Propagate a tangent vector through a sequence of linearised maps.

    ``steps`` yields (fun, y) pairs: the map of step k and the state it is
    linearised at (e.g. the GD map at the saddle that moves with slow
    variables); x_{k+1} = J_k x_k by :func:`jvp`. A step may instead be a
    callable ``x -> J_k x`` on the trained block (a system that knows its
    tangent map in closed form). Returns (log|x_k|, log of
    ``norm(x_k)``) for k = 0..n, with the vector renormalised every step so
    that nothing overflows; ``norm`` (default: Euclidean) measures the part
    that an end criterion looks at."""
    x = np.asarray(x0, float)
    n0 = float(np.linalg.norm(x))
    norm = norm or np.linalg.norm
    logs, logp = [math.log(n0)], [math.log(max(float(norm(x)), 1e-300))]
    x = x / n0
    acc = math.log(n0)
    for st in steps:
        x = np.asarray(st(x), float) if callable(st) else jvp(st[0], st[1], mask, x)
        nx = float(np.linalg.norm(x))
        if not (nx > 0 and math.isfinite(nx)):
            logs.append(-math.inf)
            logp.append(-math.inf)
            break
        acc += math.log(nx)
        x = x / nx
        logs.append(acc)
        logp.append(acc + math.log(max(float(norm(x)), 1e-300)))
    return np.array(logs), np.array(logp)


def jacobian_fd(fun: Callable, y: np.ndarray, mask: np.ndarray, h: float = 1e-5) -> np.ndarray:
    """The same by central finite differences with one Richardson step
    (error O(h^4) + rounding ~1e-16 / h): an independent check only."""
    y = np.asarray(y, dtype=np.float64)
    cols = np.flatnonzero(mask)
    J = np.empty((cols.size, cols.size))

    def d(j, hh):
        yp, ym = y.copy(), y.copy()
        yp[j] += hh
        ym[j] -= hh
        return (np.asarray(fun(yp))[cols] - np.asarray(fun(ym))[cols]) / (2 * hh)

    for k, j in enumerate(cols):
        J[:, k] = (4 * d(j, h / 2) - d(j, h)) / 3
    return J


class Cluster:
    """Eigenvalues equal up to the clustering tolerance, with the spectral
    projector onto their invariant subspace (computed on first use; None when
    that subspace is numerically defective, e.g. a Jordan block)."""

    def __init__(self, value: complex, multiplicity: int, make=None, projector=None):
        self.value = value
        self.multiplicity = multiplicity
        self._make = make
        self._projector = projector
        self._done = make is None

    @property
    def projector(self) -> np.ndarray | None:
        if not self._done:
            self._projector = self._make()
            self._done = True
        return self._projector


def clusters(M: np.ndarray, rtol: float = 1e-7, cond_max: float = 1e8) -> list[Cluster]:
    """Eigenvalue clusters of ``M``, largest real part first. The projector of
    a cluster is Rc (Lc^T Rc)^{-1} Lc^T from its right (eig of M) and left (eig
    of M^T) eigenvectors; it is kept only when it is a well-conditioned
    invariant projector (P^2 = P, M P = P M), which fails for defective
    clusters (e.g. a Jordan block at 0): those get ``projector=None``."""
    vals, R = np.linalg.eig(M)
    valsL, Lm = np.linalg.eig(M.T)
    scale = max(1.0, float(np.max(np.abs(vals)))) if vals.size else 1.0
    tol = rtol * scale
    order = np.argsort(-vals.real, kind="stable")
    used = np.zeros(vals.size, bool)
    out = []

    def maker(members, value):
        def make():
            left = np.flatnonzero(np.abs(valsL - value) <= 2 * tol)
            if left.size != members.size:
                return None
            Rc, Lc = R[:, members], Lm[:, left]
            Gm = Lc.T @ Rc
            if np.linalg.cond(Gm) >= cond_max:
                return None
            P = Rc @ np.linalg.solve(Gm, Lc.T)
            pn = max(1.0, float(np.abs(P).max()))
            if np.abs(P @ P - P).max() > 1e-6 * pn or np.abs(M @ P - P @ M).max() > 1e-6 * scale * pn:
                return None
            return P

        return make

    for i in order:
        if used[i]:
            continue
        members = np.flatnonzero(~used & (np.abs(vals - vals[i]) <= tol))
        used[members] = True
        value = complex(np.mean(vals[members]))
        out.append(Cluster(value, int(members.size), maker(members, value)))
    return out


@dataclass
class EscapeReport:
    """Everything the linearisation at a saddle predicts (see module docstring)."""

    n_trained: int
    rhs_norm: float | None  # |F(y)| on the trained block: 0 at a true fixed point
    kinks: list[str]
    valid: bool
    reason: str
    spectrum: list[complex] = field(default_factory=list)  # top eigenvalues of J (flow), with multiplicity
    lam: float | None = None  # top real part of J
    multiplicity: int | None = None
    lam2: float | None = None  # next eigenvalue whose eigenspace the displacement reaches (or None)
    slope_flow: float | None = None  # p / lam
    mu: float | None = None  # top eigenvalue of the GD map's Jacobian
    mu_spectrum: list[complex] = field(default_factory=list)
    rate_gd: float | None = None  # ln(mu) / eta
    slope_gd: float | None = None  # p eta / ln mu
    slope_gd_first_order: float | None = None  # p eta / ln(1 + eta lam)
    rate2_gd: float | None = None  # ln|mu2| / eta of the next GD eigenspace the displacement reaches
    projection: float | None = None  # a = |P1 delta| per unit scale**p
    projection2: float | None = None  # |P2 delta| of the lam2 eigenspace
    direction: np.ndarray | None = None  # unit growing direction (trained block)
    leading: list[tuple[str, float]] = field(default_factory=list)  # named entries of the direction
    power: float = 2.0
    eta: float | None = None
    method: str = "complex-step"  # how the Jacobians were computed ("fd": not exact, ~1e-8)

    def to_dict(self) -> dict:
        def c(z):
            z = complex(z)
            return z.real if abs(z.imag) <= 1e-14 * max(1.0, abs(z.real)) else [z.real, z.imag]

        return {"n_trained": self.n_trained, "rhs_norm": self.rhs_norm, "kinks": self.kinks, "valid": self.valid,
                "reason": self.reason, "spectrum": [c(z) for z in self.spectrum], "lambda": self.lam,
                "multiplicity": self.multiplicity, "lambda2": self.lam2, "slope_flow": self.slope_flow,
                "mu": self.mu, "mu_spectrum": [c(z) for z in self.mu_spectrum], "rate_gd": self.rate_gd,
                "slope_gd": self.slope_gd, "rate2_gd": self.rate2_gd, "slope_gd_first_order": self.slope_gd_first_order,
                "projection": self.projection, "projection2": self.projection2, "power": self.power,
                "eta": self.eta, "jacobian_method": self.method, "leading": [[n, v] for n, v in self.leading]}

    def slope(self, method: str) -> float | None:
        """Predicted dT / d log(1/scale) for ``method`` "gd" or "flow"."""
        return self.slope_gd if method == "gd" else self.slope_flow

    def rate(self, method: str) -> float | None:
        return self.rate_gd if method == "gd" else self.lam


def linearise(saddle: Saddle, delta: np.ndarray | None = None, power: float = 2.0, n_spectrum: int = 8,
              n_leading: int = 8, method: str = "complex-step", cluster_rtol: float = 1e-7) -> EscapeReport:
    """Linearise ``saddle`` and predict its escape.

    ``delta``: the displacement from the saddle per unit ``scale**power``
    (full state vector; only the trained block is used); default: none (no
    projection, no direction). ``method``: "complex-step" (exact) or "fd"."""
    mask = saddle.trained
    n = int(mask.sum())
    kinks = list(saddle.kinks(saddle.y)) if saddle.kinks is not None else []
    if not saddle.complex_safe:
        method = "fd"
    if method == "complex-step":
        def jac(f, y, m):
            return jacobian(f, y, m, lanes=saddle.lanes)
    else:
        jac = jacobian_fd
    rhs_norm = None
    if saddle.rhs is not None:
        rhs_norm = float(np.linalg.norm(np.asarray(saddle.rhs(saddle.y))[mask]))
    elif saddle.gd_map is not None:
        rhs_norm = float(np.linalg.norm((np.asarray(saddle.gd_map(saddle.y)) - saddle.y)[mask])) / saddle.eta
    rep = EscapeReport(n_trained=n, rhs_norm=rhs_norm, kinks=kinks, valid=False, reason="", power=power,
                       eta=saddle.eta, method=method)
    d = None if delta is None else np.asarray(delta, float)[mask]
    grow_cl = None
    if saddle.rhs is not None:
        J = jac(saddle.rhs, saddle.y, mask)
        cl = clusters(J, cluster_rtol)
        rep.spectrum = [c.value for c in cl for _ in range(c.multiplicity)][:n_spectrum]
        top = cl[0]
        rep.lam, rep.multiplicity = float(top.value.real), top.multiplicity
        if rep.lam > 0:
            rep.slope_flow = power / rep.lam
            if saddle.eta:
                rep.slope_gd_first_order = power * saddle.eta / math.log1p(saddle.eta * rep.lam)
        grow_cl = cl
    if saddle.gd_map is not None:
        M = jac(saddle.gd_map, saddle.y, mask)
        clm = clusters(M, cluster_rtol)
        clm.sort(key=lambda c: -abs(c.value))
        rep.mu_spectrum = [c.value for c in clm for _ in range(c.multiplicity)][:n_spectrum]
        rep.mu = float(abs(clm[0].value))
        if rep.mu > 1:
            rep.rate_gd = math.log(rep.mu) / saddle.eta
            rep.slope_gd = power / rep.rate_gd
        if grow_cl is None:
            grow_cl = clm
            if rep.multiplicity is None:
                rep.multiplicity = clm[0].multiplicity
    if d is not None and grow_cl:
        P1 = grow_cl[0].projector
        if P1 is not None:
            v = np.real(P1 @ d)
            rep.projection = float(np.linalg.norm(v))
            if rep.projection <= 1e-9 * float(np.linalg.norm(d)):  # rounding only: no component
                rep.projection = 0.0
            else:
                rep.direction = v / rep.projection
        if saddle.rhs is not None:
            rep.lam2, rep.projection2 = _second(grow_cl, d, lambda z: z.real)
        if saddle.gd_map is not None:
            rep.rate2_gd, p2 = _second(clm, d, lambda z: math.log(max(abs(z), 1e-300)) / saddle.eta)
            if rep.projection2 is None:
                rep.projection2 = p2
    if rep.direction is not None and saddle.names is not None:
        names = [saddle.names[i] for i in np.flatnonzero(mask)]
        # ties (symmetric directions) keep the state's order: round away the last digits first
        order = np.argsort(-np.round(np.abs(rep.direction), 9), kind="stable")[:n_leading]
        rep.leading = [(names[i], float(rep.direction[i])) for i in order]
    grows = (rep.lam is not None and rep.lam > 0) or (rep.mu is not None and rep.mu > 1)
    if kinks:
        rep.reason = f"not smooth at the saddle: {len(kinks)} pre-activation(s) at the ReLU kink"
    elif rhs_norm is not None and rhs_norm > 1e-9:
        rep.reason = f"not a fixed point: |rhs| = {rhs_norm:.3g} on the trained variables"
    elif not grows:
        rep.reason = "no growing direction: the saddle is stable on the trained variables"
    elif delta is not None and grow_cl and grow_cl[0].projector is None:
        rep.reason = "the top eigenspace is defective (no spectral projector): no projection"
    elif delta is not None and not rep.projection:
        rep.reason = "the displacement has no component on the top eigenspace"
    else:
        rep.valid = True
        rep.reason = "smooth fixed point with a growing direction"
    return rep


def _second(cl: list[Cluster], d: np.ndarray, growth: Callable) -> tuple[float | None, float | None]:
    """(growth rate, |P d|) of the first cluster after the top one that the
    displacement ``d`` reaches (a defective cluster, whose projector is
    unknown, counts as reached)."""
    dn = float(np.linalg.norm(d)) or 1.0
    for c in cl[1:]:
        pc = None if c.projector is None else float(np.linalg.norm(c.projector @ d))
        if pc is None or pc > 1e-9 * dn:
            return float(growth(c.value)), pc
    return None, None


def predicted_time(rep: EscapeReport, method: str, scale: float, intercept: float) -> float:
    """T(scale) = slope log(1/scale) + intercept."""
    return rep.slope(method) * math.log(1.0 / scale) + intercept


def manifold_intercept(rep: EscapeReport, method: str, run_until: Callable, eps: float = 1e-6) -> dict:
    """The intercept of T(scale) from one nonlinear run along the unstable
    manifold: ``run_until(eps)`` starts at the saddle plus ``eps`` times the
    growing direction and returns the time the plateau's end criterion takes
    (NaN if never). Then T(scale) = T_eps + (1/rate) ln(eps / (a scale^p)),
    i.e. intercept = T_eps + ln(eps / a) / rate."""
    rate = rep.rate(method)
    if rate is None or not rep.projection:
        return {"eps": eps, "t_eps": math.nan, "intercept": math.nan}
    t_eps = float(run_until(eps))
    return {"eps": eps, "t_eps": t_eps, "intercept": t_eps + math.log(eps / rep.projection) / rate}


def slope_tolerance(rep: EscapeReport, method: str, log_inv_scale, durations, scale_max: float) -> dict:
    """The relative tolerance of a measured slope against ``rep``'s
    prediction, from the terms the prediction neglects (each with its O(1)
    constant set to 1):

    * second mode: the displacement's component on the next eigenspace that it
      reaches (growth rate lam2 < lam1, relative size rho = |P2 d| / |P1 d|)
      shifts T by ~ rho exp(-(lam1 - lam2) T) / lam1; its derivative in
      log(1/scale) at the shortest duration T_min bounds the relative slope
      error by rho (1 - lam2/lam1) exp(-(lam1 - lam2) T_min);
    * non-growing components of size scale^p feeding back: relative
      p scale_max^p;
    * time resolution (GD: T is a whole number of steps, off by [0, eta)): the
      least-squares slope moves by at most eta sum|x - xbar| / (2 sum (x - xbar)^2),
      relative to the predicted slope.
    Returns the parts and their sum ``rel``."""
    x = np.asarray(log_inv_scale, float)
    T = np.asarray(durations, float)
    lam1 = rep.rate(method)
    parts = {"second_mode": 0.0, "feedback": rep.power * scale_max ** rep.power, "resolution": 0.0}
    lam2 = rep.rate2_gd if method == "gd" else rep.lam2
    if lam2 is not None and lam1:
        rho = rep.projection2 / rep.projection if (rep.projection2 is not None and rep.projection) else 1.0
        Tmin = float(np.nanmin(T)) if np.isfinite(T).any() else 0.0
        parts["second_mode"] = float(rho * max(0.0, 1 - lam2 / lam1) * math.exp(-(lam1 - max(lam2, 0.0)) * Tmin)) \
            if lam2 > 0 else float(rho * math.exp(-lam1 * Tmin))
    if method == "gd" and rep.eta and x.size >= 2:
        dx = x - x.mean()
        parts["resolution"] = float(rep.eta * np.abs(dx).sum() / (2 * (dx**2).sum()) / rep.slope(method))
    parts["rel"] = float(sum(parts.values()))
    return parts


# ----------------------------------------------------- measured against predicted: the generic check


def time_to_criterion(solver, system, y0, mode, criterion, horizon: float, stage: int = 2) -> float:
    """Time from ``y0`` until ``criterion`` holds, one stage of any integrate system.

    Parameters
    ----------
    solver : meanfield.core.integrate solver
        ``GDMap``, ``RK4`` or ``DormandPrince`` (anything with ``solve``).
    system : meanfield.core.integrate system
        The system (``rhs`` / ``gd_advance``).
    y0 : array_like
        The start state.
    mode : tuple of bool
        What the stage trains.
    criterion : tuple or None
        A parsed end criterion (``meanfield.core.config.parse_criterion``).
    horizon : float
        The most steps (GD) or time units (flow) to wait.
    stage : int
        The stage number written into the trajectory's stage ends.

    Returns
    -------
    float
        The time at which the criterion fired; NaN when it did not within ``horizon``.

    Examples
    --------
    >>> T = time_to_criterion(GDMap(0.5), system, y0, (False, True), crit, 1e5)  # doctest: +SKIP
    """
    from . import integrate

    st = integrate.Stage(stage, mode, horizon, criterion, "escape")
    traj = solver.solve(system, np.array(y0, float), [st], integrate.SaveAt(every=10**9))
    ends = [e for e in traj.stage_ends if e["stage"] == stage]
    return float(ends[0]["t"]) if ends and ends[0]["reason"] == "criterion" else math.nan


def slope_check(rep: EscapeReport, method: str, scales, durations, intercept: float = math.nan) -> dict:
    """A measured sweep of plateau durations against ``rep``'s predicted slope.

    The measured slope is the least-squares slope of ``durations`` against
    log(1/scale) over the finite durations; the tolerance is
    :func:`slope_tolerance` (the neglected terms); the check passes when the
    report is valid and the relative error is within a tolerance below 100%
    (a tolerance of 100% or more cannot tell any slope from the prediction:
    ``testable`` is False and the check does not pass).

    Parameters
    ----------
    rep : EscapeReport
        The linearisation at the saddle (:func:`linearise`).
    method : str
        "gd" or "flow" (which predicted slope).
    scales : array_like
        The initial scales of the sweep (for the mixture: omega).
    durations : array_like
        The measured plateau durations, NaN where the plateau did not end.
    intercept : float
        The predicted intercept (:func:`manifold_intercept`), for the predicted durations.

    Returns
    -------
    dict
        ``slope_predicted``, ``slope_measured``, ``r2``, ``intercept_measured``,
        ``relative_error``, ``tolerance`` (``rel`` of the parts),
        ``tolerance_parts``, ``scales``, ``log_inv_scale``, ``durations``,
        ``predicted_durations``, ``testable``, ``pass``.

    Examples
    --------
    >>> rep = EscapeReport(n_trained=1, rhs_norm=0.0, kinks=[], valid=True, reason="", lam=1.0, slope_flow=2.0)
    >>> r = slope_check(rep, "flow", [1e-3, 1e-2], [2 * math.log(1e3), 2 * math.log(1e2)], 0.0)
    >>> round(r["slope_measured"], 12), r["pass"]
    (2.0, True)
    """
    from .report import fit_line

    scales = np.asarray(scales, float)
    dur = np.asarray(durations, float)
    x = np.log(1.0 / scales)
    ok = np.isfinite(dur)
    fit = fit_line(x[ok], dur[ok]) if ok.sum() >= 2 else {"slope": math.nan, "intercept": math.nan, "r2": math.nan}
    tol = slope_tolerance(rep, method, x[ok], dur[ok], float(scales.max()))
    s_pred = rep.slope(method)
    rel = abs(fit["slope"] - s_pred) / s_pred if (s_pred and math.isfinite(fit["slope"])) else math.nan
    predicted = [predicted_time(rep, method, float(o), intercept) if s_pred else math.nan for o in scales]
    return {"slope_predicted": s_pred, "slope_measured": fit["slope"], "r2": fit["r2"],
            "intercept_measured": fit["intercept"], "relative_error": rel, "tolerance": tol["rel"],
            "tolerance_parts": tol, "scales": scales.tolist(), "log_inv_scale": x.tolist(),
            "durations": dur.tolist(), "predicted_durations": predicted,
            "testable": bool(tol["rel"] < 1.0),
            "pass": bool(rep.valid and math.isfinite(rel) and rel <= tol["rel"] < 1.0)}


def format_slope_check(r: dict, title: str, scale_name: str = "scale", duration_name: str = "T",
                       power: float = 2.0) -> str:
    """The text of a :func:`slope_check`: one row per scale, then the verdict line.

    Parameters
    ----------
    r : dict
        A :func:`slope_check` result (its ``scales`` may be under ``f"{scale_name}s"``).
    title : str
        The first line (which sweep, how its plateaus end).
    scale_name : str
        The scale's name in the paper (for the mixture: omega).
    duration_name : str
        The duration's name (column header, "measured" appended).
    power : float
        The displacement's power p (names the O(scale^p) feedback term).

    Returns
    -------
    str
        The lines, each ending in a newline.

    Examples
    --------
    >>> r = {"scales": [0.1], "durations": [1.0], "predicted_durations": [1.0], "slope_measured": 2.0,
    ...      "slope_predicted": 2.0, "relative_error": 0.0, "tolerance": 0.1, "pass": True, "testable": True,
    ...      "tolerance_parts": {"second_mode": 0.0, "feedback": 0.1, "resolution": 0.0}}
    >>> format_slope_check(r, "sweep:").splitlines()[-1].endswith("PASS")
    True
    """
    scales = r.get(f"{scale_name}s", r.get("scales"))
    lines = [title, f"{scale_name:>8s} {duration_name + ' measured':>17s} {'predicted':>10s}"]
    for o, d, p in zip(scales, r["durations"], r["predicted_durations"]):
        lines.append(f"{o:8.3g} {d:17.6g} {p:10.6g}")
    tp = r["tolerance_parts"]
    lines.append(f"slope: measured {r['slope_measured']:.6g}, predicted {r['slope_predicted']:.6g}; relative error "
                 f"{100 * r['relative_error']:.3g}% against a tolerance of {100 * r['tolerance']:.3g}% (second mode "
                 f"{100 * tp['second_mode']:.3g}%, O({scale_name}^{power:g}) feedback "
                 f"{100 * tp['feedback']:.3g}%, one-step resolution "
                 f"{100 * tp['resolution']:.3g}%): "
                 + ("PASS" if r["pass"] else "FAIL" if r.get("testable", True) else
                    f"NOT TESTED (a tolerance >= 100% cannot tell slopes apart: the prediction is for {scale_name} "
                    f"-> 0; use smaller {scale_name}s)"))
    return "\n".join(lines) + "\n"


def format_complex(z) -> str:
    """One spectrum entry of :meth:`EscapeReport.to_dict` as text.

    Parameters
    ----------
    z : float or [float, float]
        A real eigenvalue, or [real, imaginary] parts.

    Returns
    -------
    str
        ``"0.5"`` or ``"0.5+0.1i"``.

    Examples
    --------
    >>> format_complex(0.5), format_complex([0.5, 0.1])
    ('0.5', '0.5+0.1i')
    """
    return f"{z:.6g}" if not isinstance(z, list) else f"{z[0]:.6g}{z[1]:+.3g}i"


def slope_figure(path, series, xlabel: str, ylabel: str, title: str) -> None:
    """Measured durations (points) and predicted lines, one colour per series.

    Parameters
    ----------
    path : str or Path
        The PNG to write.
    series : list of tuple
        (label, log(1/scale) values, measured durations, predicted slope,
        predicted intercept or None); a line is drawn when the intercept is finite.
    xlabel, ylabel, title : str
        The axes' and the figure's text.

    Returns
    -------
    None

    Examples
    --------
    >>> slope_figure("s.png", [("K=2", [1, 2], [3, 5], 2.0, 1.0)], "log(1/omega)", "T", "t")  # doctest: +SKIP
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.2))
    for i, (label, x, dur, slope, b) in enumerate(series):
        col = f"C{i % 10}"
        x = np.asarray(x, float)
        ax.plot(x, dur, "o", color=col, label=label)
        xx = np.linspace(x.min() - 0.2, x.max() + 0.2, 20)
        if b is not None and math.isfinite(b):
            ax.plot(xx, slope * xx + b, "-", color=col, lw=1)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    from .io import save_figure

    save_figure(fig, path, dpi=120)
    plt.close(fig)
