"""The shared core of meanfield: what every system uses.

* ``errors``: ``ConfigError``, the one error type of bad input;
* ``config``: config dataclass helpers, value parsers, TOML loading, CLI flags of a config dataclass;
* ``criteria``: stop criteria (parsing, testing, kernel arguments, the name tables);
* ``integrate``: GD map / RK4 / Dopri5 steppers, stages, record grids, Monitor;
* ``harness``: the run harness (training description + system -> run, run file, exit code);
* ``io``: the HDF5 run file (atomic writes, the one schema);
* ``report``: claims (PASS / FAIL with numbers and source);
* ``bounds``: `bound` (a paper's inequality checked on a run file);
* ``sweep`` / ``ensemble``: many runs (per-point sweeps, chunked ensembles);
* ``escape``: escape times from saddles (Jacobian spectra);
* ``guard`` / ``outcome``: input and output checks, console outcomes.

Systems (``meanfield.models.mixture``, ``meanfield.models.induction``) and the engine
(``meanfield.engine``) build on it; nothing here imports a system at module
level.
"""
