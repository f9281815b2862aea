"""Guards at the edge of the program: every bad input becomes one line.

What lives here, used by the CLI before any work starts:

* :func:`check_output_file`, :func:`check_output_dir`: an output path must be
  writable *before* a run spends minutes on it (an existing directory where a
  file goes, a path under an existing file, a missing or read-only parent, a
  read-only file system are refused up front); stale ``PATH.tmp-PID`` files
  left by killed runs are removed (:func:`clean_stale_tmp`).
* :func:`read_config_text`: a config file is read with a size cap, must be
  UTF-8 text and is parsed by ``tomllib`` with deep nesting refused.
* :func:`mixture_estimate` and :func:`check_size`: memory and time of a run
  estimated from its config (sample count, state size, records, steps), and
  a refusal quoting the estimate when it is beyond this machine (``--force``
  goes past it on purpose).
* :func:`excerpt`: error messages quote at most a short excerpt of a value.
* :func:`terminate_as_interrupt`: SIGTERM raises ``KeyboardInterrupt`` like
  SIGINT, so both end in the same clean exit 130.

Every refusal is a :class:`meanfield.core.config.ConfigError` (the CLI prints it
on one line and exits 2).
"""

from __future__ import annotations

import math
import os
import sys
import signal
import tempfile
from pathlib import Path

from .errors import ConfigError
from .limits import (  # noqa: F401 (re-exported: the ceilings live in meanfield.core.limits)
    EXCERPT_CHARS, MAX_HEADS, MAX_HORIZON, MAX_LIST, MAX_OMEGAS, MAX_SECONDS, MAX_SEEDS, _fmt_bytes, _fmt_seconds,
    check_list, check_run_numbers, check_size, chi2_estimate, excerpt, full_study_estimate,
    max_workers, memory_limit, unknown_name)

CONFIG_MAX_BYTES = 1 << 20  # a config is a few hundred bytes; 1 MiB is far beyond any real one
CONFIG_MAX_DEPTH = 16  # tables/arrays nested deeper than this are not a config



def one_line(msg: str, n: int = 400) -> str:
    """A message on one line of at most about ``n`` characters."""
    s = " ".join(str(msg).split())
    if len(s) > n:
        s = s[: n - 60] + f" ... ({len(s) - n + 40} characters omitted) ... " + s[-20:]
    return s


# ------------------------------------------------------------------ output paths


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale_tmp(path: str | Path) -> list[Path]:
    """Remove ``PATH.tmp-PID`` files whose process is gone (left by a run that
    was killed while writing). Returns the removed paths."""
    p = Path(path)
    removed = []
    try:
        cands = list(p.parent.glob(f"{p.name}.tmp-*"))
    except OSError:
        return removed
    for f in cands:
        pid = f.name.rsplit(".tmp-", 1)[-1]
        if not pid.isdigit() or _pid_alive(int(pid)):
            continue
        try:
            f.unlink()
            removed.append(f)
        except OSError:
            pass
    return removed


def _nearest_existing(p: Path) -> Path:
    q = p
    while not os.path.lexists(q):
        if q.parent == q:
            break
        q = q.parent
    return q


def _probe_writable(folder: Path, field: str, target: Path) -> None:
    """Create and remove a file in ``folder``: the only check that also holds
    for root, read-only mounts and pseudo file systems."""
    try:
        fd, name = tempfile.mkstemp(prefix=".meanfield-probe-", dir=folder)
    except OSError as e:
        raise ConfigError(f"{field}: cannot write {target}: cannot create a file in {folder} "
                          f"({e.strerror or e})") from None
    os.close(fd)
    try:
        os.unlink(name)
    except OSError:
        pass


def _check_parent(p: Path, field: str) -> None:
    parent = p.parent if str(p.parent) else Path(".")
    q = _nearest_existing(parent)
    if not q.is_dir():
        raise ConfigError(f"{field}: cannot write {p}: {q} is a file, not a folder")
    _probe_writable(q, field, p)


