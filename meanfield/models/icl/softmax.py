"""Multi-head softmax attention on Gaussian in-context regression, SAMPLED
(Chen, Sheen, Wang, Yang, COLT 2024): the claim of ``meanfield/models/icl_softmax.toml``.

Softmax attention has no closed-form population loss under Gaussian prompts,
so the description trains on ``samples`` prompts drawn with ``data_seed``
(the engine's exact GD on that finite set: sampled, not exact; the run file
says so). The check then measures the trained heads on ``N_TEST`` fresh
prompts (another seed) with a numpy forward pass written here from the
heads' definition (docs/engine.md), first held equal to the engine's own
training loss on the training prompts (1e-9 relative: the two agree on the
convention), and states the sampling error: the standard error of the test
loss, and the train-test gap.

Chen et al. study H heads on H tasks (one head per task, their task
allocation) and prove emergence, convergence and near-optimality of gradient
flow on the population loss. The engine's ``icl_regression`` family has one
output, so the claim here is the one-task form; the multi-task setting (H
outputs, one per task) is ``meanfield/models/icl_softmax_multitask.toml``
(a data function, ``meanfield.models.icl.multitask``), whose two claims this
check adds. All are ``expected`` (the paper does not prove them for the
algorithm run here, GD on a finite sampled set).
"""

from __future__ import annotations

import math

import numpy as np

from . import theory

#: fresh test prompts and their seed (independent of the training draw: seed + 1)
N_TEST = 20000
#: the number of standard errors a difference must exceed
N_SE = 4.0
SETTINGS = {"quick": {"samples": 200, "steps": 200}, "full": {"samples": 1000, "steps": 1000}}


def heads_of(desc, r) -> list[tuple[np.ndarray, np.ndarray, float]]:
    """(W~ (P, P), v (P,), sign) of every head at the run's last record.

    Parameters
    ----------
    desc, r
        The description and its run.

    Returns
    -------
    list of (W, v, sign)

    Example
    -------
    >>> # heads_of(desc, r)
    """
    out = []
    for h in desc.model.heads:
        W = np.asarray(r.var(h.name, "W")[-1], float)
        v = np.asarray(r.var(h.name, "w")[-1], float).reshape(-1)
        out.append((W, v, float(h.sign)))
    return out


def forward(heads, Z) -> np.ndarray:
    """yhat of softmax heads on prompts Z (n, N + 1, P), the query last, not a key:
    logits x_i^T W~ x_q over the N context tokens, yhat = sum_h a_h v_h^T sum_i p_i z_i.

    Parameters
    ----------
    heads : list of (W, v, sign)
    Z : array_like
        (n, N + 1, P) prompts.

    Returns
    -------
    numpy.ndarray
        (n,).

    Example
    -------
    >>> Z = np.zeros((1, 3, 2)); Z[0, :2, 1] = [1.0, 3.0]
    >>> float(forward([(np.zeros((2, 2)), np.array([0.0, 1.0]), 1.0)], Z)[0])   # uniform attention: mean y
    2.0
    """
    ctx, q = Z[:, :-1, :], Z[:, -1, :]
    out = np.zeros(Z.shape[0])
    for W, v, a in heads:
        z = np.einsum("nia,ab,nb->ni", ctx, W, q)
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        out += a * np.einsum("ni,nia,a->n", p, ctx, v)
    return out


def measure(desc, r) -> dict:
    """Train loss (engine and forward), test loss with its standard error, the references.

    Parameters
    ----------
    desc, r
        A sampled softmax run.

    Returns
    -------
    dict

    Example
    -------
    >>> # measure(desc, r)
    """
    law = desc.data.extra["law"]
    icl = desc.data.extra["icl"]
    heads = heads_of(desc, r)
    Ztr, ytr = law.tokens(icl["samples"], np.random.default_rng(icl["seed"]))
    train_fwd = 0.5 * float(np.mean((forward(heads, Ztr) - ytr) ** 2))
    Zte, yte = law.tokens(N_TEST, np.random.default_rng(icl["seed"] + 1))
    e = 0.5 * (forward(heads, Zte) - yte) ** 2
    e0 = 0.5 * yte ** 2
    diff = e0 - e
    Lam, Sw = np.asarray(law.Lambda), np.asarray(law.Sigma_w)
    return {"samples": icl["samples"], "seed": icl["seed"], "n_test": N_TEST,
            "train_loss_engine": float(r.loss[-1]), "train_loss_forward": train_fwd,
            "forward_rel_err": theory.relerr(train_fwd, float(r.loss[-1])),
            "test_loss": float(e.mean()), "test_loss_se": float(e.std(ddof=1) / math.sqrt(N_TEST)),
            "zero_predictor_loss": 0.5 * float(np.trace(Lam @ Sw) + law.sigma ** 2),
            "improvement_over_zero": float(diff.mean()), "improvement_se": float(diff.std(ddof=1) / math.sqrt(N_TEST)),
            "train_test_gap": float(e.mean()) - float(r.loss[-1]),
            "linear_attention_optimum_L_star": theory.min_loss(Lam, law.N, Sw, law.sigma),
            "loss_start": float(r.loss[0])}


