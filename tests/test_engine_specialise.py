"""``specialise``: the engine's GD loop compiled with a description's arrays as constants
(meanfield.engine.specialise) equals the default generic loop bit for bit, and refuses in one line
what it does not cover.

What is held: the same kernels' source compiled two ways (run-time arrays, constants) give the same
state bit for bit (same arithmetic in the same order: constant folding changes no rounding), the
same step count and stop code for a criterion and a divergence; the generic loop itself is held
against the explicit network elsewhere (tests/test_engine_oracle*.py). One compile (~20 s) serves
every fast test here (one description, the bench's); other descriptions are behind ``slow``."""

import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import meanfield.engine as me
from meanfield.core.config import ConfigError
from meanfield.engine import specialise
from meanfield.engine.reduce import initial_state
from meanfield.engine.system import system_of
from meanfield.models.mixture.config import make_config
from meanfield.models.mixture.family import mixture_description

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def mixture():
    desc = mixture_description(make_config({}, K=2, L=3))
    return desc, system_of(desc, specialise=False), system_of(desc, specialise=True)


def _both(gen, spec, y0, steps, eta, criterion=None):
    a, b = y0.copy(), y0.copy()
    ra = gen.gd_advance(a, steps, eta, 3, criterion)
    rb = spec.gd_advance(b, steps, eta, 3, criterion)
    return ra, rb, a, b


def test_bit_for_bit_over_a_long_run(mixture):
    desc, gen, spec = mixture
    assert spec.specialise and not gen.specialise
    y0 = initial_state(desc)
    ra, rb, a, b = _both(gen, spec, y0, 4000, 0.5)
    assert ra == rb == (4000, 0)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, y0)  # it trained


def test_criterion_and_divergence_stop_at_the_same_step(mixture):
    desc, gen, spec = mixture
    y0 = initial_state(desc)
    ra, rb, a, b = _both(gen, spec, y0, 100000, 0.5, ("loss", "<=", 0.05))
    assert ra == rb and ra[1] == 1 and 0 < ra[0] < 100000
    assert np.array_equal(a, b)
    gen.max_abs = spec.max_abs = 50.0  # a divergence: an entry above max_abs stops both at the same step
    try:
        ra, rb, a, b = _both(gen, spec, y0, 100000, 200.0)
    finally:
        gen.max_abs = spec.max_abs = desc.training.max_abs
    assert ra == rb and ra[1] == 3
    assert np.array_equal(a, b)


@pytest.fixture
def taken(monkeypatch):
    """Counts the specialised loops handed out (single runs and batches): a test sees the path was taken."""
    seen = []
    for name in ("loop", "batch_loop"):
        orig = getattr(specialise, name)
        monkeypatch.setattr(specialise, name, lambda *a, _o=orig, _n=name: seen.append(_n) or _o(*a))
    return seen


def test_run_api_equals_the_default(mixture, taken, tmp_path):
    import meanfield

    desc = mixture[0]
    r0 = me.run(desc, specialise=False)
    assert taken == []
    r1 = me.run(desc, specialise=True)
    assert taken == ["loop"]
    assert r0.status == r1.status == "complete"
    assert np.array_equal(r0.t, r1.t) and np.array_equal(r0.loss, r1.loss)
    r2 = meanfield.run(desc, specialise=True, progress=False)
    r3, _ = me.run_to_file(desc, tmp_path / "r.h5", progress=False, specialise=True)
    r4 = meanfield.run(desc, out=tmp_path / "s.h5", specialise=True, progress=False)
    assert taken == ["loop"] * 4
    for r in (r2, r3, r4):
        assert np.array_equal(r.loss, r0.loss)


def test_refusals_name_the_field():
    flow = me.load(ROOT / "docs/examples/majority.toml", method="flow", steps=10)
    with pytest.raises(ConfigError, match=r"^specialise: the GD map only .*flow"):
        system_of(flow, specialise=True)
    gd = me.load(ROOT / "docs/examples/majority.toml", steps=10)
    old = specialise.MAX_TOKENS
    specialise.MAX_TOKENS = 2
    try:
        with pytest.raises(ConfigError, match=r"^specialise: the data set has \d+ tokens"):
            system_of(gd, specialise=True)
    finally:
        specialise.MAX_TOKENS = old
    pop = me.load(ROOT / "meanfield/models/icl_onestep.toml", steps=5)
    with pytest.raises(ConfigError, match=r"^specialise: the packed finite-dictionary system only"):
        system_of(pop, specialise=True)


