"""Check user inequalities ("bounds") over a run's trajectory, safely.

A bound is an inequality in the run's variables, written with the paper's
names, checked at every recorded time (or a selection of them). The generic
names (``t``, ``loss``, ``margin[i]``, ``T2``, ...) are this module's; a
paper's own (its signed atoms, features, sample groups and attributes) are
what its plug-in registered (``meanfield.core.bound_parse.BoundNames``,
``meanfield.core.hooks.bound_names``). The mixture paper's, for example::

    S+[c1,v1] >= 0 and S+[c2,v1] <= 0        (during stage 2)
    min_margin_consistent > 0                 (during stage 2)
    loss <= log(2) * exp(-(t - T2) / 1000)    (tmin = T2)
    0 <= g[0] <= 1

Grammar
-------
Atoms (with the mixture's registered names: P = 2K features ``c1..cK v1..vK``; heads ``+`` and ``-``; sample
indices ``i`` are 0-based, in the order of the run's ``samples/description``)::

    S+[a,b]  S-[a,b]   score of that head, key feature a, query feature b
                       (= run["S"][:, head, a, b])
    A+[a,b]  A-[a,b]   key self-score       B+[a,b]  B-[a,b]  query self-score
    w+[a]    w-[a]     neuron alignment (= run["w"][:, head, a])
    u+[i]    u-[i]     pre-activation of head +/- on sample i (= run["u"][:, i, head])
    margin[i]          y f(X_i) (= run["margin"][:, i])
    g[i]               -l'(y f(X_i)) = 1 / (1 + exp(margin[i]))
    t, step, loss      time, solver step and population loss of each record
    min_margin, max_margin                 min / max of margin[i] over all samples
    min_margin_consistent, min_margin_inconsistent
                       min of margin[i] over the consistent (every distractor
                       sign equals y) / inconsistent samples; an error if the
                       run has no such sample (e.g. L = 2 has no inconsistent one)
    max_g              max of g[i] over all samples
    loss_min, loss_min_test
                       the smallest loss of the model class (run attributes
                       of runs on an exact Gaussian population: icl_zfb, ...)
    omega, eta, K, L, n (number of samples), m (attention width; inf for
                       infinite width)
    T1, T2, T_loss     the run's detected stage times (attributes T1, T2, T_loss
                       written by ``meanfield.models.mixture.stagetimes``: neuron
                       stage done, attention stage done, loss level reached);
                       an error if the run never reached it
    T3                 end time of stage 3; Tend1, Tend2, Tend3: end times
                       of stages 1..3 (the run's stage_ends attribute; an error
                       if the run has no such stage end)
    inf, pi            constants; numbers: 1, 0.5, 1e-3

A described model's run (``meanfield model run MODEL.toml``, system
``engine``) names its heads and features itself; its variables are written
with the head's name first inside the brackets, then each index as a feature
name or a 0-based number::

    S[h,a,b]  A[h,a,b]  B[h,a,b]  W[h,a,b]   Gram block / merged W of head h (key a, query b)
    w[h,a]  w[h,c,a]  w[h,c,j,a]             value vector (output c, neuron j: 0 when there is one)
    u[h,i]  u[h,i,c]                          pre-activation of head h on sample i (output c)
    var[h,NAME,i,...]                         any variable of the run (variables/<h>/<NAME>), e.g.
                                              var[h,V.r1,plus] or var[h,a] (a trainable sign)

(a head named ``+`` or ``-`` may also be written ``S+[a,b]``); margin[i],
g[i], loss, t, eta, m, T_loss ... as above.

The head sign is written directly after the letter, without spaces (``S+[``;
``S_+[`` is accepted too). The bracketed forms are tokenised into single atoms
BEFORE Python's parser sees the text, so ``w+[c1]*2`` is ``(w+[c1])*2`` and
never ``w + ([c1]*2)``. A bare ``S``, ``w`` ... is an error that says how to
write it.

Operators: ``+ - * / **``, unary ``-`` and ``+``, parentheses; functions
``abs exp log sqrt`` (one argument) and ``min max`` (two or more arguments,
pointwise at each time: they are NOT minima over time). A bound is a
comparison ``< <= > >= ==`` (chained allowed: ``a <= b < c`` means ``a <= b and
b < c``), or comparisons combined with ``and`` / ``or`` (parentheses allowed).

Slack: ``rhs - lhs`` for ``<`` and ``<=``, ``lhs - rhs`` for ``>`` and ``>=``,
``-|lhs - rhs|`` for ``==`` (0 where both sides are equal, also for inf == inf);
chains and ``and`` take the minimum, ``or`` the maximum. A bound holds at a
time when its comparison is true there; a NaN (e.g. ``log`` of a negative
number) never holds and makes the worst slack NaN.

Times: ``during`` is ``all`` or ``stageK`` (K = 1, 2, 3); a stage is the closed
interval from its start (the last record of stage K-1, or the first record) to
its last record, so ``t >= T1 during stage2`` holds and ``t > T1`` does not.
``tmin`` / ``tmax`` further keep ``tmin <= t <= tmax``.

Safety
------
The text is never given to ``eval``, ``exec`` or ``compile`` (beyond
``ast.parse``, which only builds a syntax tree). Only ASCII text is accepted;
after the bracket rewrite the tree is checked against a whitelist of node
types, every other node (attributes, subscripts, lambdas, comprehensions,
strings, containers, keyword arguments, unknown names or functions ...) is a
one-line :class:`BoundError` naming the offending part. The checked tree is
then translated into a small private expression tree that is evaluated with
numpy, vectorised over time, on float64 values only.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .bound_parse import (DURINGS, FUNCTIONS, VARIABLES, Bound, BoundError, BoundNames, Ref, _INDEX_RE,  # noqa: F401
                          _Parser, _UNARY, _one_line, parse_bound, registered, signed_forms)
from .config import ConfigError

__all__ = [
    "BoundError", "Bound", "BoundResult", "DURINGS", "VARIABLES", "FUNCTIONS",
    "parse_bound", "evaluate", "values", "select",
]


# --------------------------------------------------------------------------- evaluation


@dataclass(frozen=True)
class BoundResult:
    """Outcome of a bound over the selected records (what :func:`evaluate` returns).

    Parameters
    ----------
    text : str
        The bound as written.
    holds : bool
        True at every selected time.
    worst_slack : float
        The minimum slack (NaN if a NaN occurred); ``t_worst`` its (first) time.
    first_violation_t : float or None
        The first time it fails (None if it holds).
    n_times, n_violations : int
        Selected records, and how many of them fail.

    Returns
    -------
    BoundResult

    Examples
    --------
    >>> import numpy as np
    >>> evaluate("loss <= 1", {"t": np.array([0.0, 1.0]), "loss": np.array([0.7, 0.3])}).holds
    True
    """

    text: str
    holds: bool
    worst_slack: float
    t_worst: float
    first_violation_t: float | None
    n_times: int
    n_violations: int
    during: str = "all"
    tmin: float | None = None
    tmax: float | None = None


class _Env:
    """Values of names and atoms for one run, each (T,) or a float."""

    def __init__(self, run, fail):
        self.run = run
        self.fail = fail
        attrs = getattr(run, "attrs", {}) or {}
        self.attrs = attrs
        self._cache: dict[str, Any] = {}
        try:
            self.t = np.asarray(run["t"], dtype=np.float64)
        except KeyError:
            fail("the run file has no 't' dataset")
        self.T = self.t.shape[0]
        feats = run.get("features")
        self.features = [str(f) for f in np.ravel(feats)] if feats is not None else None
        from .hooks import bound_names

        own = bound_names().get(str(attrs.get("system")))  # the paper's names of this run's system (or None)
        self.names = [own] if own is not None else registered()
        heads = run.get("heads")
        if attrs.get("system") == "engine":  # a general described model: its heads are named, not signed
            heads = None
        want = list(own.heads) if own is not None and own.signed else None
        if heads is not None and want is not None and [str(h) for h in np.ravel(heads)] != want:
            fail(f"unexpected heads {list(np.ravel(heads))} in the run file (expected {want})")

    def _data(self, key):
        if key not in self.run:
            self.fail(f"the run file has no '{key}' dataset")
        return np.asarray(self.run[key], dtype=np.float64)

    def _attr(self, key):
        if key not in self.attrs:
            self.fail(f"the run file has no '{key}' attribute")
        return float(self.attrs[key])

    def _samples(self, which: str) -> np.ndarray:
        margin = self._data("margin")
        if which == "all":
            return margin
        flag, value = self._paper("groups", which)
        s = self.run.get("samples")
        if not isinstance(s, dict) or flag not in s:
            self.fail(f"the run file has no samples/{flag} dataset")
        mark = np.asarray(s[flag]).astype(bool)
        sel = mark if value else ~mark
        if not sel.any():
            self.fail(f"{which}: this run has no {which.rpartition('_')[2]} samples")
        return margin[:, sel]

    def _paper(self, table: str, name: str):
        """``name`` in the paper's table ``groups`` / ``attrs`` (the run's system first), or None."""
        for names in self.names:
            v = getattr(names, table).get(name)
            if v is not None:
                return v
        return None

    def _stage_end(self, k: int) -> float:
        ends = self.attrs.get("stage_ends")
        if not isinstance(ends, list):
            self.fail(f"T{k}: the run file has no stage_ends attribute")
        for e in ends:
            if isinstance(e, dict) and int(e.get("stage", -1)) == k:
                return float(e["t"])
        have = ", ".join(str(e.get("stage")) for e in ends if isinstance(e, dict)) or "none"
        self.fail(f"T{k}: the run has no end of stage {k} (schedule {self.attrs.get('schedule', '?')}, "
                  f"status {self.attrs.get('status', '?')}; stage ends recorded: {have})")

    def var(self, name: str):
        if name not in self._cache:
            self._cache[name] = self._var(name)
        return self._cache[name]

    def _var(self, name: str):
        if name == "t":
            return self.t
        if name in ("step", "loss"):
            return self._data(name)
        if name in ("min_margin", "max_margin"):
            m = self._samples("all")
            return m.min(axis=1) if name == "min_margin" else m.max(axis=1)
        if self._paper("groups", name) is not None:  # a paper's sample group: min margin over it
            return self._samples(name).min(axis=1)
        if name == "max_g":
            return (1.0 / (1.0 + np.exp(self._samples("all")))).max(axis=1)
        if name == "eta":
            return self._attr(name)
        if name in ("loss_min", "loss_min_test"):  # a run attribute of the exact Gaussian populations
            if name not in self.attrs:
                self.fail(f"{name}: the run file has no {name} attribute (written by runs on an exact Gaussian "
                          f"population, e.g. meanfield model run icl_zfb)")
            return self._attr(name)
        if self._paper("attrs", name) is not None:  # a paper's run attribute
            return self._attr(self._paper("attrs", name))
        if name == "n":
            return float(self._data("margin").shape[1])
        if name == "m":
            w = self._attr("width")
            return math.inf if w < 0 else w
        if name in ("T1", "T2", "T_loss"):
            v = self.attrs.get(name)
            if v is None:
                if name == "T_loss":
                    self.fail("T_loss: the run file has no T_loss attribute (written since stage-time detection)")
                return self._stage_end(int(name[1]))
            v = float(v)
            if math.isnan(v):
                crit = self.attrs.get("stage_time_criteria", {})
                self.fail(f"{name}: the run never reached it (criterion: "
                          f"{crit.get(name, 'see the run attribute stage_time_criteria') if isinstance(crit, dict) else crit})")
            return v
        if name == "T3":
            return self._stage_end(3)
        if name in ("Tend1", "Tend2", "Tend3"):
            return self._stage_end(int(name[-1]))
        if name == "inf":
            return math.inf
        if name == "pi":
            return math.pi
        self.fail(f"unknown name '{name}'")

    def _feature(self, ref: Ref, label: str, names: BoundNames) -> int:
        feats = self.features
        if feats is None and names.features is not None:
            try:
                feats = list(names.features(self.attrs))
            except (KeyError, TypeError, ValueError):
                self.fail(f"{ref.text}: the run file has no features dataset")
        if feats is None:
            self.fail(f"{ref.text}: the run file has no features dataset")
        if label not in feats:
            self.fail(f"{ref.text}: unknown feature '{label}'; this run's {len(feats)} features are {', '.join(feats)}")
        return feats.index(label)

    def _engine_index(self, ref: Ref, label: str, size: int, what: str) -> int:
        """An index along one axis: a 0-based integer, or a feature name on a feature axis."""
        if _INDEX_RE.match(label):
            i = int(label)
            if i >= size:
                self.fail(f"{ref.text}: {what} index {i} out of range 0..{size - 1}")
            return i
        feats = self.features or []
        if label not in feats:
            self.fail(f"{ref.text}: unknown feature '{label}'; this run has {', '.join(feats)}")
        if size != len(feats):
            self.fail(f"{ref.text}: '{label}' is a feature, but this axis ({what}) has {size} entries, not one per "
                      f"feature; give a 0-based index")
        return feats.index(label)

    def _engine_ref(self, ref: Ref):
        """A variable of a described model's run (``variables/<head>/<name>``)."""
        variables = self.run.get("variables")
        if not isinstance(variables, dict) or not variables:
            self.fail(f"{ref.text}: the run file has no variables group")
        kind = ref.kind.lstrip("@")
        head = ref.head
        if isinstance(head, int):  # a paper's signed form S+[a,b]: the head named by its sign
            head = signed_forms()[kind][0].heads[head]
        if head not in variables:
            self.fail(f"{ref.text}: unknown head '{head}'; this run's heads: {', '.join(variables)} "
                      f"(write {kind if kind != 'var' else 'var'}[head,...] with one of them)")
        args = [str(a) for a in ref.args]
        if kind == "u":
            u = self._data("u")  # (T, n, H, rows)
            names = list(variables)
            h = names.index(head)
            if len(args) == 1 and u.shape[3] != 1:
                self.fail(f"{ref.text}: this head has {u.shape[3]} outputs: write u[{head},i,c] (c = 0..{u.shape[3] - 1})")
            i = self._engine_index(ref, args[0], u.shape[1], "sample")
            c = self._engine_index(ref, args[1], u.shape[3], "output") if len(args) > 1 else 0
            return u[:, i, h, c]
        if kind == "var":
            name, args = args[0], args[1:]
        else:
            name = kind
        if name not in variables[head]:
            self.fail(f"{ref.text}: head '{head}' has no variable '{name}'; its variables: {', '.join(variables[head])}")
        x = np.asarray(variables[head][name], dtype=np.float64)
        if kind == "w" and x.ndim == 4 and len(args) < 3:  # w (T, C, n, P): w[h,a] = w[h,0,0,a], w[h,c,a] = w[h,c,0,a]
            if len(args) == 1 and x.shape[1] * x.shape[2] != 1:
                self.fail(f"{ref.text}: head '{head}' has {x.shape[1]} outputs x {x.shape[2]} neurons: write "
                          f"w[{head},c,a] or w[{head},c,j,a]")
            if len(args) == 2 and x.shape[2] != 1:
                self.fail(f"{ref.text}: head '{head}' has {x.shape[2]} neurons: write w[{head},c,j,a]")
            args = (["0", "0"] if len(args) == 1 else [args[0], "0"]) + [args[-1]]
        if len(args) != x.ndim - 1:
            self.fail(f"{ref.text}: variable '{name}' of head '{head}' has {x.ndim - 1} axes "
                      f"{tuple(x.shape[1:])}; give {x.ndim - 1} indices")
        whats = {"w": ("output", "neuron", "feature")}.get(kind, ("key feature", "query feature")
                                                            if kind in ("S", "A", "B", "W") else ())
        idx = tuple(self._engine_index(ref, a, x.shape[k + 1], whats[k] if k < len(whats) else f"axis {k + 1} of {name}")
                    for k, a in enumerate(args))
        return x[(slice(None),) + idx]

    def ref(self, ref: Ref):
        signed = signed_forms()
        if self.attrs.get("system") == "engine" and (ref.kind.startswith("@") or ref.kind in signed):
            return self._engine_ref(ref)
        if ref.kind.startswith("@"):
            sys_ = self.attrs.get("system")
            h0, h1 = (self.names[0].heads * 2)[:2] if self.names else ("+", "-")
            self.fail(f"{ref.text}: the head-named form is for described models' runs (meanfield model run); in a "
                      f"{sys_ if isinstance(sys_, str) else 'paper'} run write {ref.kind[1:]}{h0}[...] or "
                      f"{ref.kind[1:]}{h1}[...]")
        form = None
        if ref.kind in signed:
            names, dataset, form = signed[ref.kind]
        if form == "pair":
            a, b = (self._feature(ref, x, names) for x in ref.args)
            return self._data(dataset)[:, ref.head, a, b]
        if form == "feature":
            return self._data(dataset)[:, ref.head, self._feature(ref, ref.args[0], names)]
        margin = self._data("margin")
        i, n = ref.args[0], margin.shape[1]
        if i >= n:
            self.fail(f"{ref.text}: sample index {i} out of range; this run has samples 0..{n - 1}")
        if form == "sample":
            return self._data(dataset)[:, i, ref.head]
        if ref.kind == "margin":
            return margin[:, i]
        return 1.0 / (1.0 + np.exp(margin[:, i]))


