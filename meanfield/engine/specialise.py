"""The engine's generic GD loop compiled for one description (``specialise=True``).

:func:`meanfield.engine.kernels.gd_advance` is one compiled loop for every
description: each step reads the head tables (``hi``, ``hf``), the Gram
metric ``Gr`` and the data (``nzi``, ``nzc``, ``cnt``, ...) as run-time
arrays, so every branch on a head's kind and every loop over a token's
features is decided while it runs. :func:`gd_advance` compiles the *same
source* (the kernels' ``eng_gd_advance_into``, ``eng_loss_grads`` and
``eng_update``, inlined into one function) with those arrays as compile-time
constants: LLVM folds the branches and unrolls the short loops. There is no
second copy of the mathematics, and the arithmetic is the same in the same
order: the state equals the generic loop's bit for bit (tested in
``tests/test_engine_specialise.py``).

The price is compile time: about 20 s the first time for a description on a
2-core machine, then numba's on-disk cache loads it (under a qualified name
carrying a checksum of the frozen arrays and of the code this process runs:
:func:`_code_digest`, ``kernels.SOURCE_SHA1``) in well under a second. It
pays for long runs and for many runs of one description (a sweep over eta or
omega, which are run-time arguments, shares one compiled loop; batches:
:func:`batch_loop`). Data sets over :data:`MAX_TOKENS` tokens or
:data:`MAX_FROZEN_BYTES` bytes of tables are refused: they would be compiled in.

Example
-------
>>> import meanfield.engine as me  # doctest: +SKIP
>>> r = me.run(me.load("docs/examples/majority.toml", steps=50), specialise=True)  # doctest: +SKIP
"""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import os
import textwrap
import types

import numpy as np
from numba import njit

from ..core.config import ConfigError
from . import kernels

#: the most tokens (sequences x positions) a specialised loop compiles in
MAX_TOKENS = 4096
#: the most bytes of frozen arrays (tables, Gram metric, data) a specialised loop compiles in
MAX_FROZEN_BYTES = 1 << 20
#: seconds a specialised loop takes to compile, for the first-use notice (2 cores, K = 2, L = 3: 19-23 s)
COMPILE_S = 25


#: the kernels' arguments that become compile-time constants (names of ``eng_gd_advance_into``'s parameters)
FROZEN = ("hi", "hf", "qv", "Gr", "grp", "Gam", "nzi", "nzc", "nzn", "cnt", "last", "leff", "target", "weight",
          "kind", "r0", "consistent")


def _inline(fn, ns):
    """``fn`` (a kernels dispatcher) rebuilt over ``ns`` and compiled to be inlined into its caller."""
    py = fn.py_func
    return njit(inline="always", _nrt=False)(types.FunctionType(py.__code__, ns, py.__name__, py.__defaults__, None))


def _const_bytes(k) -> bytes:
    """A code object's constant as bytes that depend on its value only (a frozenset's members sorted: their
    order follows string hashing, which changes from process to process)."""
    if isinstance(k, types.CodeType):
        return _code_bytes(k)
    if isinstance(k, (tuple, frozenset)):
        items = [_const_bytes(x) for x in k]
        if isinstance(k, tuple):
            return b"t(" + b",".join(items) + b")"
        return b"f(" + b",".join(sorted(items)) + b")"
    return repr(k).encode()


def _code_bytes(c: types.CodeType) -> bytes:
    """What a code object does, as bytes: its bytecode, the names it reads and its constants (nested code
    too). Not ``marshal.dumps``, whose bytes depend on reference counts (an object referenced twice is
    written as a back-reference): the same code gave another checksum once numba had compiled it."""
    return b"|".join([c.co_code, repr((c.co_names, c.co_varnames, c.co_freevars, c.co_cellvars, c.co_argcount,
                                        c.co_kwonlyargcount, c.co_flags)).encode()]
                     + [_const_bytes(k) for k in c.co_consts])


