"""The engine's scalar kernels rewritten for W trajectories at once (lanes), by a source transform.

``meanfield.engine.kernels`` holds the mathematics of one trajectory's GD
step once, as scalar loops (``eng_loss_grads`` and the ``_hot`` helpers it
inlines, ``eng_update``, ``eng_criterion``, the primitives of
``meanfield.core.activations``). This module produces their lane versions
from that source (Python ``ast``), never by hand: every array that holds a
trajectory's numbers (the state ``y``, ``out``, and the scratch ``u``,
``margin``, ``zb``, ``f``, ``df``, ``G``, ``gflat``, ``T``, ``p``, ``v``, ``om``,
``tk``, ``Xm``, ``Ym``, ``tmp``, ``pa``) gets a trailing lane axis, ``Y[entry,
lane]`` (the lane last and contiguous, as the mixture's hand-written lanes,
``meanfield.models.mixture.vectorised``), a per-trajectory scalar (``eta``,
the criterion's ``loss``) a (W,) row. Everything else (the description's
tables and data, ``hi`` ... ``consistent``, the key counts ``lka``, and the
loop indices over them) is the same for every lane, so every branch on a
head's kind and every loop over tokens stays one branch and one loop for the
block. The rules (:class:`_Fn`):

* a local is lane-valued when some assignment to it reads a lane value or
  runs under a lane-dependent test (a fixpoint over the function); it becomes
  a row of the lane scratch ``_LS`` (rows x W, preallocated: the kernels run
  with ``_nrt=False`` and allocate nothing);
* a statement that touches lane values becomes ``for _ln in range(W): <the
  statement, each lane value indexed [..., _ln]>``: the innermost loop runs
  over lanes (the loop LLVM vectorises; no ``fastmath``, so nothing is
  reordered or contracted: each lane performs the scalar kernel's operations
  in its order);
* an ``if`` on a lane value whose branches only assign (``if z > mx: mx = z``,
  ``if uu > 0.0: acc += uu``, ``if c != 0.0: <accumulate>``, ``if dz != 0.0``)
  is predicated: its test is kept per lane in a mask row and each assignment
  becomes ``x = <new> if mask else x`` (bit for bit the branch);
* the exact-zero skips of ``ZERO_SKIPS`` (``if d == 0.0: continue`` ...)
  skip only when every lane would; a lane whose value is zero then adds its
  terms, each a product with that exact zero, which changes at most the sign
  of a zero for finite gradients (the reason is given per site); the span
  trims of ``SPAN_TRIMS`` (``while b0 < N and Xm[c, b0] == 0.0``) trim
  the zeros every lane has (the union of the lanes' spans), the same argument.
  Both tables (``meanfield.engine.lanes_rules``) hold, per site, the checksum
  of the statements its reason was reviewed with (its loop's body);
* a function returning lane values writes them into its return rows of
  ``_LS``; calls between kernels stay calls (inlined by numba, as in the
  scalar kernels) of their lane versions; a scalar primitive
  (:data:`ELEMENTWISE`: ``relu_prime``, ``softplus_neg_e``, ``math.exp`` ...)
  is called per lane, unchanged (``vector_exp``: ``math.exp`` by ``exp_lane``).

Anything else is refused at transform time (:class:`LaneTransformError`,
naming the kernels.py line), so that an edit of ``kernels.py`` cannot
silently give wrong lane code: the edit then needs a rule here. Refused are
a lane-dependent loop bound or index; a ``return`` or ``break`` under a lane
test; a call inside a predicated branch; a lane value (a lane kernel's result
included) stored into an array without a lane axis or a uniform name; a call
of a kernel with lane arguments anywhere but as a statement or an
assignment's whole value; a lane array's shape but as ``.shape[i]``, ``i`` a
constant >= 0 (``.shape[-1]`` would be the lane count), ``len`` of a lane
value; a zero skip or span trim whose loop's body no longer has its table's
checksum (re-check the reason, then update the checksum), or a second site
with its key in one function; a statement kind the rules do not name.

Results: a lane's state, losses, margins and criteria are the scalar
kernels' to the bit, but for the sign of zero entries where a zero skip or
span trim computed a zero term anyway (``==`` holds everywhere:
``tests/test_engine_lanes.py``); with ``vector_exp`` (``math.exp`` by
``exp_lane``, within an ulp) to rounding instead. The lane kernels are compiled with numba's
numpy error model (a zero divisor would give inf or nan, which the lane
then reports as non-finite, where the scalar kernels would raise; their
divisors are never zero: softmax sums, key counts, norms + ``NGD_EPS``):
the zero-divisor check of the default model keeps LLVM from vectorising a
loop. The generated module is written under :func:`cache_dir` as a file
named by a checksum of the kernels' source (``kernels.SOURCE_SHA1``), of
this transform's (and its rules') and of the files its code calls into
(``core/activations.py``, ``core/lanes.py``, ``core/lane_exp.py``), and imported under a name
fixed by its location, so that numba's on-disk cache of its functions holds
across processes. The lane driver: ``meanfield.engine.lanes_batch``.
"""

