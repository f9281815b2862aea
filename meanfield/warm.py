"""Compile every kernel family into numba's on-disk cache.

``meanfield warm`` (or ``python -m meanfield warm``, or ``meanfield.warm()``
in Python) runs tiny commands of every kernel family in a temporary folder,
so that numba compiles every kernel they use and caches it
(``cache=True``): the mixture fast path (``mixture run``: GD; its
observables are also all that ``mixture particles`` compiles; and its flow
with a stop criterion), the engine (``model run``: its one generic GD
kernel, every description shares it, and the flow right-hand side of
``--method rk4`` with a stop criterion), the in-context regression population and its low-rank
projection (``model run icl_zfb``, ``icl_saddles``), the induction head
(``induction run``), the two-layer class (``model run induction``) and the
batched drivers of the mixture and the engine, GD and RK4 (with their
trajectory-vectorised lanes at every block width), with the
chunked sweep's summaries (``mixture sweep``, ``model sweep``: chunked by
default); after some commands a Python warm-up (:data:`EXTRA`) reaches what
their tiny sizes do not: the mixture's and the engine's lanes of every
block width (the engine's with the vectorised exp too), the two-layer
class's direct kernels and the pattern path's gather, and
``engine.run_batch``'s mixture fast path. ``tests/test_numba_cache.py`` checks that every kernel caches. The kernels' types
do not depend on the sizes, so a later run at any size loads them from the
cache instead of compiling. ``make install``, ``make demo`` and ``make test``
run it once after installing. Nothing is written outside the temporary
folder and numba's cache.
"""

from __future__ import annotations

import contextlib
import io
import logging
import tempfile
import time
from pathlib import Path

log = logging.getLogger("meanfield")

#: (name, argv of ``meanfield``) of each warm-up command; tiny sizes, same kernel types as real runs
COMMANDS = (
    ("mixture run", ["mixture", "run", "--steps", "2", "--quiet", "--out", "{tmp}/mixture.h5"]),
    ("mixture flow", ["mixture", "run", "--method", "flow", "--t-end", "0.1", "--criterion", "loss<=0.01", "--quiet",
                      "--out", "{tmp}/mixture_flow.h5"]),
    ("engine", ["model", "run", "incontext", "--K", "2", "--N", "2", "--steps", "2", "--quiet",
                "--out", "{tmp}/engine.h5"]),
    ("engine flow", ["model", "run", "incontext", "--K", "2", "--N", "2", "--method", "rk4", "--t-end", "0.1",
                     "--dt", "0.05", "--criterion", "loss<=0.01", "--quiet", "--out", "{tmp}/engine_rk4.h5"]),
    ("icl population", ["model", "run", "icl_zfb", "--steps", "2", "--quiet", "--out", "{tmp}/icl_zfb.h5"]),
    ("icl low rank", ["model", "run", "icl_saddles", "--steps", "2", "--quiet", "--out", "{tmp}/icl_saddles.h5"]),
    ("induction", ["induction", "run", "--n-train", "20", "--n-test", "0", "--L", "8", "--stage-steps", "1,1,1",
                   "--quiet", "--out", "{tmp}/induction.h5"]),
    ("twolayer", ["model", "run", "induction", "--n-train", "5", "--L", "6", "--stage-steps", "1,1,1", "--quiet",
                  "--out", "{tmp}/twolayer.h5"]),
    ("mixture batched", ["mixture", "sweep", "--param", "seed=0,1", "--width", "4", "--steps", "2",
                         "--quiet", "--out", "{tmp}/mixture_sweep"]),
    ("mixture batched rk4", ["mixture", "sweep", "--method", "rk4", "--dt", "0.05", "--t-end", "0.1",
                             "--record-every", "1", "--param", "omega=0.1,0.2", "--quiet",
                             "--out", "{tmp}/mixture_sweep_rk4"]),
    ("engine batched", ["model", "sweep", "incontext", "--K", "2", "--N", "2", "--param", "eta=0.1,0.2",
                        "--steps", "2", "--quiet", "--out", "{tmp}/engine_sweep"]),
    ("engine batched rk4", ["model", "sweep", "incontext", "--K", "2", "--N", "2", "--method", "rk4", "--t-end",
                            "0.1", "--dt", "0.05", "--record-every", "1", "--param", "eta=0.1,0.2", "--quiet",
                            "--out", "{tmp}/engine_sweep_rk4"]),
    # the lanes' vectorised exp (opt-in): its lane kernels, then every block width's driver (EXTRA); in this
    # process, the engine's other families being in the second (--jobs 2)
    ("engine batched vector exp", ["model", "sweep", "incontext", "--K", "2", "--N", "2", "--param", "eta=0.1,0.2",
                                   "--steps", "2", "--vector-exp", "--quiet", "--out", "{tmp}/engine_sweep_vexp"]),
)
#: the families (``meanfield warm --only NAME,...``)
FAMILIES = tuple(name for name, _ in COMMANDS)


