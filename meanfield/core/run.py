"""One object for every run: :class:`Run` (mixture, engine and induction run files, and in-memory engine runs).

A :class:`Run` is a mapping from dataset name to array (``run["loss"]``,
groups as nested dicts: ``run["variables"]["+"]["S"]``) with

* ``.attrs``: the root attributes (JSON ones decoded), ``.config`` the
  resolved config, ``.system`` (``mixture`` | ``engine`` | ``induction``),
  ``.path`` (None in memory);
* ``.records``: every recorded time series, ``name -> (T, ...)`` (groups
  flattened as ``"variables/+/S"``);
* ``.entries`` and ``.states``: the state, one name per scalar entry
  (``S[+,c1,v1]``, ``w[-,v1]``, ``V.r1[h,a,r1]``, ``c[{1}]``) and the (T, E)
  array of their values at every record;
* ``.state(t)``: the state at time ``t`` (linear interpolation between the
  two records around ``t`` by default; ``method="nearest"``: the nearest
  record);
* ``.plot()``, ``.to_xarray()``, ``.to_dataframe()`` (the last two need the
  ``analysis`` extra: ``pip install 'meanfield[analysis]'``);
* ``t``, ``step``, ``stage``, ``loss``, ``margin``, ``status``, ``message``,
  ``stage_ends`` and, for mixture and engine runs, the reduced variables by
  name: ``run.S["+", "c1", "v1"]`` (T,), ``run.w["-", "v1"]``,
  ``run.var("+", "V.r1")``.

:func:`open_run` reads a file; :func:`plot_runs` overlays several runs.
This module is core: it imports nothing of the systems above it (it reads
their file schemas, documented in ``docs/run-files.md``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

#: the optional extra that brings xarray and pandas
EXTRA = "analysis"
#: the ``format`` attribute of every run file
FORMAT = "meanfield-run"


def _need(module: str, what: str):
    """Import ``module`` or raise one ImportError line naming the extra."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(f"{what} needs {module}: pip install 'meanfield[{EXTRA}]'") from None


class Named:
    """A named array: ``x["+", "c1", "v1"]`` indexes the axes after time by
    label (head name, then feature names); ``x.values`` is the (T, ...) array."""

    def __init__(self, values: np.ndarray, axes: list[tuple[str, ...]]):
        self.values = values
        self.axes = axes

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        idx = [slice(None)]
        for i, k in enumerate(key):
            labels = self.axes[i]
            if isinstance(k, str):
                if k not in labels:
                    raise KeyError(f"{k!r} not in {labels}")
                idx.append(labels.index(k))
            else:
                idx.append(k)
        return self.values[tuple(idx)]

    @property
    def shape(self):
        return self.values.shape

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.values, dtype=dtype)

    def __repr__(self):
        return f"Named(shape={self.values.shape}, axes={self.axes})"


def _strs(a) -> list[str]:
    return [str(x) for x in np.ravel(np.asarray(a))]


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}/"))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _labels(n: int, names: list[str]) -> list[str]:
    return names if len(names) == n else [str(i) for i in range(n)]


class SystemName(str):
    """The system name of an in-memory run (``"engine"``) that also answers
    for the run's system object (``run.system.T(y)``, ``run.system.loss``):
    in-memory engine runs had their EngineSystem as ``run.system``."""

    def __new__(cls, name: str, obj):
        s = str.__new__(cls, name)
        s._obj = obj
        return s

    def __getattr__(self, k):
        return getattr(self.__dict__["_obj"], k)


