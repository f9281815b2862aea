"""How ``meanfield.open_run`` and the outcome lines read an induction run file (registered in ``plugin``).

The state: the selector weights ``c`` over the parent subsets, the RPE
weights ``w`` (heads x lags) and the classifier scale ``a``; the outcome
lines name the selected subset, its parent set against the true one, each
head's top lag and the final losses. The core's ``Run`` object and
``outcome_lines`` ask this reader (``meanfield.core.hooks.run_reader("induction")``).

Example
-------
>>> READER.stacked_records
()
"""

from __future__ import annotations

import math

import numpy as np

from ...core.outcome import stage_lines


def _strs(a) -> list[str]:
    return [str(x) for x in np.ravel(np.asarray(a))]


def criterion_value(name: str, run, i: int = -1) -> float | None:
    """The value a stage criterion compares, at record ``i`` (None where the file lacks it)."""
    if name == "loss":
        return float(run["loss_train"][i])
    if name == "a":
        return float(run["a"][i])
    if name == "c_top":
        return float(np.max(run["c_weight"][i]))
    if name == "rpe_top":
        return float(np.max(run["rpe"][i]))
    return None


class _Reader:
    stacked_records: tuple = ()

    @staticmethod
    def state_arrays(run, src, whole: bool) -> list:
        """(name, array, axis labels) of c, w, a: the records (``whole``) or one state (``src``)."""
        out = []
        if "c" in src:
            out.append(("c", np.asarray(src["c"]), [_strs(run.get("subsets", []))]))
        if "w" in src:
            w = np.asarray(src["w"])
            shp = w.shape[1:] if whole else w.shape
            lags = np.asarray(run.get("lags", np.zeros(shp)))
            heads = [f"h{i + 1}" for i in range(shp[0])]
            out.append(("w", w, [heads, [f"lag{int(x)}" for x in lags[0]] if lags.ndim == 2 and
                                 lags.shape[1] == shp[1] else [str(j) for j in range(shp[1])]]))
        if "a" in src:
            out.append(("a", np.asarray(src["a"]), []))
        return out

    @staticmethod
    def outcome_lines(run) -> list[str]:
        """How each phase ended, the selected subset and its parent set, the heads' top lags, the losses."""
        cfg = run.config or {}
        sched = {"three-phase": "three-stage", "joint": "simultaneous"}.get(cfg.get("schedule"), cfg.get("schedule"))
        stage_crits = cfg.get("stage_criteria", cfg.get("phase_criteria"))  # files before the one vocabulary
        if sched in (None, "three-stage"):
            crits = list(stage_crits or [None] * 3)
            names = ["c (selector)", "w (RPE)", "a (classifier)"]
        elif sched == "simultaneous":
            crits, names = [cfg.get("criterion")], ["simultaneous"]
        else:  # a schedule string such as w,c,a or cw,a: one phase per group
            groups = str(cfg["schedule"]).split(",")
            crits = list(stage_crits or [None] * len(groups))
            names = [f"trains {g}" for g in groups]
        lines = stage_lines(run, crits, names, criterion_value)
        if not len(run["t"]):
            return lines
        cw = np.asarray(run["c_weight"][-1])
        subsets = [str(s) for s in run["subsets"]]
        members = np.asarray(run["subset_members"])
        rpe = np.asarray(run["rpe"][-1])
        lags = np.asarray(run["lags"])
        top = [int(lags[h, int(np.argmax(rpe[h]))]) for h in range(rpe.shape[0])]
        j = int(np.argmax(cw))
        heads = [int(h) for h in members[j] if h >= 0]
        parents = sorted({top[h] for h in heads})
        lines.append(f"  selected subset {subsets[j]} (c-mass {cw[j]:.3f}): parent set "
                     f"{{{', '.join(map(str, parents))}}} (true pa = {{{', '.join(str(p) for p in cfg.get('pa', []))}}})")
        lines.append("  heads' top lags: " + ", ".join(
            f"head {h + 1} lag {top[h]} ({float(np.max(rpe[h])):.3f})" for h in range(len(top))))
        lt = float(run["loss_train"][-1])
        held = ""
        if "loss_test_seen" in run and math.isfinite(float(run["loss_test_seen"][-1])):
            held = (f", held-out loss {float(run['loss_test_seen'][-1]):.4g} (sequences whose target occurs in "
                    f"the context)")
        elif "loss_test" in run and math.isfinite(float(run["loss_test"][-1])):
            held = f", held-out loss {float(run['loss_test'][-1]):.4g}"
        lines.append(f"  final (t = {float(run['t'][-1]):.6g}): a = {float(run['a'][-1]):.4g}, train loss {lt:.4g}"
                     + held)
        return lines


READER = _Reader()