def _code_digest(*namespaces) -> bytes:
    """A checksum of the code the compiled functions are made of: every Python function (or numba
    dispatcher's ``py_func``) in ``namespaces``, by name, code (:func:`_code_bytes`), default arguments
    and the dispatcher's compile options (``njit``'s flags), as this process runs it. A kernel edited (or reloaded) gives new names, so numba's cache never hands back a loop of
    other code; the same code gives the same names in every process, before and after a compile."""
    seen = []  # what the checksum reads, by object: the same objects give the same checksum (memoised)
    for ns in namespaces:
        for name, obj in ns.items():
            f = getattr(obj, "py_func", obj)
            if isinstance(f, types.FunctionType):
                seen.append((name, f, f.__code__, f.__defaults__, f.__kwdefaults__,
                             tuple(getattr(obj, "targetoptions", {}).items())))
    seen = tuple(seen)
    for old, digest in _DIGESTS:
        if old == seen:  # (a tuple of the same objects compares by identity first: microseconds)
            return digest
    h = hashlib.sha1()
    for ns in namespaces:
        for name in sorted(ns):
            f = getattr(ns[name], "py_func", ns[name])
            if isinstance(f, types.FunctionType):
                opts = sorted((k, repr(v)) for k, v in getattr(ns[name], "targetoptions", {}).items())
                h.update(name.encode() + b"=" + _code_bytes(f.__code__)
                         + repr((f.__defaults__, f.__kwdefaults__, opts)).encode() + b";")
    _DIGESTS.insert(0, (seen, h.digest()))
    del _DIGESTS[8:]
    return h.digest()


_DIGESTS: list = []  # (the objects :func:`_code_digest` read, its checksum), the last 8


def _loop_code() -> tuple:
    from ..core import activations

    return vars(kernels), vars(activations), {"_stage": _stage, "_advance_source": _advance_source}


def _advance_source() -> ast.Module:
    """``eng_gd_advance_into``'s source as an ast tree, read from a file checked to be the one this process
    imported (``kernels.SOURCE_SHA1``; a file changed on disk since is refused in one line: restart)."""
    py = kernels.eng_gd_advance_into.py_func
    try:
        now = hashlib.sha1(open(kernels.__file__, "rb").read()).hexdigest()
    except OSError:
        now = None
    if now != kernels.SOURCE_SHA1:
        raise ConfigError("specialise: meanfield/engine/kernels.py changed on disk since this process imported "
                          "it; restart the process (or run without specialise)")
    return ast.parse(textwrap.dedent(inspect.getsource(py)))


@functools.lru_cache(maxsize=16)
def _transformed(tag: str, frozen: tuple):
    """``eng_gd_advance_into`` without the parameters of :data:`FROZEN`, which it reads as constants of its
    namespace; its three callees (``eng_loss_grads``, ``eng_update``, ``eng_criterion``, with the helpers
    those inline themselves) inlined (numba inlines the IR, LLVM then folds the constants). A plain
    Python function, compiled by :func:`_compiled` (a loop) and :func:`_batch` (inlined into a batch)."""
    ns = dict(vars(kernels))
    for name in ("eng_loss_grads", "eng_update", "eng_criterion"):
        ns[name] = _inline(getattr(kernels, name), ns)
    for name, (b, dt, sh) in zip(FROZEN, frozen):
        ns[name] = np.frombuffer(b, dt).reshape(sh).copy() if sh is not None else b
    tree = _advance_source()
    fdef = tree.body[0]
    fdef.decorator_list = []
    fdef.args.args = [a for a in fdef.args.args if a.arg not in FROZEN]
    fdef.name = f"eng_gd_advance_into_{tag}"
    exec(compile(tree, __file__, "exec"), ns)  # the kernels' own source, parsed by ast: no user text
    fn = ns[fdef.name]
    fn.__qualname__ = fdef.name
    return fn


@functools.lru_cache(maxsize=16)
def _compiled(tag: str, frozen: tuple):
    # the generic roots' flags (meanfield.engine.kernels._root): a zero divisor gives the same non-finite value
    return njit(cache=True, _nrt=False, error_model="numpy")(_transformed(tag, frozen))


ADV = None  # bound in each hook's own namespace (:func:`_batch`)


def _stage(y, nsteps, eta, max_abs, crit_kind, crit_op, crit_thr, b, s, data, scratch):
    """The batch hook ``gd_stage`` (``meanfield.engine.batched.eng_gd_stage``) over the frozen arrays:
    only the stage masks of ``data`` are read; ``ADV`` is bound by :func:`_batch`."""
    u, margin, zb, f, df, G, gflat, T, p, v, om, tk, Xm, Ym, tmp, new, pa, lka = scratch
    return ADV(y, nsteps, eta, data[17][b, s], crit_kind, crit_op, crit_thr, max_abs, u, margin, zb, f, df,
               G, gflat, T, p, v, om, tk, Xm, Ym, tmp, new, pa, lka)


_BATCHES: dict = {}  # tag -> batch dispatcher, the last 16 built (a dict: its hooks argument cannot be hashed)


