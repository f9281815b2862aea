"""Figure 4 of the paper (Appendix A.3) as a claim, per key kind.

The rebuttal (Q3): "The shape of the curve for c1 being query is similar to
the curve for v1 being query. The difference is that the magnitude of the
scores for c1 being query is a lot smaller than the scores for v1 being the
query." Figure 1c shows the scores S+[c_k, v1] (keys c_k, query v1), so
Figure 4 shows S+[c_k, c1]; the statement is checked for those keys (the
figure's, source ``shown``) and, separately, for the v keys S+[v_k, c1]
against S+[v_k, v1] (the statement read for every key; source ``expected``).

Per key kind: the largest |score| over the run with query c1 and with query
v1 and their ratio ("smaller": ratio < 1), and the Pearson correlation of
the two time courses per key ("similar shape": > 0). The mechanism is
measured by :func:`gradient_coherence`: |sum_n G_n| / sum_n |G_n| of the
per-sample contributions G_n to dLoss/dS+[key, query], at given times. A
score grows when its per-sample contributions add up (coherence near 1) and
stalls when they cancel (near 0).
"""

from __future__ import annotations

import numpy as np

from ...core.report import Claim
from ...core.report import jfloat as _f
from ...core.report import status as _status
from . import kernels
from .run import samples_of


def _idx(run, name: str) -> int:
    return list(run["features"]).index(name)


def score_comparison(run, kind: str) -> dict:
    """Largest |S+[key, c1]| and |S+[key, v1]| over the run for the keys of
    ``kind`` ("c" or "v"), their ratio, and the per-key time-course correlations."""
    K = len(run["features"]) // 2
    S = np.asarray(run["S"], float)[:, 0]
    qc, qv = _idx(run, "c1"), _idx(run, "v1")
    keys = [_idx(run, f"{kind}{k + 1}") for k in range(K)]
    mc = float(max(np.abs(S[:, a, qc]).max() for a in keys))
    mv = float(max(np.abs(S[:, a, qv]).max() for a in keys))
    corr = [float(np.corrcoef(S[:, a, qc], S[:, a, qv])[0, 1]) for a in keys]
    return {"max_abs_query_c1": mc, "max_abs_query_v1": mv, "ratio_c1_over_v1": mc / mv if mv > 0 else None,
            "shape_correlation_per_key": corr,
            "end_query_c1": [float(S[-1, a, qc]) for a in keys], "end_query_v1": [float(S[-1, a, qv]) for a in keys]}


def gradient_coherence(run, cfg, times=(100.0, 500.0)) -> dict:
    """|sum_n G_n[key, query]| / sum_n |G_n[key, query]| (head +) at the
    recorded times nearest ``times``, for the four (key, query) pairs
    (c1, c1), (c1, v1), (v1, c1), (v1, v1)."""
    smp = samples_of(cfg)
    f = list(run["features"])
    pairs = {"S+[c1,c1]": (f.index("c1"), f.index("c1")), "S+[c1,v1]": (f.index("c1"), f.index("v1")),
             "S+[v1,c1]": (f.index("v1"), f.index("c1")), "S+[v1,v1]": (f.index("v1"), f.index("v1"))}
    out = {}
    t = np.asarray(run["t"], float)
    for tt in times:
        j = int(np.argmin(np.abs(t - tt)))
        y = kernels.pack(run["S"][j], run["A"][j], run["B"][j], run["w"][j])
        Gs = []
        for i in range(smp.n):
            wt = np.zeros(smp.n)
            wt[i] = smp.weight[i]
            Gs.append(kernels.loss_and_grads(y, smp.P, smp.idx, smp.sgn, smp.y, wt, cfg.relu_prime_at_zero)[1][0])
        Gs = np.array(Gs)
        tot, ab = np.abs(Gs.sum(axis=0)), np.abs(Gs).sum(axis=0)
        out[f"t={t[j]:g}"] = {k: (float(tot[a, b] / ab[a, b]) if ab[a, b] > 0 else None) for k, (a, b) in pairs.items()}
    return out


def check_figure4(run, kind: str, coherence: dict | None = None) -> Claim:
    """Scores with query c1 are smaller than with query v1 (ratio < 1) and
    have a similar shape (every per-key correlation > 0), for the keys of
    ``kind``: "c" (the figure's keys, source shown) or "v" (source expected)."""
    nums = score_comparison(run, kind)
    ratio = nums["ratio_c1_over_v1"]
    ok = ratio is not None and ratio < 1 and min(nums["shape_correlation_per_key"]) > 0
    if coherence:
        nums["gradient_coherence"] = coherence
        if not ok:
            nums["mechanism"] = (
                f"the {kind}-key scores with query c1 reach {nums['max_abs_query_c1']:.3g} against "
                f"{nums['max_abs_query_v1']:.3g} with query v1: the per-sample gradient contributions to a score whose "
                "key and query are both v tokens (signed by y and by the distractor sign) cancel (coherence "
                + ", ".join(f"{k} {v['S+[v1,v1]']:.2g}" for k, v in coherence.items())
                + "), those with a c query add up (" + ", ".join(f"{k} {v['S+[v1,c1]']:.2g}" for k, v in coherence.items())
                + ")")
    name = "figure4_query_c_smaller" if kind == "c" else "figure4_query_c_smaller_v_keys"
    keys = "c keys S+[c_k, .] (Figure 4's curves)" if kind == "c" else "v keys S+[v_k, .]"
    return Claim(name, _status(ok), f"scores with query c1 have a similar shape but are smaller than with query v1, "
                 f"for the {keys}", numbers={k: (_f(v) if isinstance(v, float) else v) for k, v in nums.items()},
                 source="shown" if kind == "c" else "expected")