def _check(tree, env: _Env) -> None:
    """Resolve every name and atom once, so that run-dependent errors come before any arithmetic."""
    kind = tree[0]
    if kind == "var":
        env.var(tree[1])
    elif kind == "ref":
        env.ref(tree[1])
    elif kind in ("and", "or"):
        for x in tree[1]:
            _check(x, env)
    elif kind == "cmp":
        for x in tree[2]:
            _check(x, env)
    elif kind == "neg":
        _check(tree[1], env)
    elif kind == "bin":
        _check(tree[2], env)
        _check(tree[3], env)
    elif kind == "call":
        for x in tree[2]:
            _check(x, env)


def _value(tree, env: _Env):
    kind = tree[0]
    if kind == "const":
        return tree[1]
    if kind == "var":
        return env.var(tree[1])
    if kind == "ref":
        return env.ref(tree[1])
    if kind == "neg":
        return np.negative(_value(tree[1], env))
    if kind == "bin":
        a, b = np.float64(_value(tree[2], env)), np.float64(_value(tree[3], env))
        op = tree[1]
        if op == "+":
            return np.add(a, b)
        if op == "-":
            return np.subtract(a, b)
        if op == "*":
            return np.multiply(a, b)
        if op == "/":
            return np.divide(a, b)
        return np.power(a, b)
    if kind == "call":
        args = [np.float64(_value(x, env)) for x in tree[2]]
        if tree[1] == "min":
            return functools.reduce(np.minimum, args)
        if tree[1] == "max":
            return functools.reduce(np.maximum, args)
        return _UNARY[tree[1]](args[0])
    raise AssertionError(kind)