def _mixture_lanes():
    """The mixture's trajectory-vectorised blocks of every width (a tiny sweep takes one width only), and the
    lanes' exp over an array (``core.lane_exp.lanes_exp``, a public helper)."""
    import numpy as np

    from .core.lane_exp import lanes_exp
    from .models.mixture.batched import warm_lanes

    warm_lanes()
    lanes_exp(np.zeros(4), np.empty(4))


def _twolayer_paths():
    """The two-layer class's direct kernels (heads with too many window patterns, an attention read-out whose
    heads are not all pattern heads) and the pattern path's gather of a non-fused read-out: tiny networks,
    no command reaches them at warm's sizes."""
    import numpy as np

    from .engine.twolayer_net import Head, Net, loss_grad

    x = np.array([[0, 1, 1, 0], [1, 0, 1, 1]])
    y, p = np.eye(2)[x[:, -1]], np.full(2, 0.5)
    att = Net(2, 3, ((Head("rpe", (1, 2), value="token"),),), selector=1, readout="attention")
    loss_grad(np.full(att.size, 0.5), att, x, y, p, path="direct")
    lin = Net(2, 3, ((Head("rpe", (1, 2), value="token"),),))
    loss_grad(np.full(lin.size, 0.5), lin, x, y, p, path="pattern")


def _engine_fast_batch():
    """``meanfield.engine.run_batch`` of a mixture description: the mixture's registered batch fast path and its
    conversion of states into the engine's layout (``model sweep`` runs the generic batch)."""
    from .engine.batched import run_batch
    from .models.mixture.config import make_config
    from .models.mixture.family import mixture_description

    run_batch(mixture_description(make_config(steps=2)), seeds=[0, 1])



def families(text, field: str = "--only"):
    """The families named in ``meanfield warm --only`` (comma-separated), checked.

    Parameters
    ----------
    text : str or None
        e.g. ``"engine,twolayer"``; None: every family.
    field : str
        the name the error message gives the input.

    Returns
    -------
    set of str or None
        the names (None: all).

    Raises
    ------
    ConfigError
        pointing to the list of families, for an empty list or an unknown name.

    Examples
    --------
    >>> sorted(families("engine, twolayer"))
    ['engine', 'twolayer']
    """
    if text is None:
        return None
    from .core.config import ConfigError

    known = [name for name, _ in COMMANDS]
    names = {n.strip() for n in str(text).split(",") if n.strip()}
    bad = sorted(names - set(known))
    if bad or not names:
        where = "meanfield warm --help" if field == "--only" else "meanfield.warm.FAMILIES"
        got = (bad[0] if len(bad[0]) <= 40 else bad[0][:37] + "...") if bad else repr(text)[:40]
        raise ConfigError(f"{field}: comma-separated family names ({where} lists them); not a family: {got}")
    return names


#: the families a second process warms under ``jobs=2`` (the engine's: about 60 % of a cold warm's time, and
#: they share no kernel with the others, so that the two processes never compile the same function)
SECOND = ("engine", "engine flow", "engine batched", "engine batched rk4")


