"""The explicit two-layer network of a two-layer description, in torch float64 (the oracle).

It is built from the description's own fields (vocabulary, context length,
layers and heads, selector, read-out, loss) and shares no code with the
engine's kernels (:mod:`meanfield.engine.twolayer_net`): one-hot token and
position embeddings, a full T x T score matrix per head (the relative
positional weight of lag t - j placed at entry (t, j), plus X A X^T), an
explicit mask of the lags the window allows (j <= t), explicit softmax or
linear attention, explicit normalisation, the selector's feature products and
the read-out written out, autograd for the gradient, and plain GD
theta <- theta - eta grad on the same data (x, y, p).

Example
-------
>>> import numpy as np
>>> spec = {"S": 2, "L": 2, "readout": "linear", "selector": None,
...         "layers": [[{"score": "bilinear", "lags": None, "softmax": True, "normalise": False, "value": "stream"}]]}
>>> net = Oracle(spec)
>>> params = net.init_zero()
>>> bool(abs(float(net.loss(params, np.array([[0, 1]]), np.array([[1.0, 0.0]]), np.ones(1)).detach()) - np.log(2)) < 1e-12)
True
"""

from __future__ import annotations

import itertools
import math

import numpy as np

try:
    import torch
except ImportError:  # pragma: no cover - torch is an optional dependency of the oracle
    torch = None

__all__ = ["Oracle"]

_CAP = 300.0 * math.log(10.0)  # -log(1e-300): the clip of -log y_hat