def _slack(op: str, a, b):
    """(holds, slack) of ``a op b``; slack 0 where a == b (also inf == inf)."""
    eq = a == b
    if op in ("<", "<="):
        holds = a < b if op == "<" else a <= b
        slack = np.where(eq, 0.0, np.subtract(b, a))
    elif op in (">", ">="):
        holds = a > b if op == ">" else a >= b
        slack = np.where(eq, 0.0, np.subtract(a, b))
    else:
        holds = eq
        slack = np.where(eq, 0.0, -np.abs(np.subtract(a, b)))
    return holds, slack


def _truth(tree, env: _Env):
    kind = tree[0]
    if kind == "cmp":
        ops, operands = tree[1], [np.float64(_value(x, env)) for x in tree[2]]
        parts = [_slack(op, operands[i], operands[i + 1]) for i, op in enumerate(ops)]
    else:
        parts = [_truth(x, env) for x in tree[1]]
    holds = [np.broadcast_to(h, (env.T,)) for h, _ in parts]
    slack = [np.broadcast_to(np.asarray(s, dtype=np.float64), (env.T,)) for _, s in parts]
    if kind == "or":
        return functools.reduce(np.logical_or, holds), functools.reduce(np.fmax, slack)
    return functools.reduce(np.logical_and, holds), functools.reduce(np.minimum, slack)