def warm(main, names=None, jobs: int = 1) -> float:
    """Run the warm-up commands (all, or those in ``names``) through ``main``.

    Parameters
    ----------
    main : callable
        ``meanfield.cli.main`` (passed in so that this module does not import
        the CLI that dispatches to it).
    names : set of str, optional
        the families to warm (:data:`FAMILIES`); default all.
    jobs : int
        1 (default): one after another in this process; 2: the engine's families (:data:`SECOND`) in a
        second process at the same time (``python -m meanfield warm --only ...``), the others here.

    Returns
    -------
    float
        the seconds taken.

    Raises
    ------
    RuntimeError
        naming the command, if one of them fails.

    Examples
    --------
    >>> import meanfield.cli, meanfield.warm
    >>> meanfield.warm.warm(meanfield.cli.main, names={"engine"})   # doctest: +SKIP
    """
    if names is not None:
        names = families(names if isinstance(names, str) else ",".join(names), "names")
    if jobs not in (1, 2) or isinstance(jobs, bool):
        from .core.config import ConfigError

        raise ConfigError(f"jobs: 1 or 2; got {jobs!r}")
    t0 = time.perf_counter()
    child = None
    if jobs == 2:
        wanted = [n for n, _ in COMMANDS if names is None or n in names]
        there = [n for n in wanted if n in SECOND]
        if there and len(there) < len(wanted):
            import subprocess
            import sys

            child = subprocess.Popen([sys.executable, "-m", "meanfield", "-q", "warm", "--only", ",".join(there)],
                                     stdout=subprocess.DEVNULL)
            names = set(wanted) - set(there)
    try:
        _run(main, names)
    except BaseException:  # a failure or a signal here: the second process stops too
        if child is not None:
            child.kill()
            child.wait()
        raise
    if child is not None and child.wait() != 0:
        raise RuntimeError(f"warm-up of {', '.join(SECOND)} (a second process) failed (exit {child.returncode})")
    return time.perf_counter() - t0


def _run(main, names) -> None:
    with tempfile.TemporaryDirectory(prefix="meanfield-warm-") as tmp:
        for i, (name, argv) in enumerate(COMMANDS):
            if names is not None and name not in names:
                continue
            t1 = time.perf_counter()
            level = log.level
            with contextlib.redirect_stdout(io.StringIO()):  # the tiny runs' outcome lines are not news
                rc = main(["-q"] + [a.replace("{tmp}", str(Path(tmp))) for a in argv])
            log.setLevel(level)
            if rc not in (0, None):
                raise RuntimeError(f"warm-up of '{name}' failed (exit {rc})")
            for extra in EXTRA.get(name, ()):
                extra()
            log.info("warm: %s kernels ready in %.1f s", name, time.perf_counter() - t1)


#: a tiny description (two sequences of two tokens, one linear-value head) for :func:`_engine_lanes`
_LANES_DESC = {"name": "warm_lanes", "dictionary": {"features": ["a", "b"]},
               "data": {"rows": [{"tokens": ["a", "-b"], "target": 1}, {"tokens": ["b", "a"], "target": -1}]},
               "heads": [{"name": "h", "value": "linear"}], "parameters": {"eta": 0.1, "steps": 2}}


def _engine_lanes(method: str, vector_exp: bool = False) -> None:
    """The engine's lane kernels and the driver of every block width (``meanfield.engine.lanes_batch.WIDTHS``)
    for ``method`` (with ``vector_exp``: the lanes' vectorised exp): a tiny description's batch of 8, 16, 32 and
    64 trajectories a thread (a tiny sweep has too few for lanes; the kernels' types do not depend on the
    description or its sizes)."""
    from numba import get_num_threads

    from .engine.batched import run_batch
    from .engine.description import description_from_dict
    from .engine.lanes_batch import WIDTHS

    over = {"method": "rk4", "dt": 0.05, "t_end": 0.1} if method == "rk4" else None
    desc = description_from_dict(_LANES_DESC, over)
    for lo, _ in WIDTHS:
        run_batch(desc, seeds=list(range(lo * max(1, get_num_threads()))), fast=False, vector_exp=vector_exp)


def _engine_lanes_gd():
    _engine_lanes("gd")


def _engine_lanes_rk4():
    _engine_lanes("rk4")


def _engine_lanes_vector_exp():
    _engine_lanes("gd", vector_exp=True)


#: Python warm-ups run after a family's command: paths its tiny command does not reach
EXTRA = {"mixture batched": (_mixture_lanes, _engine_fast_batch), "twolayer": (_twolayer_paths,),
         "engine batched": (_engine_lanes_gd,), "engine batched rk4": (_engine_lanes_rk4,),
         "engine batched vector exp": (_engine_lanes_vector_exp,)}