from __future__ import annotations

import ast
import copy
import functools
import hashlib
import importlib.util
import sys
from pathlib import Path

from . import kernels
from .lanes_files import _written, cache_dir  # noqa: F401 (cache_dir: public here)
from .lanes_rules import ELEMENTWISE, ROOTS, SPAN_TRIMS, UNIFORM_CALLS, VECTOR_CALLS, ZERO_SKIPS, site_sha

LN = "_ln"  # the lane index of the generated loops
LS = "_LS"  # the lane scratch (rows x W)


class LaneTransformError(NotImplementedError):
    r"""A construct of the scalar kernels the lane transform has no rule for (raised at transform time, with
    the function, its line in kernels.py and the statement).

    Examples
    --------
    >>> import ast
    >>> from meanfield.engine import kernels
    >>> defs = dict(_module_tree(kernels.SOURCE_SHA1))
    >>> defs["eng_sign"] = ast.parse("def eng_sign(y, hi, hf, k):\n    while y[0] > 0.0:\n        k += 1\n"
    ...                              "    return y[k]").body[0]
    >>> transform(defs)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    meanfield.engine.lanes.LaneTransformError: lanes: eng_sign (kernels.py line 2): a loop whose condition ...
    """


def _src(e) -> str:
    return ast.unparse(e)


def _always_returns(stmts) -> bool:
    """Whether every path through ``stmts`` ends in a return (its last statement a return, or an if whose
    branches both always return)."""
    if not stmts:
        return False
    last = stmts[-1]
    if isinstance(last, ast.Return):
        return True
    return isinstance(last, ast.If) and _always_returns(last.body) and _always_returns(last.orelse)


def _opsym(op) -> str:
    """The symbol of a binary operator (``+`` for ``ast.Add()``)."""
    return _src(ast.BinOp(ast.Name("a"), op, ast.Name("b")))[2:-2]


@functools.lru_cache(maxsize=1)
def _module_tree(sha: str) -> dict:
    """name -> FunctionDef of every function of kernels.py (read from the file this process imported)."""
    text = Path(kernels.__file__).read_bytes()
    if hashlib.sha1(text).hexdigest() != sha:
        raise LaneTransformError("lanes: meanfield/engine/kernels.py changed on disk since this process imported "
                                 "it; restart the process")
    tree = ast.parse(text.decode())
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


class _Lane:
    """A loop over lanes at indentation ``ind`` with the statements ``body`` (fused with its neighbours)."""

    def __init__(self, ind: str, body: list):
        self.ind = ind
        self.body = body

    def lines(self) -> list:
        return [f"{self.ind}for {LN} in range(_W):"] + [f"{self.ind}    {b}" for b in self.body]


class _Transform:
    """One transform of the kernel tree: the function instances (a function and which of its parameters are
    lane arrays / lane scalars), the rows of the lane scratch they use, the generated source."""

    def __init__(self, defs: dict, vector_exp: bool = False):
        self.defs = defs
        self.vector_exp = vector_exp
        self.inst: dict = {}
        self.order: list = []
        self.nrows = 0
        self.globals_used: set = set()

    def rows(self, k: int) -> list:
        r = list(range(self.nrows, self.nrows + k))
        self.nrows += k
        return r

    def instance(self, name: str, arr, sca) -> "_Fn":
        key = (name, frozenset(arr), frozenset(sca))
        fn = self.inst.get(key)
        if fn is None:
            if name not in self.defs:
                raise LaneTransformError(f"lanes: {name} is not a function of kernels.py")
            fn = _Fn(self, name, arr, sca, len(self.inst))
            self.inst[key] = fn
            fn.analyse()
        return fn

    def emit_all(self, roots) -> list:
        """Emit the roots and every instance their emitted code calls (those of the analysis only: an
        instance built for a fixpoint iteration's provisional lane set is never emitted)."""
        todo, done = list(roots), []
        while todo:
            fn = todo.pop(0)
            if fn in done:
                continue
            self.called = []
            fn.lines = fn.emit()
            done.append(fn)
            todo += self.called
        self.order = done
        return done


