"""The mixture paper's registration (``meanfield.engine.registry``): its family, fast path, run plot and its panels, command, run check and reader, ensemble system.

Importing this module is cheap: every reference is a ``"module:attr"``
string, resolved when used.
"""

from __future__ import annotations

from ...engine import registry

registry.register_family(
    "mixture", params="meanfield.models.mixture.config:MixtureConfig", build="meanfield.models.mixture.family:build",
    check_options="meanfield.models.mixture.family:check_options",
    size_first="meanfield.models.mixture.family:size_first",
    run_file="meanfield.models.mixture.family:run_file", plot="meanfield.models.mixture.family:plot",
    field_help="meanfield.models.mixture.cli:FIELD_HELP",
    summary="K-mixture of linear classification, two-headed transformer (seed 000)")
registry.register_fast_path(
    "mixture", name="kernels", run="meanfield.models.mixture.run:run",
    verified_by="tests/test_engine_mixture.py::test_engine_equals_fast_path",
    batch="meanfield.models.mixture.engine_batch:batch",  # engine.run_batch of mixture descriptions
    summary="hand numba kernels of the orthonormal population (meanfield mixture run; S, A, B, w state)")
registry.register_run_panels("mixture", "meanfield.models.mixture.plot:PANELS")  # drawn by meanfield.engine.plot
registry.register_command("mixture", "meanfield.models.mixture.cli:add_parser", order=10)
# core's hooks (meanfield.core.hooks): the schema check of mixture run files (meanfield bound) and the
# chunked-ensemble adapter, the default system of sweeps and EnsembleProblem (system=None) for one release
registry.register_run_check("mixture", "meanfield.models.mixture.schema:validate_mixture_run",
                            reader="meanfield.models.mixture.runfile:READER")  # open_run, outcome lines
registry.register_bound_names("mixture", "meanfield.models.mixture.schema:BOUND_NAMES")  # S+[a,b], omega, ...
registry.register_ensemble_system("mixture", "meanfield.models.mixture.ensemble:MIXTURE", default=True)
