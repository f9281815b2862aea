"""Figures of an induction-head run file (and of the check's studies).

:func:`plot_run` reads a run file written by :mod:`meanfield.models.induction.run`
and writes PNG figures:

- ``c_mass.png``: the selector weights c_S^2 / sum c^2 of every subset of
  heads against t (log axis), labelled with the subset's lag set at the end
  of phase 1; phase ends as dashed lines;
- ``rpe.png``: RPE softmax heatmaps (heads x lags) at the start of phase 2
  and at its end (joint schedule: first and last record);
- ``a_log_t.png``: the classifier scale a against tau = t - (start of phase
  3) on a log axis, with the a ~ log tau fit over the growth window
  (:func:`meanfield.models.induction.measure.fit_log_growth`) and, when given, the
  optimal a*(L) of several context lengths as horizontal lines;
- ``losses.png``: training and held-out loss against t, and phase 3 against
  tau, next to the held-out losses of the baselines (GIH on the selected
  lags with the run's final a, GIH a -> infinity, Bayes-optimal, unigram).

Losses in ``losses.png`` are over the sequences the log(0) guard did not
clip (for the model: the run file's loss with the clipped sequences, each
at -log(yhat_floor), taken out; these are the sequences whose target occurs
in the context), because a single clipped sequence adds
-log(yhat_floor) / N to the mean. Baselines are computed on the run's
held-out set, regenerated from its seed (``test_seed``, ``n_test``,
``L_test``); the same seen-target loss.

The check (:mod:`meanfield.models.induction.claims`) also uses :func:`plot_chi2`
(the I~ ranking of every exponent next to the phase-1 weights) and
:func:`plot_generalisation`. Figures are closed after saving.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from meanfield.core.io import save_figure

__all__ = ["plot_run", "FIGURES", "plot_c_mass", "plot_rpe", "plot_a", "plot_losses", "plot_chi2",
           "plot_generalisation"]

FIGURES = ("c_mass.png", "rpe.png", "a_log_t.png", "losses.png")

_REQUIRED = ("t", "stage", "theta", "c_weight", "rpe", "a", "loss_train", "loss_test", "subset_members", "lags")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def load(path):
    """Read and check an induction run file (FileNotFoundError / ValueError)."""
    from ...core.io import read_run

    path = Path(path)
    try:
        run = read_run(path)
    except OSError as e:
        if not path.exists():
            raise
        raise ValueError(f"{path}: not a readable HDF5 run file ({e})") from e
    if run.attrs.get("system") != "induction":
        raise ValueError(f"{path}: not an induction run file (system attribute {run.attrs.get('system')!r})")
    missing = [k for k in _REQUIRED if k not in run]
    if missing:
        raise ValueError(f"{path}: induction run file lacks dataset(s) {', '.join(missing)}")
    if len(run["t"]) == 0:
        raise ValueError(f"{path}: the run file holds no records")
    return run


def _attrs(run) -> dict:
    from .measure import _attrs as a

    return a(run)


def _stage_lines(ax, run, x_of_t=lambda t: t):
    ends = _attrs(run).get("stage_ends") or []
    for e in ends[:-1]:
        x = x_of_t(float(e["t"]))
        if x is not None and x > 0:
            ax.axvline(x, color="k", ls="--", lw=0.7, alpha=0.6)


def _title(run) -> str:
    a = _attrs(run)
    if not a.get("d"):
        return ""
    pa = [int(v) for v in np.atleast_1d(a.get("pa", []))]
    return (f"d={a.get('d')}, pa={pa}, alpha={a.get('alpha')}, L={a.get('L')}, "
            f"H={a.get('H')}, M={a.get('M')}, D={a.get('D')}; {a.get('schedule')} {a.get('method')}")


def plot_c_mass(run, out: Path, name: str = "c_mass.png") -> str:
    from .measure import stage_end_index, subset_labels, subset_lag_sets

    plt = _plt()
    t = np.asarray(run["t"], float)
    cw = np.asarray(run["c_weight"], float)
    i1 = stage_end_index(run, 1)
    i1 = len(t) - 1 if i1 is None else i1
    lsets = subset_lag_sets(run, i1)
    labels = subset_labels(run)
    pos = t > 0
    fig, ax = plt.subplots(figsize=(6.5, 4))
    order = np.argsort(-cw[i1])
    for k in order:
        lag = "{" + ",".join(str(s) for s in lsets[k]) + "}"
        ax.plot(t[pos], cw[pos, k], lw=1.6 if k == order[0] else 1.0, label=f"heads {labels[k]} (lags {lag})")
    _stage_lines(ax, run)
    ax.set_xscale("log")
    ax.set_xlabel("t (gradient-flow time)")
    ax.set_ylabel(r"$c_S^2 / \sum_{S'} c_{S'}^2$")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("phase 1: selector mass per subset", fontsize=10)
    ax.legend(fontsize=7, loc="center left")
    fig.suptitle(_title(run), fontsize=7)
    fig.tight_layout()
    save_figure(fig, Path(out) / name, dpi=120)
    plt.close(fig)
    return name


def plot_rpe(run, out: Path, name: str = "rpe.png") -> str:
    from .measure import phase_start_index, stage_end_index

    plt = _plt()
    rpe = np.asarray(run["rpe"], float)
    lags = np.asarray(run["lags"])
    i0, i2 = phase_start_index(run, 2), stage_end_index(run, 2)
    if i0 is None or i2 is None:
        i0, i2 = 0, len(rpe) - 1
    t = np.asarray(run["t"], float)
    H, M = rpe.shape[1:]
    fig, axes = plt.subplots(1, 2, figsize=(8.5, 1.4 + 0.55 * H), constrained_layout=True)
    for ax, i, what in zip(axes, (i0, i2), ("before phase 2", "after phase 2")):
        im = ax.imshow(rpe[i], vmin=0, vmax=1, cmap="viridis", aspect="auto")
        for h in range(H):
            for j in range(M):
                ax.text(j, h, f"{rpe[i, h, j]:.2f}", ha="center", va="center", fontsize=8,
                        color="w" if rpe[i, h, j] < 0.6 else "k")
        ax.set_yticks(range(H), [f"head {h + 1}" for h in range(H)])
        same = np.all(lags == lags[0])
        ax.set_xticks(range(M), [str(v) for v in lags[0]] if same else [f"j={j}" for j in range(M)])
        ax.set_xlabel("lag" if same else "window position (lag = first + j)")
        ax.set_title(f"{what} (t = {t[i]:.4g})", fontsize=9)
    fig.colorbar(im, ax=axes, fraction=0.04)
    fig.suptitle("RPE softmax per head (copier)", fontsize=9)
    save_figure(fig, Path(out) / name, dpi=120)
    plt.close(fig)
    return name


def plot_a(run, out: Path, fit: dict | None = None, a_star: dict | None = None, name: str = "a_log_t.png") -> str:
    from .measure import fit_log_growth, phase3_series

    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    ser = phase3_series(run)
    if ser is None:  # no phase 3: a against t
        t = np.asarray(run["t"], float)
        pos = t > 0
        ax.plot(t[pos], np.asarray(run["a"])[pos], "-", label="a(t)")
        ax.set_xlabel("t")
    else:
        tau, a, t3 = ser
        pos = tau > 0
        ax.plot(tau[pos], a[pos], ".-", ms=3, lw=1, label="a (phase 3)")
        f = fit if fit is not None and fit.get("slope") is not None else fit_log_growth(tau, a)
        if f.get("slope") is not None and np.isfinite(f.get("slope", math.nan)):
            xx = np.geomspace(f["tau_lo"], f["tau_hi"], 50)
            ax.plot(xx, f["slope"] * np.log(xx) + f["intercept"], "r-", lw=2, alpha=0.6,
                    label=f"fit a = {f['slope']:.3f} log tau + {f['intercept']:.3f} (R^2 {f['r2']:.4f})")
            ax.axvspan(f["tau_lo"], f["tau_hi"], color="r", alpha=0.06, label="growth window (10%-90% of the rise)")
        ax.set_xlabel("tau = t - t(phase 3 start)")
    if a_star:
        for k, (L, v) in enumerate(sorted(a_star.items())):
            ax.axhline(v, color=f"C{k + 2}", ls=":", lw=1.2, label=f"a*(L={L}) = {v:.3f}")
    ax.set_xscale("log")
    ax.set_ylabel("a")
    ax.set_title("phase 3: classifier scale a(t)", fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(_title(run), fontsize=7)
    fig.tight_layout()
    save_figure(fig, Path(out) / name, dpi=120)
    plt.close(fig)
    return name


def unclipped_loss(loss, clipped, N: int, yhat_floor: float) -> np.ndarray:
    """Mean loss over the sequences the guard did not clip, from a guarded mean."""
    loss = np.asarray(loss, float)
    clipped = np.asarray(clipped, float)
    cap = -math.log(yhat_floor)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(N - clipped > 0, (N * loss - cap * clipped) / (N - clipped), np.nan)


def run_baselines(run) -> dict:
    """Held-out seen-target losses of the baselines for a run: its test set
    regenerated from its seed; GIH on the lag set of the final selected subset."""
    from . import theory as T
    from .measure import lag_weights
    from .data import generate

    a = _attrs(run)
    n = int(a.get("n_test", 0))
    if n == 0:
        return {}
    d, L, pa, alpha = int(a["d"]), int(a.get("L_test", a["L"])), tuple(int(v) for v in a["pa"]), float(a["alpha"])
    tok = generate(n, d, L, pa, alpha, tuple(int(v) for v in a["test_seed"])).tokens
    w = lag_weights(run, len(run["t"]) - 1)
    S = max(w, key=lambda k: w[k])
    a_end = float(np.asarray(run["a"])[-1])
    fl = float(a.get("yhat_floor", 1e-300))
    return {f"GIH lags {list(S)}, a_end": T.losses(T.gih_predict(tok, d, S, a_end), tok, fl)["loss_seen"],
            "Bayes": T.losses(T.bayes_predict(tok, d, pa, alpha), tok, fl)["loss_seen"],
            "unigram": T.losses(T.unigram_predict(tok, d), tok, fl)["loss_seen"]}


def plot_losses(run, out: Path, baselines: dict | None = None, name: str = "losses.png") -> str:
    from .measure import phase3_series

    plt = _plt()
    a = _attrs(run)
    fl = float(a.get("yhat_floor", 1e-300))
    t = np.asarray(run["t"], float)
    tr = unclipped_loss(run["loss_train"], run.get("clipped_train", np.zeros_like(t)), int(a.get("n_train", 1)), fl) \
        if "clipped_train" in run else np.asarray(run["loss_train"], float)
    if "loss_test_seen" in run:  # held-out sequences whose target occurs in the context
        te = np.asarray(run["loss_test_seen"], float)
    else:  # older files: recover it from the guarded mean
        te = unclipped_loss(run["loss_test"], run.get("clipped_test", np.zeros_like(t)), int(a.get("n_test", 1)), fl) \
            if "clipped_test" in run else np.asarray(run["loss_test"], float)
    base = run_baselines(run) if baselines is None else baselines
    ser = phase3_series(run)
    fig, axes = plt.subplots(1, 2 if ser is not None else 1, figsize=(11 if ser is not None else 6.5, 4), squeeze=False)
    ax = axes[0, 0]
    ax.plot(t, tr, "-", label="model, train")
    ax.plot(t, te, "-", label="model, held-out")
    _stage_lines(ax, run)
    for k, (nm, v) in enumerate(base.items()):
        if v is not None and np.isfinite(v):
            ax.axhline(v, color=f"C{k + 2}", ls=":", lw=1.3, label=f"{nm}: {v:.4f}")
    ax.set_xlabel("t")
    ax.set_ylabel("cross-entropy (unclipped sequences)")
    ax.set_title("losses; baselines on the held-out set", fontsize=10)
    ax.legend(fontsize=7)
    if ser is not None:
        ax = axes[0, 1]
        tau, _, t3 = ser
        i3 = np.flatnonzero(t >= t3)
        tt = t[i3] - t3
        pos = tt > 0
        ax.plot(tt[pos], tr[i3][pos], "-", label="model, train")
        ax.plot(tt[pos], te[i3][pos], "-", label="model, held-out")
        for k, (nm, v) in enumerate(base.items()):
            if v is not None and np.isfinite(v):
                ax.axhline(v, color=f"C{k + 2}", ls=":", lw=1.3, label=nm)
        ax.set_xscale("log")
        ax.set_xlabel("tau = t - t(phase 3 start)")
        ax.set_title("phase 3", fontsize=10)
        ax.legend(fontsize=7)
    fig.suptitle(_title(run), fontsize=7)
    fig.tight_layout()
    save_figure(fig, Path(out) / name, dpi=120)
    plt.close(fig)
    return name


def plot_exponent_profile(results: dict, out: Path, name: str = "chi2_exponent_profile.png") -> str:
    """The profile chi2(k) - min of the pooled exponent fit
    (:func:`meanfield.models.induction.claims.exponent_profile`), scaled by its
    overdispersion, per RPE init, with the F threshold of the confidence
    interval and the interval shaded. ``results``: {label: the numbers of a
    ``check_exponent_ci`` claim}."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for n, (lab, r) in enumerate(results.items()):
        k = np.asarray(r["profile"]["k"])
        c2 = np.asarray(r["profile"]["chi2"])
        y = (c2 - c2.min()) / r["overdispersion"]
        ax.plot(k, y, "-", color=f"C{n}", label=f"{lab}: k = {r['k_hat']:g}, CI [{r['ci'][0]:g}, {r['ci'][1]:g}]")
        ax.axvspan(r["ci"][0], r["ci"][1], color=f"C{n}", alpha=0.15)
        ax.axhline(r["F"], color="k", ls=":", lw=1)
    ax.axvline(2.0, color="gray", ls="--", lw=1, label="the paper's exponent 2")
    ax.set_yscale("symlog", linthresh=1.0)
    ax.set_ylim(bottom=0.0)
    ax.set_xlabel("exponent k of mu(z) in I~_k")
    ax.set_ylabel("(chi2(k) - min) / overdispersion")
    ax.set_title("exponent of mu(z): profile fit of the phase-1 velocities, pooled over parent sets", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, Path(out) / name, dpi=120)
    plt.close(fig)
    return name