def _num(name: str, v) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool):
        raise BoundError(f"{name}: must be a number, got {v!r}")
    try:
        f = float(v)
    except (TypeError, ValueError):
        if isinstance(v, str) and v.strip() and name in ("tmin", "tmax"):
            # a stage time of the run (T1, T2, T_loss, T3, Tend1..3) or an expression of such
            # names, e.g. "T2 + 100": syntax checked now, evaluated once the run is read
            try:
                _Parser(v).parse_value()
            except BoundError:
                from .limits import excerpt

                raise BoundError(f"{name}: must be a number or a stage time (T1, T2, T_loss, T3, Tend1..3, or an "
                                 f"expression such as T2 + 100), got {excerpt(v, 40)}") from None
            return v.strip()
        raise BoundError(f"{name}: must be a number, got {v!r}") from None
    if math.isnan(f):
        raise BoundError(f"{name}: must be a number, got {v!r}")
    return f


def _resolve_time(name: str, v, run) -> float | None:
    """``tmin`` / ``tmax``: a number, or a constant expression of the run's
    stage times (``T2``, ``T2 + 100``) evaluated on this run."""
    v = _num(name, v)
    if not isinstance(v, str):
        return v
    try:
        arr = values(v, run)
    except BoundError as e:
        raise BoundError(f"{name}: {e}") from None
    if arr.size and not np.all(arr == arr[0]):
        raise BoundError(f"{name}: {v!r} changes over the run; give a number or a stage time (T1, T2, T_loss, T3, "
                         "Tend1..3)")
    f = float(arr[0]) if arr.size else math.nan
    if math.isnan(f):
        raise BoundError(f"{name}: {v!r} is not defined for this run")
    return f