class Oracle:
    """The explicit network of a spec dict (``S``, ``L``, ``layers``, ``selector``, ``readout``).

    Parameters
    ----------
    spec : dict
        ``S``, ``L``, ``readout`` ("linear" | "attention"), ``selector`` (D or None),
        ``layers``: a list of layers, each a list of heads, each a dict with
        ``score``, ``lags`` ([first, last] or None), ``softmax``, ``normalise``, ``value``, optionally ``query``
        and ``key`` (lists of stream blocks: "token", "position", "layerJ.headI"; the score reads only their
        columns of the stream and of A / W_Q / W_K); optionally ``ce``
        ("log" or "softmax": the loss, as :class:`meanfield.engine.twolayer_net.Net`) and ``log_cap``; and optionally
        ``width`` (a finite m: the score (W_Q x_t)^T (W_K x_j), the weights W_Q, W_K in R^{m x D} its parameters)
        and ``value_matrix`` (the output V u; with ``width`` V = W_O M_V, W_O^T and M_V in R^{m x w} its parameters).

    Example
    -------
    >>> spec = {"S": 2, "L": 3, "readout": "linear", "selector": None,
    ...         "layers": [[{"score": "rpe", "lags": [0, 1], "softmax": True, "normalise": True, "value": "token"}]]}
    >>> [n for n, _ in Oracle(spec).shapes]
    ['layer1.head1.w', 'readout.W']
    """

    def __init__(self, spec: dict):
        if torch is None:
            raise ImportError("the explicit network needs torch (pip install torch)")
        self.S, self.L = int(spec["S"]), int(spec["L"])
        self.readout = spec["readout"]
        self.D = spec.get("selector")
        self.ce = spec.get("ce", "log")  # "softmax": torch's own cross_entropy on y_hat taken as logits
        self.cap = float(spec.get("log_cap", _CAP))
        self.layers = [[dict(h) for h in layer] for layer in spec["layers"]]
        self.T = self.L + 1 if self.readout == "attention" else self.L
        shapes, width = [], self.S + self.T
        for k, layer in enumerate(self.layers):
            grow = 0
            for h, hd in enumerate(layer):
                if "rpe" in hd["score"]:
                    shapes.append((f"layer{k + 1}.head{h + 1}.w", (hd["lags"][1] - hd["lags"][0] + 1,)))
                if "bilinear" in hd["score"] and hd.get("width") is not None:  # wide: the weights themselves
                    m = int(hd["width"])
                    shapes.append((f"layer{k + 1}.head{h + 1}.WQ", (m, width)))
                    shapes.append((f"layer{k + 1}.head{h + 1}.WK", (m, width)))
                elif "bilinear" in hd["score"]:
                    shapes.append((f"layer{k + 1}.head{h + 1}.A", (width, width)))
                vw = self.S if hd["value"] == "token" else width
                if hd.get("value_matrix") and hd.get("width") is not None:  # o = W_O M_V u, the weights themselves
                    m = int(hd["width"])
                    shapes.append((f"layer{k + 1}.head{h + 1}.WOt", (m, vw)))
                    shapes.append((f"layer{k + 1}.head{h + 1}.MV", (m, vw)))
                elif hd.get("value_matrix"):
                    shapes.append((f"layer{k + 1}.head{h + 1}.V", (vw, vw)))
                grow += vw
            width += grow
        self.nheads = sum(len(layer) for layer in self.layers)
        if self.D is not None:
            self.subs = [s for r in range(min(self.D, self.nheads) + 1)
                         for s in itertools.combinations(range(self.nheads), r)]
            shapes.append(("selector.c", (len(self.subs),)))
        shapes.append(("readout.W", (width, self.S)) if self.readout == "linear" else ("readout.a", ()))
        self.shapes = shapes

    def init_zero(self) -> dict:
        """Zero parameters (name -> tensor with requires_grad)."""
        return {n: torch.zeros(s, dtype=torch.float64, requires_grad=True) for n, s in self.shapes}

    def from_flat(self, theta) -> dict:
        """Parameters from a flat vector laid out block after block in :attr:`shapes` order."""
        out, i = {}, 0
        for n, s in self.shapes:
            m = int(np.prod(s)) if s else 1
            out[n] = torch.tensor(np.asarray(theta[i:i + m], dtype=np.float64).reshape(s), requires_grad=True)
            i += m
        return out

    @staticmethod
    def to_flat(params: dict) -> np.ndarray:
        """The flat vector of the parameters (insertion order)."""
        return np.concatenate([t.detach().numpy().ravel() for t in params.values()])

    def _mask(self, first, last):
        t = torch.arange(self.T)[:, None]
        j = torch.arange(self.T)[None, :]
        lag = t - j
        return (lag >= first) & (lag <= last)

    def predict_log(self, params: dict, x) -> "torch.Tensor":
        """log y_hat (n, S) of sequences x (n, >= L)."""
        x = torch.as_tensor(np.asarray(x)[:, :self.L])
        n = x.shape[0]
        tok = torch.nn.functional.one_hot(x, self.S).double()
        if self.T > self.L:  # the query position: no token
            tok = torch.cat([tok, torch.zeros(n, 1, self.S, dtype=torch.float64)], dim=1)
        pos = torch.eye(self.T, dtype=torch.float64).expand(n, self.T, self.T)
        X = torch.cat([tok, pos], dim=2)
        where = {"token": list(range(self.S)), "position": list(range(self.S, self.S + self.T))}  # stream columns
        outs = []
        for k, layer in enumerate(self.layers):
            new = []
            col = X.shape[2]
            for h, hd in enumerate(layer):
                name = f"layer{k + 1}.head{h + 1}"
                # a restricted query / key: the score reads only those stream columns (of X and of A, W_Q, W_K)
                qi = [c for b in hd.get("query") or () for c in where[b]] or list(range(X.shape[2]))
                ki = [c for b in hd.get("key") or () for c in where[b]] or list(range(X.shape[2]))
                qi, ki = torch.tensor(qi), torch.tensor(ki)
                first, last = hd["lags"] if hd["lags"] is not None else (0, self.T - 1)
                allowed = self._mask(first, last)
                Z = torch.zeros(n, self.T, self.T, dtype=torch.float64)
                if "rpe" in hd["score"]:
                    w = params[name + ".w"]
                    R = torch.zeros(self.T, self.T, dtype=torch.float64)
                    rows = []
                    for t in range(self.T):
                        row = []
                        for j in range(self.T):
                            lag = t - j
                            row.append(w[lag - first] if first <= lag <= last else torch.zeros((), dtype=torch.float64))
                        rows.append(torch.stack(row))
                    R = torch.stack(rows)
                    Z = Z + R
                if "bilinear" in hd["score"] and hd.get("width") is not None:  # (W_Q x_t) . (W_K x_j)
                    Z = Z + ((X[:, :, qi] @ params[name + ".WQ"][:, qi].T)
                             @ (X[:, :, ki] @ params[name + ".WK"][:, ki].T).transpose(1, 2))
                elif "bilinear" in hd["score"]:
                    Z = Z + X[:, :, qi] @ params[name + ".A"][qi][:, ki] @ X[:, :, ki].transpose(1, 2)
                if hd["softmax"]:
                    Zm = Z.masked_fill(~allowed, float("-inf"))
                    has = allowed.any(dim=1)
                    att = torch.where(has[None, :, None], torch.softmax(torch.where(has[None, :, None], Zm, 0.0 * Z),
                                                                        dim=2), 0.0 * Z)
                    att = att * allowed
                else:
                    att = Z * allowed
                val = X[:, :, :self.S] if hd["value"] == "token" else X
                s = att @ val
                if hd["normalise"]:
                    sq = (s * s).sum(dim=2, keepdim=True)  # s = 0 (no lag): u = 0 and no gradient (no sqrt(0))
                    safe = torch.sqrt(torch.where(sq > 0, sq, torch.ones_like(sq)))
                    s = torch.where(sq > 0, s / safe, torch.zeros_like(s))
                if hd.get("value_matrix") and hd.get("width") is not None:
                    s = (s @ params[name + ".MV"].T) @ params[name + ".WOt"]  # W_O M_V u: (W_O^T)^T M_V
                elif hd.get("value_matrix"):
                    s = s @ params[name + ".V"].T
                new.append(s)
                outs.append(s)
                where[name] = list(range(col, col + s.shape[2]))
                col += s.shape[2]
            X = torch.cat([X] + new, dim=2)
        if self.readout == "linear":
            return torch.log_softmax(X[:, self.L - 1, :] @ params["readout.W"], dim=1)
        L = self.L
        c = params["selector.c"]
        num = torch.zeros(n, L, dtype=torch.float64)
        for si, sub in enumerate(self.subs):
            term = torch.ones(n, L, dtype=torch.float64)
            for h in sub:
                u = outs[h]
                term = term * (u[:, :L, :] * u[:, L:L + 1, :]).sum(dim=2)
            num = num + c[si] ** 2 * term
        Kl = num / (c ** 2).sum()
        logits = params["readout.a"] * Kl
        beta = torch.softmax(logits, dim=1)
        onehot = torch.nn.functional.one_hot(x[:, :L], self.S).double()
        yhat = (beta[:, :, None] * onehot).sum(dim=1)
        pos_ = yhat > 0  # a token absent from the context: log 0 = -inf, with no gradient through it
        return torch.where(pos_, torch.log(torch.where(pos_, yhat, torch.ones_like(yhat))),
                           torch.full_like(yhat, float("-inf")))

    def loss(self, params: dict, x, y, p) -> "torch.Tensor":
        """sum_n p_n sum_e y_ne min(-log y_hat_ne, -log 1e-300) (a clipped or zero-target term: no gradient)."""
        logy = self.predict_log(params, x)
        y = torch.as_tensor(np.asarray(y, dtype=np.float64))
        p = torch.as_tensor(np.asarray(p, dtype=np.float64))
        if self.ce == "softmax":  # CrossEntropyLoss handed the probabilities y_hat as logits, soft targets y
            per = torch.nn.functional.cross_entropy(torch.exp(logy), y, reduction="none")
            return (p * per).sum()
        nl = -logy
        cap = self.cap
        keep = (y > 0) & (nl < cap)
        term = torch.where(keep, y * torch.where(keep, nl, torch.zeros_like(nl)), torch.zeros_like(nl))
        term = term + torch.where((y > 0) & ~keep, y * cap, torch.zeros_like(nl))
        return (p * term.sum(dim=1)).sum()

    def gd(self, theta0, x, y, p, eta, steps: int, train=None):
        """Plain GD from a flat ``theta0``; ``eta`` a number or a flat array, ``train`` a flat 0/1 mask.

        Returns the flat parameters after ``steps`` steps and the losses before each step and after the last.
        """
        params = self.from_flat(theta0)
        flat_eta = np.broadcast_to(np.asarray(eta, dtype=np.float64), (len(theta0),))
        if train is not None:
            flat_eta = flat_eta * np.asarray(train, dtype=np.float64)
        etas, i = {}, 0
        for n, s in self.shapes:
            m = int(np.prod(s)) if s else 1
            etas[n] = torch.tensor(flat_eta[i:i + m].reshape(s))
            i += m
        losses = []
        for _ in range(int(steps)):
            tl = self.loss(params, x, y, p)
            losses.append(float(tl.detach()))
            gs = torch.autograd.grad(tl, list(params.values()), allow_unused=True)
            with torch.no_grad():
                for (nm, t), g in zip(params.items(), gs):
                    if g is not None:
                        t -= etas[nm] * g
        losses.append(float(self.loss(params, x, y, p).detach()))
        return self.to_flat(params), np.array(losses)