class _Fn:
    """One lane version of a kernel function (see the module docstring for the rules)."""

    def __init__(self, tr: _Transform, name: str, arr, sca, idx: int):
        self.tr = tr
        self.name = name
        self.node = copy.deepcopy(tr.defs[name])
        self.params = [a.arg for a in self.node.args.args]
        self.arr = set(arr)
        self.sca = set(sca)
        self.loc: set = set()
        self.row: dict = {}
        self.ret = 0  # lane return values (0: the function returns uniform values or nothing)
        self.ret_rows: list = []
        self.out = f"{name}__l{idx}"
        self.nsite = 0
        self.body = [s for s in self.node.body
                     if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]  # the docstring
        self._check_sites()
        self._rename_loop_vars()
        if self.node.args.vararg or self.node.args.kwarg or self.node.args.kwonlyargs or self.node.args.defaults:
            self.fail(self.node, "only plain positional parameters")

    def _rename_loop_vars(self):
        """A loop variable whose name is also assigned by another statement (``for z in ...`` then ``z = 0.0``:
        the name is a uniform index in one place, maybe a lane value in the other) is renamed inside its loop."""
        assigned = set()
        for n in ast.walk(ast.Module(self.body, [])):
            if isinstance(n, (ast.Assign, ast.AugAssign)):
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                    assigned.update(self._targets(t))
        k = 0
        for n in ast.walk(ast.Module(self.body, [])):
            if isinstance(n, ast.For) and isinstance(n.target, ast.Name) and n.target.id in assigned:
                old, k = n.target.id, k + 1
                new = f"_{old}_{k}"
                for m in ast.walk(ast.Module(n.body, [])):
                    if isinstance(m, ast.Name) and m.id == old:
                        if not isinstance(m.ctx, ast.Load):
                            self.fail(n, "a loop variable assigned inside its loop")
                        m.id = new
                n.target.id = new

    def _check_sites(self):
        """Each zero skip and span trim is the one reviewed: no other site of this function has its key, and
        its loop's body has the checksum of its entry."""
        sites, seen = [], {}

        def visit(stmts, loop_body):
            for st in stmts:
                if isinstance(st, ast.If) and len(st.body) == 1 and isinstance(st.body[0], ast.Continue) \
                        and not st.orelse and (self.name, _src(st.test)) in ZERO_SKIPS:
                    key = (self.name, _src(st.test))
                    sites.append((st, key, "zero skip", "ZERO_SKIPS", ZERO_SKIPS[key][0], site_sha(loop_body)))
                elif isinstance(st, ast.While) and isinstance(st.test, ast.BoolOp) and isinstance(st.test.op, ast.And) \
                        and (self.name, _src(st.test.values[-1])) in SPAN_TRIMS:
                    key = (self.name, _src(st.test.values[-1]))
                    sites.append((st, key, "span trim", "SPAN_TRIMS", SPAN_TRIMS[key], site_sha(loop_body)))
                if isinstance(st, (ast.For, ast.While)):
                    visit(st.body, st.body)
                elif isinstance(st, ast.If):
                    visit(st.body + st.orelse, loop_body)

        visit(self.body, self.body)
        for st, key, what, tab, want, got in sites:
            if key in seen:
                self.fail(st, f"a second {what} with the test {key[1]!r} (the first at kernels.py line {seen[key]}): "
                              f"each site needs its own reviewed entry in {tab}")
            seen[key] = getattr(st, "lineno", "?")
        for st, key, what, tab, want, got in sites:
            if got != want:
                self.fail(st, f"the {what} guards different statements than the reviewed ones (its loop's body has "
                              f"checksum {got}, not {want}): re-check its reason in {tab} and update the checksum")

    def fail(self, node, why: str):
        line = getattr(node, "lineno", "?")
        raise LaneTransformError(f"lanes: {self.name} (kernels.py line {line}): {why}: "
                                 f"{_src(node).splitlines()[0] if isinstance(node, ast.AST) else ''}")

    # ------------------------------------------------------------ lane-ness

    def lane_names(self) -> set:
        return self.arr | self.sca | self.loc

    def callee(self, call: ast.Call):
        """The lane instance a call of a kernel function with lane arguments runs, else None."""
        f = call.func
        if not (isinstance(f, ast.Name) and f.id in self.tr.defs):
            return None
        if call.keywords:
            self.fail(call, "keyword arguments in a kernel call")
        arr, sca = set(), set()
        fdef = self.tr.defs[f.id]
        pnames = [a.arg for a in fdef.args.args]
        if len(pnames) != len(call.args):
            self.fail(call, "a call with another number of arguments than parameters")
        for p, a in zip(pnames, call.args):
            if isinstance(a, ast.Name) and a.id in self.arr:
                arr.add(p)
            elif isinstance(a, ast.Name) and a.id in (self.sca | self.loc):
                sca.add(p)
            elif self.is_lane(a):
                self.fail(call, "a lane-valued expression as an argument (only a lane array or local by name)")
        if not arr and not sca:
            return None
        return self.tr.instance(f.id, arr, sca)

    def is_lane(self, e) -> bool:
        if e is None:
            return False
        if isinstance(e, ast.Attribute):
            if e.attr == "shape":
                return False  # a lane array's leading dimensions are its scalar shape
            return self.is_lane(e.value)
        if isinstance(e, ast.Name):
            return e.id in self.lane_names()
        if isinstance(e, ast.Call):
            inst = self.callee(e)
            if inst is not None:
                return inst.ret > 0
            return any(self.is_lane(a) for a in e.args)
        return any(self.is_lane(c) for c in ast.iter_child_nodes(e))

    def _targets(self, t) -> list:
        if isinstance(t, ast.Name):
            return [t.id]
        if isinstance(t, ast.Tuple):
            return [n for x in t.elts for n in self._targets(x)]
        return []

    def _zero_skip(self, st) -> bool:
        return (isinstance(st, ast.If) and len(st.body) == 1 and isinstance(st.body[0], ast.Continue)
                and not st.orelse and (self.name, _src(st.test)) in ZERO_SKIPS)

    def _scan(self, stmts, lc: bool) -> bool:
        changed = False
        for st in stmts:
            if isinstance(st, (ast.Assign, ast.AugAssign)):
                tgts = st.targets if isinstance(st, ast.Assign) else [st.target]
                lane = lc or self.is_lane(st.value) or (isinstance(st, ast.AugAssign) and self.is_lane(st.target))
                for t in tgts:
                    if lane:
                        for n in self._targets(t):
                            if n in self.params:
                                self.fail(st, "a parameter assigned a lane value")
                            if n not in self.loc:
                                self.loc.add(n)
                                changed = True
            elif isinstance(st, ast.If):
                if self._zero_skip(st):
                    continue
                lane = lc or self.is_lane(st.test)
                changed |= self._scan(st.body, lane)
                changed |= self._scan(st.orelse, lane)
            elif isinstance(st, (ast.For, ast.While)):
                changed |= self._scan(st.body, lc)
                if st.orelse:
                    self.fail(st, "a loop with an else branch")
        return changed

    def analyse(self):
        while self._scan(self.body, False):
            pass
        rets = [n for n in ast.walk(ast.Module(self.body, [])) if isinstance(n, ast.Return)]
        lane = [r for r in rets if r.value is not None and self.is_lane(r.value)]
        if lane:
            arity = {len(r.value.elts) if isinstance(r.value, ast.Tuple) else 1 for r in rets if r.value is not None}
            if len(arity) != 1 or any(r.value is None for r in rets):
                self.fail(lane[0], "returns of different arities")
            self.ret = arity.pop()
            self.ret_rows = self.tr.rows(self.ret)
            if not _always_returns(self.body):
                self.fail(self.node, "a function returning lane values that can end without a return")
        for n in sorted(self.loc):
            self.row[n] = self.tr.rows(1)[0]
        self._check_calls_and_shapes()

    def _check_calls_and_shapes(self):
        """A kernel call with lane arguments only as a statement or an assignment's whole value (the forms
        emit_call transforms; elsewhere its text would call the scalar kernel); a lane array's shape only as
        ``.shape[i]``, i a constant >= 0 (its leading dimensions: the last is the lanes'), no ``len`` of a lane
        value."""
        whole, shape_ok = set(), set()
        for n in ast.walk(ast.Module(self.body, [])):
            if isinstance(n, (ast.Expr, ast.Assign)) and isinstance(n.value, ast.Call):
                whole.add(id(n.value))
            if (isinstance(n, ast.Subscript) and isinstance(n.value, ast.Attribute) and n.value.attr == "shape"
                    and isinstance(n.value.value, ast.Name) and n.value.value.id in self.arr
                    and isinstance(n.slice, ast.Constant) and type(n.slice.value) is int and n.slice.value >= 0):
                shape_ok.add(id(n.value))
        for n in ast.walk(ast.Module(self.body, [])):
            if (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in self.tr.defs
                    and id(n) not in whole and self.callee(n) is not None):
                self.fail(n, "a kernel call with lane arguments inside an expression (only as a statement, or "
                             "as the whole value of an assignment)")
            if isinstance(n, ast.Attribute) and n.attr == "shape" and id(n) not in shape_ok and self.is_lane(n.value):
                self.fail(n, "the shape of a lane value other than .shape[i] of a lane array, i a constant >= 0")
            if (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "len"
                    and any(self.is_lane(a) for a in n.args)):
                self.fail(n, "len() of a lane value")

    # ------------------------------------------------------------ expressions

    def lx(self, e) -> str:
        """Source of expression e evaluated in lane ``_ln``."""
        fn = self

        class R(ast.NodeTransformer):
            def visit_Attribute(self, node):
                if node.attr == "shape":
                    return node
                if isinstance(node.value, ast.Name) and node.value.id == "math":
                    return node
                fn.fail(node, "an attribute of a lane value")

            def visit_Subscript(self, node):
                if isinstance(node.value, ast.Name) and node.value.id in fn.arr:
                    if fn.is_lane(node.slice):
                        fn.fail(node, "a lane-dependent index")
                    idx = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
                    return ast.Subscript(node.value, ast.Tuple(idx + [ast.Name(LN)]), node.ctx)
                if fn.is_lane(node.slice):
                    fn.fail(node, "a lane-dependent index")
                if isinstance(node.value, ast.Name) and node.value.id in fn.lane_names():
                    fn.fail(node, "a lane scalar indexed")
                return node

            def visit_Name(self, node):
                if node.id in fn.loc:
                    return ast.Subscript(ast.Name(LS), ast.Tuple([ast.Constant(fn.row[node.id]), ast.Name(LN)]),
                                         node.ctx)
                if node.id in fn.sca:
                    return ast.Subscript(ast.Name(node.id), ast.Name(LN), node.ctx)
                if node.id in fn.arr:
                    fn.fail(node, "a lane array used as a value")
                return node

            def visit_Call(self, node):
                f = node.func
                ok = (isinstance(f, ast.Name) and f.id in ELEMENTWISE) or (
                    isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "math")
                if not ok:
                    if any(fn.is_lane(a) for a in node.args):
                        fn.fail(node, "a call inside a lane expression that is not elementwise")
                    return node
                node.args = [self.visit(a) for a in node.args]
                if fn.tr.vector_exp and _src(f) in VECTOR_CALLS:  # math.exp -> exp_lane (lanes_rules.VECTOR_CALLS)
                    node.func = ast.Name(VECTOR_CALLS[_src(f)], ast.Load())
                return node

            def visit_Lambda(self, node):
                fn.fail(node, "a lambda")

        return _src(R().visit(copy.deepcopy(e)))

    def ux(self, e) -> str:
        if self.is_lane(e):
            self.fail(e, "a lane value where a uniform one is needed")
        for n in ast.walk(e):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name):
                if n.func.id not in UNIFORM_CALLS and n.func.id not in self.tr.defs:
                    self.fail(n, f"a call of {n.func.id}")
            if isinstance(n, (ast.Lambda, ast.ListComp, ast.GeneratorExp, ast.DictComp, ast.SetComp, ast.Await,
                              ast.Yield, ast.NamedExpr)):
                self.fail(n, "a construct the transform has no rule for")
        return _src(e)

    # ------------------------------------------------------------ statements

    def site(self) -> str:
        self.nsite += 1
        return f"_all{self.nsite}"

    def mask_of(self, mask) -> str:
        return f"{LS}[{mask}, {LN}] != 0.0"

    def lane_stmt(self, text: str, ind: str) -> list:
        return [_Lane(ind, [text])]

    def assign_text(self, tgt, val: str, mask) -> str:
        t = self.lx(tgt)
        if mask is None:
            return f"{t} = {val}"
        return f"{t} = ({val}) if {self.mask_of(mask)} else {t}"

    def emit_call(self, st, call, tgts, ind, mask) -> list:
        inst = self.callee(call)
        if inst is None:
            return None
        if mask is not None:
            self.fail(st, "a kernel call under a lane-dependent test")
        args = []
        for a in call.args:
            if isinstance(a, ast.Name) and a.id in self.loc:
                args.append(f"{LS}[{self.row[a.id]}]")
            else:
                args.append(_src(a) if (isinstance(a, ast.Name) and a.id in self.lane_names()) else self.ux(a))
        text = f"{inst.out}({', '.join(args + [LS])})"
        self.tr.called.append(inst)
        if not tgts:
            return [ind + text]
        if inst.ret == 0:
            return [f"{ind}{' = '.join(self.ux_target(t) for t in tgts)} = {text}"]
        out = [ind + text]
        for t in tgts:
            elts = t.elts if isinstance(t, ast.Tuple) else [t]
            if len(elts) != inst.ret:
                self.fail(st, "a call's results unpacked into another number of targets")
            for x, r in zip(elts, inst.ret_rows):
                out += self.lane_stmt(self.assign_text(self.lane_target(st, x), f"{LS}[{r}, {LN}]", None), ind)
        return out

    def lane_target(self, st, t):
        """t, the target of a lane value (a lane local, or an entry of a lane array), else a refusal."""
        if isinstance(t, ast.Subscript) and not (isinstance(t.value, ast.Name) and t.value.id in self.arr):
            self.fail(st, "a lane value stored into an array without a lane axis")
        if isinstance(t, ast.Name) and t.id not in self.loc:
            self.fail(st, "a lane value assigned to a uniform name")
        if not isinstance(t, (ast.Name, ast.Subscript)):
            self.fail(st, "a lane value assigned to a target that is not a name or an entry")
        return t

    def ux_target(self, t) -> str:
        for n in self._targets(t):
            if n in self.lane_names():
                self.fail(t, "a lane local assigned a uniform call's result")
        if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id in self.lane_names():
            self.fail(t, "a lane array assigned a uniform call's result")
        return _src(t)

    def emit(self) -> list:
        params = self.params + [LS]
        lines = [f"def {self.out}({', '.join(params)}):", f"    _W = {LS}.shape[1]"]
        for x in self.block(self.body, "    ", None):
            lines += x.lines() if isinstance(x, _Lane) else [x]
        return lines

    def block(self, stmts, ind: str, mask) -> list:
        """The statements' lines, adjacent loops over lanes at one indentation fused into one (each lane's
        statements stay in their order and lanes never read each other's entries: the fusion is exact)."""
        out = []
        for st in stmts:
            for x in self.stmt(st, ind, mask):
                if isinstance(x, _Lane) and out and isinstance(out[-1], _Lane) and out[-1].ind == x.ind:
                    out[-1] = _Lane(x.ind, out[-1].body + x.body)
                else:
                    out.append(x)
        return out or [ind + "pass"]

    def stmt(self, st, ind: str, mask) -> list:
        if isinstance(st, ast.Expr):
            if isinstance(st.value, ast.Constant):
                return []
            if isinstance(st.value, ast.Call):
                got = self.emit_call(st, st.value, [], ind, mask)
                if got is not None:
                    return got
                if mask is None and not self.is_lane(st.value):
                    return [ind + self.ux(st.value)]
            self.fail(st, "an expression statement that is not a kernel call")
        if isinstance(st, (ast.Assign, ast.AugAssign)):
            tgts = st.targets if isinstance(st, ast.Assign) else [st.target]
            if isinstance(st, ast.Assign) and isinstance(st.value, ast.Call):
                got = self.emit_call(st, st.value, tgts, ind, mask)
                if got is not None:
                    return got
            lane = mask is not None or self.is_lane(st.value) or any(self.is_lane(t) for t in tgts)
            if not lane:
                if isinstance(st, ast.AugAssign):
                    return [f"{ind}{self.ux_target(st.target)} {_opsym(st.op)}= {self.ux(st.value)}"]
                return [f"{ind}{' = '.join(self.ux_target(t) for t in tgts)} = {self.ux(st.value)}"]
            if len(tgts) != 1 or isinstance(tgts[0], ast.Tuple):
                self.fail(st, "a lane assignment to several targets")
            t = self.lane_target(st, tgts[0])
            if isinstance(st, ast.AugAssign):
                val = f"{self.lx(t)} {_opsym(st.op)} ({self.lx(st.value)})"
            elif isinstance(st.value, ast.Constant) and isinstance(st.value.value, bool):
                val = "1.0" if st.value.value else "0.0"  # a lane flag: a row of floats, read by its truth
            else:
                val = self.lx(st.value)
            return self.lane_stmt(self.assign_text(t, val, mask), ind)
        if isinstance(st, ast.If):
            if self._zero_skip(st):
                if mask is not None:
                    self.fail(st, "a zero skip under a lane-dependent test")
                a = self.site()
                return [f"{ind}{a} = True", f"{ind}for {LN} in range(_W):",
                        f"{ind}    if not ({self.lx(st.test)}):", f"{ind}        {a} = False",
                        f"{ind}if {a}:", f"{ind}    continue"]
            if mask is None and not self.is_lane(st.test):
                out = [f"{ind}if {self.ux(st.test)}:"] + self.block(st.body, ind + "    ", None)
                if st.orelse:
                    out += [f"{ind}else:"] + self.block(st.orelse, ind + "    ", None)
                return out
            if mask is not None and not self.is_lane(st.test):  # a uniform test inside a predicated branch
                out = [f"{ind}if {self.ux(st.test)}:"] + self.block(st.body, ind + "    ", mask)
                if st.orelse:
                    out += [f"{ind}else:"] + self.block(st.orelse, ind + "    ", mask)
                return out
            for n in ast.walk(ast.Module(st.body + st.orelse, [])):
                if isinstance(n, (ast.Continue, ast.Break, ast.Return)):
                    self.fail(st, "a continue, break or return under a lane-dependent test")
            m1 = self.tr.rows(1)[0]
            outer = f"{self.mask_of(mask)} and " if mask is not None else ""
            test = self.lx(st.test)
            out = [_Lane(ind, [f"{LS}[{m1}, {LN}] = 1.0 if ({outer}({test})) else 0.0"])]
            m2 = None
            if st.orelse:
                m2 = self.tr.rows(1)[0]
                out[0].body.append(f"{LS}[{m2}, {LN}] = 1.0 if ({outer}not ({test})) else 0.0")
            out += self.block(st.body, ind, m1)
            if st.orelse:
                out += self.block(st.orelse, ind, m2)
            return out
        if isinstance(st, ast.For):
            if not isinstance(st.target, ast.Name) or st.target.id in self.lane_names():
                self.fail(st, "a loop variable that is not a uniform name")
            it = st.iter
            if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"):
                self.fail(st, "a loop over something other than range(...)")
            return [f"{ind}for {st.target.id} in {self.ux(it)}:"] + self.block(st.body, ind + "    ", mask)
        if isinstance(st, ast.While):
            if not self.is_lane(st.test):
                return [f"{ind}while {self.ux(st.test)}:"] + self.block(st.body, ind + "    ", mask)
            t = st.test
            if not (isinstance(t, ast.BoolOp) and isinstance(t.op, ast.And) and len(t.values) >= 2
                    and (self.name, _src(t.values[-1])) in SPAN_TRIMS and mask is None
                    and not any(self.is_lane(v) for v in t.values[:-1])):
                self.fail(st, "a loop whose condition depends on a lane value (not a span trim of SPAN_TRIMS)")
            uni = ast.BoolOp(ast.And(), t.values[:-1]) if len(t.values) > 2 else t.values[0]
            a = self.site()
            return ([f"{ind}while {self.ux(uni)}:", f"{ind}    {a} = True", f"{ind}    for {LN} in range(_W):",
                     f"{ind}        if not ({self.lx(t.values[-1])}):", f"{ind}            {a} = False",
                     f"{ind}    if not {a}:", f"{ind}        break"]
                    + self.block(st.body, ind + "    ", None))
        if isinstance(st, ast.Return):
            if mask is not None:
                self.fail(st, "a return under a lane-dependent test")
            if self.ret == 0:
                return [ind + ("return" if st.value is None else f"return {self.ux(st.value)}")]
            vals = st.value.elts if isinstance(st.value, ast.Tuple) else [st.value]
            out = []
            for v, r in zip(vals, self.ret_rows):
                out += self.lane_stmt(f"{LS}[{r}, {LN}] = {self.lx(v)}", ind)
            return out + [ind + "return"]
        if isinstance(st, (ast.Continue, ast.Break, ast.Pass)):
            if mask is not None and not isinstance(st, ast.Pass):
                self.fail(st, "a continue or break under a lane-dependent test")
            return [ind + _src(st)]
        self.fail(st, f"a {type(st).__name__} statement")


