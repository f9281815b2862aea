"""The explicit network as a ``meanfield.core.integrate`` system
(``meanfield.engine.particle_system``): :class:`ParticleSystem` (GD, holding the
weights, records their projection onto the engine's state) and
:class:`FlowParticleSystem` (flow and rk4 on the weights themselves), the
explicit network of a description (:func:`oracle_of`) and each weight's rate per
stage (:func:`stage_rho`). ``meanfield.engine.finite`` builds and runs them."""

from __future__ import annotations

import math

import numpy as np

from . import oracle as orc
from .description import Description
from .objects import STAGE_SHIFT

#: mode bits of a stage (``reduce.GROUP_BIT``) -> parameter groups
_BITS = {1: "attention", 2: "values", 4: "readout", 8: "signs"}



class ParticleSystem:
    """The explicit network as a ``meanfield.core.integrate`` system: ``y`` is the
    projection of the weights it holds (the engine's flat layout), :meth:`gd_advance`
    steps the weights and writes their projection into ``y``; criteria are
    evaluated on the weights by the network itself. GD (flow and rk4: :class:`FlowParticleSystem`).

    Two ways to step (same arithmetic up to rounding order): with d >= ``IN_PLACE_D_OVER_P``
    P the wide weights are updated in place (``Oracle.step_in_place``: the step is
    refused, and nothing written, when the projection predicted from the gradient
    factors is not finite or exceeds ``max_abs``; one set of weights, one read and
    one write of each per step); otherwise (small d, where the prediction would cost
    as much as the pass) the steps write two preallocated sets of weights in turn
    and the projection of the result decides."""

    #: d / P from which the wide weights are stepped in place
    IN_PLACE_D_OVER_P = 4

    def __init__(self, desc: Description, E: np.ndarray, params: list[dict], max_abs: float = math.inf):
        from .reduce import layout

        self.desc = desc
        self.E = np.asarray(E, float)
        self.net = oracle_of(desc, self.E)
        self.lay = layout(desc)
        self.max_abs = max_abs
        self.params = params
        self.rho = stage_rho(desc)

    @property
    def params(self) -> list[dict]:
        """The held weights (per-head dicts, :mod:`meanfield.engine.oracle`); once read
        here they are the caller's: later steps never write into their arrays."""
        self._bufs = [None, None]
        self._owned = False
        return self._params

    @params.setter
    def params(self, value):
        self._params = value
        self._we = None     # their products with E (Oracle.products), once computed
        self._proj = None   # their projection, once computed
        # two sets of arrays owned by the system, written in turn by the steps (no allocation per step)
        self._bufs = [None, None]
        self._turn = 0
        self._owned = False  # the held arrays are the caller's (copied before an in-place step)

    def _buffers(self) -> list[dict]:
        i = self._turn
        if self._bufs[i] is None:
            self._bufs[i] = [dict({k: np.empty(np.shape(v)) for k, v in p.items() if np.ndim(v) > 0},
                                  **({"_U": np.empty_like(pe["_U"])} if "_U" in pe else {}))
                             for p, pe in zip(self._params, self._products())]
        return self._bufs[i]

    def _products(self):
        if self._we is None:
            self._we = self.net.products(self._params)
        return self._we

    def projection(self) -> np.ndarray:
        """The projection of the held weights (the engine's flat layout; kept from the last step)."""
        if self._proj is None:
            self._proj = orc.pack(self.desc, self.E, self._params, self.lay, self._products())
        return self._proj.copy()

    def _criterion(self, criterion) -> bool:
        v = self.net.criterion_value(self._params, criterion[0], we=self._products())
        return (v >= criterion[2]) if criterion[1] == ">=" else (v <= criterion[2])

    def gd_advance(self, y, nsteps, eta, mode, criterion):
        groups = tuple(g for b, g in _BITS.items() if int(mode) & b)
        if self.rho is not None:  # each weight its group's rate (the stage's index is mode >> STAGE_SHIFT)
            eta = {k: eta * r for k, r in self.rho[int(mode) >> STAGE_SHIFT].items()}
        net, desc, E, lay = self.net, self.desc, self.E, self.lay
        code = 0
        done = 0
        in_place = E.shape[0] >= self.IN_PLACE_D_OVER_P * E.shape[1]
        verdict = {}

        def accept(new, we):
            proj = orc.pack(desc, E, new, lay, we)
            verdict["proj"] = proj
            verdict["code"] = 0 if np.all(np.isfinite(proj)) else 2
            if verdict["code"] == 0 and self.max_abs < math.inf and np.abs(proj).max() > self.max_abs:
                verdict["code"] = 3
            return verdict["code"] == 0

        for _ in range(int(nsteps)):
            if criterion is not None and self._criterion(criterion):
                code = 1
                break
            if in_place:
                if not self._owned:
                    self._params = [{k: np.array(v) for k, v in p.items()} for p in self._params]
                    self._owned = True
                with np.errstate(over="ignore", invalid="ignore"):
                    out = net.step_in_place(self._params, eta, groups, self._products(), accept)
                if out is None:
                    code = verdict["code"]
                    break
                new, we = out
                self._params, self._we, self._proj = new, we, None
                self._bufs = [None, None]
                done += 1
                continue
            old = self._params
            with np.errstate(over="ignore", invalid="ignore"):
                # the new weights go into the system's own buffers (never into the held arrays)
                new, we = net.step(old, eta, groups, we=self._products(), out=self._buffers(), products=True)
                proj = orc.pack(desc, E, new, lay, we)
            # a non-finite weight makes its projection non-finite (inf * 0 is nan), so the projection decides
            if not np.all(np.isfinite(proj)):
                code = 2
                break
            if self.max_abs < math.inf and np.abs(proj).max() > self.max_abs:
                code = 3
                break
            self._params, self._we, self._proj = new, we, proj
            self._turn ^= 1
            done += 1
        else:
            if criterion is not None and self._criterion(criterion):
                code = 1
        y[:] = self.projection()
        return done, code

    def rhs(self, y, mode):
        raise NotImplementedError("the particle system runs gradient descent only (method = gd)")

    def criterion_value(self, y, name):
        return self.net.criterion_value(self._params, name, we=self._products())


