"""The shared core of meanfield: what every system uses. It imports nothing above it.

What belongs here (machinery that names no paper):

* ``errors``: ``ConfigError``, the one error type of bad input;
* ``config``: config dataclass helpers, value parsers, TOML loading, CLI flags of a config dataclass;
* ``criteria``, ``stagetimes``: stop criteria (parsing, testing, kernel arguments, the name tables);
  T1, T2, T_loss of a recorded trajectory;
* ``activations``: ``@portable`` (one source for CPU, CUDA and the complex-step target) and the
  primitives ``relu_prime``, ``softplus_neg``, ``sigmoid_neg``;
* ``integrate``: GD map / RK4 / Dopri5 steppers, stages, record grids, Monitor;
* ``batched``: the one batched trajectory driver, the backend choice and the CUDA launcher;
* ``harness``: the run harness (training description + system -> run, run file, exit code);
* ``io``: the HDF5 run file (atomic writes, the one schema);
* ``report``: claims (PASS / FAIL with numbers and source);
* ``bounds`` (``bound_parse``): `bound` (a paper's inequality checked on a run file);
* ``sweep`` / ``ensemble`` (``ensemble_plan``, ``ensemble_store``, ``ensemble_pools``, ``ensemble_cli``,
  ``ensemble_plot``): many runs (per-point sweeps, chunked ensembles; systems plug in through adapters);
* ``escape``: escape times from saddles (Jacobian spectra);
* ``guard`` / ``limits`` / ``outcome``: input and output checks, the generic size ceilings and estimates,
  console outcomes (a paper's own estimates: ``meanfield.models.<paper>.sizes``);
* ``hooks``: the few pieces core needs from a paper (a system's run-file check, its ensemble adapter),
  registered by the plug-ins through ``meanfield.engine.registry`` and looked up here.

What does not: descriptions, the closed Gram state and its kernels, the
oracle, finite width, the registry (``meanfield.engine``); anything of one
paper (``meanfield.models.<paper>``). No module here imports the engine, a
paper or the CLI, not even inside a function (``lint-imports``,
``tests/test_layout.py``, ``tests/test_core_hooks.py``); ``hooks`` loads the plug-ins by name.
"""