def transform(defs: dict | None = None, vector_exp: bool = False) -> tuple:
    """The lane kernels' source, transformed from the scalar kernels (the rules: the module docstring).

    Parameters
    ----------
    defs : dict or None
        name -> ``ast.FunctionDef`` of the kernel functions (default: kernels.py's, read from the file this
        process imported; the tests pass an edited tree to see a refusal).
    vector_exp : bool
        Inside the loops over lanes, ``math.exp`` by ``meanfield.core.lane_exp.exp_lane`` (vectorises; within
        an ulp, not bit for bit: :data:`~meanfield.engine.lanes_rules.VECTOR_CALLS`); False: unchanged.

    Returns
    -------
    tuple
        (source, roots): the generated module's source and, per root of :data:`ROOTS`, (its generated
        name, the rows of the lane scratch its lane results are left in).

    Raises
    ------
    LaneTransformError
        A construct without a rule.

    Examples
    --------
    >>> src, roots = transform()
    >>> roots["eng_update"][1], "def eng_loss_grads__l0(" in src
    ((), True)
    """
    tr = _Transform(defs if defs is not None else _module_tree(kernels.SOURCE_SHA1), bool(vector_exp))
    roots, insts = {}, []
    for name, (arr, sca) in ROOTS.items():
        inst = tr.instance(name, arr, sca)
        insts.append(inst)
        roots[name] = (inst.out, tuple(inst.ret_rows))
    tr.emit_all(insts)
    used = set()
    for fn in tr.order:
        for n in ast.walk(fn.node):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                used.add(n.id)
    head = ["# generated by meanfield.engine.lanes from meanfield/engine/kernels.py (sha1 "
            f"{kernels.SOURCE_SHA1}): do not edit", "import math", "from numba import njit",
            "from meanfield.core.lanes import NoAlias", "from meanfield.core.lane_exp import exp_lane", "from meanfield.engine import kernels as _K", ""]
    for n in sorted(used):
        if n != "math" and n in vars(kernels) and not n.startswith("__"):
            head.append(f"{n} = _K.{n}")
    head += ["", f"ROWS = {max(tr.nrows, 1)}"]
    for name, (out, rows) in roots.items():
        head.append(f"RET_{name} = {rows!r}")
    body = []
    for fn in tr.order:
        is_root = fn.out in {v[0] for v in roots.values()}
        deco = ('@njit(cache=True, nogil=True, _nrt=False, error_model="numpy", pipeline_class=NoAlias)' if is_root
                else '@njit(inline="always", _nrt=False, error_model="numpy")')
        body += ["", "", deco] + fn.lines
    for name, (out, rows) in roots.items():
        body.append(f"{name}_lanes = {out}")
    return "\n".join(head + body) + "\n", roots