class Run(dict):
    """A run: a mixture, engine or induction run file read by :func:`open_run`,
    or an engine run in memory (``meanfield.run(desc)``). See the module docstring.

    Parameters
    ----------
    data : dict, optional
        dataset name -> array (or a dict: a group).
    attrs : dict, optional
        the root attributes.
    path : str or Path, optional
        the file it was read from.

    Examples
    --------
    >>> import meanfield
    >>> r = meanfield.open_run("runs/incontext.h5")            # doctest: +SKIP
    >>> r.entries[:2], r.state(2.5)[:2], r.to_xarray()          # doctest: +SKIP
    """

    def __init__(self, data: dict | None = None, attrs: dict | None = None, path=None, *, lazy=None):
        super().__init__(data or {})
        self._attrs = dict(attrs or {})
        self.path = Path(path) if path is not None else None
        self._lazy = lazy  # a callable returning (data, attrs): filled on first use (in-memory runs)

    # ------------------------------------------------------------------ the mapping (filled lazily in memory)
    def _fill(self):
        if self.__dict__.get("_lazy") is not None:
            fn, self._lazy = self._lazy, None
            data, attrs = fn()
            dict.update(self, data)
            self._attrs = {**attrs, **self._attrs}

    def __getitem__(self, k):
        self._fill()
        return dict.__getitem__(self, k)

    def __contains__(self, k):
        self._fill()
        return dict.__contains__(self, k)

    def __iter__(self):
        self._fill()
        return dict.__iter__(self)

    def __len__(self):
        self._fill()
        return dict.__len__(self)

    def keys(self):
        self._fill()
        return dict.keys(self)

    def items(self):
        self._fill()
        return dict.items(self)

    def values(self):
        self._fill()
        return dict.values(self)

    def get(self, k, default=None):
        self._fill()
        return dict.get(self, k, default)

    def __repr__(self):
        where = f" {self.path}" if self.path else " (in memory)"
        return f"<meanfield.Run{where}: system {self.system}, {len(self.t)} records, status {self.status}>"

    @property
    def attrs(self) -> dict:
        """The root attributes (JSON-encoded ones decoded)."""
        self._fill()
        return self._attrs

    @attrs.setter
    def attrs(self, value):
        self._attrs = dict(value)

    @property
    def config(self) -> dict:
        """The fully resolved config the run was made from."""
        c = self.attrs.get("config", {})
        return c if isinstance(c, dict) else {}

    @config.setter
    def config(self, value):
        self.attrs["config"] = value

    @property
    def system(self) -> str:
        """``mixture`` | ``engine`` | ``induction`` (in memory: a name that also
        answers for the engine's system object)."""
        name = self.__dict__.get("_system_name")
        return name if name is not None else str(self.attrs.get("system", ""))

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        if name in ("t", "step", "stage", "margin"):
            return np.asarray(self[name]) if name in self else np.empty(0)
        if name == "loss":
            for k in ("loss", "loss_train"):
                if k in self:
                    return np.asarray(self[k])
            return np.empty(0)
        if name in ("status", "message"):
            return self.attrs.get(name, "")
        if name == "stage_ends":
            return list(self.attrs.get("stage_ends") or [])
        if name in ("heads", "features"):
            return tuple(_strs(self[name])) if name in self else ()
        if name in ("S", "A", "B", "W", "w", "a") and (self.system == "engine"
                                                       or getattr(self._reader(), "blocks", None) is not None):
            return self._stacked(name)
        raise AttributeError(name)

    # ------------------------------------------------------------------ records and state entries
    @property
    def records(self) -> dict[str, np.ndarray]:
        """Every recorded time series, ``name -> array (T, ...)``, groups
        flattened (``"variables/+/S"``): the datasets whose first axis is the
        record axis ``t`` (the initial state and static datasets are not in it)."""
        T = len(self.t)
        return {k: np.asarray(v) for k, v in _flatten(dict(self.items())).items()
                if not k.startswith(("initial_state", "samples", "training_set"))
                and np.ndim(v) >= 1 and np.shape(v)[0] == T and np.asarray(v).dtype.kind in "fiub"}

    def _state_arrays(self, source: dict | None = None) -> list[tuple[str, np.ndarray, list[list[str]]]]:
        """(name, array (T, ...) or (...) , axis labels) of every state variable."""
        src = self if source is None else source
        out = []
        sysname = self.system
        feats = list(self.features)
        reader = self._reader()
        if reader is not None:  # a paper's run file: the reader its plug-in registered
            out = list(reader.state_arrays(self, src, source is None))
        elif sysname in ("engine", "twolayer"):  # twolayer: the blocks of meanfield.engine.twolayer_run
            axes = self.attrs.get("variable_axes") or {}
            for h, g in (src.get("variables") or {}).items():
                for nm, a in g.items():
                    a = np.asarray(a)
                    shp = a.shape[1:] if source is None else a.shape
                    ax = axes.get(f"{h}/{nm}") if isinstance(axes, dict) else None
                    if ax is None or [len(x) for x in ax] != list(shp):
                        ax = [_labels(n, feats) for n in shp]
                    out.append((nm, a, [[h]] + [list(x) for x in ax]))
        return out

    @staticmethod
    def _names(nm: str, shape: tuple, axes: list[list[str]]) -> list[str]:
        if axes and len(axes[0]) == 1 and len(shape) == len(axes) - 1:  # engine: the head is a label, not an axis
            head, rest = axes[0][0], axes[1:]
        else:
            head, rest = None, axes
        rest = [_labels(n, list(ax)) for n, ax in zip(shape, rest)] if rest else []
        if not shape:
            return [nm if head is None else f"{nm}[{head}]"]
        names = []
        for idx in np.ndindex(*shape):
            lab = [rest[i][j] for i, j in enumerate(idx)]
            if head is not None:
                lab = [head] + lab
            names.append(f"{nm}[{','.join(lab)}]")
        return names

    @property
    def entries(self) -> list[str]:
        """The name of every scalar state entry, in the order of :attr:`states`."""
        names = []
        for nm, a, ax in self._state_arrays():
            names += self._names(nm, a.shape[1:], ax)
        return names

    @property
    def states(self) -> np.ndarray:
        """The state at every record, (T, E) over :attr:`entries`."""
        T = len(self.t)
        parts = [np.asarray(a, dtype=float).reshape(T, -1) for _, a, _ in self._state_arrays()]
        return np.concatenate(parts, axis=1) if parts else np.empty((T, 0))

    @property
    def initial_state(self) -> np.ndarray:
        """The initial state over :attr:`entries` (the file's ``initial_state``
        group; older files: the first record)."""
        g = self.get("initial_state")
        if isinstance(g, dict):
            src = {"variables": g} if self.system == "engine" else g
            parts = [np.asarray(a, dtype=float).ravel() for _, a, _ in self._state_arrays(src)]
            if parts:
                return np.concatenate(parts)
        return self.states[0]

    def state(self, t: float, method: str = "linear") -> np.ndarray:
        """The state at time ``t`` over :attr:`entries`.

        Parameters
        ----------
        t : float
            a time within the recorded range.
        method : {"linear", "nearest"}
            ``linear`` (default): linear interpolation between the two records
            around ``t`` (exact at a record); ``nearest``: the nearest record
            (the earlier one at a tie).

        Returns
        -------
        numpy.ndarray
            (E,) values, in the order of :attr:`entries`.

        Examples
        --------
        >>> r = meanfield.open_run("runs/incontext.h5")     # doctest: +SKIP
        >>> dict(zip(r.entries, r.state(2.5)))              # doctest: +SKIP
        """
        from .errors import ConfigError

        tt = np.asarray(self.t, dtype=float)
        if tt.size == 0:
            raise ConfigError("t: the run has no records")
        t = float(t)
        if not (tt[0] <= t <= tt[-1]) or not math.isfinite(t):
            raise ConfigError(f"t: must be within the recorded range [{tt[0]:g}, {tt[-1]:g}], got {t:g}")
        X = self.states
        if method == "nearest":
            i = int(np.argmin(np.abs(tt - t)))
            return X[i].copy()
        if method != "linear":
            raise ConfigError(f"method: must be linear or nearest, got {method!r}")
        j = int(np.searchsorted(tt, t, side="left"))
        if tt[j] == t:
            return X[j].copy()
        i = j - 1
        lam = (t - tt[i]) / (tt[j] - tt[i])
        return (1 - lam) * X[i] + lam * X[j]

    # ------------------------------------------------------------------ named variables
    def _reader(self):
        """The reader a plug-in registered for this run's system (``meanfield.core.hooks.run_reader``), or None
        (a described model's run, ``engine`` / ``twolayer``, is read here)."""
        sysname = self.system
        if not isinstance(sysname, str) or sysname in ("engine", "twolayer"):
            return None
        from .hooks import run_reader

        return run_reader(str(sysname))

    def _blocks(self) -> dict:
        obs = self.__dict__.get("obs")
        if obs is not None:
            return obs["blocks"]
        out = {}
        reader = self._reader()
        if getattr(reader, "blocks", None) is not None:
            out = dict(reader.blocks(self))
        else:
            for h, g in (self.get("variables") or {}).items():
                for nm, a in g.items():
                    out[f"{h}:{nm}"] = np.asarray(a)
        return out

    def var(self, head: str, name: str) -> np.ndarray:
        """The recorded variable ``name`` of ``head`` (T, ...): ``run.var("+", "V.r1")``."""
        blk = self._blocks()
        key = f"{head}:{name}"
        if key not in blk:
            raise KeyError(f"no variable {name!r} of head {head!r}; have {', '.join(sorted(blk))}")
        return blk[key]

    def _stacked(self, name: str) -> Named:
        heads = tuple(self.heads)
        blk = self._blocks()
        if not heads or any(f"{h}:{name}" not in blk for h in heads):
            raise AttributeError(name)
        vals = np.stack([blk[f"{h}:{name}"] for h in heads], axis=1)
        feats = tuple(self.features)
        axes = [heads]
        if name in ("S", "A", "B", "W"):
            axes += [feats, feats]
        elif name == "w":
            if vals.ndim == 5 and vals.shape[2] == 1 and vals.shape[3] == 1:
                vals = vals[:, :, 0, 0]
            if vals.ndim == 3:
                axes += [feats]
            else:
                axes += [tuple(map(str, range(n))) for n in vals.shape[2:-1]] + [feats]
        return Named(vals, axes)

    # ------------------------------------------------------------------ exports
    def _attrs_plain(self) -> dict:
        """The attributes as NetCDF-safe values (JSON text for dicts, lists, None, booleans)."""
        out = {}
        for k, v in self.attrs.items():
            if isinstance(v, (bool, np.bool_)):
                out[k] = json.dumps(bool(v))
            elif isinstance(v, (dict, list, tuple)) or v is None:
                out[k] = json.dumps(v, default=str)
            elif isinstance(v, (int, float, str, np.integer, np.floating)):
                out[k] = v
            else:
                out[k] = str(v)
        return out

    def to_xarray(self):
        """The run as an ``xarray.Dataset``: ``state`` (time x entry), ``loss``,
        ``step``, ``stage`` (time) and every other recorded series (its extra
        axes as dims ``<name>_<i>``); the root attributes carried (dicts and
        lists as JSON text), so ``ds.to_netcdf(path)`` and ``xarray.open_dataset``
        give back equal values.

        Returns
        -------
        xarray.Dataset

        Examples
        --------
        >>> ds = meanfield.open_run("runs/incontext.h5").to_xarray()   # doctest: +SKIP
        >>> ds.state.sel(entry="W[h,x1,x1]").plot()                     # doctest: +SKIP
        """
        xr = _need("xarray", "to_xarray")
        coords = {"time": np.asarray(self.t, dtype=float), "entry": np.array(self.entries, dtype=str)}
        dv = {"state": (("time", "entry"), self.states)}
        for k, v in self.records.items():
            if k == "t" or k.startswith("variables/") or k in getattr(self._reader(), "stacked_records", ()):
                continue
            nm = k.replace("/", "_").replace(".", "_")
            dims = ("time",) + tuple(f"{nm}_{i}" for i in range(1, np.ndim(v)))
            dv[nm] = (dims, v)
        return xr.Dataset(dv, coords=coords, attrs=self._attrs_plain())

    def to_dataframe(self):
        """The run as a ``pandas.DataFrame``: one row per record (index ``t``),
        columns ``step``, ``stage``, ``loss`` and one per state entry.

        Returns
        -------
        pandas.DataFrame

        Examples
        --------
        >>> df = meanfield.open_run("runs/incontext.h5").to_dataframe()   # doctest: +SKIP
        >>> df[["loss", "W[h,x1,x1]"]].plot()                              # doctest: +SKIP
        """
        pd = _need("pandas", "to_dataframe")
        cols = {}
        for k in ("step", "stage"):
            if k in self:
                cols[k] = np.asarray(self[k])
        cols["loss"] = self.loss
        X = self.states
        for i, e in enumerate(self.entries):
            cols[e] = X[:, i]
        df = pd.DataFrame(cols, index=pd.Index(np.asarray(self.t, dtype=float), name="t"))
        df.attrs = self._attrs_plain()
        return df

    # ------------------------------------------------------------------ figures
    def plot(self, entries=None, ax=None, logy: bool = True, max_entries: int = 12):
        """Loss and state entries against time, every line labelled.

        Parameters
        ----------
        entries : list of str, optional
            the state entries to draw (names from :attr:`entries`); default:
            the ``max_entries`` that move most.
        ax : matplotlib Axes, optional
            draw the entries into it (no loss panel).
        logy : bool
            logarithmic loss axis.
        max_entries : int
            how many entries by default.

        Returns
        -------
        matplotlib.figure.Figure

        Examples
        --------
        >>> fig = meanfield.open_run("runs/incontext.h5").plot()   # doctest: +SKIP
        """
        import matplotlib.pyplot as plt

        names = self.entries
        X = self.states
        if entries is None:
            moved = np.abs(X[-1] - X[0]) if len(X) else np.zeros(len(names))
            idx = list(np.argsort(-moved, kind="stable")[:max_entries])
        else:
            missing = [e for e in entries if e not in names]
            if missing:
                from .errors import ConfigError

                raise ConfigError(f"entries: no state entry {missing[0]!r}; e.g. {', '.join(names[:4])}")
            idx = [names.index(e) for e in entries]
        t = np.asarray(self.t, dtype=float)
        if ax is None:
            fig, (al, ax) = plt.subplots(1, 2, figsize=(11, 4))
            al.plot(t, self.loss, label="loss")
            if logy and np.all(self.loss > 0):
                al.set_yscale("log")
            al.set_xlabel(time_label(self))
            al.set_ylabel("loss")
            al.legend(fontsize=8, loc="upper right")
        else:
            fig = ax.figure
        for i in idx:
            ax.plot(t, X[:, i], lw=1, label=names[i])
        ax.set_xlabel(time_label(self))
        ax.set_ylabel("state entry (reduced variable)")
        if idx:
            ax.legend(fontsize=7, ncol=2 if len(idx) > 6 else 1, loc="upper left")
        fig.tight_layout()
        return fig