def _check_during(during) -> str:
    d = "all" if during is None else str(during).strip().lower().replace(" ", "")
    if d not in DURINGS:
        raise BoundError(f"during: must be one of {', '.join(DURINGS)}; got {during!r}")
    return d


def select(run, during: str = "all", tmin=None, tmax=None) -> np.ndarray:
    """Boolean mask over the run's records for ``during`` / ``tmin`` / ``tmax`` (see the module docstring).

    Parameters
    ----------
    run : Run or mapping
        Records with ``t`` (and ``stage`` for ``during = "stageK"``).
    during : str
        ``"all"`` or ``"stageK"`` (stage K's records and its start state).
    tmin, tmax : float, optional
        Bounds on the record time, inclusive.

    Returns
    -------
    numpy.ndarray
        Boolean, one entry per record.

    Examples
    --------
    >>> import numpy as np
    >>> select({"t": np.array([0.0, 1.0, 2.0])}, tmin=1).tolist()
    [False, True, True]
    """
    d = _check_during(during)
    tmin, tmax = _num("tmin", tmin), _num("tmax", tmax)
    if tmin is not None and tmax is not None and tmin > tmax:
        raise BoundError(f"tmin ({tmin:g}) must be <= tmax ({tmax:g})")
    t = np.asarray(run["t"], dtype=np.float64)
    mask = np.ones(t.shape[0], dtype=bool)
    if d != "all":
        k = int(d[5:])
        stage = np.asarray(run["stage"]) if "stage" in run else None
        if stage is None:
            raise BoundError("during: the run file has no 'stage' dataset")
        mask = stage == k
        if not mask.any():
            have = ", ".join(str(int(s)) for s in np.unique(stage)) or "none"
            sched = getattr(run, "attrs", {}).get("schedule", "?")
            raise BoundError(f"during={d}: the run has no records of stage {k} (schedule {sched}; stages recorded: {have})")
        j = int(np.argmax(mask))
        if j > 0 and stage[j - 1] == k - 1:
            mask[j - 1] = True  # the stage's start state: the end of stage k-1
    if tmin is not None:
        mask &= t >= tmin
    if tmax is not None:
        mask &= t <= tmax
    return mask


