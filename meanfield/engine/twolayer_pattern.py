"""The pattern path of the generic two-layer network: rpe token heads computed once per window pattern.

A head of :mod:`meanfield.engine.twolayer_net` whose score is ``rpe`` alone
and whose value is ``token`` has attention weights that depend on the
position t only through m(t), the number of lags of its window that exist
(alpha = softmax(w[:m]) or w[:m]), and a value that reads only the one-hot
tokens of those lags. So its output u_t is a function of the window's code

    code(t) = offset[m] + sum_{j < m} digit(t - first - j) B^j,   offset[m] = sum_{k < m} B^k,

with digit(s) the token x_{s+1} (0-based position s) and B = S, or B = S + 1
when the window can reach the attention read-out's query position (first lag
0), whose token features are zero (the digit S, a blank). The codes of every
(sequence, position) are computed once per data set (:func:`prepare`, cached
with the data set by the caller); per gradient call each head's output is
tabulated once per pattern (``n_pat = sum_{m <= K} B^m`` vectors,
:func:`table`) and read back by code, and the backward pass accumulates
d loss / d u per pattern (:func:`gather_back`) and goes through the
normalisation and the softmax once per pattern (:func:`table_backward`).

When every head is a pattern head and the read-out is ``attention``, the
selector's similarity needs only the Gram tables G_h[q, p] = <U_h[q], U_h[p]>:
:func:`readout` is the fused read-out of
:func:`meanfield.engine.twolayer_kernels.readout_attention` with the inner
products looked up by code and d loss / d G_h accumulated per pattern pair
(the head outputs are never formed per position).

A head is a pattern head when its table has at most :data:`PATTERN_MAX`
patterns (``path = "auto"``; above it the head takes the direct path);
``path = "pattern"`` asks for every head the pattern path accepts and refuses
a bound exceeded, ``path = "direct"`` uses none. The mathematics is that of
the direct path; ``tests/test_twolayer_pattern.py`` holds them equal (and
equal to the explicit network) to 1e-12.

Example
-------
>>> from meanfield.engine.twolayer_net import Head, Net
>>> net = Net(S=2, L=3, layers=((Head("rpe", (1, 2), normalise=True, value="token"),),), selector=1,
...           readout="attention")
>>> prep = prepare(net, np.array([[0, 1, 1]]))
>>> prep.heads, prep.npat[0], prep.codes[0, 0].tolist()
((0,), 7, [0, 1, 4, 6])
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit

from ..core.errors import ConfigError
from .twolayer_kernels import loss_row

__all__ = ["PATTERN_MAX", "PATHS", "Prepared", "accepts", "n_patterns", "prepare", "table", "table_backward",
           "gather_back", "readout"]

#: a head takes the pattern path when its window has at most this many patterns (its Gram table: n_pat^2 doubles)
PATTERN_MAX = 512
PATHS = ("auto", "direct", "pattern")


def accepts(net, hd) -> bool:
    """Whether the pattern path computes head ``hd`` (an rpe score alone and a token value).

    Parameters
    ----------
    net : meanfield.engine.twolayer_net.Net
    hd : meanfield.engine.twolayer_net.Head

    Returns
    -------
    bool

    Example
    -------
    >>> from meanfield.engine.twolayer_net import Head, Net
    >>> net = Net(2, 3, ((Head("rpe", (1, 1), value="token"), Head()),))
    >>> [accepts(net, hd) for _, _, hd in net.heads]
    [True, False]
    """
    return hd.score == "rpe" and hd.value == "token"


def _base(net, hd) -> int:
    first, _ = net.window(hd)
    return net.S + 1 if (net.readout == "attention" and first == 0) else net.S


def n_patterns(net, hd) -> int:
    """The number of window patterns of a head: sum_{m=0}^{K} B^m (K lags, B digits).

    Parameters
    ----------
    net : meanfield.engine.twolayer_net.Net
    hd : meanfield.engine.twolayer_net.Head

    Returns
    -------
    int

    Example
    -------
    >>> from meanfield.engine.twolayer_net import Head, Net
    >>> n_patterns(Net(3, 5, ((Head("rpe", (1, 3), value="token"),),)), Head("rpe", (1, 3), value="token"))
    40
    """
    first, last = net.window(hd)
    B = _base(net, hd)
    return sum(B ** m for m in range(last - first + 2))


@dataclass(frozen=True)
class Prepared:
    """The pattern codes of a data set for one network (:func:`prepare`).

    ``heads``: the global indices of the pattern heads; ``codes`` (len(heads), n, T) int32; per pattern head
    ``npat``, ``plen`` (npat,) the number of existing lags of each pattern and ``digit`` (npat, K) its digits
    (the blank: S); ``n`` the number of sequences; ``path`` as asked.
    """

    path: str
    heads: tuple
    codes: np.ndarray
    npat: tuple
    plen: tuple
    digit: tuple
    n: int

    def row(self, gi: int) -> int:
        """The row of ``codes`` of global head ``gi``."""
        return self.heads.index(gi)


@njit(cache=True)
def _codes(x, L, T, first, K, B, S, offset, out):
    n = x.shape[0]
    for i in range(n):
        for t in range(T):
            m = t - first + 1
            if m < 0:
                m = 0
            if m > K:
                m = K
            code = 0
            base = 1
            for j in range(m):
                s = t - first - j
                dg = x[i, s] if s < L else S
                code += dg * base
                base *= B
            out[i, t] = offset[m] + code


def _tables_of(K, B):
    plen, digit = [], []
    for m in range(K + 1):
        for code in range(B ** m):
            plen.append(m)
            r, row = code, []
            for _ in range(m):
                row.append(r % B)
                r //= B
            digit.append(row + [0] * (K - m))
    return np.array(plen, dtype=np.int64), np.array(digit, dtype=np.int64).reshape(len(plen), K)


def prepare(net, x, path: str = "auto") -> Prepared:
    """Group the positions of a data set by window pattern, once (the per-data-set step of the pattern path).

    Parameters
    ----------
    net : meanfield.engine.twolayer_net.Net
    x : ndarray of int, shape (n, L) or (n, L + 1)
        The sequences (a further column, the target, is never read).
    path : str
        ``auto`` (pattern heads: those accepted with at most :data:`PATTERN_MAX` patterns), ``pattern``
        (every accepted head; a bound exceeded or no head accepted is refused), ``direct`` (none).

    Returns
    -------
    Prepared

    Raises
    ------
    ConfigError
        An unknown path, or ``pattern`` where it does not apply.

    Example
    -------
    >>> from meanfield.engine.twolayer_net import Head, Net
    >>> net = Net(2, 2, ((Head("rpe", (0, 0), value="token"),),))
    >>> prepare(net, np.array([[1, 0]])).codes[0].tolist()
    [[2, 1]]
    """
    if path not in PATHS:
        raise ConfigError(f"path: one of {', '.join(PATHS)}; got {path!r}")
    x = np.ascontiguousarray(x, dtype=np.int64)
    n = x.shape[0]
    heads, npat, plens, digits, rows = [], [], [], [], []
    if path != "direct":
        for gi, (k, h, hd) in enumerate(net.heads):
            if not accepts(net, hd):
                continue
            npt = n_patterns(net, hd)
            if npt > PATTERN_MAX:
                if path == "pattern":
                    raise ConfigError(f"path: 'pattern' needs at most {PATTERN_MAX} window patterns per head; "
                                      f"layers[{k}].heads[{h}] has {npt} (use path = 'auto' or 'direct')")
                continue
            first, last = net.window(hd)
            K, B = last - first + 1, _base(net, hd)
            plen, digit = _tables_of(K, B)
            offset = np.array([sum(B ** j for j in range(m)) for m in range(K + 1)], dtype=np.int64)
            out = np.empty((n, net.T), dtype=np.int32)
            _codes(x, net.L, net.T, first, K, B, net.S, offset, out)
            heads.append(gi)
            npat.append(npt)
            plens.append(plen)
            digits.append(digit)
            rows.append(out)
        if path == "pattern" and not heads:
            raise ConfigError("path: 'pattern' applies to rpe heads with a token value; this network has none "
                              "(use path = 'auto' or 'direct')")
    codes = np.ascontiguousarray(np.stack(rows)) if rows else np.zeros((0, n, net.T), dtype=np.int32)
    return Prepared(path, tuple(heads), codes, tuple(npat), tuple(plens), tuple(digits), n)


def table(prep: Prepared, gi: int, w, softmax: bool, normalise: bool, S: int) -> dict:
    """The output of pattern head ``gi`` for every pattern: U (npat, S), ||s|| (npat,), alpha per m (K + 1, K).

    Parameters
    ----------
    prep : Prepared
    gi : int
        The global head index.
    w : ndarray, shape (K,)
        The head's rpe weights (over its window's lags).
    softmax, normalise : bool
    S : int
        The vocabulary.

    Returns
    -------
    dict
        ``U``, ``nrm``, ``tab``, ``r`` (the row of the head in ``prep.codes``).

    Example
    -------
    >>> from meanfield.engine.twolayer_net import Head, Net
    >>> net = Net(2, 2, ((Head("rpe", (0, 0), value="token"),),))
    >>> table(prepare(net, np.array([[1, 0]])), 0, np.zeros(1), True, False, 2)["U"].tolist()
    [[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]]
    """
    r = prep.row(gi)
    plen, digit = prep.plen[r], prep.digit[r]
    K = digit.shape[1]
    w = np.asarray(w, dtype=np.float64)[:K]
    tab = np.zeros((K + 1, K))
    for m in range(1, K + 1):
        if softmax:
            e = np.exp(w[:m] - w[:m].max())
            tab[m, :m] = e / e.sum()
        else:
            tab[m, :m] = w[:m]
    npat = len(plen)
    s = np.zeros((npat, S + 1))  # column S: the blank (zero features), dropped
    al = tab[plen]  # (npat, K)
    idx = np.arange(npat)
    for j in range(K):
        s[idx, digit[:, j]] += np.where(j < plen, al[:, j], 0.0)
    s = s[:, :S]
    if normalise:
        nrm = np.sqrt((s * s).sum(axis=1))
        U = np.divide(s, nrm[:, None], out=np.zeros_like(s), where=nrm[:, None] > 0)
    else:
        nrm = np.zeros(npat)
        U = s
    return {"U": U, "nrm": nrm, "tab": tab, "r": r, "softmax": softmax, "normalise": normalise}


def table_backward(prep: Prepared, tb: dict, barU) -> np.ndarray:
    """d loss / d w of a pattern head from d loss / d U per pattern (npat, S).

    Parameters
    ----------
    prep : Prepared
    tb : dict
        Its :func:`table`.
    barU : ndarray, shape (npat, S)

    Returns
    -------
    ndarray, shape (K,)

    Example
    -------
    >>> from meanfield.engine.twolayer_net import Head, Net
    >>> net = Net(2, 2, ((Head("rpe", (0, 1), value="token", softmax=False),),))
    >>> prep = prepare(net, np.array([[1, 0]])); tb = table(prep, 0, np.ones(2), False, False, 2)
    >>> table_backward(prep, tb, np.ones((7, 2))).tolist()
    [6.0, 4.0]
    """
    r = tb["r"]
    plen, digit = prep.plen[r], prep.digit[r]
    K = digit.shape[1]
    U, nrm, tab = tb["U"], tb["nrm"], tb["tab"]
    barU = np.asarray(barU, dtype=np.float64)
    if tb["normalise"]:
        proj = (U * barU).sum(axis=1, keepdims=True)
        ds = np.divide(barU - U * proj, nrm[:, None], out=np.zeros_like(barU), where=nrm[:, None] > 0)
    else:
        ds = barU
    ds = np.concatenate([ds, np.zeros((ds.shape[0], 1))], axis=1)  # the blank reads nothing
    live = np.arange(K)[None, :] < plen[:, None]
    dal = np.where(live, np.take_along_axis(ds, digit, axis=1), 0.0)
    al = tab[plen]
    if tb["softmax"]:
        dz = al * (dal - (al * dal).sum(axis=1, keepdims=True))
    else:
        dz = dal
    return np.where(live, dz, 0.0).sum(axis=0)


@njit(cache=True)
def _gather_back(codes, du, npat, out):
    n, T = codes.shape
    V = du.shape[2]
    for i in range(n):
        for t in range(T):
            q = codes[i, t]
            for v in range(V):
                out[q, v] += du[i, t, v]


def gather_back(prep: Prepared, gi: int, du) -> np.ndarray:
    """d loss / d U per pattern: the sum of d loss / d u_t over the positions with each code.

    Parameters
    ----------
    prep : Prepared
    gi : int
    du : ndarray, shape (n, T, S)

    Returns
    -------
    ndarray, shape (npat, S)

    Example
    -------
    >>> from meanfield.engine.twolayer_net import Head, Net
    >>> net = Net(2, 2, ((Head("rpe", (0, 0), value="token"),),))
    >>> gather_back(prepare(net, np.array([[1, 1]])), 0, np.ones((1, 2, 2))).tolist()
    [[0.0, 0.0], [0.0, 0.0], [2.0, 2.0]]
    """
    r = prep.row(gi)
    out = np.zeros((prep.npat[r], du.shape[2]))
    _gather_back(prep.codes[r], np.ascontiguousarray(du, dtype=np.float64), prep.npat[r], out)
    return out


@njit(cache=True, error_model="numpy", nogil=True)  # a non-finite value propagates (the run stops as diverged)
def _readout(codes, G, x, y, p, c, a, members, sizes, log_cap, loss_kind, want_grad, logy, barG, acc, lo, hi):
    # sequences lo..hi-1 (a chunk: its own barG and acc, the GIL released so that chunks run on threads);
    # returns (their loss, their d loss / d a). The loops over positions are innermost (contiguous rows of
    # g (H, L)), subsets of size 0, 1, 2 unrolled
    H, n, T = codes.shape
    L = T - 1
    nS = c.shape[0]
    S = y.shape[1]
    C = 0.0
    for s in range(nS):
        C += c[s] * c[s]
    coef = np.empty(nS)
    for s in range(nS):
        coef[s] = c[s] * c[s] / C
    g = np.zeros((H, L))
    gam = np.zeros((H, L))
    K = np.zeros(L)
    ez = np.zeros(L)
    dK = np.zeros(L)
    tmp = np.zeros(L)
    me = np.zeros(S)
    wy = np.zeros(S)
    total = 0.0
    gat = 0.0
    for i in range(lo, hi):
        xi = x[i]
        for h in range(H):
            Gq = G[h, codes[h, i, L]]
            ch = codes[h, i]
            gh = g[h]
            for l in range(L):
                gh[l] = Gq[ch[l]]
        for l in range(L):
            K[l] = 0.0
        for s in range(nS):
            sz = sizes[s]
            cs = coef[s]
            if sz == 0:
                for l in range(L):
                    K[l] += cs
            elif sz == 1:
                g0 = g[members[s, 0]]
                for l in range(L):
                    K[l] += cs * g0[l]
            elif sz == 2:
                g0 = g[members[s, 0]]
                g1 = g[members[s, 1]]
                for l in range(L):
                    K[l] += cs * g0[l] * g1[l]
            else:
                for l in range(L):
                    tmp[l] = cs
                for r in range(sz):
                    gr = g[members[s, r]]
                    for l in range(L):
                        tmp[l] *= gr[l]
                for l in range(L):
                    K[l] += tmp[l]
        zmax = -math.inf
        for l in range(L):
            if a * K[l] > zmax:
                zmax = a * K[l]
        tot = 0.0
        for e in range(S):
            me[e] = 0.0
        for l in range(L):
            ez[l] = math.exp(a * K[l] - zmax)
            tot += ez[l]
            me[xi[l]] += ez[l]
        ltot = math.log(tot)
        for e in range(S):
            logy[i, e] = math.log(me[e]) - ltot if me[e] > 0 else -math.inf
        li, wsum, live = loss_row(logy[i], y[i], p[i], log_cap, loss_kind, wy)
        total += li
        if not want_grad or not live:
            continue
        bk = 0.0
        for l in range(L):
            e = xi[l]
            dz = ez[l] / tot * wsum - wy[e] * ez[l] / me[e]
            gat += K[l] * dz
            dK[l] = a * dz
            bk += dK[l] * K[l]
        for h in range(H):
            gh = gam[h]
            for l in range(L):
                gh[l] = 0.0
        for s in range(nS):
            sz = sizes[s]
            cs = coef[s]
            sm = 0.0
            if sz == 0:
                for l in range(L):
                    sm += dK[l]
            elif sz == 1:
                g0 = g[members[s, 0]]
                m0 = gam[members[s, 0]]
                for l in range(L):
                    sm += dK[l] * g0[l]
                    m0[l] += cs * dK[l]
            elif sz == 2:
                g0 = g[members[s, 0]]
                g1 = g[members[s, 1]]
                m0 = gam[members[s, 0]]
                m1 = gam[members[s, 1]]
                for l in range(L):
                    v = dK[l]
                    sm += v * g0[l] * g1[l]
                    m0[l] += cs * v * g1[l]
                    m1[l] += cs * v * g0[l]
            else:
                for l in range(L):
                    tmp[l] = dK[l]
                for r in range(sz):
                    gr = g[members[s, r]]
                    for l in range(L):
                        tmp[l] *= gr[l]
                for l in range(L):
                    sm += tmp[l]
                for r in range(sz):
                    mr = gam[members[s, r]]
                    for l in range(L):
                        o = cs * dK[l]
                        for r2 in range(sz):
                            if r2 != r:
                                o *= g[members[s, r2], l]
                        mr[l] += o
            acc[s] += sm - bk
        for h in range(H):
            bq = barG[h, codes[h, i, L]]
            ch = codes[h, i]
            gh = gam[h]
            for l in range(L):
                bq[ch[l]] += gh[l]
    return total, gat


#: the read-out's sequences are cut into at most this many chunks, run on threads (the kernel releases the GIL);
#: the cut depends on the sizes only, never on the thread count, so the sums are the same on every machine
MAX_CHUNKS = 8
#: a chunk has at least this many sequences
MIN_CHUNK = 1024
#: the chunks' own d loss / d G tables together stay under this many doubles
MAX_CHUNK_TABLES = 8_000_000


def chunks(n: int, table_size: int) -> list:
    """The (lo, hi) chunks of ``n`` sequences the read-out sums separately (then in order): a function of the
    sizes only.

    Example
    -------
    >>> chunks(10, 100), len(chunks(10_000, 100))
    ([(0, 10)], 8)
    """
    k = max(1, min(MAX_CHUNKS, n // MIN_CHUNK, MAX_CHUNK_TABLES // max(1, table_size)))
    cuts = [n * j // k for j in range(k + 1)]
    return [(cuts[j], cuts[j + 1]) for j in range(k)]


def _run_chunks(args, parts, barG, acc):
    """Each chunk with its own barG / acc (the first chunk the caller's), on numba's thread count; summed in order."""
    import numba

    out = [None] * len(parts)
    bufs = [(barG, acc)] + [(np.zeros_like(barG), np.zeros_like(acc)) for _ in parts[1:]]
    threads = min(len(parts), numba.get_num_threads())
    if threads <= 1:
        for j, (lo, hi) in enumerate(parts):
            out[j] = _readout(*args, bufs[j][0], bufs[j][1], lo, hi)
    else:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(threads) as ex:
            futs = [ex.submit(_readout, *args, bufs[j][0], bufs[j][1], lo, hi) for j, (lo, hi) in enumerate(parts)]
            out = [f.result() for f in futs]
    total, gat = 0.0, 0.0
    for j in range(len(parts)):
        total += out[j][0]
        gat += out[j][1]
        if j:
            barG += bufs[j][0]
            acc += bufs[j][1]
    return total, gat


def readout(prep: Prepared, tables: list, x, y, p, c, a: float, members, sizes, log_cap: float, want_grad: bool,
            loss_kind: int = 0):
    """The selector and the attention read-out over pattern heads only (every head a pattern head).

    Parameters
    ----------
    prep : Prepared
    tables : list of dict
        The :func:`table` of every head, in head order.
    x, y, p : ndarray
        Tokens (n, >= L), targets (n, S), weights (n,).
    c : ndarray, shape (nS,)
    a : float
    members, sizes : ndarray of int
        The subsets of heads (as :func:`meanfield.engine.twolayer_kernels.readout_attention`).
    log_cap : float
    want_grad : bool
    loss_kind : int
        :data:`meanfield.engine.twolayer_kernels.LOSS_KINDS` (0: the guarded cross-entropy of y_hat).

    Returns
    -------
    loss : float
    logy : ndarray, shape (n, S)
    barU : list of ndarray
        d loss / d U per pattern of every head (zeros when not ``want_grad``).
    gc : ndarray
    ga : float

    Example
    -------
    >>> from meanfield.engine.twolayer_net import Head, Net
    >>> net = Net(2, 2, ((Head("rpe", (1, 1), value="token", normalise=True),),), selector=1, readout="attention")
    >>> x = np.array([[0, 1]]); prep = prepare(net, x); tb = [table(prep, 0, np.zeros(1), True, True, 2)]
    >>> out = readout(prep, tb, x, np.array([[1.0, 0.0]]), np.ones(1), np.ones(2), 1.0,
    ...               np.array([[0], [0]]), np.array([0, 1]), 690.0, True)
    >>> round(out[0], 12) == round(float(np.log(2)), 12)  # the query and the keys share no token: K(l) equal
    True
    """
    Hn = len(tables)
    mp = max(prep.npat)
    G = np.zeros((Hn, mp, mp))
    for h, tb in enumerate(tables):
        U = tb["U"]
        G[h, :U.shape[0], :U.shape[0]] = U @ U.T
    n, S = y.shape
    logy = np.zeros((n, S))
    barG = np.zeros((Hn, mp, mp))
    c = np.ascontiguousarray(c, dtype=np.float64)
    acc = np.zeros(len(c))
    args = (prep.codes, G, np.ascontiguousarray(x, dtype=np.int64), np.ascontiguousarray(y, dtype=np.float64),
            np.ascontiguousarray(p, dtype=np.float64), c, float(a),
            np.ascontiguousarray(members, dtype=np.int64), np.ascontiguousarray(sizes, dtype=np.int64),
            float(log_cap), int(loss_kind), bool(want_grad), logy)
    loss, gat = _run_chunks(args, chunks(n, barG.size if want_grad else 0), barG, acc)
    C = float(c @ c)
    gc = 2.0 * c / C * acc
    ga = np.array([gat])
    barU = []
    for h, tb in enumerate(tables):
        U = tb["U"]
        k = U.shape[0]
        B = barG[h, :k, :k]
        barU.append((B + B.T) @ U)
    return float(loss), logy, barU, gc, float(ga[0])