def time_label(run) -> str:
    """The time axis label: gradient-flow time t = (steps) x eta for GD runs."""
    m = run.attrs.get("method", "")
    if m == "gd":
        return "t (gradient-flow time = steps x eta)"
    return "t (gradient-flow time)"


def open_run(path) -> Run:
    """Open a run file of any system (mixture, engine, induction).

    Parameters
    ----------
    path : str or Path
        an HDF5 run file written by ``meanfield``.

    Returns
    -------
    Run

    Raises
    ------
    FileNotFoundError, ValueError
        no such file; not a meanfield run file.

    Examples
    --------
    >>> r = meanfield.open_run("runs/incontext.h5")    # doctest: +SKIP
    >>> r.system, r.loss[-1], r.entries[:3]            # doctest: +SKIP
    """
    return read_file(path)


def _read_group(g) -> dict[str, Any]:
    import h5py

    out = {}
    for k, v in g.items():
        if isinstance(v, h5py.Group):
            out[k] = _read_group(v)
        else:
            a = v[()]
            if v.dtype.kind == "O" or h5py.check_string_dtype(v.dtype) is not None:
                a = np.asarray(v.asstr()[()], dtype=object)
            out[k] = a
    return out


def read_file(path) -> Run:
    """Read a run file of any system (what :func:`open_run` and
    ``meanfield.core.io.read_run`` return): datasets and groups as a
    :class:`Run`, JSON attributes decoded, the width of format-1 files (-1)
    read as ``inf``.

    Parameters
    ----------
    path : str or Path

    Returns
    -------
    Run

    Raises
    ------
    FileNotFoundError, ValueError

    Examples
    --------
    >>> r = read_file("runs/incontext.h5")     # doctest: +SKIP
    """
    import h5py

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"run file not found: {path}")
    if not h5py.is_hdf5(path):  # a directory, a text file, a truncated file: not h5py's raw OSError
        raise ValueError(f"{path}: not a meanfield run file (not an HDF5 file)")
    with h5py.File(path, "r") as f:
        if f.attrs.get("format") != FORMAT:
            raise ValueError(f"{path}: not a meanfield run file (format attribute {f.attrs.get('format')!r})")
        run = Run(_read_group(f), path=path)
        attrs = {}
        for k, v in f.attrs.items():
            if isinstance(v, bytes):
                v = v.decode()
            # JSON-encoded attributes (dicts, lists, None) start with { or [ or are "null";
            # any other string stays a string
            if isinstance(v, str) and k not in ("message", "status", "system", "format", "meanfield_version") and \
                    (v[:1] in ("{", "[") or v == "null"):
                try:
                    v = json.loads(v)
                except json.JSONDecodeError:
                    pass
            attrs[k] = v
    if attrs.get("width") == -1:  # files before format 2 wrote infinite width as -1
        attrs["width"] = math.inf
    run.attrs = attrs
    return run