def evaluate(bound: Bound | str, run, during: str = "all", tmin=None, tmax=None) -> BoundResult:
    """Check ``bound`` over the run's records selected by ``during`` and ``tmin <= t <= tmax``.

    Parameters
    ----------
    bound : Bound or str
        The bound (:func:`parse_bound`'s grammar).
    run : Run, mapping or path
        A :class:`meanfield.Run`, records by name, or a run file's path.
    during : str
        ``"all"`` or ``"stageK"`` (:func:`select`).
    tmin, tmax : float or str, optional
        Time bounds (a number or a recorded time's name, e.g. ``T2``).

    Returns
    -------
    BoundResult
        Whether it holds, its worst slack and where, its first violation.

    Examples
    --------
    >>> import numpy as np
    >>> run = {"t": np.array([0.0, 1.0, 2.0]), "loss": np.array([0.7, 0.5, 0.3])}
    >>> r = evaluate("loss <= 0.6", run)
    >>> r.holds, r.first_violation_t, r.n_violations
    (False, 0.0, 1)
    """
    if isinstance(bound, str):
        bound = parse_bound(bound)
    if isinstance(run, (str, Path)):
        run = _read(run)
    p = _Parser(bound.text)
    env = _Env(run, p.fail)
    _check(bound.tree, env)
    d = _check_during(during)
    tmin, tmax = _resolve_time("tmin", tmin, run), _resolve_time("tmax", tmax, run)
    mask = select(run, d, tmin, tmax)
    n = int(mask.sum())
    if n == 0:
        raise BoundError(f"bound {_one_line(bound.text, 80)!r}: no recorded times in the selection "
                         f"(during={d}, tmin={tmin}, tmax={tmax}; the run spans t = {env.t[0]:g}..{env.t[-1]:g})"
                         if env.T else f"bound {_one_line(bound.text, 80)!r}: the run has no records")
    with np.errstate(all="ignore"):
        holds, slack = _truth(bound.tree, env)
    t = env.t[mask]
    holds, slack = np.asarray(holds)[mask], np.asarray(slack, dtype=np.float64)[mask]
    nan = np.isnan(slack)
    if nan.any():
        iw = int(np.argmax(nan))
        worst = math.nan
    else:
        iw = int(np.argmin(slack))
        worst = float(slack[iw])
    bad = ~holds
    return BoundResult(
        text=bound.text, holds=bool(holds.all()), worst_slack=worst, t_worst=float(t[iw]),
        first_violation_t=float(t[int(np.argmax(bad))]) if bad.any() else None,
        n_times=n, n_violations=int(bad.sum()), during=d,
        tmin=_num("tmin", tmin), tmax=_num("tmax", tmax),
    )


