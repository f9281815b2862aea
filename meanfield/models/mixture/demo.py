"""``meanfield mixture demo``: the paper's K=2, L=3 story in one command.

Runs the exact GD map of Algorithm 1 (three stages) and of simultaneous
training at infinite width, the gradient flow of Algorithm 1, and one
finite-width run (m = 256), then writes into ``out``: the HDF5 run files, the
Figure-1 style PNGs of each run and ``summary.md``, which states the story
(neurons align, consistent samples separate after stage 1, inconsistent ones
after stage 2, the loss goes to zero) next to the numbers that show it, and
explains each run's outcome (:func:`outcome`), the finite-width one included:
there two inconsistent samples end with both heads' ReLUs inactive and stay
at margin 0 (the dead-ReLU mechanism of ``meanfield.models.mixture.robustness``).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ...core.io import read_run
from .claims import _stage_end_index
from .config import make_config
from .plot import plot_run, summary_markdown
from .run import EXIT_CODES, run_to_file

#: the demo's runs: name -> (description, config overrides)
RUNS = {
    "three_stage": ("Algorithm 1, exact GD map (eta = 0.5), infinite width",
                    dict(schedule="three-stage", stage_steps=(1000, 4000, 2000))),
    "simultaneous": ("simultaneous training (the paper's experiments), exact GD map, infinite width",
                     dict(schedule="simultaneous", steps=4000)),
    "three_stage_flow": ("Algorithm 1, gradient flow (adaptive Dormand-Prince), infinite width",
                         dict(schedule="three-stage", method="flow", stage_times=(500.0, 2000.0, 1000.0))),
    "simultaneous_m256": ("simultaneous training, exact GD map, finite width m = 256 (seed 0)",
                          dict(schedule="simultaneous", steps=4000, width=256, seed=0)),
}
QUICK = {"three_stage", "simultaneous"}
#: a margin counts as positive above this (round-off sits at ~1e-16)
TOL = 1e-8
#: the stage-time margin level (``meanfield.models.mixture.stagetimes``)
TOL_LEVEL = 0.1


def story_checks(run) -> list[tuple[str, bool, str]]:
    """(claim, holds, numbers) for the K=2 story on a three-stage run."""
    c = run["samples"]["consistent"].astype(bool)
    m = run["margin"]
    out = []
    i1, i2 = _stage_end_index(run, 1), _stage_end_index(run, 2)
    if i1 is not None:
        mc, mi = m[i1][c].min(), np.abs(m[i1][~c]).max()
        out.append(("after stage 1 the consistent samples are separated (min margin > 0)", mc > TOL, f"min margin {mc:.4g}"))
        out.append(("after stage 1 the inconsistent samples sit at margin 0", mi < 1e-9, f"largest abs. margin {mi:.2g}"))
        w = run["w"][i1]
        # rebuttal: w_+ = c1+c2+v1+v2, w_- = c1+c2-v1-v2 (sign pattern; c and v parts differ in size)
        K = int(run.attrs["K"])
        pattern = np.array([[1] * K + [1] * K, [1] * K + [-1] * K], dtype=float)
        ok = bool(np.all(np.sign(w) == pattern))
        out.append(("neurons take the sign pattern w+ = c1+c2+v1+v2, w- = c1+c2-v1-v2", ok,
                    f"w+ = {np.round(w[0], 3).tolist()}, w- = {np.round(w[1], 3).tolist()}"))
    if i2 is not None:
        mi = m[i2][~c].min()
        out.append(("after stage 2 the inconsistent samples are separated too", mi > TOL, f"min margin {mi:.4g}"))
    loss0, loss1 = float(run["loss"][0]), float(run["loss"][-1])
    out.append(("the loss goes towards 0", loss1 < 0.05 * loss0, f"loss {loss0:.4g} -> {loss1:.4g}"))
    return out


def outcome(run, cfg) -> list[str]:
    """Why the run ends the way it does, in a few sentences (markdown lines):
    which samples are solved, the role of the exactly symmetric start, and
    for a run that leaves samples at margin 0 the dead-ReLU mechanism
    (``meanfield.models.mixture.robustness``)."""
    from .robustness import explain, mechanism

    mech = mechanism(run, cfg.relu_prime_at_zero)
    c = np.asarray(run["samples"]["consistent"]).astype(bool)
    m = np.asarray(run["margin"], float)
    i1 = _stage_end_index(run, 1)
    lines = ["**Outcome.** " + explain(mech) + "."]
    if cfg.width is None:
        t = np.asarray(run["t"], float)
        reach = np.flatnonzero(m[:, ~c].min(axis=1) >= TOL_LEVEL)
        t_sep = f"t = {t[reach[0]]:g}" if reach.size else "never"
        three = cfg.schedule == "three-stage" and i1 is not None
        lines.append(
            ("Why: the start is exactly symmetric (infinite width: S = 0, A = B = omega^2 I; zero neurons), so at "
             "t = 0 every pre-activation sits at the ReLU kink u = 0, where ReLU'(0) = 1 counts it active, and "
             "the two heads stay mirror images of each other. " if cfg.neuron_init == "zero" else
             f"Why: the attention starts exactly symmetric (infinite width: S = 0, A = B = omega^2 I; neuron init "
             f"{cfg.neuron_init}). ")
            + (f"With attention frozen in stage 1, u+ = u- on every inconsistent sample, so its margin is exactly "
               f"0 at the end of the neuron stage (largest |margin| {np.abs(m[i1][~c]).max():.2g} at T1 = "
               f"{float(t[i1]):g}); " if three else
               "Trained together, the neurons learn first and the inconsistent samples' margins stay near 0 "
               "(u+ and u- differ only through the slowly growing attention scores); ")
            + f"the attention scores S+[c_k, v_k] then separate them (all inconsistent margins >= {TOL_LEVEL:g} at "
            f"{t_sep}).")
    else:
        u0 = mech["stuck"][0] if mech["stuck"] else None
        w_stuck = float(np.asarray(run["samples"]["weight"], float)[[s["sample"] for s in mech["stuck"]]].sum())
        lines.append(
            f"Why: at width m = {cfg.width} the sampled attention init (W_K, W_Q entries N(0, omega^2/m)) is "
            f"the symmetric start moved by about omega^2/sqrt(m) = {cfg.omega ** 2 / np.sqrt(cfg.width):.1g}. "
            "That is enough: "
            + ("the zero neurons move off the kink u = 0 in an asymmetric direction, and the inconsistent "
               f"sample(s) {', '.join(s['description'] for s in mech['stuck'])} end with u < 0 on BOTH heads "
               f"(e.g. u+ = {u0['u_plus_end']:.2g}, u- = {u0['u_minus_end']:.2g}): ReLU' = 0 there, so they send "
               "no gradient to the neurons or the attention and stay at margin 0 for good; the loss stops at "
               f"{mech['loss_end']:.4g} ({mech['n_stuck']} of {m.shape[1]} samples at margin 0, total weight "
               f"{w_stuck:.3g}, contribute {w_stuck:.3g} log 2 = {w_stuck * np.log(2):.3g}). Any perturbation of the "
               "symmetric start does this (`meanfield mixture study robustness`: neuron init, attention init, "
               "a random orthonormal embedding, eps from 1e-12 to 1e-2); a positive neuron init (e.g. "
               "`--neuron-init const:0.01,0.01,0,0`: every pre-activation starts on the active side) restores the "
               "story, several neurons per head make it likely (the study's phase diagram)."
               if u0 is not None else
               "this seed escapes the dead-ReLU trap (see `meanfield mixture study robustness` for how often "
               "perturbed starts do)."))
    return lines


def demo(out: Path, quick: bool = False) -> int:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    names = [n for n in RUNS if not quick or n in QUICK]
    parts = ["# meanfield demo: K = 2, L = 3 (seed 000)", "",
             "The paper's story, reproduced exactly from the reduced dynamics "
             "(omega = 0.1, zero neuron init, ReLU'(0) = 1). Figures are in one folder per run.", ""]
    worst = 0
    t_all = time.perf_counter()
    for name in names:
        desc, over = RUNS[name]
        cfg = make_config({}, **over)
        t0 = time.perf_counter()
        print(f"[demo] {name}: {desc} ...", flush=True)
        traj, path = run_to_file(cfg, out / f"{name}.h5", progress=True)
        worst = max(worst, EXIT_CODES[traj.status])
        figs = plot_run(path, out / name)
        print(f"[demo]   {path} ({traj.status}, {time.perf_counter() - t0:.1f} s), {len(figs)} figures in {out / name}",
              flush=True)
        run = read_run(path)
        parts += [f"## {name}: {desc}", ""]
        if cfg.schedule == "three-stage":
            parts += ["| claim | holds | measured |", "|---|---|---|"]
            for claim, ok, nums in story_checks(run):
                parts.append(f"| {claim} | {'yes' if ok else '**NO**'} | {nums} |")
                worst = max(worst, 0 if ok else 1)
            parts.append("")
        parts += outcome(run, cfg) + [""]
        body = summary_markdown(path).split("\n", 1)[1]  # drop its own title
        parts += [body.strip(), "", "Figures: " + ", ".join(f"[{f.name}]({name}/{f.name})" for f in figs), ""]
    summary = out / "summary.md"
    summary.write_text("\n".join(parts) + "\n")
    print(f"[demo] summary: {summary} ({time.perf_counter() - t_all:.1f} s in all)")
    return worst