def label_of(run, label) -> str:
    """A legend label for ``run``: ``label`` an attribute or a resolved parameter
    name (``"width"`` -> ``width = 16``; infinite width -> ``width = inf``), a
    callable of the run, or None (the file name)."""
    if callable(label):
        return str(label(run))
    if label is None:
        return run.path.stem if run.path is not None else str(run.attrs.get("model", "run"))
    v = run.attrs.get(label)
    if v is None:
        cfg = run.config
        for part in (cfg, cfg.get("parameters", {}), cfg.get("declared", {}), run.attrs.get("parameters") or {}):
            if isinstance(part, dict) and label in part:
                v = part[label]
                break
    if v is None:
        return f"{label} = ?"
    if label == "width" and (v == -1 or v is None or (isinstance(v, float) and math.isinf(v))):
        v = "inf"
    return f"{label} = {v:g}" if isinstance(v, float) else f"{label} = {v}"


def plot_runs(runs, label=None, entries=None, logy: bool = True):
    """Overlay several runs in one figure: their losses and (``entries``) the
    chosen state entries, one legend line per run.

    Parameters
    ----------
    runs : list of Run or paths
        the runs (paths are opened with :func:`open_run`).
    label : str or callable, optional
        what tells the runs apart in the legend: an attribute or parameter
        name (``"width"``, ``"eta"``, ``"seed"``), or a function of a Run;
        default the file names.
    entries : list of str, optional
        state entries to draw in a second panel (names from ``Run.entries``).
    logy : bool
        logarithmic loss axis.

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> fig = meanfield.plot_runs(["runs/w16.h5", "runs/w64.h5"], label="width")   # doctest: +SKIP
    """
    import matplotlib.pyplot as plt

    from .errors import ConfigError

    runs = [r if isinstance(r, Run) else open_run(r) for r in runs]
    if not runs:
        raise ConfigError("runs: give at least one run")
    n = 2 if entries else 1
    fig, axes = plt.subplots(1, n, figsize=(5.5 * n, 4), squeeze=False)
    al = axes[0][0]
    for r in runs:
        lab = label_of(r, label)
        al.plot(np.asarray(r.t, dtype=float), r.loss, label=lab)
        if entries:
            names = r.entries
            X = r.states
            for e in entries:
                if e not in names:
                    raise ConfigError(f"entries: no state entry {e!r} in {r.path or 'run'}")
                axes[0][1].plot(np.asarray(r.t, dtype=float), X[:, names.index(e)], label=f"{e}, {lab}")
    if logy and all(np.all(np.asarray(r.loss) > 0) for r in runs):
        al.set_yscale("log")
    al.set_xlabel(time_label(runs[0]))
    al.set_ylabel("loss")
    al.legend(fontsize=8, loc="upper right")
    if entries:
        axes[0][1].set_xlabel(time_label(runs[0]))
        axes[0][1].set_ylabel("state entry (reduced variable)")
        axes[0][1].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return fig



def stage_end_index(t, stage_ends, stage: int) -> int | None:
    """The record index at which ``stage`` ended (the first record at or after
    its end time, to a relative 1e-12), or None when it has no end.

    Parameters
    ----------
    t : array_like
        The record times (ascending).
    stage_ends : list of dict
        The run's ``stage_ends`` (each with ``stage`` and ``t``).
    stage : int
        The stage number.

    Returns
    -------
    int or None

    Examples
    --------
    >>> stage_end_index([0.0, 1.0, 2.0], [{"stage": 1, "t": 1.0}], 1)
    1
    """
    for e in stage_ends or []:
        if int(e["stage"]) == stage:
            return int(np.searchsorted(np.asarray(t, float), e["t"] - 1e-12 * max(1.0, e["t"])))
    return None