@functools.lru_cache(maxsize=2)
def module(vector_exp: bool = False):
    """The lane kernels (the generated module, imported): ``eng_loss_grads_lanes``, ``eng_update_lanes``,
    ``eng_criterion_lanes`` (each: the scalar kernel's parameters, the lane arrays and scalars with a trailing
    lane axis, then the lane scratch ``_LS`` of ``ROWS`` rows), ``RET_<root>`` (the rows of ``_LS`` their
    lane results are left in), ``ROWS`` and ``TAG`` (the checksum naming the file). ``vector_exp``: the
    variant with ``exp_lane`` in the loops over lanes (:func:`transform`; its own file and tag).

    Parameters
    ----------
    vector_exp : bool

    Returns
    -------
    module

    Examples
    --------
    >>> m = module()
    >>> len(m.RET_eng_loss_grads), len(m.RET_eng_criterion), m.RET_eng_update
    (1, 1, ())
    """
    src, _ = transform(vector_exp=bool(vector_exp))
    from ..core import activations, lane_exp
    from ..core import lanes as core_lanes
    from . import lanes_rules

    # the name covers what the compiled code is made of: the generated source (it names kernels.py's sha1),
    # this transform, and the files of what it calls or compiles with (numba's cache does not track them)
    parts = [src.encode()] + [Path(f).read_bytes() for f in (__file__, lanes_rules.__file__, activations.__file__,
                                                          core_lanes.__file__, lane_exp.__file__)]
    tag = hashlib.sha1(b"".join(parts)).hexdigest()[:16]
    try:
        path = _written(cache_dir(), tag, src)
    except OSError as e:  # an unwritable cache (a read-only home): this process's own folder, one warning
        import logging
        import tempfile

        path = _written(Path(tempfile.mkdtemp(prefix="meanfield-lanes-")), tag, src)
        logging.getLogger("meanfield").warning(
            "lane kernels: cannot write to %s (%s); using %s for this process (set MEANFIELD_LANES_DIR to a "
            "writable folder to keep them)", cache_dir(), e.strerror or e, path.parent)
    name = f"_meanfield_engine_lanes_{tag}"
    mod = sys.modules.get(name)
    for attempt in (0, 1):
        if mod is not None:
            break
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod  # numba's cache re-imports the defining module by name
        try:
            spec.loader.exec_module(mod)
        except FileNotFoundError:  # pruned by another process just now (lanes_files.prune): written again
            del sys.modules[name]
            mod = None
            if attempt:
                raise
            path = _written(path.parent, tag, src)
        except BaseException:
            del sys.modules[name]
            raise
    mod.TAG = tag
    return mod