def _batch(pk, hooks: dict):
    """The engine's CPU batch loop (``core.batched.batch_cpu`` over ``core.batched.gd_trajectory``, the
    engine's hooks) with the stage hook :func:`_stage` calling the specialised loop :func:`loop` returns
    (:func:`_compiled` under the loop's own tag: a run's compile serves the batch, and the reverse; inlined
    into the hook instead, the batch took minutes to compile): one thread's slice of trajectories, each
    through the same loop as :func:`loop`. The drivers are named by a checksum of their own code too."""
    from ..core import batched as core_batched

    loop_tag, frozen = _key(pk, pk.lay.Gr, pk.lay.hf)
    tag = _tag(frozen, (hooks, vars(core_batched)))
    if tag in _BATCHES:
        return _BATCHES[tag]
    hook = types.FunctionType(_stage.__code__, {"ADV": _compiled(loop_tag, frozen)}, f"_stage_{tag}", None, None)
    hook.__qualname__ = f"_stage_{tag}"
    ns = dict(hooks, gd_stage=njit(cache=True, _nrt=False, error_model="numpy")(hook))
    traj = core_batched.instantiate(core_batched.gd_trajectory, ns, "eng_gd_trajectory", njit, f"_{tag}")
    ns["trajectory"] = traj
    while len(_BATCHES) >= 16:
        _BATCHES.pop(next(iter(_BATCHES)))
    _BATCHES[tag] = core_batched.instantiate(core_batched.batch_cpu, ns, "eng_gd_batch_cpu",
                                             njit(cache=True, nogil=True), f"_{tag}")
    return _BATCHES[tag]


def _frozen_values(pk, Gr, hf) -> list:
    lay = pk.lay
    return [lay.hi, hf, lay.qv, Gr, lay.grp, pk.Gam, pk.nzi, pk.nzc, pk.nzn, pk.cnt, pk.last, pk.leff, pk.target,
            pk.weight, int(pk.kind), float(pk.r0), pk.consistent]


def check(desc, pk) -> None:
    """Refuse, in one ConfigError line, what ``specialise`` does not cover: another method than the GD map
    and a data set too large to compile in (the systems it does not apply to: ``meanfield.engine.system``).

    Parameters
    ----------
    desc : meanfield.engine.objects.Description
    pk : meanfield.engine.packed.Packed
        Its packed arrays.

    Examples
    --------
    >>> import meanfield.engine as me
    >>> from meanfield.engine.packed import pack
    >>> d = me.load("docs/examples/majority.toml", method="flow", steps=5)
    >>> check(d, pack(d))
    Traceback (most recent call last):
    ...
    meanfield.core.errors.ConfigError: specialise: the GD map only (training.method = gd); this description's method is flow
    """
    if desc.training.method != "gd":
        raise ConfigError(f"specialise: the GD map only (training.method = gd); this description's method is "
                          f"{desc.training.method}")
    _check_size(pk)


def refuse_twolayer() -> None:
    """The two-layer class runs its own kernels (``meanfield.engine.twolayer_run``): refused in one line."""
    raise ConfigError("specialise: the one-layer engine's GD loop only; a two-layer description runs its own "
                      "kernels (run it without specialise)")


def _check_size(pk) -> None:
    nb = sum(v.nbytes for v in _frozen_values(pk, pk.lay.Gr, pk.lay.hf) if isinstance(v, np.ndarray))
    if nb > MAX_FROZEN_BYTES:
        raise ConfigError(f"specialise: the description's tables and data take {nb} bytes; a specialised loop "
                          f"compiles at most {MAX_FROZEN_BYTES} in (run it without specialise: the generic loop)")
    n_tok = int(pk.nzn.size)
    if n_tok > MAX_TOKENS:
        raise ConfigError(f"specialise: the data set has {n_tok} tokens ({pk.nzn.shape[0]} sequences x "
                          f"{pk.nzn.shape[1]} positions); a specialised loop compiles at most {MAX_TOKENS} in "
                          "(run it without specialise: the generic loop)")


def _key(pk, Gr, hf, extra=()) -> tuple:
    """(tag, frozen): the checksum naming the compiled functions and the frozen values as bytes."""
    _check_size(pk)
    frozen = []
    for v in _frozen_values(pk, Gr, hf):
        if isinstance(v, np.ndarray):
            a = np.ascontiguousarray(v)
            frozen.append((a.tobytes(), a.dtype.str, a.shape))
        else:
            frozen.append((v, None, None))
    return _tag(tuple(frozen), extra), tuple(frozen)