def check_output_file(path, field: str = "out", suffixes: tuple[str, ...] | None = None) -> Path:
    """An output FILE path that can be written: refuse, before any work, an
    existing directory, a non-regular file, a parent that is a file, a folder
    we cannot write in. Missing parent folders are fine (created at write
    time). Stale ``PATH.tmp-PID`` files are cleaned up. Returns the path."""
    if path is None or str(path).strip() == "":
        raise ConfigError(f"{field}: give a file path")
    p = Path(path)
    if suffixes and p.suffix not in suffixes:
        raise ConfigError(f"{field}: must be a path ending in {' or '.join(suffixes)}, got {excerpt(str(path))}")
    if p.is_dir():
        raise ConfigError(f"{field}: {excerpt(str(p))} is an existing directory; give a file path")
    if os.path.lexists(p) and not p.is_file():
        raise ConfigError(f"{field}: {excerpt(str(p))} exists and is not a regular file")
    _check_parent(p, field)
    clean_stale_tmp(p)
    return p


def check_output_dir(path, field: str = "out") -> Path:
    """An output FOLDER that can be written (existing or to be created)."""
    if path is None or str(path).strip() == "":
        raise ConfigError(f"{field}: give a folder path")
    p = Path(path)
    if os.path.lexists(p):
        if not p.is_dir():
            raise ConfigError(f"{field}: {excerpt(str(p))} exists and is not a folder")
        _probe_writable(p, field, p)
        return p
    _check_parent(p, field)
    return p


def check_disk(path, need_bytes: float, field: str = "out", force: bool = False) -> None:
    """Refuse, before the work, an output whose estimated size is more than the
    free space where it goes (a full disk during the final write loses the run;
    HDF5 has even crashed on it)."""
    import shutil

    if force:
        return
    q = _nearest_existing(Path(path).parent if str(Path(path).parent) else Path("."))
    try:
        free = shutil.disk_usage(q if q.is_dir() else q.parent).free
    except OSError:
        return
    if need_bytes > free:
        raise ConfigError(f"{field}: the run file needs about {_fmt_bytes(need_bytes)}, only {_fmt_bytes(free)} free "
                          f"in {excerpt(str(q))}; free space or record less (--record-every, --record-log); "
                          "--force runs it anyway")


# ------------------------------------------------------------------ config files


def _depth(v, d: int = 0) -> int:
    if d > CONFIG_MAX_DEPTH:
        return d
    if isinstance(v, dict):
        return max([_depth(x, d + 1) for x in v.values()] or [d + 1])
    if isinstance(v, list):
        return max([_depth(x, d + 1) for x in v] or [d + 1])
    return d


def read_config_text(path, field: str = "config", max_bytes: int = CONFIG_MAX_BYTES) -> dict:
    """Parse a TOML config file safely: at most ``max_bytes`` are read (so
    ``/dev/zero`` or a huge file is refused, not swallowed), the bytes must
    be UTF-8, nesting deeper than ``CONFIG_MAX_DEPTH`` is refused. Returns
    the parsed dict; every failure is a one-line ConfigError."""
    import tomllib

    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{field}: {excerpt(str(p))} is a directory; give a TOML file")
    try:
        with open(p, "rb") as fh:
            raw = fh.read(max_bytes + 1)
    except FileNotFoundError:
        raise ConfigError(f"{field}: file not found: {excerpt(str(p))}") from None
    except OSError as e:
        raise ConfigError(f"{field}: cannot read {excerpt(str(p))}: {e.strerror or e}") from None
    if len(raw) > max_bytes:
        raise ConfigError(f"{field}: {excerpt(str(p))} is larger than {max_bytes // 1024} KiB; "
                          "a config file is a short TOML text")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{field}: {excerpt(str(p))} is not a UTF-8 text file (byte 0x{raw[e.start]:02x} "
                          f"at offset {e.start}); give a TOML file") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{field}: malformed TOML in {excerpt(str(p))}: {one_line(str(e), 160)}") from None
    except RecursionError:
        raise ConfigError(f"{field}: {excerpt(str(p))} nests tables or arrays too deeply "
                          f"(at most {CONFIG_MAX_DEPTH} levels)") from None
    if _depth(data) > CONFIG_MAX_DEPTH:
        raise ConfigError(f"{field}: {excerpt(str(p))} nests tables or arrays too deeply "
                          f"(at most {CONFIG_MAX_DEPTH} levels)")
    return data


