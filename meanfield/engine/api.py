"""The Python API of the engine (for notebooks)::

    import meanfield.engine as me
    desc = me.load("meanfield/models/mixture.toml", K=3, width=5, seed=1, steps=300)
    info = me.derive(desc)            # names and counts of the reduced variables (+ LaTeX when available)
    r = me.run(desc)                  # a Run: r.t, r.loss, r.S["+", "c1", "v1"], r.w["-", "v1"], r.var("+", "A")
    me.run_to_file(desc, "runs/m.h5") # the same, written as a run file

A description can also be built directly from the dataclasses of
:mod:`meanfield.engine.description` (Dictionary, Data via ``make_data``, Head,
Model, Init, Training with StageSpec).
"""

from __future__ import annotations

from .description import Description
from .reduce import derive_summary
from .runs import Run, run, run_to_file  # noqa: F401


def derive(desc: Description, latex: bool = True) -> dict:
    """What ``meanfield model derive`` prints: the reduced variables and their dynamics.

    Parameters
    ----------
    desc : Description
        A loaded description (:func:`meanfield.engine.load`).
    latex : bool
        Also build the derivation in LaTeX (needs sympy; per state entry for
        small models, the general Gram-block form otherwise).

    Returns
    -------
    dict
        ``model``, ``P`` (number of features), ``features``, ``state_size``,
        ``variables`` (one dict per reduced block: ``head``, ``name``,
        ``kind``, ``shape``, ``count`` of independent entries),
        ``independent`` (their total), ``gd_map`` and ``flow`` in words,
        ``parameters`` (the declared parameters' values) and ``latex`` (a
        string, or None when ``latex`` is false or sympy is missing).

    Examples
    --------
    >>> import meanfield.engine as me
    >>> info = me.derive(me.load("docs/examples/majority.toml"), latex=False)
    >>> [(v["name"], v["count"]) for v in info["variables"]], info["independent"]
    ([('A', 6), ('S', 9), ('B', 6), ('w', 3)], 24)
    """
    out = derive_summary(desc)
    out["parameters"] = {k: list(v) if isinstance(v, tuple) else v for k, v in desc.declared}  # the declared ones
    out["latex"] = None
    if latex:
        try:
            from . import symbolic
        except ImportError:
            return out
        fn = getattr(symbolic, "description_latex", None)
        if fn is not None:
            out["latex"] = fn(desc)
        elif hasattr(symbolic, "general_latex"):
            out["latex"] = symbolic.general_latex()
    return out