def plot_chi2(chi, velocity: dict, out: Path, end_weights: dict | None = None,
              name: str = "chi2_ranking.png") -> str:
    """Left: I~_k(S) / max_S I~_k (+- standard error) for every exponent k;
    middle: the phase-1 velocity -dL/dc_S at initialisation (+- standard
    error over batches) against I~_k / max, with the linear fit and its R^2,
    per exponent; right: the c_S^2 weights at the end of phase 1 (log axis).
    ``velocity``: {lag set: per-batch values}; ``end_weights``: {lag set: weight}."""
    from ...core.report import fit_line

    plt = _plt()
    k0 = 2.0 if 2.0 in chi.mean else chi.exponents[0]
    subs = sorted(chi.subsets, key=lambda S: -chi.mean[k0][chi.subsets.index(S)])
    x = np.arange(len(subs))
    labels = ["{" + ",".join(map(str, S)) + "}" for S in subs]
    ks = list(chi.exponents)
    wbar = 0.8 / len(ks)
    fig, axes = plt.subplots(1, 3 if end_weights is not None else 2, figsize=(16 if end_weights else 11, 4.2))
    ax = axes[0]
    for n, k in enumerate(ks):
        m = np.array([chi.mean[k][chi.subsets.index(S)] for S in subs])
        s = np.array([chi.se[k][chi.subsets.index(S)] for S in subs])
        top = m.max() if m.max() > 0 else 1.0
        ax.bar(x + n * wbar, m / top, wbar, yerr=s / top, capsize=2, label=f"k = {k:g}", alpha=0.85)
    ax.set_xticks(x + 0.4 - wbar / 2, labels)
    ax.set_xlabel("lag set S")
    ax.set_ylabel("I~_k(S) / max_S I~_k")
    ax.set_title(f"modified chi-square MI (d={chi.d}, pa={[int(v) for v in chi.pa]}, alpha={chi.alpha:g}, "
                 f"{chi.n_kernels} kernels)", fontsize=9)
    ax.legend(fontsize=7, ncol=2)
    bx = axes[1]
    keys = [S for S in subs if len(S) > 0 and S in velocity]
    vm = np.array([np.mean(velocity[S]) for S in keys])
    vs = np.array([np.std(velocity[S], ddof=1) / np.sqrt(np.size(velocity[S])) if np.size(velocity[S]) > 1 else 0.0
                   for S in keys])
    for n, k in enumerate(ks):
        xi = np.array([chi.mean[k][chi.subsets.index(S)] for S in keys])
        xi = xi / xi.max() if xi.max() > 0 else xi
        f = fit_line(xi, vm)
        bx.errorbar(xi, vm, yerr=vs, fmt="o", ms=4, color=f"C{n}", label=f"k = {k:g}: R^2 {f['r2']:.3f}")
        xx = np.linspace(xi.min(), xi.max(), 10)
        bx.plot(xx, f["slope"] * xx + f["intercept"], "-", color=f"C{n}", lw=0.8)
    if 2.0 in ks:
        xi = np.array([chi.mean[2.0][chi.subsets.index(S)] for S in keys])
        xi = xi / xi.max()
        for S, a_, b_ in zip(keys, xi, vm):
            bx.annotate("{" + ",".join(map(str, S)) + "}", (a_, b_), fontsize=7, xytext=(3, 3),
                        textcoords="offset points")
    bx.set_xlabel("I~_k(S) / max (labels: k = 2)")
    bx.set_ylabel("phase-1 velocity -dL/dc_S at init")
    bx.set_title("which exponent predicts phase 1 (clean copiers)", fontsize=9)
    bx.legend(fontsize=7)
    if end_weights is not None:
        cx = axes[2]
        v = np.array([max(end_weights.get(S, 0.0), 1e-300) for S in subs])
        cx.bar(x, v, 0.6, color="k", alpha=0.75)
        cx.set_yscale("log")
        cx.set_ylim(bottom=max(1e-12, v[v > 1e-300].min() / 10) if (v > 1e-300).any() else 1e-12)
        cx.set_xticks(x, labels)
        cx.set_xlabel("lag set S")
        cx.set_ylabel("c_S^2 / sum c^2")
        cx.set_title("end of phase 1 (clean copiers)", fontsize=9)
    fig.tight_layout()
    save_figure(fig, Path(out) / name, dpi=120)
    plt.close(fig)
    return name