# ------------------------------------------------------------------ sizes

# Cost model of one evaluation of the reduced mixture dynamics (loss and
# gradients over n samples of L tokens, P = 2K features), fitted to the
# benchmark numbers in the README (3.2 us at K = 2, L = 3; 107 us at K = 8,
# L = 3; 40 ms at K = 8, L = 6): a, b, c below reproduce them within a factor 2,
# which is all a refusal threshold needs.
_T_SAMPLE = 2e-9  # seconds per (sample x token^2 x feature)
_T_MATRIX = 1e-8  # seconds per P^3 (the GD map's matrix products)
_T_CALL = 1e-6

def _log_n_samples(K: int, L: int) -> float:
    """log of K x 2 x C(2(K-1) + L - 3, L - 2), without forming the number."""
    a = 2 * (K - 1) + L - 3
    b = L - 2
    if b < 0 or a < b:
        return math.log(2 * K)
    return math.log(2 * K) + math.lgamma(a + 1) - math.lgamma(b + 1) - math.lgamma(a - b + 1)


def _records(cfg) -> float:
    H = float(cfg.horizon or 0.0)
    if cfg.record_log is not None:
        return cfg.record_log + 4.0
    if cfg.record_dt is not None:
        return H / cfg.record_dt + 4.0
    if cfg.record_every is not None:
        if cfg.method == "gd":
            return H / cfg.record_every + 4.0
        return 1e3  # solver steps: unknown in advance
    return 1004.0


def mixture_estimate(cfg, particles_d: int | None = None) -> dict:
    """Estimated peak memory (bytes) and compute time (s) of one mixture run
    from its config alone. Floats, so absurd sizes do not overflow."""
    P = 2 * cfg.K
    if cfg.n_train is not None:
        n = float(cfg.n_train)
        D = float(cfg.ambient_d or (2 * cfg.K + 4))
    else:
        n = math.exp(min(_log_n_samples(cfg.K, cfg.L), 700.0)) * (2.0 if cfg.label_noise > 0 else 1.0)
        D = float(P)
    nn = float(cfg.n_neurons)
    T = _records(cfg)
    state = 6.0 * D * D + 2.0 * D * nn
    per_record = state + 3.0 * n * nn + 2.0 * nn * D
    mem = 8.0 * (3.0 * T * per_record + 4.0 * n * cfg.L + 20.0 * state)
    if cfg.width is not None:
        mem += 8.0 * 2 * 2 * float(cfg.width) * D * 2
    per_eval = _T_SAMPLE * n * cfg.L * cfg.L * D * nn + _T_MATRIX * D ** 3 + _T_CALL
    H = float(cfg.horizon or 0.0)
    if cfg.method == "gd":
        steps = H
    elif cfg.method == "rk4":
        steps = 4.0 * H / cfg.dt
    else:
        steps = 0.0  # adaptive: not known in advance
    if particles_d is not None:
        m = float(cfg.width or 0)
        mem += 8.0 * (6.0 * m * particles_d + 4.0 * n * cfg.L * particles_d)
        per_eval += 5e-9 * m * particles_d * n * cfg.L
    return {"n_samples": n, "records": T, "bytes": mem, "steps": steps, "seconds": steps * per_eval}


def check_mixture_size(cfg, force: bool = False, what: str = "size", particles_d: int | None = None,
                       copies: float = 1.0) -> dict:
    """:func:`mixture_estimate` x ``copies`` (runs of a sweep) through :func:`check_size`."""
    est = mixture_estimate(cfg, particles_d)
    est = {**est, "seconds": est["seconds"] * copies, "bytes": est["bytes"]}
    desc = (f" (K={cfg.K}, L={cfg.L}: {est['n_samples']:.3g} samples, {est['records']:.3g} records, "
            f"{est['steps']:.3g} steps" + (f", {copies:.3g} runs" if copies != 1 else "") + ")")
    check_size(est, what, force, desc)
    return est


