"""An explicit network with trainable token embeddings, in torch float64 with autograd: the oracle of
``meanfield.engine.embeddings`` (tests/test_engine_embeddings.py).

It shares no code with the engine's dynamics: the tokens are x = E t with E (d x P) a torch
parameter, the wide weights W_K, W_Q, M_V (m x d) and read-outs r_c (m) are explicit, the forward
pass is written out from the conventions of ``docs/engine.md`` ("A description") and the gradient is
torch's autograd; full-batch GD steps every weight with its group's rate (the description's rates and
schedules, read with ``meanfield.engine.rates``' rate lookup, the meaning of the description, not its
dynamics). From the engine it takes the description, the initial explicit weights and the names of
the reduced variables for the comparison.
"""

from __future__ import annotations

import numpy as np
import torch

from meanfield.engine.rates import schedule_factor, stage_base_eta, stage_group_rates, stage_schedule

TORCH = dict(dtype=torch.float64)


def _t(x):
    return torch.tensor(np.asarray(x, dtype=np.float64), **TORCH)


class EmbeddingNet:
    """The explicit network of ``desc`` with trainable E.

    ``E0``: (d x P); ``wide``: per head the m_h x D_h weights [W_K | W_Q | M_V | r_1 .. r_C]
    (columns d, d, d, 1, ..., in that order, those the head has); ``narrow``: per head a dict
    with ``W`` (d x d), ``w`` (C n x d) and ``a`` (the sign), those it has."""

    def __init__(self, desc, E0, wide, narrow):
        self.desc = desc
        data = desc.data
        self.T = _t(data.tokens)                         # (S, L, P)
        self.c = _t(data.count_array)                    # (S, L)
        self.weight = _t(data.weight)
        self.target = np.asarray(data.target)
        self.loss_kind = desc.model.loss
        self.r0 = float(desc.model.relu_prime_at_zero)
        self.E = _t(E0).requires_grad_(True)
        d, P = E0.shape
        self.d, self.P = d, P
        self.params = []
        for h, M, nar in zip(desc.model.heads, wide, narrow):
            p, col = {}, 0
            M = np.asarray(M, float)
            if h.kq == "separate":
                p["WK"], p["WQ"] = _t(M[:, :d]), _t(M[:, d:2 * d])
                col = 2 * d
            else:
                p["W"] = _t(nar["W"])
            if h.value == "matrix":
                p["MV"] = _t(M[:, col:col + d])
                p["r"] = _t(M[:, col + d:col + d + h.outputs].T)   # (C, m)
            if h.value in ("neuron", "linear"):
                p["w"] = _t(np.asarray(nar["w"]).reshape(h.outputs, h.n_neurons, d))
            p["a"] = _t(float(nar["a"]))
            for v in p.values():
                v.requires_grad_(True)
            self.params.append(p)

    # ------------------------------------------------------------ forward

    def _relu(self, u):
        zero = torch.zeros_like(u)
        return torch.where(u > 0, u, zero) + self.r0 * torch.where(u == 0, u, zero)

    def forward(self):
        E, T, c = self.E, self.T, self.c
        S, L, P = T.shape
        X = T @ E.T                                       # (S, L, d) the tokens
        f = 0.0
        for h, p in zip(self.desc.model.heads, self.params):
            ck = c.clone()
            if h.query == "mean":
                Xq, Tq = X, T
                qw = c / c.sum(dim=1, keepdim=True)
            elif h.query == "last":
                last = [int(np.flatnonzero(c[s].numpy() > 0)[-1]) for s in range(S)]
                Xq = torch.stack([X[s, last[s]] for s in range(S)])[:, None, :]
                Tq = torch.stack([T[s, last[s]] for s in range(S)])[:, None, :]
                qw = torch.ones((S, 1), **TORCH)
                if not h.query_self:
                    mask = torch.ones_like(ck)
                    for s in range(S):
                        mask[s, last[s]] = 0.0
                    ck = ck * mask
            else:
                tq = _t(h.query_vector)
                Tq = tq.expand(S, 1, P)
                Xq = Tq @ E.T
                qw = torch.ones((S, 1), **TORCH)
            if h.kq == "separate":
                z = torch.einsum("sim,slm->sil", X @ p["WK"].T, Xq @ p["WQ"].T)
            else:
                z = torch.einsum("sid,de,sle->sil", X, p["W"], Xq)
            z = h.scale * z                                # (S, L keys, Lq)
            ck3 = ck[:, :, None]
            if h.attention == "softmax":
                zm = torch.where(ck3 > 0, z, torch.full_like(z, -1e300)).max(dim=1, keepdim=True).values.detach()
                e = ck3 * torch.exp(torch.where(ck3 > 0, z - zm, torch.zeros_like(z)))
                pa = e / e.sum(dim=1, keepdim=True)
            else:
                pa = z * ck3 / ck.sum(dim=1)[:, None, None]
            att = (pa * qw[:, None, :]).sum(dim=2)          # (S, L) total weight of key i
            zbar = (att[:, :, None] * X).sum(dim=1)          # (S, d)
            if h.value == "neuron":
                u = torch.einsum("cnd,sd->scn", p["w"], zbar)
                out = self._relu(u).mean(dim=2)
            elif h.value == "linear":
                out = zbar @ p["w"][:, 0].T
            elif h.value == "matrix":
                out = (zbar @ p["MV"].T) @ p["r"].T
            else:
                out = (att[:, :, None] * T).sum(dim=1)       # the attended token's coefficients
            f = f + p["a"] * out
        return f

    def loss(self):
        f = self.forward()
        y = self.target
        if self.loss_kind == "logistic":
            yy = _t(y)
            ls = torch.nn.functional.softplus(-yy * f[:, 0])
        elif self.loss_kind == "squared":
            ls = 0.5 * ((f - _t(y).reshape(f.shape)) ** 2).sum(dim=1)
        else:
            k = torch.tensor(np.asarray(y, dtype=np.int64))
            ls = torch.logsumexp(f, dim=1) - f[torch.arange(f.shape[0]), k]
        return (self.weight * ls).sum()

    # ------------------------------------------------------------ GD

    def step(self, rates: dict, train):
        """One full-batch GD step: each weight minus its group's rate times its gradient
        (neurons: rate n, the mean-field time scale; E in every stage)."""
        loss = self.loss()
        ws = [self.E] + [v for p in self.params for v in p.values()]
        grads = torch.autograd.grad(loss, ws)
        gE, gi = grads[0], iter(grads[1:])
        with torch.no_grad():
            self.E -= rates["embeddings"] * gE
            for h, p in zip(self.desc.model.heads, self.params):
                for k, v in p.items():
                    g = next(gi)
                    grp = {"WK": ("keys", "attention"), "WQ": ("queries", "attention"), "W": ("keys", "attention"),
                           "w": ("values", "values"), "MV": ("values", "values"), "r": ("readout", "readout"),
                           "a": ("signs", "signs")}[k]
                    if grp[1] not in train or (k == "a" and not h.train_sign):
                        continue
                    lr = rates[grp[0]] * (h.n_neurons if (k == "w" and h.value == "neuron") else 1)
                    v -= lr * g
        return float(loss.detach())

    def run(self):
        """Every stage's steps (no criteria); returns the :meth:`reduced` variables (a list) and E^T E
        (an array) at the start and after each step."""
        tr = self.desc.training
        states, grams = [self.reduced()], [self.gram()]
        k_run = 0
        for i, st in enumerate(tr.stages):
            spec, origin, horizon = stage_schedule(tr, i)
            base = stage_base_eta(tr, st)
            r = stage_group_rates(tr, st)
            for k in range(int(st.length)):
                s = 1.0 if spec is None else schedule_factor(spec, (k if origin is None else k_run), horizon)
                self.step({g: v * s for g, v in r.items()}, st.train)
                k_run += 1
                states.append(self.reduced())
                grams.append(self.gram())
            del base
        return states, np.array(grams)

    # ------------------------------------------------------------ projection

    def gram(self):
        E = self.E.detach().numpy()
        return E.T @ E

    def reduced(self):
        """The engine's reduced variables of the explicit weights, by name (head, name) -> array:
        the Gram blocks of U = [W_K E, W_Q E, M_V E, r_c], W~ = E^T W E, w~ = w E, a."""
        E = self.E.detach().numpy()
        out = {}
        for h, p in zip(self.desc.model.heads, self.params):
            cols = []
            if "WK" in p:
                cols += [p["WK"].detach().numpy() @ E, p["WQ"].detach().numpy() @ E]
            if "MV" in p:
                cols.append(p["MV"].detach().numpy() @ E)
                cols += [p["r"].detach().numpy()[c][:, None] for c in range(h.outputs)]
            if cols:
                U = np.concatenate(cols, axis=1)
                out[(h.name, "Q")] = U.T @ U
            if "W" in p:
                out[(h.name, "W")] = E.T @ p["W"].detach().numpy() @ E
            if "w" in p:
                out[(h.name, "w")] = p["w"].detach().numpy() @ E
            out[(h.name, "a")] = float(p["a"].detach())
        return out
