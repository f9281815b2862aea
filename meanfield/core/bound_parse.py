"""Parsing of a bound (``meanfield.core.bounds``): the expression language, nothing evaluated.

A bound is one inequality over a run's recorded quantities, written with the
papers' names (``S+[c1,v1]``, ``loss``, ``margin[i]``, ``T1``, ...) and
``+ - * / **``, ``abs exp log sqrt min max``. :func:`parse_bound` reads it with
Python's ``ast`` under a whitelist (:data:`VARIABLES`, :data:`FUNCTIONS`; size
and depth capped): a name, call or operator outside it is a one-line
:class:`BoundError` naming it. Never ``eval``.

Example
-------
>>> from meanfield.core.bound_parse import parse_bound
>>> b = parse_bound("loss <= log(2) * exp(-t / 100)")
>>> sorted(b.names)
['loss', 't']
"""

from __future__ import annotations

import ast
import math
import re
import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .config import ConfigError

MAX_CHARS = 4000
MAX_DEPTH = 80
DURINGS = ("all", "stage1", "stage2", "stage3")

#: the names every run has (a paper adds its own: :class:`BoundNames`, registered in ``meanfield.core.hooks``)
VARIABLES = {
    "t": "time of each record",
    "step": "solver step of each record",
    "loss": "population loss",
    "min_margin": "min over samples of margin[i]",
    "max_margin": "max over samples of margin[i]",
    "max_g": "max over samples of g[i] = 1/(1+exp(margin[i]))",
    "eta": "GD step size",
    "m": "attention width (inf for infinite width)",
    "n": "number of samples",
    "loss_min": "smallest loss of the model class (run attribute loss_min: exact Gaussian populations)",
    "loss_min_test": "the same at the test context length (run attribute loss_min_test)",
    "T1": "detected end of stage 1 (run attribute T1)",
    "T2": "detected end of stage 2 (run attribute T2)",
    "T_loss": "first time the loss reached the detection level (run attribute T_loss)",
    "T3": "end time of stage 3",
    "Tend1": "end time of stage 1",
    "Tend2": "end time of stage 2",
    "Tend3": "end time of stage 3",
    "inf": "infinity",
    "pi": "3.14159...",
}


@dataclass(frozen=True)
class BoundNames:
    """A paper's own names in the bound language (registered per system in ``meanfield.core.hooks``).

    Parameters
    ----------
    variables : dict
        name -> meaning (the help) of each variable the paper adds.
    attrs : dict
        name -> the run attribute it reads (a number).
    groups : dict
        name -> (flag, value): the min of margin[i] over the samples whose
        ``samples/<flag>`` equals ``value``.
    signed : dict
        letter -> (dataset, form): atoms written ``X+[...]`` (a head sign after
        the letter); form ``"pair"`` reads ``dataset[:, head, a, b]`` (two
        features), ``"feature"`` ``dataset[:, head, a]``, ``"sample"``
        ``dataset[:, i, head]`` (a sample index).
    heads : tuple of str
        The head signs, in the order of the head axis.
    feature_pattern : str
        A regular expression of the feature names (checked when parsed).
    features : callable, optional
        ``features(attrs) -> list of str``: the feature names of a run file without a ``features`` dataset.
    forms : str
        The signed forms for the help (``S+[a,b], ...``).
    help : str
        Where the full list is (``meanfield PAPER bound --help``; default: ``bound_parse.variables()``).

    Example
    -------
    >>> BoundNames({"K": "number of groups"}, attrs={"K": "K"}).attrs
    {'K': 'K'}
    """

    variables: dict
    attrs: dict = field(default_factory=dict)
    groups: dict = field(default_factory=dict)
    signed: dict = field(default_factory=dict)
    heads: tuple = ("+", "-")
    feature_pattern: str = r"[A-Za-z][A-Za-z0-9_]*"
    features: Any = None
    forms: str = ""
    help: str = ""


def registered() -> list:
    """The :class:`BoundNames` of every registered system (plug-ins loaded), in registration order.

    Returns
    -------
    list of BoundNames

    Example
    -------
    >>> isinstance(registered(), list)
    True
    """
    from . import hooks

    return list(hooks.bound_names().values())