class FlowParticleSystem:
    """The explicit network's gradient flow (method flow or rk4): ``y`` is the flat
    vector of the weights themselves (each moves at -lr dLoss/dweight, lr = n for
    neurons); records are projected afterwards. ``max_abs`` applies to the weights."""

    def __init__(self, desc: Description, E: np.ndarray, params: list[dict], max_abs: float = math.inf):
        self.desc = desc
        self.E = np.asarray(E, float)
        self.net = oracle_of(desc, self.E)
        self.keys = [sorted(p) for p in params]
        self.shapes = [[np.shape(p[k]) for k in ks] for p, ks in zip(params, self.keys)]
        self.y0 = self.flat(params)
        self.max_abs = max_abs
        self.rho = stage_rho(desc)

    def flat(self, params) -> np.ndarray:
        return np.concatenate([np.ravel(p[k]) for p, ks in zip(params, self.keys) for k in ks]).astype(float)

    def unflat(self, v) -> list[dict]:
        out, i = [], 0
        for ks, shs in zip(self.keys, self.shapes):
            q = {}
            for k, sh in zip(ks, shs):
                n = int(np.prod(sh))
                q[k] = np.asarray(v[i:i + n]).reshape(sh)
                i += n
            out.append(q)
        return out

    def rhs(self, y, mode):
        groups = tuple(g for b, g in _BITS.items() if int(mode) & b)
        ps = self.unflat(y)
        _, g, _ = self.net.loss_grads(ps)
        rate = 1.0 if self.rho is None else self.rho[int(mode) >> STAGE_SHIFT]  # a group's rate: its time scale
        return self.flat(self.net.step(ps, rate, groups, grads=g)) - y

    def gd_advance(self, y, nsteps, eta, mode, criterion):
        raise NotImplementedError("FlowParticleSystem integrates the flow (method flow or rk4)")

    def criterion_value(self, y, name):
        return self.net.criterion_value(self.unflat(y), name)


def stage_rho(desc: Description) -> list[dict] | None:
    """Per stage, each explicit weight's rate over the stage's step size
    (``meanfield.engine.rates``); None when every rate is the step size."""
    from .rates import has_rates, stage_base_eta, weight_rates

    tr = desc.training
    if not has_rates(tr):
        return None
    return [{k: r / stage_base_eta(tr, s) for k, r in weight_rates(tr, s).items()} for s in tr.stages]


def oracle_of(desc: Description, E: np.ndarray):
    """The explicit network of ``desc``: the oracle on its data, or, for the exact
    population of Gaussian prompts, on the population loss (``meanfield.engine.population_oracle``)."""
    if "population" in desc.data.extra:
        from .population_oracle import PopulationOracle

        return PopulationOracle(desc, E)
    return orc.Oracle(desc, E)
