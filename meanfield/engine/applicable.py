"""Keys and criteria that apply only where documented (docs/engine.md): one-line errors naming them.

:func:`check_criteria_rows`: a margin criterion over no row is refused (it
would hold vacuously at step 0); :func:`check_knobs_apply`: a run knob given
as a flag or keyword that no head of the description uses is refused.
(``query_self`` without ``query = "last"`` is refused where the head is read,
``meanfield.engine.description.make_head``.)
"""

from __future__ import annotations

from ..core.config import ConfigError


def check_knobs_apply(heads, given: set) -> None:
    """A run knob given (a flag, a keyword of ``meanfield.load``) that no head
    of the description uses is refused, naming it: ``omega`` without a
    ``kq = separate`` head (merged W~ starts at 0), ``omega_v`` / ``sigma_r``
    without a ``value = matrix`` head, ``neuron_init`` without a neuron or
    linear value vector, ``relu_prime_at_zero`` without ``value = neuron``.
    (A description's own [parameters] may keep such defaults for variants.)"""
    kq = {h.kq for h in heads}
    values = {h.value for h in heads}
    rules = {
        "omega": ("separate" in kq, "it scales W_K, W_Q of kq = separate heads; every head here has kq = merged "
                                    "(W~ = 0 at init)"),
        "omega_v": ("matrix" in values, "it scales the value matrix of value = matrix heads; none here"),
        "sigma_r": ("matrix" in values, "it scales the readout vectors of value = matrix heads; none here"),
        "neuron_init": (bool(values & {"neuron", "linear"}), "it sets the value vectors of value = neuron / linear "
                                                             "heads; none here"),
        "relu_prime_at_zero": ("neuron" in values, "it is the ReLU's derivative at 0 of value = neuron heads; none "
                                                   "here"),
    }
    for k in sorted(given):
        ok, why = rules.get(k, (True, ""))
        if not ok:
            raise ConfigError(f"{k}: has no effect on this model ({why}); remove it")


def check_criteria_rows(training, data) -> None:
    """A margin criterion applies only to the rows it names (docs/engine.md):
    ``consistent_margin`` to the rows flagged ``consistent`` (a description
    without that flag counts every row as consistent), ``inconsistent_margin``
    to the rows not flagged. One over no row would hold vacuously at step 0
    (the minimum over nothing is +inf): refused, naming the stage."""
    cons = data.flag("consistent")
    empty = {"consistent_margin": not cons.any(), "inconsistent_margin": bool(cons.all())}
    for i, st in enumerate(training.stages):
        name = st.criterion[0] if st.criterion else None
        if empty.get(name):
            where = "criterion" if len(training.stages) == 1 and st.name == "simultaneous" else \
                f"training.stages[{i}].criterion"
            which = "flagged consistent" if name == "consistent_margin" else "not flagged consistent"
            raise ConfigError(f"{where}: {name} applies to the rows {which}, and this description's data have none "
                              "(it would hold at step 0); use min_margin or loss, or flag the rows (flags.consistent)")
