"""Every edge a clean error for the engine's ``meanfield model ...`` verbs
(issue 14 applied to issue 11): an option the run ignores, an output path
that cannot be written, an absurd size, SIGINT during ``model particles``.

Each refused case goes through ``meanfield.cli.main`` (all of them in ONE
subprocess, as tests/test_edges.py does, to keep the module fast) and must
exit 2 with exactly one line ``meanfield: error: FIELD...``, no traceback,
nothing written (the case folder's file list is unchanged, no tmp file),
within seconds and without allocating the size it was asked for.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from proc_signals import wait_until_catches
from cli_cases import long_refusals, run_cases

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "meanfield" / "models"
CASE_SECONDS = 20.0  # validation only (the description's data are built): seconds on a loaded 2-core machine
PEAK_RSS_MB = 1500  # the smallest refused size below is ~18 GiB (machine-dependent limit: 80% of RAM)

CASES = [
    # 1. options the run ignores: one rule (meanfield.core.guard.check_applicable), same wording as `mixture run`
    ("criterion-with-stages", ["model", "run", "maxmargin", "--criterion", "loss <= 0.6", "--steps", "100",
                               "--out", "x.h5"], "criterion"),
    ("criterion-in-staged-toml", ["model", "run", "crit_staged.toml", "--steps", "100", "--out", "x.h5"],
     "criterion"),
    ("t-end-with-gd", ["model", "run", "incontext", "--t-end", "5", "--out", "x.h5"], "t_end"),
    ("t-end-with-gd-mixture-family", ["model", "run", "mixture", "--t-end", "5", "--out", "x.h5"], "t_end"),
    ("steps-with-three-stage-mixture-family", ["model", "run", "mixture", "--schedule", "three-stage", "--steps",
                                              "9", "--out", "x.h5"], "steps"),
    ("steps-with-three-stage-induction-family", ["model", "run", "induction", "--steps", "3", "--out", "x.h5"],
     "steps"),  # was silently dropped: the 900 default steps ran (minutes on the generic two-layer path)
    ("dt-with-flow", ["model", "run", "incontext", "--method", "flow", "--dt", "0.1", "--out", "x.h5"], "dt"),
    ("rtol-with-gd", ["model", "run", "incontext", "--rtol", "1e-9", "--out", "x.h5"], "rtol"),
    ("steps-and-t-end-with-flow", ["model", "run", "incontext", "--method", "flow", "--steps", "9", "--t-end", "1",
                                   "--out", "x.h5"], "steps"),
    ("particles-t-end-with-gd", ["model", "particles", "incontext", "--width", "4", "--t-end", "5",
                                 "--out", "x.h5"], "t_end"),
    ("sweep-base-criterion-with-stages", ["model", "sweep", "maxmargin", "--param", "omega=0.1,0.2", "--criterion",
                                          "loss<=0.6", "--out", "sw"], "criterion"),
    # 2, 3. output paths checked before the work, the field named
    ("run-out-under-file", ["model", "run", "incontext", "--steps", "2", "--out", "afile/x.h5"], "out"),
    ("run-out-existing-dir", ["model", "run", "incontext", "--steps", "2", "--out", "DIR.h5"], "out"),
    ("run-out-bad-suffix", ["model", "run", "incontext", "--steps", "2", "--out", "x.txt"], "out"),
    ("run-plot-is-file", ["model", "run", "incontext", "--steps", "2", "--out", "ok.h5", "--plot", "afile"], "plot"),
    ("particles-out-dir", ["model", "particles", "incontext", "--width", "4", "--steps", "2", "--out", "DIR.h5"],
     "out"),
    ("width-sweep-out-under-file", ["model", "width-sweep", "incontext", "--widths", "4", "--seeds", "1",
                                    "--steps", "2", "--out", "afile/w.h5"], "out"),
    ("width-sweep-json-is-dir", ["model", "width-sweep", "incontext", "--widths", "4", "--seeds", "1",
                                 "--steps", "2", "--out", "DIR.h5x/w.h5"], "out"),
    ("sweep-out-file", ["model", "sweep", "mixture", "--param", "omega=0.1,0.2", "--steps", "2", "--out", "afile"],
     "out"),
    ("sweep-out-under-file", ["model", "sweep", "mixture", "--param", "omega=0.1,0.2", "--steps", "2",
                              "--out", "afile/sw"], "out"),
    ("check-out-file", ["model", "check", "incontext", "--quick", "--out", "afile"], "out"),
    ("plot-out-file", ["model", "plot", "missing.h5", "--out", "afile"], "out"),
    # 4. sizes estimated before allocating (--force goes past)
    ("mixture-family-K-1000", ["model", "run", "mixture", "--K", "1000", "--out", "x.h5"], "size"),
    ("derive-mixture-K-1000", ["model", "derive", "mixture", "--K", "1000"], "size"),
    ("steps-1e15", ["model", "run", "incontext", "--steps", "1e15", "--out", "x.h5"], "size"),
    ("records-1e9", ["model", "run", "incontext", "--steps", "1000000000", "--record-every", "1",
                     "--out", "x.h5"], "size"),
    ("particles-width-1e9", ["model", "particles", "maxmargin", "--kq", "separate", "--width", "1000000000",
                             "--out", "x.h5"], "size"),
    ("particles-mixture-width-1e9", ["model", "particles", "mixture", "--width", "1000000000", "--out", "x.h5"],
     "size"),
    ("width-sweep-seeds-1e9", ["model", "width-sweep", "incontext", "--widths", "4", "--seeds", "1000000000",
                               "--steps", "2", "--out", "w.h5"], "seeds"),
    ("sweep-1e8-points", ["model", "sweep", "incontext", "--param", "omega=0.01:1:log:10000", "--param",
                          "eta=0.1:1:lin:10000", "--out", "sw"], "size"),
    # general descriptions: estimated from the declared parameters BEFORE the features and data are built
    ("incontext-N-1e8", ["model", "run", "incontext", "--N", "1e8", "--out", "x.h5"], "size"),
    ("incontext-K-1e8", ["model", "run", "incontext", "--K", "100000000", "--out", "x.h5"], "size"),
    ("maxmargin-n-1e8", ["model", "run", "maxmargin", "--n", "100000000", "--out", "x.h5"], "size"),
    ("maxmargin-T-1e8", ["model", "particles", "maxmargin", "--width", "4", "--T", "100000000", "--out", "x.h5"],
     "size"),
    ("multiclass-L-1e8", ["model", "run", "mixture_multiclass", "--L", "100000000", "--out", "x.h5"], "size"),
    ("multiclass-K-1e8", ["model", "run", "mixture_multiclass", "--K", "100000000", "--out", "x.h5"], "size"),
    # --force passes the estimate; the builder's own count must still refuse at once (it was an exact integer
    # power of L = 1e8: a hang)
    # 1e304 sequences: beyond any run, so --force does not go past (core.limits.HARD_MEMORY_FACTOR)
    ("multiclass-L-1e8-force", ["model", "run", "mixture_multiclass", "--L", "100000000", "--force", "--out", "x.h5"],
     "size"),
    ("twolayer-steps-1e9", ["model", "run", "edelman", "--steps", "1000000000", "--out", "x.h5"],
     "steps"),  # ran for weeks before (found by tests/test_cli_numbers.py): one gradient timed, times the steps
    ("induction-family-n-test-1e9", ["model", "run", "induction", "--n-test", "1000000000", "--out", "x.h5"],
     "size"),  # drew a billion test sequences before (found by tests/test_cli_numbers.py)
    ("derive-maxmargin-n-1e9", ["model", "derive", "maxmargin", "--n", "1000000000"], "size"),
    ("model-is-a-directory", ["model", "run", "DIR.h5", "--out", "x.h5"], "model"),
    # a check its checker refuses (incontext's claims on another paper's data) leaves no folder behind
    ("check-refused-makes-no-folder", ["model", "check", "mm_named_incontext.toml", "--quick", "--out",
                                       "chk/sub"], "data.function"),
]

def _files(d: Path) -> set[str]:
    return {str(p.relative_to(d)) for p in d.rglob("*")}


@pytest.fixture(scope="module")
def edge_results(tmp_path_factory):
    d = tmp_path_factory.mktemp("engine_edges")
    (d / "DIR.h5").mkdir()
    (d / "DIR.h5x").mkdir()
    (d / "DIR.h5x" / "w.json").mkdir()  # width-sweep writes w.json beside w.h5: a folder there is refused first
    (d / "afile").write_text("a regular file\n")
    text = (MODELS / "maxmargin.toml").read_text()
    assert "\n[parameters]\n" in text
    assert '\nname = "maxmargin"\n' in text
    (d / "mm_named_incontext.toml").write_text(text.replace('\nname = "maxmargin"\n', '\nname = "incontext"\n'))
    (d / "crit_staged.toml").write_text(text.replace("\n[parameters]\n", '\n[parameters]\ncriterion = "loss<=0.6"\n'))
    before = _files(d)
    results, peak = run_cases([(c, a) for c, a, _ in CASES], d)
    return {"results": results, "peak_rss_mb": peak, "new": _files(d) - before, "dir": d}


@pytest.mark.parametrize("cid,argv,field", CASES, ids=[c[0] for c in CASES])
def test_engine_edge_is_one_clean_line(edge_results, cid, argv, field):
    x = edge_results["results"][cid]
    err = x["stderr"]
    lines = err.strip().splitlines()
    assert x["rc"] == 2, (x["rc"], err[-3000:])
    assert "Traceback" not in err and "Traceback" not in x["stdout"]
    assert len(lines) == 1, err[-3000:]
    assert lines[0].startswith(f"meanfield: error: {field}"), (field, lines[0])
    assert x["seconds"] < CASE_SECONDS, x["seconds"]


def test_every_refusal_line_is_short(edge_results):
    long = long_refusals(edge_results["results"])
    assert not long, long


def test_engine_edges_write_nothing_and_allocate_nothing(edge_results):
    assert not edge_results["new"], sorted(edge_results["new"])  # e.g. run --plot FILE wrote ok.h5 first, before
    assert not list(edge_results["dir"].rglob("*.tmp-*"))
    assert edge_results["peak_rss_mb"] < PEAK_RSS_MB, edge_results["peak_rss_mb"]


def test_inapplicable_message_is_the_mixture_rule(edge_results):
    """The same rule and wording as ``meanfield mixture run`` (meanfield.core.guard.check_applicable)."""
    msg = edge_results["results"]["t-end-with-gd"]["stderr"]
    assert "t_end: not used here (method gd, schedule simultaneous); it applies to" in msg, msg
    msg = edge_results["results"]["criterion-with-stages"]["stderr"]
    assert "criterion: not used here (method gd, schedule staged)" in msg, msg


def test_force_goes_past_the_size_refusal():
    from meanfield.core.config import ConfigError
    from meanfield.engine.description import load_description
    from meanfield.engine.edges import check_engine_size, engine_estimate

    desc = load_description(MODELS / "incontext.toml", {"steps": 10**9, "record_every": 10**8})
    with pytest.raises(ConfigError, match="^size: .*--force"):
        check_engine_size(desc)
    est = check_engine_size(desc, force=True)  # hours, not beyond any run: --force goes past
    assert est["steps"] == 1e9
    huge = load_description(MODELS / "incontext.toml", {"steps": 10**15})  # 1e15 records: beyond any run
    with pytest.raises(ConfigError, match="beyond any run"):
        check_engine_size(huge, force=True)
    small = load_description(MODELS / "incontext.toml", {"steps": 30, "record_every": 1})
    assert check_engine_size(small)["records"] == pytest.approx(34)
    # the estimate grows with every size it names: records, width x d
    assert engine_estimate(small, particles_d=6)["bytes"] > engine_estimate(small)["bytes"]


def test_the_explicit_networks_estimate_counts_the_width_only_where_weights_have_it():
    """A merged head's W is d x d and a token value has no width (incontext): its explicit network costs
    the same at every m (measured: 12.0 s at m 4, 12.3 s at m 256); a separate head's W_K, W_Q are m x d
    (maxmargin): time and memory grow with m."""
    from meanfield.engine.description import load_description
    from meanfield.engine.edges import engine_estimate
    from meanfield.engine.finite import _check

    ic = [load_description(MODELS / "incontext.toml", {"width": m}) for m in (4, 10**9)]
    e4, e9 = (engine_estimate(d, particles_d=6) for d in ic)
    assert e4["seconds"] == e9["seconds"] and e4["bytes"] == e9["bytes"]
    assert _check(ic[1], 6) == 6  # no m x d weights to refuse
    mm = [load_description(MODELS / "maxmargin.toml", {"width": m, "kq": "separate"}) for m in (4, 4096)]
    s4, s9 = (engine_estimate(d, particles_d=8) for d in mm)
    assert s9["seconds"] > s4["seconds"] and s9["bytes"] > s4["bytes"]


def test_general_description_size_is_estimated_before_its_data(monkeypatch):
    """The estimate comes from the declared parameters alone: the data builder is
    never called for a refused size, --force goes past it, and a normal size
    estimates the same sequence count as the built data."""
    from meanfield.core.config import ConfigError
    from meanfield.engine.description import load_description, read_raw
    from meanfield.engine.edges import description_size_first
    from meanfield.models import incontext, maxmargin, multiclass

    def boom(*a, **k):
        raise AssertionError("data built before the size check")

    raw = read_raw(MODELS / "incontext.toml")
    monkeypatch.setattr(incontext, "prompts", boom)
    with pytest.raises(ConfigError, match=r"^size: .*6\.67e\+23 seqs"):
        description_size_first(raw, {"N": "1e8"}, force=False)
    with pytest.raises(ConfigError, match="beyond any run"):  # 1e23 sequences: --force does not go past
        description_size_first(raw, {"N": "1e8"}, force=True)
    monkeypatch.undo()
    for name, over in (("incontext", {"N": 7, "K": 3}), ("maxmargin", {"n": 9, "T": 4}),
                       ("mixture_multiclass", {"K": 2, "C": 3, "L": 4})):
        raw = read_raw(MODELS / f"{name}.toml")
        est = description_size_first(raw, over, force=False)
        desc = load_description(MODELS / f"{name}.toml", over)
        assert est["n_samples"] == pytest.approx(desc.data.n, rel=1e-9), name
    del maxmargin, multiclass


def test_shipped_descriptions_pass_their_own_option_check():
    """Every shipped description's [parameters] fit its own method and schedule (the
    file is checked as written; a flag that switches the method is checked on its own)."""
    from meanfield.engine.description import read_raw
    from meanfield.engine.edges import check_options

    for p in sorted(MODELS.glob("*.toml")):
        check_options(read_raw(p), {})
    check_options(read_raw(MODELS / "incontext.toml"), {"method": "flow", "t_end": 1.0})  # file's steps: a default


def test_particles_sigint_leaves_an_interrupted_valid_file(tmp_path):
    from meanfield.core.io import read_run

    out = tmp_path / "long.h5"
    proc = subprocess.Popen([sys.executable, "-m", "meanfield", "model", "particles", "incontext", "--width", "4",
                             "--steps", "100000000", "--record-every", "500", "--force", "--out", str(out)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until_catches(proc)  # the run's Monitor has installed its handlers: then let it step
        assert proc.poll() is None, proc.communicate()
        time.sleep(6.0)  # the CLI's guard catches SIGTERM from the start, the Monitor once the run is set up
        proc.send_signal(signal.SIGINT)
        so, se = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, (so, se)
    f = read_run(out)
    assert f.attrs["status"] == "interrupted" and f.attrs["particles"] == 1
    assert len(f["t"]) >= 2 and f["step"][-1] > 0 and np.all(np.isfinite(f["loss"]))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["long.h5"]