def derive_estimate(K: int, L: int, fmts, reduce_symmetry: bool = False, force: bool = False) -> dict:
    """Refuse a sympy derivation that would not finish. Cost model, timed on
    this project's 2-core machine: the LaTeX / Python formats differentiate
    every sample's pre-activation in every score variable, about
    2.2e-3 s x n L^2 P^2 (K = 2, L = 3: 10 s; K = 3: 23 s); JSON only lists the
    6 P^2 + 2 P variables (~1e-4 s each); the symmetry reduction tries every
    group permutation and sign pattern, K! 4^K candidates (~7e-5 s each)."""
    P = 2 * K
    log_n = _log_n_samples(K, L)
    secs = 2.0
    if any(f in ("latex", "python") for f in fmts):
        secs += 2.2e-3 * math.exp(min(log_n + math.log(L * L * P * P), 700.0))
    secs += 1e-4 * (6.0 * P * P + 2 * P)
    if reduce_symmetry:
        secs += 7e-5 * math.exp(min(math.lgamma(K + 1) + K * math.log(4.0), 700.0))
    est = {"bytes": 8.0 * 50 * math.exp(min(log_n, 700.0)) * L * P, "seconds": secs}
    check_size(est, "size", force, f" (derive K={K}, L={L}: {math.exp(min(log_n, 700.0)):.3g} samples)")
    return est


def construct_estimate(K: int, L: int, d: int, force: bool = False) -> dict:
    """Refuse a Lemma 6.1 check that would not fit: it evaluates the explicit
    network on every sample, about 48 n L d bytes and 1.3e-7 n L d K seconds
    (timed here: K = 8, L = 8, 434112 samples: 58 s, 2.4 GB)."""
    n = math.exp(min(_log_n_samples(K, L), 700.0))
    est = {"bytes": 48.0 * n * L * d, "seconds": 1.3e-7 * n * L * d * K}
    check_size(est, "size", force, f" (construct K={K}, L={L}: {n:.3g} samples)")
    return est


# Induction system: one full-batch gradient costs about 1.9e-8 s per (sequence x position) at the
# default H = M = 3 (README, `bench_induction.py`: 19 ms for 10,000 sequences of L = 100).
_T_IND = 1.9e-8


def induction_estimate(cfg) -> dict:
    """Estimated memory (bytes) and time (s) of an induction run from its config."""
    L = float(cfg.L)
    Lt = float(cfg.L_test or cfg.L)
    n = float(cfg.n_train or 0)
    heads = max(1.0, cfg.H * cfg.M / 9.0)
    seqs = 8.0 * (n * (L + 1) + float(cfg.n_test) * (Lt + 1) + float(cfg.batch) * (L + 1))
    mem = 6.0 * seqs * heads
    if cfg.method == "gd":
        steps = float(sum(cfg.stage_steps) if cfg.schedule != "simultaneous" else cfg.steps)
    elif cfg.method == "rk4" and cfg.dt:
        H = sum(cfg.stage_times) if cfg.schedule != "simultaneous" and cfg.stage_times else (cfg.t_end or 0.0)
        steps = 4.0 * float(H) / cfg.dt
    else:
        steps = 0.0
    per = n if cfg.sampling == "fixed" else float(cfg.batch)
    # the model's features: every subset of at most D heads; a sequence's kernel: d^(|pa| + 1) floats
    n_feat = float(sum(math.comb(cfg.H, j) for j in range(0, cfg.D + 1)))
    kernel = math.exp(min((len(cfg.pa) + 1) * math.log(max(cfg.d, 1)), 700.0))
    rec = cfg.record_log if cfg.record_log is not None else (steps / cfg.record_every if cfg.record_every
                                                             else min(steps, 1000.0))
    mem += 8.0 * (4.0 * kernel + float(rec + 4) * (cfg.H * cfg.M + n_feat + 8.0))
    return {"bytes": mem, "seconds": steps * _T_IND * per * L * heads * max(1.0, n_feat / 7.0), "steps": steps}