def plot_generalisation(rows_L: list, rows_alpha: list, L: int, alpha: float, model_L: float, base_L: dict,
                        out: Path, name: str = "generalisation.png") -> str:
    """Held-out losses (seen targets) of the model and the baselines at the
    training setting, longer contexts and other priors."""
    plt = _plt()
    cols = [{"label": f"L={L}, alpha={alpha:g}\n(training)", "model": model_L, "gih_a_end": base_L.get("gih_a_end"),
             "bayes": base_L.get("bayes"), "unigram": base_L.get("unigram")}]
    cols += [{"label": f"L={r['L']}", **r} for r in rows_L]
    cols += [{"label": f"alpha={r['alpha']:g}", **r} for r in rows_alpha]
    keys = [("model", "trained model"), ("gih_a_end", "GIH on S*, a_end"), ("bayes", "Bayes-optimal"),
            ("unigram", "unigram")]
    x = np.arange(len(cols))
    w = 0.2
    fig, ax = plt.subplots(figsize=(1.6 * len(cols) + 2, 4))
    for n, (k, lab) in enumerate(keys):
        ax.bar(x + n * w, [np.nan if c.get(k) is None else c[k] for c in cols], w, label=lab)
    ax.set_xticks(x + 1.5 * w, [c["label"] for c in cols], fontsize=8)
    ax.set_ylabel("held-out cross-entropy (seen targets)")
    ax.set_title("generalisation: longer contexts and other priors (model trained once)", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, Path(out) / name, dpi=120)
    plt.close(fig)
    return name


def plot_run(path, out, fmt: str = "png") -> list[Path]:
    """Every figure of :data:`FIGURES` for the run file ``path`` into folder ``out``
    (``fmt``: png, or pdf / svg for vector figures)."""
    run = load(path)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    names = [plot_c_mass(run, out, name=f"c_mass.{fmt}"), plot_rpe(run, out, name=f"rpe.{fmt}"),
             plot_a(run, out, name=f"a_log_t.{fmt}"), plot_losses(run, out, name=f"losses.{fmt}")]
    return [out / n for n in names]
