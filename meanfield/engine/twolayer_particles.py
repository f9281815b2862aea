"""The explicit two-layer network at finite width as a run (``meanfield model particles`` of a two-layer description).

The weights themselves (W_Q, W_K of a wide bilinear head, W_O^T, M_V of a
wide value matrix, every narrow block) are trained by the explicit torch
network (:mod:`meanfield.engine.twolayer_oracle`: autograd, no code shared
with the engine's kernels), from the draw the description's own seed makes
(``twolayer_wide.initial_weights`` with the streams (seed, layer, head) and
(seed, layer, head, 1), so its Gram is the description's initial state), and
recorded as their projection onto the engine's state (each pair of wide
weights as its Gram). The run goes through the core harness like every run
(stages with their blocks and step sizes, criteria, records, checkpoints,
signals), so its run file reads like ``meanfield model run``'s and the two can
be compared record by record: ``meanfield model run FILE --width M`` is the
exact Gram map, this is the network it describes. GD only; torch is needed
(``pip install torch``).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..core import harness
from ..core.criteria import holds
from ..core.errors import ConfigError

__all__ = ["ParticleSystem", "particles", "particles_to_file"]

#: a Gram block -> the explicit network's two weight matrices (the halves of U, in the Gram's column order)
HALVES = {".Q": (".WQ", ".WK"), ".QV": (".WOt", ".MV")}


def _gram(name: str):
    return next(((name[: -len(k)], v) for k, v in HALVES.items() if name.endswith(k)), (None, None))


class ParticleSystem:
    """The explicit network as a ``meanfield.core.integrate`` system: it holds the weights, steps them by GD
    and writes their projection (the engine's state) into ``y``."""

    def __init__(self, desc):
        from .twolayer_oracle import Oracle, torch
        from .twolayer_wide import initial_weights

        if torch is None:
            raise ConfigError("particles: the explicit two-layer network needs torch (pip install torch); the exact "
                              "dynamics at this width: meanfield model run FILE --width M")
        self.torch = torch
        net = desc.net
        widths = {hd.width for _, _, hd in net.heads if hd.width is not None}
        if not widths:
            raise ConfigError("width: no head of this two-layer description is wide (width = m on a bilinear head or "
                              "a value matrix): its explicit network is its parameter vector, what model run runs")
        if any(w == math.inf for w in widths):
            raise ConfigError("width: the explicit network needs a finite width m (--width M); the file says inf")
        if desc.training.method != "gd":
            raise ConfigError(f"method: the explicit network (particles) runs gd only; got {desc.training.method!r}")
        self.desc, self.net = desc, net
        seed = int((desc.raw.get("init") or {}).get("seed", 0))
        spec = {"S": net.S, "L": net.L, "readout": net.readout, "selector": net.selector, "ce": net.ce,
                "log_cap": net.log_cap,
                "layers": [[dict(score=h.score, lags=h.lags, softmax=h.softmax, normalise=h.normalise, value=h.value,
                                 value_matrix=h.value_matrix, width=h.width, query=list(h.query), key=list(h.key))
                            for h in hs] for hs in net.layers]}
        self.o = Oracle(spec)
        heads = {f"layer{k + 1}.head{h + 1}": (k, h, hd) for k, h, hd in net.heads}
        flat, i = [], 0
        for name, shape in net.blocks:
            n = int(np.prod(shape))
            base, _ = _gram(name)
            if base is not None:
                k, h, hd = heads[base]
                sd = (seed, k, h) if name.endswith(".Q") else (seed, k, h, 1)
                u = initial_weights(shape[0] // 2, hd.omega, int(hd.width), seed=sd)
                flat += [u[:, :shape[0] // 2].ravel(), u[:, shape[0] // 2:].ravel()]
            else:
                flat.append(np.asarray(desc.theta0[i:i + n], dtype=np.float64))
            i += n
        self.params = self.o.from_flat(np.concatenate(flat))
        self.max_abs = desc.training.max_abs
        self.y0 = self.projection()

    def projection(self) -> np.ndarray:
        """The engine's state of the held weights: each pair of wide weights as its Gram U^T U."""
        out = []
        for name, _ in self.net.blocks:
            base, pair = _gram(name)
            if base is not None:
                u = np.hstack([self.params[base + pair[0]].detach().numpy(),
                               self.params[base + pair[1]].detach().numpy()])
                out.append((u.T @ u).ravel())
            else:
                out.append(self.params[name].detach().numpy().ravel())
        return np.concatenate(out)

    def _tensors(self, train) -> list:
        names = set()
        for name in train:
            base, pair = _gram(name)
            names |= {base + pair[0], base + pair[1]} if base is not None else {name}
        return [n for n in self.params if n in names]

    def _loss(self):
        d = self.desc
        return self.o.loss(self.params, d.x, d.y, d.p)

    def gd_advance(self, y, nsteps, eta, mode, criterion):
        """Up to ``nsteps`` GD steps of the weights; ``y`` their projection after; (done, code)."""
        torch = self.torch
        names = self._tensors(mode)
        for k in range(int(nsteps)):
            tl = self._loss()
            loss = float(tl.detach())
            if criterion is not None and holds(loss, criterion[1], criterion[2]):
                return k, 1
            gs = torch.autograd.grad(tl, [self.params[n] for n in names], allow_unused=True)
            old = {n: self.params[n].detach().clone() for n in names}
            with torch.no_grad():
                for n, g in zip(names, gs):
                    if g is not None:
                        self.params[n] -= eta * g
            new = self.projection()
            bad = 2 if not (np.isfinite(new).all() and math.isfinite(loss)) else \
                3 if np.abs(new).max(initial=0.0) > self.max_abs else 0
            if bad:
                with torch.no_grad():
                    for n in names:
                        self.params[n].copy_(old[n])
                return k, bad
            y[:] = new
        return int(nsteps), 0

    def rhs(self, y, mode):  # pragma: no cover - refused in __init__ (gd only)
        raise ConfigError("method: the explicit network (particles) runs gd only")

    def criterion_value(self, y, name):
        """The loss of the held weights."""
        return float(self._loss().detach())


def check_time(system: ParticleSystem, force: bool = False) -> dict:
    """Refuse a run beyond the time rule (``meanfield.core.limits``) before it starts: one loss and gradient of
    the network, timed, times the GD steps of every stage."""
    import time

    from ..core.limits import check_size

    desc = system.desc
    steps = float(sum(float(s.length) for s in desc.stages))
    tl = system._loss()
    t0 = time.perf_counter()
    system.torch.autograd.grad(system._loss(), list(system.params.values()), allow_unused=True)
    est = {"seconds": steps * (time.perf_counter() - t0), "steps": steps}
    del tl
    check_size(est, "steps", force, f" ({desc.name}, explicit network: {steps:.3g} GD steps)")
    return est


def particles_to_file(desc, out, progress: bool = True, checkpoint_s: float = 60.0, force: bool = False):
    """Train the explicit network of ``desc`` at its finite width and write the run file.

    Parameters
    ----------
    desc : TwoLayerDescription
        With wide heads at a finite width (``--width M``).
    out : str or Path
        The run file (.h5).
    progress : bool
        A progress line for runs over 2 s.
    checkpoint_s : float
        Seconds between checkpoint files.
    force : bool
        Go past the time estimate.

    Returns
    -------
    (Trajectory, Path)

    Raises
    ------
    ConfigError
        No wide head, an infinite width, a method other than gd, no torch.

    Example
    -------
    >>> traj, path = particles_to_file(desc, "runs/wide_particles.h5")      # doctest: +SKIP
    """
    from ..core.io import write_run
    from .twolayer_run import _stages, file_content

    system = ParticleSystem(desc)
    check_time(system, force)

    def save(traj, status=None, message=None):
        data, attrs = file_content(desc, traj)
        attrs.update(particles=1, width=float(next(hd.width for _, _, hd in desc.net.heads if hd.width is not None)))
        return write_run(out, system="twolayer", config={"source": desc.source, "name": desc.name},
                         status=status or traj.status, message=message or traj.message, data=data, attrs=attrs)

    def solve(mon):
        return harness.solve(desc.training, system, system.y0, _stages(desc), monitor=mon)

    traj, path = harness.run_to_file(desc.training, solve, save, progress=progress, checkpoint_s=checkpoint_s,
                                     label="particles ")
    return traj, Path(path)


def particles(desc, monitor=None):
    """The explicit network's run in memory (a :class:`meanfield.core.run.Run`, ``system = "twolayer"``,
    ``particles = 1``; the states are the projections of the weights).

    Parameters
    ----------
    desc : TwoLayerDescription
        With wide heads at a finite width.
    monitor : meanfield.core.integrate.Monitor or None

    Returns
    -------
    meanfield.core.run.Run

    Example
    -------
    >>> r = particles(desc)                       # doctest: +SKIP
    >>> r["theta"].shape                          # doctest: +SKIP
    """
    from ..core.run import Run
    from .twolayer_run import _stages, file_content

    system = ParticleSystem(desc)
    traj = harness.solve(desc.training, system, system.y0, _stages(desc), monitor=monitor)
    data, attrs = file_content(desc, traj)
    attrs.update(system="twolayer", status=traj.status, message=traj.message, particles=1)
    return Run(data, attrs)