def check_induction_size(cfg, force: bool = False) -> dict:
    est = induction_estimate(cfg)
    check_size(est, "size", force, f" (induction: {cfg.n_train} sequences of L = {cfg.L}, {est['steps']:.3g} steps)")
    return est


def induction_data_estimate(N: int, d: int, L: int, n_parents: int, kernels: bool, force: bool = False) -> dict:
    """``induction data``: tokens N (L + 1) int64, kernels N d^(|pa| + 1) floats;
    generation about 3.2e-8 s per token (README: 32 ms for 10,000 x 100)."""
    k1 = math.exp(min((n_parents + 1) * math.log(max(d, 1)), 700.0))  # one sequence's kernel, always drawn
    k = k1 if kernels else 0.0
    est = {"bytes": 3.0 * 8.0 * (float(N) * ((L + 1) + k) + k1), "seconds": 3.2e-8 * float(N) * (L + 1 + k1)}
    check_size(est, "size", force, f" (induction data: {N} sequences of L = {L})")
    return est


# ------------------------------------------------------------------ one rule for inapplicable options

_ONLY = {  # key -> (predicate on the resolved config, what it needs)
    "t_end": (lambda c: c.method != "gd" and c.schedule == "simultaneous",
              "a flow or rk4 run with the simultaneous schedule (gd runs use steps; three-stage runs stage_times)"),
    "stage_times": (lambda c: c.method != "gd" and c.schedule == "three-stage",
                    "a flow or rk4 run with the three-stage schedule (gd runs use stage_steps)"),
    "dt": (lambda c: c.method == "rk4", "method rk4"),
    "rtol": (lambda c: c.method == "flow", "method flow"),
    "atol": (lambda c: c.method == "flow", "method flow"),
    "h_min": (lambda c: c.method == "flow", "method flow"),
    "steps": (lambda c: c.schedule == "simultaneous", "the simultaneous schedule (three-stage runs use stage_steps)"),
    "criterion": (lambda c: c.schedule == "simultaneous",
                  "the simultaneous schedule (three-stage runs use stage_criteria)"),
    "stage_steps": (lambda c: c.schedule == "three-stage", "the three-stage schedule (simultaneous runs use steps)"),
    "stage_criteria": (lambda c: c.schedule == "three-stage",
                       "the three-stage schedule (simultaneous runs use criterion)"),
    "stage3": (lambda c: c.schedule == "three-stage", "the three-stage schedule"),
    "data_seed": (lambda c: c.n_train is not None, "a finite training set (n_train)"),
}


def check_applicable(given: dict, cfg, rules: dict | None = None) -> None:
    """A config key or flag the chosen method / schedule ignores is an error
    naming it (instead of being silently dropped). ``given``: the keys the user
    set (TOML file and flags), ``cfg``: the resolved MixtureConfig (or any
    object with ``method`` and ``schedule`` that ``rules`` reads: the engine's
    general descriptions pass ``meanfield.engine.edges.ENGINE_ONLY``)."""
    rules = _ONLY if rules is None else rules
    for k, v in given.items():
        if v is None or k not in rules:
            continue
        ok, needs = rules[k]
        if not ok(cfg):
            raise ConfigError(f"{k}: not used here (method {cfg.method}, schedule {cfg.schedule}); "
                              f"it applies to {needs}")
    if cfg.method != "gd":  # flow / rk4: step counts only set the default horizons
        for steps_key, time_key in (("steps", "t_end"), ("stage_steps", "stage_times")):
            if given.get(steps_key) is not None and given.get(time_key) is not None:
                raise ConfigError(f"{steps_key}: not used when {time_key} is given (for flow and rk4 runs "
                                  f"{steps_key} x eta is only the default {time_key})")


# ------------------------------------------------------------------ run files that open but are wrong


