"""In-context n-gram Markov chains (seed 002): a seeded numba generator and
HDF5 data files.

Conventions (shared by the model, the kernels and the baselines)
----------------------------------------------------------------

* Vocabulary ``[d] = {0, ..., d-1}`` (0-based token values; the spec's e(x) is
  the one-hot vector of x). Positions are **1-based in the mathematics** and
  **0-based in arrays**: position l (1 <= l <= L+1) is column ``l - 1`` of
  ``tokens``.
* ``tokens``: int64 array (N, L+1); ``tokens[:, :L]`` are x_1..x_L (the
  context), ``tokens[:, L]`` is x_{L+1} (the target, also ``data.targets``).
* Parent lags ``pa``: a sorted tuple of distinct positive integers
  ``pa[0] < pa[1] < ... < pa[p-1]`` (p = |pa|, r = max(pa) = pa[-1]);
  the n-gram chain is ``pa = (1, ..., n-1)`` (default (1, 2): a trigram chain).
* The parent context of position l > r is
  ``z = (x_{l-pa[0]}, x_{l-pa[1]}, ..., x_{l-pa[p-1]})`` (the most recent
  parent first), flattened **row-major** (C order) to the integer

      zi = sum_k x_{l-pa[k]} * d**(p-1-k)         (0 <= zi < d**p)

  (:func:`context_index`, :func:`context_tuple` invert it).
* Kernel of sequence n: ``kernels[n]`` is a float64 array (d**p, d) with
  ``kernels[n, zi, e] = pi_n(x_l = e | parent context zi)``; rows sum to 1.
  ``kernels[n].reshape((d,) * p + (d,))`` is the tensor indexed
  ``[x_{l-pa[0]}, ..., x_{l-pa[-1]}, next]`` (:meth:`InductionData.kernel_tensor`).
  Each row is an independent Dirichlet(alpha 1_d) draw.
* x_1..x_r are iid uniform on [d]; x_l ~ pi(. | z(l)) for r < l <= L+1.

Randomness
----------

``seed`` is an int or a tuple of ints (the entropy of a
``numpy.random.SeedSequence``). Sequence n gets the 64-bit word
``SeedSequence(seed).generate_state(N, uint64)[n]``, which seeds a SplitMix64
stream (Steele, Lea & Flood 2014) used, in this order, for: the d**p kernel
rows (zi = 0, 1, ...; d log-gamma variates each, Marsaglia-Tsang; for
alpha < 1 the boost G(alpha) = G(alpha+1) U**(1/alpha) is applied in log
space so that tiny alpha never gives 0/0), then x_1..x_r, then x_{r+1}..x_{L+1}
(inverse CDF). Hence the first k sequences of a set of N are the set of k
with the same seed, sequences are independent of N, and the results do not
depend on numpy's or numba's random number generators (bit-for-bit
reproducible across versions).

Files
-----

:func:`save_data` / :func:`load_data`: HDF5 with datasets ``tokens`` (N, L+1)
int64, ``targets`` (N,) int64, optionally ``kernels`` (N, d**p, d) float64,
and root attributes ``format = "meanfield-induction-data"``,
``format_version = 1``, ``d``, ``L``, ``pa`` (int array), ``alpha``,
``seed`` (int array: the SeedSequence entropy), ``N``,
``kernel_layout`` (a one-line description of the layout above).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numba import njit

DATA_FORMAT = "meanfield-induction-data"
DATA_FORMAT_VERSION = 1
KERNEL_LAYOUT = ("kernels[n, zi, e] = pi_n(next = e | parents), zi = sum_k x[l - pa[k]] * d**(p-1-k), "
                 "pa sorted ascending (most recent parent is the most significant digit)")

# ----------------------------------------------------------------- SplitMix64

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S11 = np.uint64(11)
_TWO_M53 = 1.0 / 9007199254740992.0


@njit(cache=True)
def _next_u64(state):
    z = state[0] + _GOLDEN
    state[0] = z
    z = (z ^ (z >> _S30)) * _MIX1
    z = (z ^ (z >> _S27)) * _MIX2
    return z ^ (z >> _S31)


@njit(cache=True)
def _uniform(state):
    """U in [0, 1), 53 random bits."""
    return float(_next_u64(state) >> _S11) * _TWO_M53


@njit(cache=True)
def _uniform_open(state):
    """U in (0, 1)."""
    return (float(_next_u64(state) >> _S11) + 0.5) * _TWO_M53


@njit(cache=True)
def _normal(state):
    """Standard normal (Box-Muller, one variate per call)."""
    u1 = _uniform_open(state)
    u2 = _uniform(state)
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


@njit(cache=True)
def _log_gamma_variate(state, alpha):
    """log of a Gamma(alpha, 1) variate (Marsaglia & Tsang 2000; boost for alpha < 1)."""
    boost = 0.0
    if alpha < 1.0:
        boost = np.log(_uniform_open(state)) / alpha
        alpha = alpha + 1.0
    dd = alpha - 1.0 / 3.0
    cc = 1.0 / np.sqrt(9.0 * dd)
    while True:
        x = _normal(state)
        v = 1.0 + cc * x
        if v <= 0.0:
            continue
        v = v * v * v
        u = _uniform_open(state)
        if np.log(u) < 0.5 * x * x + dd - dd * v + dd * np.log(v):
            return np.log(dd * v) + boost


@njit(cache=True)
def _dirichlet_row(state, alpha, out):
    """out[:] ~ Dirichlet(alpha 1_d), computed from log-gamma variates."""
    d = out.shape[0]
    mx = -np.inf
    for e in range(d):
        g = _log_gamma_variate(state, alpha)
        out[e] = g
        if g > mx:
            mx = g
    s = 0.0
    for e in range(d):
        out[e] = np.exp(out[e] - mx)
        s += out[e]
    for e in range(d):
        out[e] /= s


@njit(cache=True)
def _categorical(state, row):
    u = _uniform(state)
    d = row.shape[0]
    acc = row[0]
    k = 0
    while u >= acc and k < d - 1:
        k += 1
        acc += row[k]
    return k


@njit(cache=True)
def _uniform_token(state, d):
    k = int(_uniform(state) * d)
    return k if k < d else d - 1


@njit(cache=True)
def _generate(seeds, d, L, pa, alpha, tokens, kernels, store_kernels):
    N = seeds.shape[0]
    p = pa.shape[0]
    r = pa[p - 1]
    nz = d ** p
    scratch = np.empty((nz, d))
    state = np.empty(1, dtype=np.uint64)
    for n in range(N):
        state[0] = seeds[n]
        K = kernels[n] if store_kernels else scratch
        for z in range(nz):
            _dirichlet_row(state, alpha, K[z])
        x = tokens[n]
        for i in range(r):
            x[i] = _uniform_token(state, d)
        for i in range(r, L + 1):  # 0-based column i is position l = i + 1
            z = 0
            for k in range(p):
                z = z * d + x[i - pa[k]]
            x[i] = _categorical(state, K[z])


@njit(cache=True)
def _chain(seed, kernel, d, pa, length, x0, out):
    state = np.empty(1, dtype=np.uint64)
    state[0] = seed
    p = pa.shape[0]
    r = pa[p - 1]
    for i in range(r):
        out[i] = x0[i] if x0[0] >= 0 else _uniform_token(state, d)
    for i in range(r, length):
        z = 0
        for k in range(p):
            z = z * d + out[i - pa[k]]
        out[i] = _categorical(state, kernel[z])


# ----------------------------------------------------------------- public API


def normalize_pa(pa) -> tuple[int, ...]:
    """Sorted tuple of distinct positive ints (ValueError otherwise)."""
    out = sorted({int(v) for v in pa})
    if not out or out[0] < 1 or len(out) != len(tuple(pa)):
        raise ValueError(f"pa: must be distinct positive integers, got {pa!r}")
    return tuple(out)


def ngram_pa(n: int) -> tuple[int, ...]:
    """Parent lags of an n-gram chain: (1, ..., n-1)."""
    if n < 2:
        raise ValueError(f"n: must be >= 2, got {n}")
    return tuple(range(1, n))


#: tokens generated / written per chunk (about 0.1 s each): a signal waits at most one chunk
CHUNK_TOKENS = 1 << 22


def seed_words(seed, N: int) -> np.ndarray:
    """Per-sequence uint64 seeds: ``SeedSequence(seed).generate_state(N, uint64)``."""
    entropy = list(seed) if isinstance(seed, (tuple, list, np.ndarray)) else int(seed)
    return np.random.SeedSequence(entropy).generate_state(int(N), dtype=np.uint64)


@dataclass(frozen=True)
class InductionData:
    """A fixed data set of n-gram sequences (see the module docstring for layouts)."""

    tokens: np.ndarray  # (N, L+1) int64
    d: int
    L: int
    pa: tuple[int, ...]
    alpha: float
    seed: tuple[int, ...]
    kernels: np.ndarray | None = None  # (N, d**p, d) float64

    @property
    def N(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def targets(self) -> np.ndarray:
        return self.tokens[:, self.L]

    @property
    def context(self) -> np.ndarray:
        return self.tokens[:, : self.L]

    def kernel_tensor(self, n: int) -> np.ndarray:
        """pi_n as an array of shape (d,)*p + (d,) indexed [x_{l-pa[0]}, ..., x_{l-pa[-1]}, next]."""
        if self.kernels is None:
            raise ValueError("this data set was generated without kernels (kernels=False)")
        return self.kernels[n].reshape((self.d,) * len(self.pa) + (self.d,))

    def subset(self, idx) -> "InductionData":
        return InductionData(self.tokens[idx], self.d, self.L, self.pa, self.alpha, self.seed,
                             None if self.kernels is None else self.kernels[idx])


def _seed_tuple(seed) -> tuple[int, ...]:
    if isinstance(seed, (tuple, list, np.ndarray)):
        return tuple(int(s) for s in seed)
    return (int(seed),)


def generate(N: int, d: int = 3, L: int = 100, pa=(1, 2), alpha: float = 1.0, seed=0,
             kernels: bool = False) -> InductionData:
    """N independent sequences of length L+1, each from its own Dirichlet(alpha)
    kernel (returned too when ``kernels``). ``seed``: int or tuple of ints."""
    pa = normalize_pa(pa)
    if d < 2:
        raise ValueError(f"d: must be >= 2, got {d}")
    if not alpha > 0:
        raise ValueError(f"alpha: must be > 0, got {alpha}")
    if L <= pa[-1]:
        raise ValueError(f"L: must be > max(pa) = {pa[-1]}, got {L}")
    seeds = seed_words(seed, N)
    tok = np.empty((N, L + 1), dtype=np.int64)
    ker = np.empty((N if kernels else 0, d ** len(pa), d), dtype=np.float64)
    pa_arr = np.asarray(pa, dtype=np.int64)
    step = max(1, CHUNK_TOKENS // (L + 1))  # sequences are independent (own seed): chunks give the same data,
    for a in range(0, N, step):  # and a SIGINT / SIGTERM is handled between them (not after minutes)
        b = min(N, a + step)
        _generate(seeds[a:b], int(d), int(L), pa_arr, float(alpha), tok[a:b], ker[a:b] if kernels else ker,
                  bool(kernels))
    return InductionData(tok, int(d), int(L), pa, float(alpha), _seed_tuple(seed), ker if kernels else None)


def sample_chain(kernel: np.ndarray, pa, length: int, seed=0, x0=None) -> np.ndarray:
    """One long chain (int64, ``length``) with a fixed kernel (d**p, d) or (d,)*p+(d,):
    x_1..x_r = ``x0`` (default uniform), then x_l ~ kernel[z(l)]."""
    pa = normalize_pa(pa)
    K = np.ascontiguousarray(kernel, dtype=np.float64)
    d = K.shape[-1]
    K = K.reshape(d ** len(pa), d)
    r = pa[-1]
    if length < r:
        raise ValueError(f"length: must be >= max(pa) = {r}")
    x0a = np.full(r, -1, dtype=np.int64) if x0 is None else np.asarray(x0, dtype=np.int64)
    if x0a.shape != (r,):
        raise ValueError(f"x0: needs max(pa) = {r} values")
    out = np.empty(length, dtype=np.int64)
    _chain(seed_words(seed, 1)[0], K, d, np.asarray(pa, dtype=np.int64), int(length), x0a, out)
    return out


def context_index(tokens: np.ndarray, l: int, pa, d: int) -> np.ndarray:
    """Flattened parent context zi of 1-based position ``l`` (l > max(pa)) of
    each row of ``tokens`` (N, >= l): sum_k x_{l-pa[k]} d**(p-1-k)."""
    pa = normalize_pa(pa)
    tokens = np.asarray(tokens)
    z = np.zeros(tokens.shape[:-1], dtype=np.int64)
    for lag in pa:
        z = z * d + tokens[..., l - 1 - lag]
    return z


def context_tuple(zi: int, p: int, d: int) -> tuple[int, ...]:
    """Inverse of the flattening: zi -> (x_{l-pa[0]}, ..., x_{l-pa[p-1]})."""
    return tuple(int(v) for v in np.unravel_index(int(zi), (d,) * p))


def save_data(path: str | Path, data: InductionData) -> Path:
    """Write a data set to HDF5 (atomic: ``meanfield.core.io.write_bytes_atomic``).
    The compressed image is built in memory in slices (a signal is handled
    between them), so a full disk is one clean error, never a failing HDF5 write."""
    import io

    import h5py

    from ...core.io import write_bytes_atomic

    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        f.attrs["format"] = DATA_FORMAT
        f.attrs["format_version"] = DATA_FORMAT_VERSION
        f.attrs["d"] = data.d
        f.attrs["L"] = data.L
        f.attrs["pa"] = np.asarray(data.pa, dtype=np.int64)
        f.attrs["alpha"] = data.alpha
        f.attrs["seed"] = np.asarray(data.seed, dtype=np.int64)
        f.attrs["N"] = data.N
        f.attrs["kernel_layout"] = KERNEL_LAYOUT
        kw = {"compression": "gzip", "compression_opts": 4}
        for name, arr in (("tokens", data.tokens), ("targets", data.targets), ("kernels", data.kernels)):
            if arr is None:
                continue
            ds = f.create_dataset(name, shape=arr.shape, dtype=arr.dtype, **kw)
            step = max(1, CHUNK_TOKENS // max(1, arr[:1].size))  # written in slices: a signal is
            for a in range(0, arr.shape[0], step):  # handled between them
                ds[a:a + step] = arr[a:a + step]
    return write_bytes_atomic(path, buf.getbuffer())


def load_data(path: str | Path) -> InductionData:
    """Read a data set written by :func:`save_data` (ValueError if it is not one)."""
    import h5py

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"data file not found: {path}")
    with h5py.File(path, "r") as f:
        if f.attrs.get("format") != DATA_FORMAT:
            raise ValueError(f"{path}: not a meanfield induction data file (format {f.attrs.get('format')!r})")
        tokens = np.asarray(f["tokens"][()], dtype=np.int64)
        kernels = np.asarray(f["kernels"][()], dtype=np.float64) if "kernels" in f else None
        d = int(f.attrs["d"])
        L = int(f.attrs["L"])
        pa = tuple(int(v) for v in np.atleast_1d(f.attrs["pa"]))
        alpha = float(f.attrs["alpha"])
        seed = tuple(int(v) for v in np.atleast_1d(f.attrs["seed"]))
    if tokens.ndim != 2 or tokens.shape[1] != L + 1:
        raise ValueError(f"{path}: tokens have shape {tokens.shape}, expected (N, L+1) with L = {L}")
    return InductionData(tokens, d, L, pa, alpha, seed, kernels)
