"""Figures of a general engine run file: loss, margins and the reduced variables of every head."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..core.io import save_figure


def plot_engine_run(r, path: Path, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t = r["t"]
    files = []
    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    ax[0].plot(t, r["loss"])
    ax[0].set_yscale("log")
    ax[0].set_xlabel("t")
    ax[0].set_title("loss")
    ax[1].plot(t, r["margin"], lw=0.8)
    ax[1].set_xlabel("t")
    ax[1].set_title("margins")
    f = out / "loss.png"
    fig.tight_layout()
    save_figure(fig, f, dpi=110)
    plt.close(fig)
    files.append(f)
    feats = [str(x) for x in r["features"]]
    for head, group in r.get("variables", {}).items():
        names = [k for k, v in group.items() if np.asarray(v).ndim >= 2]
        if not names:
            continue
        fig, axes = plt.subplots(1, len(names), figsize=(4 * len(names), 3.6), squeeze=False)
        for a, nm in zip(axes[0], names):
            v = np.asarray(group[nm])
            flat = v.reshape(v.shape[0], -1)
            a.plot(t, flat, lw=0.8)
            a.set_title(f"{head}: {nm}")
            a.set_xlabel("t")
        fig.suptitle(f"{Path(path).name} (features {', '.join(feats)})", fontsize=9)
        fig.tight_layout()
        f = out / f"variables_{head}.png"
        save_figure(fig, f, dpi=110)
        plt.close(fig)
        files.append(f)
    return files