def _tag(frozen: tuple, extra=()) -> str:
    """The checksum of :func:`_key` from its frozen values (the code's digest with ``extra``, then each value)."""
    h = hashlib.sha1(_code_digest(*_loop_code(), *extra) + kernels.SOURCE_SHA1.encode())
    for b, dt, shape in frozen:
        h.update(repr((dt, shape)).encode() + (b if dt else repr(b).encode()))
    return h.hexdigest()[:20]


def batch_loop(pk, hooks: dict):
    """The CPU batch loop (``meanfield.engine.batched.run_batch(..., specialise=True)``) of one packed
    description: ``eng_gd_batch_cpu``'s arguments, each trajectory through the specialised loop.

    Parameters
    ----------
    pk : meanfield.engine.packed.Packed
    hooks : dict
        The globals of ``meanfield.engine.batched`` (its hooks ``new_scratch``, ``record_into``, ...), which
        the batch drivers are rebuilt over.

    Returns
    -------
    numba dispatcher
    """
    fn = _batch(pk, hooks)
    from ..core.guard import first_use_notice

    first_use_notice(fn, seconds=COMPILE_S, echo=True)
    return fn


def loop(pk, Gr, hf):
    """The compiled GD loop of one packed description with the rates (Gr, hf) of a stage.

    Parameters
    ----------
    pk : meanfield.engine.packed.Packed
        The packed description.
    Gr, hf : numpy.ndarray
        The stage's Gram metric times its rates and head float table.

    Returns
    -------
    numba dispatcher
        ``fn(y, nsteps, eta, mode, crit_kind, crit_op, crit_thresh, max_abs, *scratch)`` ->
        (steps done, code, loss), as ``kernels.eng_gd_advance_into``.

    Examples
    --------
    >>> import meanfield.engine as me  # doctest: +SKIP
    >>> from meanfield.engine.packed import pack  # doctest: +SKIP
    >>> pk = pack(me.load("docs/examples/majority.toml", steps=5))  # doctest: +SKIP
    >>> fn = loop(pk, pk.lay.Gr, pk.lay.hf)  # about 20 s the first time  # doctest: +SKIP
    """
    fn = _compiled(*_key(pk, Gr, hf))
    from ..core.guard import first_use_notice

    first_use_notice(fn, seconds=COMPILE_S, echo=True)  # "compiling kernels, about 20 s, once" when not cached
    return fn


def choice(value):
    """``specialise`` as given (True, False or ``"auto"``), checked: anything else is refused in one line.

    Parameters
    ----------
    value : bool or str
        True: compile the loop where it is missing (about 20 s, once); ``"auto"`` (the default of every
        run): the specialised loop where one is ready (compiled in this process or in numba's on-disk
        cache), else the generic loop, never waiting for a compile (a long single run has it compiled by
        a second process: ``meanfield.engine.background``); False: the generic loop.

    Returns
    -------
    bool or str

    Examples
    --------
    >>> choice("auto"), choice(True), choice(False)
    ('auto', True, False)
    >>> choice("yes")
    Traceback (most recent call last):
    ...
    meanfield.core.errors.ConfigError: specialise: True, False or 'auto'; got 'yes'
    """
    if value is True or value is False or value == "auto":
        return value
    raise ConfigError(f"specialise: True, False or 'auto'; got {value!r}")


def ready(fn, args) -> bool:
    """Whether the dispatcher ``fn`` runs ``args`` without compiling: an overload for their types compiled
    in this process, or in numba's on-disk cache for this machine and this code (numba's index, read
    through its cache object: a numba whose internals moved reads as not ready, and the run takes the
    generic loop).

    Parameters
    ----------
    fn : numba dispatcher
        A compiled-on-demand function (``njit(cache=True)``).
    args : tuple
        The arguments it would be called with (their numba types are looked up, nothing runs).

    Returns
    -------
    bool

    Examples
    --------
    >>> import numpy as np
    >>> from meanfield.engine import kernels
    >>> ready(kernels._scratch, (np.float32(1.0),) * 8)  # never compiled for these types
    False
    """
    try:
        sig = tuple(fn.typeof_pyval(a) for a in args)
        if sig in fn.overloads:
            return True
        cache = fn._cache
        name = cache._cache_file._load_index().get(cache._index_key(sig, fn.targetctx.codegen()))
        return name is not None and os.path.exists(cache._cache_file._data_path(name))
    except Exception:  # a probe of numba's internals: whatever fails means "not ready", never an error
        return False