def validate_mixture_run(run, path) -> None:
    """Check a mixture run file read by ``io.read_run`` against the public
    schema (README, "HDF5 run format"): the ``config`` attribute is a JSON
    object, every dataset a reader uses is there with a consistent shape.
    Raises ConfigError naming the first wrong field."""
    import numpy as np

    where = excerpt(str(path))
    cfg = run.attrs.get("config", None)
    if not isinstance(cfg, dict):
        raise ConfigError(f"{where}: attribute 'config' must be a JSON object, got {excerpt(cfg)}")
    run.config = cfg

    def ds(name, ndim):
        if name not in run:
            raise ConfigError(f"{where}: dataset '{name}' is missing")
        a = np.asarray(run[name])
        if a.ndim != ndim:
            raise ConfigError(f"{where}: dataset '{name}' must have {ndim} dimension(s), has shape {a.shape}")
        return a

    t = ds("t", 1)
    T = t.shape[0]
    feats = ds("features", 1)
    P = feats.shape[0]
    if P < 4 or P % 2:
        raise ConfigError(f"{where}: dataset 'features' must list 2K >= 4 names, has {P}")
    samples = run.get("samples")
    if not isinstance(samples, dict):
        raise ConfigError(f"{where}: group 'samples' is missing")
    for k in ("consistent", "y", "weight"):
        if k not in samples:
            raise ConfigError(f"{where}: dataset 'samples/{k}' is missing")
    n = np.asarray(samples["y"]).shape[0] if np.asarray(samples["y"]).ndim == 1 else -1
    expect = {"step": (T,), "stage": (T,), "loss": (T,), "w": (T, 2, P), "S": (T, 2, P, P), "A": (T, 2, P, P),
              "B": (T, 2, P, P), "margin": (T, n), "u": (T, n, 2)}
    for name, shape in expect.items():
        if name in ("step", "u") and name not in run:  # read only by some expressions
            continue
        a = ds(name, len(shape))
        if a.shape != shape:
            raise ConfigError(f"{where}: dataset '{name}' has shape {a.shape}, expected {shape} "
                              f"(T = {T} records, P = {P} features, n = {n} samples)")
    for k in ("consistent", "weight"):
        if np.asarray(samples[k]).shape != (n,):
            raise ConfigError(f"{where}: dataset 'samples/{k}' has shape {np.asarray(samples[k]).shape}, "
                              f"expected ({n},)")


# ------------------------------------------------------------------ signals


def _raise_interrupt(signum, frame):
    from .errors import PENDING

    PENDING["signal"] = signum  # remembered: the exception below may be swallowed by third-party code
    raise KeyboardInterrupt(f"signal {signum}")


class deferred_signals:
    """Hold SIGINT / SIGTERM back while a file is being written (seconds at
    most), then hand a signal that arrived meanwhile to the handler that was
    in place (a run's monitor sets its stop flag; otherwise KeyboardInterrupt).
    So a signal during the final write leaves the complete file, not a
    half-written temporary. A no-op outside the main thread."""

    def __enter__(self):
        import threading

        self.got = None
        self.old = {}
        if threading.current_thread() is not threading.main_thread():
            return self
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                if signal.getsignal(sig) is None:  # a handler not installed from Python (embedding code):
                    continue  # it could not be put back; leave it alone
                self.old[sig] = signal.signal(sig, self._hold)
            except (ValueError, OSError):  # pragma: no cover
                pass
        return self

    def _hold(self, signum, frame):
        self.got = (signum, frame)

    def __exit__(self, *exc):
        for sig, old in self.old.items():
            signal.signal(sig, old)
        if self.got is not None:
            signum, frame = self.got
            old = self.old.get(signum)
            if callable(old):
                old(signum, frame)
            elif old == signal.SIG_DFL and signum == signal.SIGTERM:
                raise KeyboardInterrupt(f"signal {signum}")
            elif old != signal.SIG_IGN:
                raise KeyboardInterrupt(f"signal {signum}")
        return False


def terminate_as_interrupt() -> None:
    """SIGTERM raises KeyboardInterrupt (as SIGINT does), so a terminated
    command unwinds through the same clean-up and exits 130."""
    try:
        signal.signal(signal.SIGTERM, _raise_interrupt)
    except ValueError:  # not the main thread
        pass


