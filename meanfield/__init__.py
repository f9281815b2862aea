"""meanfield: exact reduced training dynamics of small transformers.

The public Python API (every name in ``__all__``; each also a command of
``meanfield``)::

    import meanfield as mf
    desc = mf.load("incontext", K=3)          # a description (a shipped name or a TOML file), parameters set
    desc = mf.set_parameters(desc, N=12)      # other parameter values
    r = mf.run(desc)                          # a Run (tqdm progress; progress=False for none)
    r.plot(); r.to_xarray(); r.to_dataframe(); r.state(10.0)
    p = mf.particles(desc, width=64)          # the explicit finite-width network
    s = mf.width_sweep(desc, widths=[16, 64, 256], seeds=3, out="runs/w.h5")
    claims, report = mf.check("incontext", out="runs/ic_check")
    mf.derive(desc)["latex"]                  # the ODE of each state entry (small models)
    r = mf.open_run("runs/x.h5")              # any run file: mixture, engine, induction
    mf.plot_runs([r1, r2], label="width")     # overlay

Systems live in subpackages (``meanfield.engine``, the papers in
``meanfield.models.<paper>``); shared machinery in ``meanfield.core``. Importing
this package imports none of them (no numba, sympy, CUDA or xarray): each
name is loaded on first use.
"""

__version__ = "0.1.0"

__all__ = ["Run", "open_run", "plot_runs", "load", "set_parameters", "run", "particles", "width_sweep", "check",
           "derive", "ConfigError", "__version__"]

_FROM = {
    "Run": "meanfield.core.run", "open_run": "meanfield.core.run", "plot_runs": "meanfield.core.run",
    "ConfigError": "meanfield.core.errors",
    "load": "meanfield.api", "set_parameters": "meanfield.api", "run": "meanfield.api",
    "particles": "meanfield.api", "width_sweep": "meanfield.api", "check": "meanfield.api",
    "derive": "meanfield.api",
}


def __getattr__(name):
    mod = _FROM.get(name)
    if mod is None:
        raise AttributeError(f"module 'meanfield' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(mod), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
