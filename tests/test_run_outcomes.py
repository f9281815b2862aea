"""Every run verb ends with what happened (issue 14, item 4): ``meanfield model
run`` / ``particles`` print the same block as ``meanfield mixture run``
(``meanfield.core.outcome.outcome_lines``: status, each stage's end and whether
its criterion fired or the cap was hit with the value reached, final loss and
margins, stage times where the model has consistent/inconsistent samples);
``model width-sweep`` ends with a short summary. Through the CLI, small sizes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "meanfield" / "models"


def _cli(*argv, cwd):
    r = subprocess.run([sys.executable, "-m", "meanfield", *argv], cwd=cwd, capture_output=True, text=True,
                       timeout=300)
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    return r


def _block(stdout: str) -> list[str]:
    lines = stdout.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.startswith("outcome: "))
    return lines[i:]


def test_model_run_outcome_criterion_fired_and_never_fired(tmp_path):
    # a staged description: stage 1 (attention) with a criterion it cannot reach in 30 steps
    text = (MODELS / "maxmargin.toml").read_text()
    head, sep, stages = text.partition("[[training.stages]]")
    assert sep
    (tmp_path / "mm.toml").write_text(head + sep + stages.replace("\n", '\ncriterion = "loss <= 1e-6"\n', 1))
    r = _cli("model", "run", "mm.toml", "--stage-steps", "30", "--out", "a.h5", "--quiet", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    b = _block(r.stdout)
    assert b[0] == "outcome: complete"
    assert any("ran to its cap at step 30" in ln and "criterion loss<=1e-06 NEVER fired (it reached 0." in ln
               for ln in b), b
    assert any(ln.startswith("  final (t = 30): loss 0.") and "min margin" in ln for ln in b), b
    assert not any("stage times" in ln for ln in b), b  # maxmargin has no consistent / inconsistent samples
    # a criterion that fires: the step it fired at
    r = _cli("model", "run", "mixture_multiclass", "--K", "2", "--C", "2", "--steps", "3000", "--record-every", "10",
             "--criterion", "loss<=0.6", "--symmetry", "allow", "--out", "b.h5", "--quiet", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    b = _block(r.stdout)
    fired = [ln for ln in b if "criterion loss<=0.6 fired at step" in ln]
    assert fired and "simultaneous" in fired[0], b
    assert any(ln.startswith("  final (") and "consistent" in ln and "inconsistent" in ln for ln in b), b
    assert any(ln.startswith("  stage times: T1") for ln in b), b  # it has consistent samples: stage times


def test_model_run_outcome_is_the_mixture_runs_block(tmp_path):
    """The mixture family through the engine prints the same block as `mixture run` (one function)."""
    a = _cli("mixture", "run", "--steps", "40", "--criterion", "loss<=0.01", "--out", "m.h5", "--quiet", cwd=tmp_path)
    b = _cli("model", "run", "mixture", "--steps", "40", "--criterion", "loss<=0.01", "--out", "e.h5", "--quiet",
             cwd=tmp_path)
    assert a.returncode == 0 and b.returncode == 0, (a.stderr, b.stderr)
    ba, bb = _block(a.stdout), _block(b.stdout)
    assert any("NEVER fired" in ln for ln in ba), ba
    assert ba[:2] == bb[:2], (ba, bb)


def test_particles_and_width_sweep_end_with_a_summary(tmp_path):
    r = _cli("model", "particles", "maxmargin", "--width", "8", "--steps", "20", "--out", "p.h5", "--quiet",
             cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    b = _block(r.stdout)
    assert b[0] == "outcome: complete" and any(ln.startswith("  final (t = 20): loss") for ln in b), b
    r = _cli("model", "width-sweep", "mixture", "--steps", "20", "--widths", "8,16", "--seeds", "2",
             "--neuron-init", "const:0.01,0.01,0,0", "--out", "w.h5", "--quiet", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    b = _block(r.stdout)
    assert b[0] == "outcome: infinite-width run complete; 4 finite-width runs: 4 complete", b
    assert any(ln.startswith("  sup error of S: ") and "at m = 8" in ln and "at m = 16" in ln for ln in b), b
    assert any(("error ~ m^" in ln) or ("no exponent" in ln) for ln in b), b


def test_regression_run_prints_its_residual_not_a_margin(tmp_path):
    """A squared-loss run (icl_zfb: in-context regression) has no margin: its final line names the largest
    residual max|f - y|, checked against the explicit prediction error of the run file (loss = 1/2 |f - y|^2
    summed with weights: with one sequence the residual is sqrt(2 loss))."""
    import re

    import h5py

    r = _cli("model", "run", "icl_zfb", "--steps", "20", "--out", "z.h5", "--quiet", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    final = [ln for ln in _block(r.stdout) if ln.startswith("  final (")]
    assert final and "min margin" not in final[0] and "largest residual max|f - y|" in final[0], final
    got = float(re.search(r"max\|f - y\| (\S+)", final[0]).group(1))
    with h5py.File(tmp_path / "z.h5", "r") as f:
        n = f["margin"].shape[1]
        loss = float(f["loss"][-1])
    assert n == 1  # the exact population is one sequence: residual^2 = 2 loss
    assert abs(got - (2 * loss) ** 0.5) <= 1e-3 * got