def ok(m: dict) -> tuple[bool, dict]:
    """ok.

    Parameters
    ----------
    m : dict
        ``measure``.

    Returns
    -------
    (bool, dict)

    Example
    -------
    >>> ok({'forward_rel_err': 0.0, 'improvement_over_zero': 1.0, 'improvement_se': 0.1})[0]
    True
    """
    parts = {"forward_matches_engine": m["forward_rel_err"] <= 1e-9,
             "learns_in_context": m["improvement_over_zero"] > N_SE * m["improvement_se"]}
    return all(parts.values()), parts


def check(path, out, quick: bool = False, log=print):
    """The sampled softmax claim on the description at ``path``.

    Parameters
    ----------
    path : Path
    out : Path
    quick : bool
    log : callable

    Returns
    -------
    (list of Claim, dict)

    Example
    -------
    >>> # meanfield model check icl_softmax --quick --out DIR
    """
    from ...core.report import Claim, status
    from ...engine.description import load_description
    from ...engine.runs import run

    S = SETTINGS["quick" if quick else "full"]
    log(f"[check] icl_softmax: engine GD on {S['samples']} SAMPLED prompts (not exact), {S['steps']} steps ...")
    desc = load_description(str(path), dict(S))
    r = run(desc)
    if r.status != "complete":
        from .common import failed_claim

        return [failed_claim("chen_softmax_sampled", "expected", "Chen et al. (see docs/models.md 4d).",
                             RuntimeError(f"{r.status}: {r.message}"), dict(S))], {
            "summary": "Chen et al.: the sampled run did not complete."}
    m = measure(desc, r)
    good, parts = ok(m)
    log(f"[check]   test loss {m['test_loss']:.4f} +- {m['test_loss_se']:.4f} (zero predictor "
        f"{m['zero_predictor_loss']:.4f}, linear-attention optimum {m['linear_attention_optimum_L_star']:.4f})")
    claim = Claim(
        "chen_softmax_sampled", status(good),
        "Chen et al. (COLT 2024; their multi-task setting reduced to one task, expected here): multi-head softmax "
        "attention trained by GD learns in context: on fresh prompts its loss is below the zero predictor's "
        f"(1/2) E[y_q^2] by more than {N_SE:g} standard errors. SAMPLED, NOT EXACT: trained on "
        f"{m['samples']} prompts (seed {m['seed']}), tested on {N_TEST} fresh prompts (seed {m['seed'] + 1}); "
        f"sampling error: test loss {m['test_loss']:.5g} +- {m['test_loss_se']:.2g} (one standard error), "
        f"train-test gap {m['train_test_gap']:.3g}. The forward pass that tests it reproduces the engine's "
        "training loss on the training prompts to 1e-9 relative. Reference, not gated: the linear-attention "
        f"optimum L* = {m['linear_attention_optimum_L_star']:.5g} (icl_zfb).",
        {"heads": len(desc.model.heads), "attention": "softmax", "population": "sampled, not exact",
         "samples": m["samples"], "steps": S["steps"], "eta": desc.training.eta},
        {"criteria": parts, **m}, None, "expected")
    from pathlib import Path

    from . import multitask

    mt = multitask.check_claims(Path(path).parent / "icl_softmax_multitask.toml", quick=quick, log=log)
    return [claim, *mt], {"summary": "Chen, Sheen, Wang, Yang (COLT 2024), sampled (not exact) engine runs of "
                                     "meanfield/models/icl_softmax.toml (one task) and "
                                     "meanfield/models/icl_softmax_multitask.toml (one head per task)."}
