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

    For a small model (``meanfield.engine.symbolic_entries.supported``) the
    LaTeX also has the explicit loss and the gradient-flow right-hand side of
    each state entry (at most 12 entries; larger models: one line saying why).

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
    >>> import meanfield as mf
    >>> "W[h,v1,v2]" in derive(mf.load("incontext", K=2, N=2))["latex"].replace("_{h,v1,v2}", "[h,v1,v2]")
    True
    """
    out = derive_summary(desc)
    if desc.dictionary.trainable:  # trainable embeddings: the ambient state (meanfield.engine.embeddings)
        from .embeddings import describe_state
        from .reduce import layout

        out["embeddings"] = describe_state(desc, layout(desc))
    out["parameters"] = {k: list(v) if isinstance(v, tuple) else v for k, v in desc.declared}  # the declared ones
    if "population" in desc.data.extra or desc.data.extra.get("sampled"):  # a data family (meanfield.engine.gaussian)
        from .gaussian import convention_attrs

        law = (desc.data.extra.get("population") or {}).get("law") or desc.data.extra.get("law")
        opts = desc.data.extra.get("icl", {"N_test": None, "samples": 0, "seed": 0})
        out["data"] = convention_attrs(law, opts, exact="population" in desc.data.extra)
        if "population" in desc.data.extra:
            out["data"]["loss"] = ("L = (1/2) (T . M T - 2 m . T + c0), yhat = sum_abj T_abj G_ab x_qj, "
                                   "M = E[G G] (x) Lambda: closed-form Gaussian moments (docs/engine.md)")
            out["data"]["loss_min"] = law.moments().minimum_loss()
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
        from . import symbolic_entries

        why = symbolic_entries.supported(desc)
        if why is None:  # a small model: the actual ODE of each state entry
            out["latex"] = (out["latex"] or "") + "\n" + symbolic_entries.entry_latex(desc)
        else:
            out["latex"] = (out["latex"] or "") + (f"% no entry-by-entry ODE: {why} (it is printed for at most "
                                                   f"{symbolic_entries.MAX_ENTRIES} state entries; above them, "
                                                   "the general block maps only)\n")
    return out