def cached(pk, Gr, hf, args):
    """The specialised loop of :func:`loop` when it is :func:`ready` for ``args``, else None (nothing
    compiled; a description :func:`loop` refuses, or a kernels.py changed on disk: None too). What
    ``specialise="auto"`` runs.

    Parameters
    ----------
    pk : meanfield.engine.packed.Packed
        The packed description.
    Gr, hf : numpy.ndarray
        The stage's Gram metric times its rates and head float table.
    args : tuple
        The loop's arguments, ``(y, nsteps, eta, mode, crit_kind, crit_op, crit_thresh, max_abs, *scratch)``.

    Returns
    -------
    numba dispatcher or None

    Examples
    --------
    >>> import meanfield.engine as me
    >>> from meanfield.engine.packed import pack
    >>> from meanfield.engine.reduce import initial_state
    >>> pk = pack(me.load("docs/examples/majority.toml", steps=5)); y = initial_state(me.load("docs/examples/majority.toml"))
    >>> fn = cached(pk, pk.lay.Gr, pk.lay.hf, (y, 1, 0.5, 3, 0, 1, 0.0, 1e6) + scratch_of(pk, y.size))
    >>> fn is None or fn.__name__.startswith("eng_gd_advance_into_")  # None unless compiled before
    True
    """
    try:
        fn = _compiled(*_key(pk, Gr, hf))
    except ConfigError:
        return None
    return fn if ready(fn, args) else None


def cached_batch(pk, hooks: dict, args):
    """The batch loop of :func:`batch_loop` when it is :func:`ready` for ``args``, else None: what
    ``run_batch(..., specialise="auto")`` runs.

    Parameters
    ----------
    pk : meanfield.engine.packed.Packed
        The packed description.
    hooks : dict
        The globals of ``meanfield.engine.batched`` (as :func:`batch_loop`).
    args : sequence
        The batch loop's arguments after the slice bounds (``core.batched.run_cpu`` calls it with
        ``(lo, hi, *args)``).

    Returns
    -------
    numba dispatcher or None

    Examples
    --------
    >>> import meanfield.engine as me  # doctest: +SKIP
    >>> b = me.run_batch(me.load("docs/examples/majority.toml", steps=5), fast=False)  # auto: calls it  # doctest: +SKIP
    """
    try:
        fn = _batch(pk, hooks)
    except ConfigError:
        return None
    return fn if ready(fn, (0, 1) + tuple(args)) else None


def scratch_of(pk, ny: int) -> tuple:
    """The loop's scratch arrays for a state of size ``ny`` (reusable from call to call: every step
    writes what it reads, as within one call)."""
    lay = pk.lay
    n, L = pk.nzn.shape
    return kernels._scratch(ny, n, L, lay.qv.shape[1], lay.hi.shape[0], pk.R, pk.C, lay.Nmax)


def gd_advance(pk, Gr, hf, y, nsteps, eta, mode, crit_kind, crit_op, crit_thresh, max_abs, fn=None, scratch=None):
    """Up to ``nsteps`` exact GD steps of ``y`` in place by the specialised loop.

    Parameters
    ----------
    pk : meanfield.engine.packed.Packed
        The packed description.
    Gr, hf : numpy.ndarray
        The stage's Gram metric times its rates and head float table.
    y : numpy.ndarray
        The state, advanced in place.
    nsteps, eta, mode, crit_kind, crit_op, crit_thresh, max_abs
        As ``kernels.gd_advance``.
    fn : numba dispatcher, optional
        The loop (default :func:`loop` of ``pk, Gr, hf``).
    scratch : tuple, optional
        Its scratch (default new, :func:`scratch_of`; a caller stepping often keeps both).

    Returns
    -------
    tuple
        (steps done, code, loss) as ``kernels.gd_advance``.

    Examples
    --------
    >>> import meanfield.engine as me  # doctest: +SKIP
    >>> from meanfield.engine.packed import pack  # doctest: +SKIP
    >>> from meanfield.engine.reduce import initial_state  # doctest: +SKIP
    >>> d = me.load("docs/examples/majority.toml", steps=5); pk = pack(d); y = initial_state(d)  # doctest: +SKIP
    >>> gd_advance(pk, pk.lay.Gr, pk.lay.hf, y, 10, 0.5, 3, 0, 1, 0.0, 1e6)[:2]  # doctest: +SKIP
    (10, 0)
    """
    scratch = scratch if scratch is not None else scratch_of(pk, y.shape[0])
    fn = fn if fn is not None else loop(pk, Gr, hf)
    return fn(y, nsteps, eta, mode, crit_kind, crit_op, crit_thresh, max_abs, *scratch)
