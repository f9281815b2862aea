"""The engine's reduced dynamics as a system for ``meanfield.core.integrate`` (``meanfield.engine.packed``).

:func:`pack` turns a description into the kernels' arrays (:class:`Packed`);
:class:`EngineSystem` adapts the generic kernels (``meanfield.engine.kernels``)
to the shared steppers (exact GD map, RK4, adaptive Dormand-Prince); a stage's
``mode`` (:func:`mode_of`) is the bit mask of the parameter groups it trains
(1 attention, 2 values, 4 readout, 8 signs). Subclasses replace the loss (the
exact Gaussian population: ``meanfield.engine.population``);
``meanfield.engine.system`` picks the system of a description and holds the
stages, solver, record grid and observables.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from ..core import integrate
from ..core.config import ConfigError
from . import background, kernels
from .objects import STAGE_SHIFT, Description
from .reduce import GROUP_BIT, LOSS, Layout, layout


@dataclass
class Packed:
    """The description as the kernels' arrays."""

    lay: Layout
    Gam: np.ndarray
    X: np.ndarray
    nzi: np.ndarray  # (n, L, Z) int64: features with a non-zero coefficient, per token
    nzc: np.ndarray  # (n, L, Z): those coefficients
    nzn: np.ndarray  # (n, L) int64: how many
    cnt: np.ndarray
    last: np.ndarray
    leff: np.ndarray
    target: np.ndarray
    weight: np.ndarray
    consistent: np.ndarray
    kind: int
    r0: float
    R: int  # rows of u per head
    C: int


def _own(a, dtype) -> np.ndarray:
    """A C-contiguous, writeable copy: numba compiles a separate specialisation
    for read-only arrays (the mixture's sample arrays are read-only), so every
    description must hand the kernels the same array types to share one cache."""
    return np.array(a, dtype=dtype, order="C", copy=True)


def _state(y) -> np.ndarray:
    return np.require(y, np.float64, ["C", "W"])


def check_keys(desc: Description) -> None:
    """Refuse (ConfigError) a softmax head whose last query, left out of the keys (``query_self = false``),
    has no key in some data row (a single token): a softmax over no keys is undefined."""
    alone = np.flatnonzero((np.asarray(desc.data.count_array) > 0).sum(axis=1) < 2)
    for k, h in enumerate(desc.model.heads):
        if h.attention == "softmax" and h.query == "last" and not h.query_self and alone.size:
            raise ConfigError(f"heads[{k}].query_self: false leaves data row {int(alone[0])} (a single token) "
                              f"without a key, and a softmax over no keys is undefined; allowed: true, or rows of "
                              f"at least two tokens")


def pack(desc: Description) -> Packed:
    lay = layout(desc)
    d = desc.data
    X = _own(d.tokens, np.float64)
    cnt = _own(d.count_array, np.float64)
    pos = cnt > 0
    if not pos.any(axis=1).all():  # a sequence without a token: the old per-row lookup's IndexError
        raise IndexError("pack: a sequence without a positive count")
    last = (cnt.shape[1] - 1 - np.argmax(pos[:, ::-1], axis=1)).astype(np.int64)  # the last position with c > 0
    leff = cnt.sum(axis=1)
    check_keys(desc)
    C = desc.model.heads[0].outputs
    t = np.asarray(d.target, dtype=np.float64)
    target = _own(t.reshape(t.shape[0], -1), np.float64)
    R = max(h.outputs * h.n_neurons for h in desc.model.heads)
    nz = X != 0.0
    nzn = nz.sum(axis=2).astype(np.int64)
    Z = max(1, int(nzn.max()))
    # per token, its non-zero features in ascending order in the first nzn slots, 0 after (a stable sort of
    # "is zero" puts the non-zeros first in index order): vectorised, the same arrays as a loop over tokens
    order = np.argsort(~nz, axis=2, kind="stable")[..., :Z]
    used = np.arange(Z) < nzn[..., None]
    nzi = np.ascontiguousarray(np.where(used, order, 0), dtype=np.int64)
    nzc = np.ascontiguousarray(np.where(used, np.take_along_axis(X, order, axis=2), 0.0), dtype=np.float64)
    return Packed(lay=lay, Gam=_own(desc.dictionary.Gamma, np.float64), X=X, nzi=nzi, nzc=nzc, nzn=nzn,
                  cnt=cnt, last=last, leff=leff,
                  target=target, weight=_own(d.weight, np.float64),
                  consistent=_own(d.flag("consistent"), np.bool_), kind=LOSS[desc.model.loss],
                  r0=float(desc.model.relu_prime_at_zero), R=R, C=C)


#: the stage-mode bit of normalised GD (``training.normalise = "parameter"``; kernels.eng_update)
NORMALISED = 16


def mode_of(train, normalise: str = "none") -> int:
    """The bit mask of a stage: its trained groups (1 attention, 2 values, 4
    readout, 8 signs), plus 16 for normalised GD."""
    m = 0
    for g in train:
        m |= GROUP_BIT[g]
    return m | (NORMALISED if normalise != "none" else 0)


def _bits(mode) -> int:
    """The kernel's part of a stage's mode: group and normalisation bits, without the stage's index."""
    return int(mode) & ((1 << STAGE_SHIFT) - 1)


