"""How ``meanfield.open_run`` and the outcome lines read a mixture run file (registered in ``plugin``).

A mixture run file keeps the state per block, stacked over the heads
(``S``, ``A``, ``B`` of shape (T, 2, P, P), ``w`` (T, 2, P)); the run's
``heads`` (default ``+``, ``-``) and ``features`` label the axes. The core's
``Run`` object and ``outcome_lines`` know no system: they ask this reader
(``meanfield.core.hooks.run_reader("mixture")``).

Example
-------
>>> READER.stacked_records
('S', 'A', 'B')
"""

from __future__ import annotations

import numpy as np

from ...core.outcome import criterion_value, final_lines, stage_lines

BLOCKS = ("S", "A", "B", "w")


class _Reader:
    stacked_records = ("S", "A", "B")  # the records that are the state blocks themselves

    @staticmethod
    def state_arrays(run, src, whole: bool) -> list:
        """(name, array, axis labels) of S, A, B, w: the records (``whole``) or one state (``src``)."""
        heads = list(run.heads) or ["+", "-"]
        feats = list(run.features)
        out = []
        for nm in BLOCKS:
            if nm in src:
                a = np.asarray(src[nm])
                out.append((nm, a, [heads] + [feats] * (a.ndim - 1 - bool(whole))))
        return out

    @staticmethod
    def blocks(run) -> dict:
        """``"head:name" -> (T, ...)`` of every recorded block."""
        heads = list(run.heads) or ["+", "-"]
        out = {}
        for nm in BLOCKS:
            if nm in run:
                a = np.asarray(run[nm])
                for i, h in enumerate(heads):
                    out[f"{h}:{nm}"] = a[:, i]
        return out

    @staticmethod
    def outcome_lines(run) -> list[str]:
        """How each stage ended (the three-stage schedule's neurons / attention / neurons or both), the final
        loss and margins, the stage times."""
        cfg = run.config or {}
        if cfg.get("schedule") == "three-stage":
            crits = list(cfg.get("stage_criteria") or [None] * 3)
            names = ["neurons", "attention", "neurons" if cfg.get("stage3", "neurons") == "neurons" else "both"]
        else:
            crits, names = [cfg.get("criterion")], ["simultaneous"]
        return stage_lines(run, crits, names, criterion_value) + final_lines(run)


READER = _Reader()
