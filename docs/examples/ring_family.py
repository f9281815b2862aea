"""A family of one's own, plugged into meanfield (docs/engine.md, "Add your own family").

``ring``: P features e1..eP; sequence i is the two tokens (e_i, e_{i+1 mod P})
with label +1 for even i and -1 for odd i; one softmax head with separate
keys and queries and a ReLU neuron. Its parameters are the engine's run
knobs plus ``P``. Importing this module registers the family; name it in a
description (``plugins = ["ring_family"]``, ``family = "ring"``) or in your
distribution's entry points (group ``meanfield.plugins``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from meanfield.core.config import as_int
from meanfield.engine import registry
from meanfield.engine.description import RunParams, description_from_dict


@dataclass(frozen=True)
class Params(RunParams):
    """The run knobs (``steps``, ``eta``, ``width``, ...) and the ring's size."""

    P: int = 3


def build(values: dict, name: str, source: str | None = None):
    """The description of the ring family from its ``[parameters]`` values."""
    values = dict(values)
    P = as_int("P", values.pop("P", 3), lo=2)
    feats = [f"e{i + 1}" for i in range(P)]
    rows = [{"tokens": [feats[i], feats[(i + 1) % P]], "target": 1 if i % 2 == 0 else -1} for i in range(P)]
    raw = {"name": name, "dictionary": {"features": feats}, "data": {"rows": rows},
           "heads": [{"name": "h", "attention": "softmax", "kq": "separate", "query": "mean", "value": "neuron"}],
           "parameters": values}
    return dataclasses.replace(description_from_dict(raw, source=source), family="ring")


registry.register_family("ring", params=Params, build=build,
                         summary="P features on a ring, two-token sequences, alternating labels")