@dataclass
class EngineSystem:
    """A description's reduced dynamics for ``meanfield.core.integrate``."""

    pk: Packed
    max_abs: float = math.inf
    #: per stage (index = mode >> STAGE_SHIFT) the kernel's (Gr, hf) with the stage's group rates
    #: (``meanfield.engine.rates.rate_arrays``); None: the layout's (every rate the step size)
    rates: list | None = None
    #: GD by the loop compiled for this description (``meanfield.engine.specialise``: the same kernels
    #: with its arrays as constants; equal bit for bit, faster, about 20 s to compile the first time);
    #: ``"auto"``: that loop where one is ready (compiled or in the disk cache), else the generic loop
    specialise: bool | str = False
    #: the specialised loops built so far, per stage index (a stage's rates fix its arrays), and a scratch a thread
    _loops: dict = field(default_factory=dict, repr=False, compare=False)
    #: with ``specialise="auto"``: once the generic loop has run ``background.AFTER_S`` seconds, have the loop
    #: compiled by a child process and switch to it (``meanfield.engine.background``; single runs set it)
    background: bool = field(default=False, repr=False, compare=False)
    #: GD steps this system has taken (every call, every stage), and the count when it switched to a loop
    #: that became ready during the run (compiled in the background, or by another process; None: it did
    #: not; with per-stage rates, the last stage's switch; approximate where threads share the system)
    steps_done: int = field(default=0, repr=False, compare=False)
    switched_at: int | None = field(default=None, repr=False, compare=False)

    def _rated(self, mode):
        lay = self.pk.lay
        if self.rates is None:
            return lay.Gr, lay.hf
        return self.rates[int(mode) >> STAGE_SHIFT]

    def _data(self):
        pk = self.pk
        return pk.nzi, pk.nzc, pk.nzn, pk.cnt, pk.last, pk.leff, pk.target, pk.weight, pk.kind, pk.r0

    def gd_advance(self, y, nsteps, eta, mode, criterion):
        pk, lay = self.pk, self.pk.lay
        kind, op, thr = integrate.criterion_args(criterion, kernels.CRITERIA)
        Gr, hf = self._rated(mode)
        watch = None  # "auto" with a background compile: this stage's time in the generic loop
        if self.specialise:
            from . import specialise

            st = int(mode) >> STAGE_SHIFT if self.rates is not None else 0
            key = ("scratch", threading.get_ident())  # one scratch a thread (a system may be shared)
            scr = self._loops.get(key)
            if scr is None or scr[6].shape[0] != y.shape[0]:  # scratch[6]: gflat, the state's size
                scr = self._loops[key] = specialise.scratch_of(pk, y.shape[0])
            args = (y, int(nsteps), float(eta), _bits(mode), kind, op, thr, float(self.max_abs)) + scr
            if st not in self._loops:  # "auto": the loop if ready (no compile), else False: the generic loop
                self._loops[st] = (specialise.loop(pk, Gr, hf) if self.specialise is True
                                   else specialise.cached(pk, Gr, hf, args) or False)
            fn = self._loops[st]
            if fn is False and self.background:  # "auto" in the generic loop: a long run's loop compiled by a child
                watch = self._loops.get(("watch", st))
                if watch is None:  # (setdefault: one Watch where threads share the system)
                    watch = self._loops.setdefault(("watch", st), background.Watch())
                if watch.state != "off":
                    fn = watch.loop(pk, Gr, hf, args)
                    if fn is not False:
                        self._loops[st] = fn
                        self.switched_at = self.steps_done  # from this step on (the same state bit for bit)
            if fn is not False:
                done, code, _ = fn(*args)
                self.steps_done += int(done)
                return int(done), int(code)
        t0 = time.perf_counter()
        done, code, _ = kernels.gd_advance(y, int(nsteps), float(eta), _bits(mode), lay.hi, hf, lay.qv, Gr,
                                           lay.grp, pk.Gam, *self._data(), pk.consistent, kind, op, thr,
                                           float(self.max_abs), pk.R, pk.C, lay.Nmax)
        self.steps_done += int(done)
        if watch is not None and watch.state == "generic":
            watch.generic_s += time.perf_counter() - t0
        return int(done), int(code)

    def rhs(self, y, mode):
        pk, lay = self.pk, self.pk.lay
        out = np.empty_like(y)
        Gr, hf = self._rated(mode)
        kernels.flow_rhs(_state(y), out, _bits(mode), lay.hi, hf, lay.qv, Gr, lay.grp, pk.Gam,
                         *self._data(), pk.R, pk.C, lay.Nmax)
        return out

    def criterion_value(self, y, name):
        pk, lay = self.pk, self.pk.lay
        return float(kernels.criterion_value(_state(y), kernels.CRITERIA[name], lay.hi, lay.hf, lay.qv,
                                             pk.Gam, *self._data(), pk.consistent, pk.R, pk.C, lay.Nmax))

    def loss_and_grads(self, y):
        pk, lay = self.pk, self.pk.lay
        return kernels.loss_and_grads(_state(y), lay.hi, lay.hf, lay.qv, *self._data(), pk.R, pk.C,
                                      lay.Nmax)