def variables() -> dict:
    """Every variable a bound may name: :data:`VARIABLES` and the registered papers' (name -> meaning).

    Returns
    -------
    dict

    Example
    -------
    >>> "loss" in variables()
    True
    """
    out = dict(VARIABLES)
    for names in registered():
        for k, v in names.variables.items():
            out.setdefault(k, v)
        for k, (flag, value) in names.groups.items():  # a group or an attribute is a variable, named or not
            out.setdefault(k, f"min of margin[i] over the samples with {flag} = {value}")
        for k, key in names.attrs.items():
            out.setdefault(k, f"run attribute {key}")
    return out


def signed_forms() -> dict:
    """letter -> (BoundNames, dataset, form) of every registered signed atom (the first registration wins).

    Returns
    -------
    dict

    Example
    -------
    >>> isinstance(signed_forms(), dict)
    True
    """
    out: dict = {}
    for names in registered():
        for letter, (dataset, form) in names.signed.items():
            out.setdefault(letter, (names, dataset, form))
    return out


def atom_forms() -> str:
    """The bracketed forms for the help and the messages (the registered papers' signed forms, then the generic ones).

    Returns
    -------
    str

    Example
    -------
    >>> "margin[i]" in atom_forms()
    True
    """
    own = [n.forms for n in registered() if n.forms]
    return ", ".join(own + [_GENERIC_FORMS])


FUNCTIONS = {"abs": (1, 1), "exp": (1, 1), "log": (1, 1), "sqrt": (1, 1), "min": (2, None), "max": (2, None)}
_UNARY = {"abs": np.abs, "exp": np.exp, "log": np.log, "sqrt": np.sqrt}

_GENERIC_FORMS = ("margin[i], g[i]; a described model's run (meanfield model run): S[h,a,b], A[h,a,b], B[h,a,b], "
                  "W[h,a,b], w[h,a], w[h,c,a], u[h,i], u[h,i,c], var[h,NAME,i,...]")


def _ref_re(letters: str, heads: str):
    return re.compile(
        r"(?<![A-Za-z0-9_.])(?:" + (rf"(?P<kind>[{letters}])_?(?P<head>[{heads}])|" if letters else "")
        + r"(?P<skind>margin|g)[ \t]*|(?P<gkind>var|[SABWwu]))\[(?P<arg>[^\[\]]*)\]",
        re.ASCII,
    )


#: the head-named forms of a described model's run: kind -> (least, most) number of bracket entries
_GENERAL_ARGS = {"S": (3, 3), "A": (3, 3), "B": (3, 3), "W": (3, 3), "w": (2, 4), "u": (2, 3), "var": (2, 8)}
_GENERAL_ITEM_RE = re.compile(r"[A-Za-z0-9_.+-]+\Z", re.ASCII)
_INDEX_RE = re.compile(r"[0-9]+\Z", re.ASCII)

_CMP = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "=="}
_BIN = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**"}
_ALLOWED = (
    ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.Compare, ast.BinOp, ast.UnaryOp, ast.USub, ast.UAdd,
    ast.Call, ast.Name, ast.Load, ast.Constant, *_CMP, *_BIN,
)
_DESCRIBE = {
    "Attribute": "attribute access", "Subscript": "subscript", "Lambda": "lambda",
    "ListComp": "comprehension", "SetComp": "comprehension", "DictComp": "comprehension",
    "GeneratorExp": "comprehension", "comprehension": "comprehension", "Starred": "starred argument",
    "keyword": "keyword argument", "List": "list", "Tuple": "tuple", "Set": "set", "Dict": "dict",
    "IfExp": "conditional expression", "NamedExpr": "assignment expression", "JoinedStr": "f-string",
    "FormattedValue": "f-string", "Await": "await", "Yield": "yield", "YieldFrom": "yield", "Slice": "slice",
    "Not": "operator 'not'", "Invert": "operator '~'", "NotEq": "operator '!='", "Is": "operator 'is'",
    "IsNot": "operator 'is not'", "In": "operator 'in'", "NotIn": "operator 'not in'", "Mod": "operator '%'",
    "FloorDiv": "operator '//'", "MatMult": "operator '@'", "BitAnd": "operator '&'", "BitOr": "operator '|'",
    "BitXor": "operator '^'", "LShift": "operator '<<'", "RShift": "operator '>>'",
}


class BoundError(ConfigError):
    """A bound that cannot be parsed or evaluated: a one-line message naming the offending part."""