def values(text: str, run) -> np.ndarray:
    """The value of an arithmetic expression (same grammar, no comparison) at every record.

    Parameters
    ----------
    text : str
        The expression.
    run : Run, mapping or path
        As in :func:`evaluate`.

    Returns
    -------
    numpy.ndarray
        Shape (T,), one value per record.

    Examples
    --------
    >>> import numpy as np
    >>> values("2 * loss", {"t": np.array([0.0, 1.0]), "loss": np.array([0.7, 0.3])}).tolist()
    [1.4, 0.6]
    """
    p = _Parser(text)
    tree = p.parse_value()
    if isinstance(run, (str, Path)):
        run = _read(run)
    env = _Env(run, p.fail)
    _check(tree, env)
    with np.errstate(all="ignore"):
        return np.broadcast_to(np.asarray(_value(tree, env), dtype=np.float64), (env.T,)).copy()


# --------------------------------------------------------------------------- files


def _read(path):
    from .io import read_run

    try:
        run = read_run(path)
    except FileNotFoundError as e:
        raise ConfigError(str(e)) from None
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: cannot read run file: {_one_line(e)}") from None
    system = run.attrs.get("system")
    if system == "engine":  # a general described model (meanfield model run): names without heads
        return run
    from .hooks import registered_run_checks as registered_systems
    from .hooks import run_check  # a paper's run files: the schema check its plug-in registered

    check = run_check(system) if isinstance(system, str) else None
    if check is None:
        raise ConfigError(f"{path}: bounds apply to the runs of a system that registered its run check "
                          f"({', '.join(registered_systems()) or 'none'}) and described models (meanfield model run); "
                          f"this run's system is {system!r}")
    try:
        check(run, path)  # shapes and the config attribute; names the wrong field
    except ConfigError as e:
        raise ConfigError(f"run: {e}") from None
    return run


_BOUND_KEYS = ("name", "expr", "during", "tmin", "tmax")