@pytest.mark.parametrize("model,extra", [("induction", []), ("incontext", ["--method", "flow", "--steps", "5"])])
def test_cli_refuses_in_one_line_and_writes_nothing(tmp_path, model, extra):
    out = tmp_path / "r.h5"
    p = subprocess.run([sys.executable, "-m", "meanfield", "model", "run", model, "--specialise",
                        "--out", str(out), *extra], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("meanfield: error: specialise: "), p.stderr
    assert "Traceback" not in p.stderr and not out.exists()


@pytest.mark.slow
def test_cli_run_file_equals_the_default(tmp_path):
    runs = []
    for flag in (["--no-specialise"], ["--specialise"]):
        out = tmp_path / f"r{len(runs)}.h5"
        p = subprocess.run([sys.executable, "-m", "meanfield", "model", "run", "mixture", "--steps", "300",
                            "--out", str(out), "--quiet", *flag], capture_output=True, text=True, cwd=ROOT,
                           timeout=600)
        assert p.returncode == 0, p.stderr
        runs.append(me.open_run(out) if hasattr(me, "open_run") else __import__("meanfield").open_run(out))
    assert np.array_equal(runs[0].loss, runs[1].loss) and np.array_equal(runs[0].t, runs[1].t)


@pytest.mark.slow
@pytest.mark.parametrize("path,over", [
    ("docs/examples/majority.toml", {"steps": 400}),
    ("docs/examples/majority.toml", {"steps": 300, "group_eta": "keys=0.5,values=2"}),  # rates: Gr, hf per stage
    ("meanfield/models/mixture_multiclass.toml", {"steps": 200, "width": 8, "seed": 1}),
    ("meanfield/models/maxmargin.toml", {"steps": 200}),
])
def test_other_descriptions_bit_for_bit(path, over):
    desc = me.load(ROOT / path, **over)
    r0, r1 = me.run(desc, specialise=False), me.run(desc, specialise=True)
    assert r0.status == r1.status
    assert np.array_equal(r0.loss, r1.loss)


def test_many_short_calls_equal_one_long_one(mixture):
    """The loop and its scratch are kept by the system from call to call (a run that records every step
    calls it once a step): 300 calls of one step equal one call of 300, and the generic loop's."""
    desc, gen, spec = mixture
    y0 = initial_state(desc)
    a, b = y0.copy(), y0.copy()
    for _ in range(300):
        assert spec.gd_advance(a, 1, 0.5, 3, None) == (1, 0)
    gen.gd_advance(b, 300, 0.5, 3, None)
    assert np.array_equal(a, b)
    assert len([k for k in spec._loops if isinstance(k, int)]) == 1


def test_batch_bit_for_bit_and_refusals(mixture):
    """run_batch(..., specialise=True): every trajectory through the specialised loop, records and all,
    equals the generic batch bit for bit (per-trajectory eta, criteria-free stages, 2 threads)."""
    from meanfield.engine.batched import run_batch

    desc = mixture[0]
    Y0 = np.tile(initial_state(desc), (6, 1))
    etas = np.linspace(0.2, 1.5, 6)
    b0 = run_batch(desc, y0s=Y0, eta=etas, record_every=40, fast=False, specialise=False)
    b1 = run_batch(desc, y0s=Y0, eta=etas, record_every=40, fast=False, specialise=True)
    for k in ("y", "loss", "rec_y", "rec_t", "rec_step", "n_records", "code", "steps"):
        assert np.array_equal(getattr(b0, k), getattr(b1, k)), k
    rk4 = me.load(ROOT / "docs/examples/majority.toml", method="rk4", steps=10)
    with pytest.raises(ConfigError, match=r"^specialise: the GD map only"):
        run_batch(rk4, fast=False, specialise=True)


def test_model_sweep_specialise_takes_the_path(tmp_path, taken):
    """In this process (meanfield.cli.main): the chunked sweep with --specialise asks for the batch loop."""
    from meanfield.cli import main

    assert main(["model", "sweep", "mixture", "--param", "eta=0.1,0.3", "--steps", "50", "--out", str(tmp_path / "a"),
                 "--quiet", "--specialise"]) == 0
    assert "batch_loop" in taken
    assert main(["model", "sweep", "mixture", "--param", "eta=0.1,0.3", "--steps", "50", "--out", str(tmp_path / "b"),
                 "--quiet", "--specialise", "--backend", "auto"]) == 0  # auto without a GPU: the CPU


def test_batch_specialise_skips_the_fast_path(mixture, taken):
    from meanfield.engine.batched import run_batch

    desc = mixture[0]
    b = run_batch(desc, y0s=np.tile(initial_state(desc), (2, 1)), specialise=True)  # fast=True by default
    assert taken == ["batch_loop"]
    g = run_batch(desc, y0s=np.tile(initial_state(desc), (2, 1)), fast=False, specialise=False)
    assert np.array_equal(b.y, g.y)


def test_frozen_bytes_and_twolayer_refused(monkeypatch):
    gd = me.load(ROOT / "docs/examples/majority.toml", steps=10)
    monkeypatch.setattr(specialise, "MAX_FROZEN_BYTES", 64)
    with pytest.raises(ConfigError, match=r"^specialise: the description's tables and data take \d+ bytes"):
        system_of(gd, specialise=True)
    tl = me.load(ROOT / "meanfield/models/edelman.toml", steps=5)
    with pytest.raises(ConfigError, match=r"^specialise: the one-layer engine's GD loop only"):
        me.run(tl, specialise=True)


def test_code_digest_sees_a_changed_kernel(monkeypatch):
    """The cache name follows the code the process runs: a kernel's code object replaced gives a new tag."""
    from meanfield.engine import kernels
    from meanfield.engine.packed import pack

    pk = pack(me.load(ROOT / "docs/examples/majority.toml", steps=10))
    t0 = specialise._key(pk, pk.lay.Gr, pk.lay.hf)[0]
    fake = types.SimpleNamespace(py_func=lambda y: y)  # an "edited" kernel
    monkeypatch.setitem(vars(kernels), "eng_update", fake)
    assert specialise._key(pk, pk.lay.Gr, pk.lay.hf)[0] != t0


def test_model_sweep_specialise_equals_the_default(tmp_path):
    """model sweep --specialise (chunked): sweep.h5 equal to the default's, every dataset bit for bit;
    --per-point --specialise refused in one line, nothing written."""
    import h5py

    def sweep(out, *flag):
        return subprocess.run([sys.executable, "-m", "meanfield", "model", "sweep", "mixture", "--param",
                               "eta=0.1,0.3,1.0", "--steps", "200", "--out", str(out), "--quiet", *flag],
                              capture_output=True, text=True, cwd=ROOT, timeout=600)

    assert sweep(tmp_path / "a", "--specialise").returncode == 0
    assert sweep(tmp_path / "b", "--no-specialise").returncode == 0
    with h5py.File(tmp_path / "a" / "sweep.h5") as a, h5py.File(tmp_path / "b" / "sweep.h5") as b:
        names = [k for k in a if isinstance(a[k], h5py.Dataset)]
        assert "loss_end" in names
        for k in names:
            assert np.array_equal(a[k][()], b[k][()], equal_nan=True), k
    p = sweep(tmp_path / "c", "--specialise", "--per-point")
    assert p.returncode == 2 and p.stderr.startswith("meanfield: error: specialise: ")
    assert len(p.stderr.strip().splitlines()) == 1 and not (tmp_path / "c").exists()


def _args(spec, y):
    return (y, 1, 0.5, 3, 0, 1, 0.0, 1e6) + specialise.scratch_of(spec.pk, y.shape[0])


def test_auto_takes_a_ready_loop_and_never_compiles(mixture, taken, monkeypatch):
    """specialise="auto" (the default): the fixture's description has a compiled loop, so a default
    system runs it (bit for bit the generic loop); where none is ready it runs the generic loop; it
    never compiles (``loop`` not called). ``ready`` itself: True for the compiled types, False for a
    state of other types (never compiled)."""
    desc, gen, spec = mixture
    y0 = initial_state(desc)
    spec.gd_advance(y0.copy(), 1, 0.5, 3, None)
    taken.clear()
    assert specialise.ready(spec._loops[0], _args(spec, y0))
    assert not specialise.ready(spec._loops[0], _args(spec, y0.astype(np.float32)))
    auto = system_of(desc)
    assert auto.specialise == "auto"
    a, b = y0.copy(), y0.copy()
    auto.gd_advance(a, 500, 0.5, 3, None)
    gen.gd_advance(b, 500, 0.5, 3, None)
    assert np.array_equal(a, b) and auto._loops[0] is spec._loops[0]
    monkeypatch.setattr(specialise, "ready", lambda fn, args: False)
    cold = system_of(desc)
    c = y0.copy()
    cold.gd_advance(c, 500, 0.5, 3, None)
    assert cold._loops[0] is False and np.array_equal(c, b)
    assert taken == []
    flow = me.load(ROOT / "docs/examples/majority.toml", method="flow", steps=10)
    assert system_of(flow).specialise is False  # auto: the GD map only, nothing refused
    for bad in ("yes", 1, None):
        with pytest.raises(ConfigError, match=r"^specialise: True, False or 'auto'; got "):
            system_of(desc, specialise=bad)


def test_auto_finds_the_loop_on_disk_in_a_new_process(mixture):
    """The disk probe for real: a new process (nothing compiled in it) finds the fixture's loop in numba's
    cache and runs it; with --no-specialise, and for a description never compiled, the generic loop."""
    desc, gen, spec = mixture
    spec.gd_advance(initial_state(desc), 1, 0.5, 3, None)  # compiled and saved (cache=True)
    code = ("import sys; from meanfield.engine.system import system_of; "
            "from meanfield.engine.reduce import initial_state; "
            "from meanfield.models.mixture.config import make_config; "
            "from meanfield.models.mixture.family import mixture_description; "
            "d = mixture_description(make_config({}, K=2, L=3)); s = system_of(d); "
            "s.gd_advance(initial_state(d), 3, 0.5, 3, None); "
            "d2 = mixture_description(make_config({}, K=2, L=4)); s2 = system_of(d2); "
            "s2.gd_advance(initial_state(d2), 3, 0.5, 3, None); "
            "print(s._loops[0] is not False, s2._loops[0] is not False)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["True", "False"], p.stdout


def test_cli_default_and_no_specialise(tmp_path, mixture, monkeypatch):
    """model run (in this process): by default it asks for a ready loop and gets the fixture's;
    --no-specialise does not ask; both files equal bit for bit."""
    from meanfield.cli import main

    desc, gen, spec = mixture
    spec.gd_advance(initial_state(desc), 1, 0.5, 3, None)
    got = []
    orig = specialise.cached
    monkeypatch.setattr(specialise, "cached", lambda *a: got.append(orig(*a)) or got[-1])
    assert main(["model", "run", "mixture", "--steps", "60", "--quiet", "--out", str(tmp_path / "a.h5")]) == 0
    assert got and got[0] is not None
    got.clear()
    assert main(["model", "run", "mixture", "--steps", "60", "--quiet", "--no-specialise",
                 "--out", str(tmp_path / "b.h5")]) == 0
    assert got == []
    import meanfield

    ra, rb = meanfield.open_run(tmp_path / "a.h5"), meanfield.open_run(tmp_path / "b.h5")
    assert np.array_equal(ra.loss, rb.loss) and np.array_equal(ra.t, rb.t)
    with pytest.raises(ConfigError, match=r"^specialise: True, False or 'auto'"):
        meanfield.run(desc, specialise="yes", progress=False)


def test_batch_auto_takes_a_ready_batch(mixture, monkeypatch):
    """run_batch(fast=False, lanes=False) by default: the specialised batch once one is compiled, bit for
    bit the generic batch (specialise=False). (The default lanes=True runs the lanes,
    tests/test_engine_lanes.py; "auto" applies to the per-trajectory path.)"""
    from meanfield.engine.batched import run_batch

    got = []
    orig = specialise.cached_batch
    monkeypatch.setattr(specialise, "cached_batch", lambda *a: got.append(orig(*a)) or got[-1])
    desc = mixture[0]
    Y0 = np.tile(initial_state(desc), (3, 1))
    run_batch(desc, y0s=Y0[:1], fast=False, specialise=True)  # compiled (or loaded), B = 1
    b2 = run_batch(desc, y0s=Y0, fast=False, record_every=25, lanes=False)  # B = 3: the same signature
    assert got and got[-1] is not None
    assert len(got[-1].overloads) == 1
    n = len(got)
    b0 = run_batch(desc, y0s=Y0, fast=False, record_every=25, specialise=False, lanes=False)
    assert len(got) == n
    import numba

    B = 8 * numba.get_num_threads()  # 8 a thread: the lanes, no "auto"
    bl = run_batch(desc, y0s=np.tile(Y0[:1], (B, 1)), fast=False, record_every=25)
    assert len(got) == n
    for k in ("y", "loss", "rec_y", "n_records"):
        assert np.array_equal(getattr(b0, k), getattr(bl, k)[:3]), k
    for k in ("y", "loss", "rec_y", "n_records"):
        assert np.array_equal(getattr(b0, k), getattr(b2, k)), k
    with pytest.raises(ConfigError, match=r"^specialise: True, False or 'auto'"):
        run_batch(desc, specialise="no")


def test_cache_name_is_the_same_in_every_process(mixture):
    """The tag naming the compiled loop depends on the code and the arrays only: the same in this process
    after a compile as in new processes with other string hashing (a marshal-based checksum changed once
    numba had compiled the kernels, and "auto" then missed a loop it had)."""
    import os

    from meanfield.engine.packed import pack

    desc, gen, spec = mixture
    spec.gd_advance(initial_state(desc), 1, 0.5, 3, None)  # compiled (or loaded) in this process
    pk = pack(desc)
    here = specialise._key(pk, pk.lay.Gr, pk.lay.hf)[0]
    code = ("from meanfield.engine import specialise as sp; from meanfield.engine.packed import pack; "
            "from meanfield.models.mixture.config import make_config; "
            "from meanfield.models.mixture.family import mixture_description; "
            "pk = pack(mixture_description(make_config({}, K=2, L=3))); print(sp._key(pk, pk.lay.Gr, pk.lay.hf)[0])")
    for seed in ("1", "2"):
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                           env=dict(os.environ, PYTHONHASHSEED=seed))
        assert p.returncode == 0, p.stderr
        assert p.stdout.strip() == here


def test_ready_needs_the_data_file_and_run_and_batch_share_the_loop(mixture, monkeypatch):
    """``ready``: a new dispatcher of the compiled loop's function (nothing compiled in it) is ready
    from disk; with the data file gone (exists() False) it is not, so "auto" never compiles. A batch's
    stage hook calls the run's own loop, by name (one compile, one cache entry, serves both)."""
    from numba import njit

    from meanfield.engine import batched
    from meanfield.engine.packed import pack

    desc, gen, spec = mixture
    y0 = initial_state(desc)
    spec.gd_advance(y0.copy(), 1, 0.5, 3, None)
    fresh = njit(cache=True, _nrt=False)(spec._loops[0].py_func)
    assert not fresh.overloads and specialise.ready(fresh, _args(spec, y0))
    monkeypatch.setattr(specialise.os.path, "exists", lambda p: False)
    assert not specialise.ready(fresh, _args(spec, y0))
    monkeypatch.undo()
    pk = pack(desc)
    traj = specialise._batch(pk, vars(batched)).py_func.__globals__["trajectory"]
    hook = traj.py_func.__globals__["gd_stage"]
    loop_tag = specialise._key(pk, pk.lay.Gr, pk.lay.hf)[0]  # the run's loop's name: the same numba cache entry
    assert hook.py_func.__globals__["ADV"].py_func.__qualname__ == f"eng_gd_advance_into_{loop_tag}"


def test_code_digest_sees_defaults_and_flags():
    def f(x, a=1.0):
        return x * a

    def g(x, a=2.0):
        return x * a

    from numba import njit

    g.__code__ = f.__code__  # the same code, another default
    assert specialise._code_digest({"f": f}) != specialise._code_digest({"f": g})
    assert specialise._code_digest({"f": njit(f)}) != specialise._code_digest({"f": njit(fastmath=True)(f)})


def test_sweep_no_specialise_reaches_every_path(tmp_path, monkeypatch):
    """model sweep --no-specialise: neither per-point runs nor --batched ask for a ready loop; by default
    they do (the same files either way: the same bits)."""
    from meanfield.cli import main

    asked = []
    for name in ("cached", "cached_batch"):
        orig = getattr(specialise, name)
        monkeypatch.setattr(specialise, name, lambda *a, _o=orig: asked.append(1) or _o(*a))
    for i, mode in enumerate(("--per-point", "--batched")):
        for flag in ("--no-specialise", None):
            asked.clear()
            out = tmp_path / f"s{i}{flag}"
            argv = ["model", "sweep", "docs/examples/majority.toml", "--param", "eta=0.1,0.2", "--steps", "3",
                    mode, "--workers", "1", "--quiet", "--out", str(out)] + ([flag] if flag else [])
            assert main(argv) == 0
            assert (asked == []) == (flag is not None), (mode, flag, asked)


def test_public_gd_advance_equals_the_generic_loop(mixture):
    """``specialise.gd_advance`` (the Python entry to one specialised loop: its own loop and scratch when
    not given) advances a state as the generic system does, bit for bit, and returns its (steps, code)."""
    from meanfield.engine.packed import pack

    desc, gen, spec = mixture
    pk = pack(desc)
    y0 = initial_state(desc)
    a, b = y0.copy(), y0.copy()
    r = specialise.gd_advance(pk, pk.lay.Gr, pk.lay.hf, a, 200, 0.5, 3, 0, 1, 0.0, 1e6)
    assert r[:2] == (200, 0)
    assert gen.gd_advance(b, 200, 0.5, 3, None) == (200, 0)
    assert np.array_equal(a, b) and not np.array_equal(a, y0)