# ------------------------------------------------------------------ messages


LOG = "meanfield"


def setup_logging(verbosity: int = 0) -> None:
    """Messages of the command line through ``logging`` (logger ``meanfield``):
    ``-q`` (verbosity -1) warnings only, default info, ``-v`` (1) debug.
    Library use configures logging itself; nothing is set up on import."""
    import logging

    import sys

    class _Stderr(logging.StreamHandler):
        """A StreamHandler on whatever ``sys.stderr`` is at emit time (redirected
        in tests and by callers of ``main``), not the one at set-up."""

        @property
        def stream(self):
            return sys.stderr

        @stream.setter
        def stream(self, value):
            pass

    log = logging.getLogger(LOG)
    log.setLevel(logging.WARNING if verbosity < 0 else logging.DEBUG if verbosity > 0 else logging.INFO)
    if not any(getattr(h, "_meanfield", False) for h in log.handlers):
        h = _Stderr()
        h.setFormatter(logging.Formatter("meanfield: %(message)s"))
        h._meanfield = True
        log.addHandler(h)
        log.propagate = False


def cli_log():
    """The ``meanfield`` logger of the command line (set up with the default
    level if the CLI's ``main`` has not done so: a CLI function called on its
    own, as the tests do). Messages print as ``meanfield: MESSAGE`` on stderr."""
    import logging

    log = logging.getLogger(LOG)
    if not any(getattr(h, "_meanfield", False) for h in log.handlers):
        setup_logging(0)
    return log


#: seconds of the first compilation of each kernel family, measured cold (NUMBA_CACHE_DIR empty) on a
#: loaded 2-core machine (benchmarks/bench_first_use.py prints today's numbers)
COMPILE_S = {"mixture": 15, "engine": 30, "induction": 25}


def first_use_notice(*dispatchers, family: str | None = None, echo: bool = False) -> bool:
    """Say "compiling kernels, about N s, once" when a numba kernel about to be
    used has neither been compiled in this process nor been cached on disk
    (numba ``cache=True``): the first run after an install spends most of its
    time there, and a step rate measured then would be meaningless (the
    progress line shows none until one is measured).

    Parameters
    ----------
    *dispatchers : numba dispatchers
        the kernels the run is about to call.
    family : str, optional
        ``mixture`` | ``engine`` | ``induction``: N from :data:`COMPILE_S`.
    echo : bool
        also print the line on stderr when the ``meanfield`` logger has no
        handler (the Python API in a notebook).

    Returns
    -------
    bool
        whether the kernels compile now.

    Examples
    --------
    >>> from meanfield.engine import kernels                                  # doctest: +SKIP
    >>> first_use_notice(kernels.gd_advance, family="engine", echo=True)      # doctest: +SKIP
    """
    import logging

    first = False
    for d in dispatchers:
        try:
            if d.signatures:
                continue
            cache = getattr(d, "_cache", None)
            index = getattr(getattr(cache, "_cache_file", None), "_index_path", None)
            if index is None or not os.path.exists(index):
                first = True
                break
        except AttributeError:  # not a numba dispatcher
            continue
    if first:
        n = COMPILE_S.get(family or "", 30)
        msg = f"compiling kernels, about {n} s, once (later runs load them from numba's cache; `meanfield warm`)"
        log = logging.getLogger(LOG)
        if echo and not log.handlers:
            print(f"meanfield: {msg}", file=sys.stderr, flush=True)
        else:
            log.info(msg)
    return first


# ------------------------------------------------------------------ the last-resort barrier

EXIT_INTERNAL = 70  # sysexits.h EX_SOFTWARE: a bug in meanfield, not in the input