def _one_line(s: str, limit: int = 120) -> str:
    s = " ".join(str(s).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


# --------------------------------------------------------------------------- parsing


@dataclass(frozen=True)
class Ref:
    """A bracketed atom: kind a registered signed letter (``BoundNames.signed``), margin, g, or
    ``@`` and a described model's letter; head: the index of its sign in the paper's heads, a
    head's name (``@`` forms) or None; args: feature labels or a sample index."""

    kind: str
    head: int | None
    args: tuple
    text: str


@dataclass(frozen=True)
class Bound:
    """A parsed bound (made by :func:`parse_bound`).

    Parameters
    ----------
    text : str
        The inequality as written.
    tree : tuple
        The private expression tree.
    refs : tuple of Ref
        The bracketed atoms it uses (``S+[c1,v1]``, ``margin[3]``, ...).
    names : frozenset of str
        The variables it uses (``loss``, ``T2``, ...).

    Examples
    --------
    >>> b = parse_bound("loss <= 0.5")
    >>> str(b), sorted(b.names)
    ('loss <= 0.5', ['loss'])
    """

    text: str
    tree: tuple
    refs: tuple
    names: frozenset

    def __str__(self) -> str:
        return self.text


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.refs: dict[str, Ref] = {}
        self.names: set[str] = set()
        self.signed = signed_forms()
        self.variables = variables()
        heads = "".join(dict.fromkeys(h for n, _, _ in self.signed.values() for h in n.heads))
        self.ref_re = _ref_re("".join(self.signed), re.escape(heads))

    def fail(self, msg: str):
        raise BoundError(f"bound {_one_line(self.text, 80)!r}: {msg}")

    # -- the bracket rewrite
    def rewrite(self) -> str:
        prefix = "_ref"
        while prefix in self.text:
            prefix = "_" + prefix
        out, pos = [], 0
        for i, mt in enumerate(self.ref_re.finditer(self.text)):
            ref = self._ref(mt)
            ph = f"{prefix}{i}_"
            self.refs[ph] = ref
            out.append(self.text[pos: mt.start()])
            out.append(f" {ph} ")
            pos = mt.end()
        out.append(self.text[pos:])
        self.prefix = prefix
        return "".join(out)

    def _ref(self, mt: re.Match) -> Ref:
        raw = mt.group(0)
        arg = mt.group("arg")
        parts = [p.strip() for p in arg.split(",")]
        if mt.group("gkind"):  # a described model's run: the head by name, then indices by name or number
            kind = mt.group("gkind")
            lo, hi = _GENERAL_ARGS[kind]
            if not lo <= len(parts) <= hi or not all(_GENERAL_ITEM_RE.match(p) for p in parts):
                n = f"{lo}" if lo == hi else f"{lo} to {hi}"
                self.fail(f"{raw!s}: expected {n} names or indices inside the brackets (the head's name first), "
                          f"e.g. {dict(S='S[h,a,b]', A='A[h,a,b]', B='B[h,a,b]', W='W[h,a,b]', w='w[h,a]', u='u[h,i]', var='var[h,V.r1,a]')[kind]}")
            return Ref("@" + kind, parts[0], tuple(parts[1:]), f"{kind}[{','.join(parts)}]")
        if mt.groupdict().get("kind"):  # (no such group when no paper registered a signed atom)
            kind, sign = mt.group("kind"), mt.group("head")
            names, _, form = self.signed[kind]
            if sign not in names.heads:
                self.fail(f"{raw!s}: head '{sign}' is not one of {', '.join(names.heads)}")
            head = names.heads.index(sign)
        else:
            kind, head, sign, form = mt.group("skind"), None, "", "sample"
        if form in ("pair", "feature"):
            want = 2 if form == "pair" else 1
            feat = re.compile(names.feature_pattern + r"\Z", re.ASCII)
            if len(parts) != want or not all(feat.match(p) for p in parts):
                what = "two feature names like c1,v2" if want == 2 else "one feature name like c1 or v2"
                self.fail(f"{raw!s}: expected {what} inside the brackets")
            return Ref(kind, head, tuple(parts), f"{kind}{sign}[{','.join(parts)}]")
        if len(parts) != 1 or not _INDEX_RE.match(parts[0]):
            self.fail(f"{raw!s}: expected one sample index (0, 1, ..., n-1) inside the brackets")
        i = int(parts[0])
        return Ref(kind, head, (i,), f"{kind}{sign}[{i}]")

    # -- messages in the user's own words
    def seg(self, node, parent=None) -> str:
        s = None
        if hasattr(node, "lineno"):
            s = ast.get_source_segment(self.src, node)
        if s is None and parent is not None and hasattr(parent, "lineno"):
            s = ast.get_source_segment(self.src, parent)
        if s is None:
            s = type(node).__name__
        for ph, ref in self.refs.items():
            s = s.replace(f" {ph} ", ref.text).replace(ph, ref.text)
        return _one_line(s.strip(), 60)

    def _tree(self) -> ast.Expression:
        text = self.text
        if not isinstance(text, str):
            raise BoundError(f"bound: must be a string, got {type(text).__name__}")
        if not text.strip():
            raise BoundError("bound: empty expression")
        if len(text) > MAX_CHARS:
            self.fail(f"too long ({len(text)} characters, at most {MAX_CHARS})")
        bad = [c for c in text if not (c.isascii() and (c.isprintable() or c in " \t\n\r"))]
        if bad:
            self.fail(f"character {bad[0]!r} not allowed (ASCII only)")
        self.src = self.rewrite().strip()
        try:
            tree = ast.parse(self.src, mode="eval")
        except SyntaxError as e:
            self.fail(f"syntax error: {e.msg}")
        except (RecursionError, MemoryError, ValueError):
            self.fail("expression too complex to parse")
        self._whitelist(tree)
        return tree

    def parse(self) -> Bound:
        out = self._bool(self._tree().body, 0)
        return Bound(self.text, out, tuple(self.refs.values()), frozenset(self.names))

    def parse_value(self) -> tuple:
        return self._value(self._tree().body, 0)

    def _whitelist(self, tree) -> None:
        stack = [(tree, None)]
        while stack:
            node, parent = stack.pop(0)
            if not isinstance(node, _ALLOWED):
                name = type(node).__name__
                what = _DESCRIBE.get(name, name)
                if name == "Subscript":
                    self.fail(f"subscript '{self.seg(node, parent)}' not allowed; the bracketed forms are {atom_forms()}"
                              " (no space between the letter, the sign and '[')")
                if isinstance(node, (ast.cmpop, ast.operator, ast.unaryop, ast.boolop)):
                    self.fail(f"{what} not allowed in '{self.seg(node, parent)}'; operators: + - * / ** < <= > >= == and or")
                self.fail(f"{what} '{self.seg(node, parent)}' not allowed")
            if isinstance(node, ast.Constant) and (isinstance(node.value, bool) or not isinstance(node.value, (int, float))):
                self.fail(f"constant '{self.seg(node, parent)}' not allowed; only numbers")
            if isinstance(node, ast.Call):
                if not (isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS):
                    self.fail(f"call of '{self.seg(node.func, node)}' not allowed; functions: {', '.join(FUNCTIONS)}")
                if node.keywords:
                    self.fail(f"keyword argument in '{self.seg(node, parent)}' not allowed")
            if isinstance(node, ast.Name):
                self._check_name(node, parent)
            stack.extend((c, node) for c in ast.iter_child_nodes(node))

    def _check_name(self, node: ast.Name, parent) -> None:
        nid = node.id
        if nid in self.refs or nid in self.variables:
            return
        if nid in FUNCTIONS:
            if isinstance(parent, ast.Call) and parent.func is node:
                return
            self.fail(f"'{nid}' is a function: call it, e.g. {nid}(x{', y' if FUNCTIONS[nid][0] > 1 else ''})")
        if nid in self.signed:
            names, _, form = self.signed[nid]
            h0, h1 = (names.heads + names.heads)[:2]
            if form == "pair":
                self.fail(f"'{nid}' needs a head and two features: write {nid}{h0}[a,b] or {nid}{h1}[a,b] "
                          "(no space between the letter, the sign and '[')")
            arg = "a" if form == "feature" else "i"
            self.fail(f"'{nid}' needs a head and an index: write {nid}{h0}[{arg}] or {nid}{h1}[{arg}] "
                      "(no space between the letter, the sign and '[')")
        if nid in ("margin", "g"):
            self.fail(f"'{nid}' needs a sample index: write {nid}[i]")
        pair = next((f"{k}{n.heads[0]}[a,b], " for k, (n, _, form) in self.signed.items() if form == "pair"), "")
        where = next((n.help for n in registered() if n.help), "meanfield.core.bound_parse.variables()")
        self.fail(f"unknown name '{nid}' (names such as t, loss, T2, {pair}margin[i]; the full list: {where})")

    # -- translation into the private tree
    def _depth(self, depth: int) -> int:
        if depth > MAX_DEPTH:
            self.fail(f"expression nested too deeply (more than {MAX_DEPTH} levels)")
        return depth + 1

    def _bool(self, node, depth) -> tuple:
        depth = self._depth(depth)
        if isinstance(node, ast.BoolOp):
            op = "and" if isinstance(node.op, ast.And) else "or"
            return (op, tuple(self._bool(v, depth) for v in node.values))
        if isinstance(node, ast.Compare):
            ops = tuple(_CMP[type(o)] for o in node.ops)
            operands = (self._value(node.left, depth),) + tuple(self._value(c, depth) for c in node.comparators)
            return ("cmp", ops, operands)
        self.fail(f"a bound must be a comparison such as 'loss <= 0.1' (comparisons may be joined by and/or); "
                  f"got '{self.seg(node)}'")

    def _value(self, node, depth) -> tuple:
        depth = self._depth(depth)
        if isinstance(node, ast.Constant):
            try:
                v = float(node.value)
            except OverflowError:
                v = math.inf
            if not math.isfinite(v):  # 1e400 parses as inf: a number the comparison cannot represent
                try:  # a long integer: count all its digits (beyond Python's 4300-digit str limit: the segment)
                    text = str(node.value) if isinstance(node.value, int) else self.seg(node)
                except ValueError:
                    text = self.seg(node)
                text = text if len(text) <= 24 else f"{text[:12]}...{text[-6:]} ({len(text)} characters)"
                self.fail(f"number '{text}' too large (beyond {sys.float_info.max:.3g})")
            return ("const", v)
        if isinstance(node, ast.Name):
            if node.id in self.refs:
                return ("ref", self.refs[node.id])
            self.names.add(node.id)
            return ("var", node.id)
        if isinstance(node, ast.UnaryOp):
            x = self._value(node.operand, depth)
            return ("neg", x) if isinstance(node.op, ast.USub) else x
        if isinstance(node, ast.BinOp):
            out = ("bin", _BIN[type(node.op)], self._value(node.left, depth), self._value(node.right, depth))
            if out[2][0] == "const" and out[3][0] == "const":  # a constant part must be a representable number
                a, b = out[2][1], out[3][1]
                try:
                    with np.errstate(all="ignore"):
                        v = {"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else math.nan,
                             "**": a ** b if a > 0 or float(b).is_integer() else math.nan}[out[1]]
                except (OverflowError, ZeroDivisionError):
                    v = math.inf
                if isinstance(v, complex) or not math.isfinite(v):
                    self.fail(f"'{self.seg(node)}' is not a representable number (it overflows or is undefined); "
                              f"its value must be finite, at most {sys.float_info.max:.3g}")
                return ("const", float(v))
            return out
        if isinstance(node, ast.Call):
            name = node.func.id
            lo, hi = FUNCTIONS[name]
            nargs = len(node.args)
            if nargs < lo or (hi is not None and nargs > hi):
                want = f"exactly {lo} argument" if hi == lo else f"{lo} or more arguments"
                extra = " (pointwise at each time, not a minimum over time)" if name in ("min", "max") else ""
                self.fail(f"{name}() takes {want}{extra}; got {nargs} in '{self.seg(node)}'")
            return ("call", name, tuple(self._value(a, depth) for a in node.args))
        if isinstance(node, (ast.Compare, ast.BoolOp)):
            self.fail(f"comparison '{self.seg(node)}' used as a number; comparisons may only be joined by and/or")
        self.fail(f"'{self.seg(node)}' not allowed")  # unreachable after the whitelist


def parse_bound(text: str) -> Bound:
    """Parse a bound: an inequality over a run's variables (the module docstring has the grammar).

    Checks everything that does not depend on a run; :func:`evaluate` checks the
    rest (feature names, sample indices, stage ends) against the run. Nothing
    is evaluated as Python: the text is parsed against a whitelist.

    Parameters
    ----------
    text : str
        The inequality, e.g. ``"S+[c1,v1] >= 0.5 * omega**2"`` or
        ``"min_margin >= 0.5"`` (comparisons may be chained and joined by
        ``and`` / ``or``).

    Returns
    -------
    Bound
        The parsed bound.

    Raises
    ------
    BoundError
        One line naming the offending part (an unknown name, a forbidden
        construct, a missing comparison, ...).

    Examples
    --------
    >>> sorted(parse_bound("loss <= log(2) and T2 < 1000").names)
    ['T2', 'loss']
    >>> parse_bound("__import__('os')")
    Traceback (most recent call last):
    ...
    meanfield.core.bound_parse.BoundError: bound "__import__('os')": call of '__import__' not allowed; functions: abs, exp, log, sqrt, min, max
    """
    return _Parser(text).parse()