def barrier(call, verbose: bool = False, after_work=None) -> int:
    """Run ``call()`` (a CLI command returning its exit code) so that nothing
    ends in a Python traceback: bad input (ConfigError) -> one line, exit 2;
    SIGINT / SIGTERM outside a run's own handler -> one line, exit 130; an
    operating-system error (a path, a full disk) -> one line naming the path,
    exit 2; out of memory -> one line, exit 2; anything else is a bug: one line
    ``internal error``, exit 70, and the traceback with ``-v`` or
    ``MEANFIELD_DEBUG=1``.

    ``after_work``: given when this process is the ``meanfield`` command,
    whose start-up handler (``meanfield.cli``: a signal before the barrier
    exits 130 at once) is replaced here by SIGINT -> KeyboardInterrupt;
    ``after_work()`` is called as soon as ``call`` returns (it puts the exit-130
    handler back for the interpreter's shutdown)."""
    debug = verbose or os.environ.get("MEANFIELD_DEBUG", "") not in ("", "0")
    try:
        old_term = signal.getsignal(signal.SIGTERM)
        old_int = signal.getsignal(signal.SIGINT)
    except ValueError:  # pragma: no cover
        old_term = old_int = None
    if old_term != signal.SIG_IGN:
        terminate_as_interrupt()
    # SIGINT -> KeyboardInterrupt for the command's duration (the start-up handler exits at once), unless
    # the process was started with SIGINT ignored (a background job of a non-interactive shell, `trap ''
    # INT`): that choice is honoured, as Python itself and POSIX tools do; SIGTERM still stops the run
    if old_int != signal.SIG_IGN:
        try:
            signal.signal(signal.SIGINT, _raise_interrupt)
        except ValueError:  # pragma: no cover - not the main thread
            pass
    from .errors import PENDING

    PENDING["signal"] = None
    try:
        return _barrier_body(call, debug, after_work)
    finally:
        PENDING["signal"] = None
        for sig, old in ((signal.SIGTERM, old_term), (signal.SIGINT, old_int)):
            if old is not None:
                try:
                    signal.signal(sig, old)
                except (ValueError, TypeError):  # pragma: no cover
                    pass


def _barrier_body(call, debug: bool, after_work=None) -> int:
    import sys
    import traceback

    def say(msg):
        try:
            print(f"meanfield: {one_line(msg)}", file=sys.stderr)
        except (OSError, ValueError):  # pragma: no cover - stderr gone
            pass

    try:
        rc = call()
        if after_work is not None:
            after_work()
        return rc
    except ConfigError as e:
        from .errors import PENDING

        if PENDING["signal"] is not None:  # a failed import (the signal's KeyboardInterrupt inside it) named as
            say("interrupted (SIGINT/SIGTERM); files are written whole or not at all, so any file at the "
                "output path is a complete or checkpoint file")  # bad input: the signal is the cause
            return 130
        say(f"error: {e}")
        return 2
    except KeyboardInterrupt:
        say("interrupted (SIGINT/SIGTERM); files are written whole or not at all, so any file at the output "
            "path is a complete or checkpoint file")
        return 130
    except BrokenPipeError:  # output piped into head & co.
        try:
            sys.stderr.close()
        except OSError:  # pragma: no cover
            pass
        return 0
    except MemoryError:
        if debug:
            traceback.print_exc()
        say("error: size: out of memory; make the run smaller (K, L, width, n_train, records)")
        return 2
    except OSError as e:
        if debug:
            traceback.print_exc()
        where = e.filename if e.filename is not None else ""
        say(f"error: {excerpt(str(where), 240) + ': ' if where else ''}{e.strerror or e}")
        return 2
    except RecursionError:
        if debug:
            traceback.print_exc()
        say("error: input nested too deeply")
        return 2
    except Exception as e:  # a bug: visible, but one line unless asked
        if debug:
            traceback.print_exc()
        from .errors import PENDING

        if PENDING["signal"] is not None:  # the signal's KeyboardInterrupt was turned into another error on the
            say("interrupted (SIGINT/SIGTERM); files are written whole or not at all, so any file at the "
                "output path is a complete or checkpoint file")  # way (raised inside a class's creation, ...)
            return 130
        say(f"internal error: {type(e).__name__}: {e} (a bug in meanfield; rerun with -v or MEANFIELD_DEBUG=1 "
            "for the traceback)")
        return EXIT_INTERNAL
