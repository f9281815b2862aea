"""The claims of Oymak, Rawat, Soltanolkotabi, Thrampoulidis, "On the role of attention in prompt-tuning"
(ICML 2023) on ``meanfield/models/prompt_attention.toml``.

What was read: the abstract (ICML 2023; arXiv 2306.03435; the ME-FoMo 2023 workshop version). Its
sections, theorems and data model could not be read here, so no theorem is cited, the contextual
mixture is ours (``data``), and every claim is ``expected``: the abstract says the paper proves,
for the initial trajectory of gradient descent on its data model, that the prompt learns to attend
to the sparse context-relevant tokens with near-optimal sample complexity, and that softmax
prompt-attention is more expressive than linear prompt-attention; the run here is full-batch GD to
convergence on our law (``docs/models.md``, "prompt_attention").

The run: a softmax head whose fixed query is the prompt feature p (logits z_i = x_i^T W~ p: the
prompt's logits are the column W~[:, p], trained by GD on W~), a linear prediction head v (value
vector), logistic loss, both 0 at t = 0; a held-out ``[test]`` set of the same law (another seed)
whose loss and 0-1 error the run file records at every record (``meanfield.engine.heldout``).

Thresholds (one principle each, never tuned): monotonicity to rounding (1e-12); "separates" is
every relevant token's weight above every irrelevant token's, in every training and test sequence
(no margin); the test error of the trained prompt is below that of the same model with the
attention frozen at uniform (mean pooling) by more than three binomial standard errors of the
latter (sqrt(e (1 - e) / n_test)), a stated 3-sigma confidence bound.
"""

from __future__ import annotations

import numpy as np

from ...core.report import Claim, status
from .data import dataset

ROUND = 1e-12
SIGMAS = 3.0
SETTINGS = {"quick": {"steps": 1000, "n_test": 400}, "full": {"steps": 4000, "n_test": 2000}}


def _law(desc) -> dict:
    dec = dict(desc.declared)
    return {k: dec[k] for k in ("T", "n_relevant", "sigma", "noise")}


def attention(W_p, tokens) -> np.ndarray:
    """Softmax weights of the prompt for each token.

    Parameters
    ----------
    W_p : numpy.ndarray
        The prompt's logit vectors W~[:, p] at each record (T_rec, P).
    tokens : numpy.ndarray
        (n, L, P) token coefficients.

    Returns
    -------
    numpy.ndarray
        (T_rec, n, L) attention weights.

    Examples
    --------
    >>> attention(np.zeros((1, 3)), np.eye(3)[None]).round(3).tolist()
    [[[0.333, 0.333, 0.333]]]
    """
    z = np.einsum("nlp,tp->tnl", tokens, W_p)
    e = np.exp(z - z.max(axis=2, keepdims=True))
    return e / e.sum(axis=2, keepdims=True)


def measure(desc, r, n_test: int) -> dict:
    """The attention and held-out numbers of one run (module docstring).

    Parameters
    ----------
    desc : Description
    r : Run
    n_test : int
        The test set's size (the law is redrawn with seed 1000 to find its relevant tokens).

    Returns
    -------
    dict

    Examples
    --------
    >>> measure(desc, run(desc), 400)["test_error_end"]   # doctest: +SKIP
    """
    dec = dict(desc.declared)
    law = _law(desc)
    tr = dataset(desc.dictionary.features, n=dec["n_train"], seed=dec["data_seed"], **law)
    te = dataset(desc.dictionary.features, n=n_test, seed=1000, **law)
    W = r.var("h", "W")
    Wp = W[:, :, -1]                                   # the prompt's logits (T, P)
    out = {"final_loss": float(r.loss[-1]), "test_loss_end": float(r.test_loss[-1]),
           "test_error_start": float(r.test_error[0]), "test_error_end": float(r.test_error[-1])}
    for name, d in (("train", tr), ("test", te)):
        p = attention(Wp, d["tokens"])
        rel = d["relevant"]
        mass = (p * rel).sum(axis=2).mean(axis=1)       # (T,) mean attention on the relevant tokens
        gap = np.where(rel, p[-1], np.inf).min(axis=1) - np.where(rel, -np.inf, p[-1]).max(axis=1)
        out[f"{name}_relevant_mass_start"] = float(mass[0])
        out[f"{name}_relevant_mass_end"] = float(mass[-1])
        out[f"{name}_relevant_mass_min_increment"] = float(np.diff(mass).min())
        out[f"{name}_separation_min_gap"] = float(gap.min())
    return out


def check(path, out, quick: bool = False, log=print):
    """The prompt-attention claims on the description at ``path`` (prompt_attention.toml as shipped).

    Parameters
    ----------
    path : Path
        The description.
    out : Path
        The report folder.
    quick : bool
        1000 steps, 400 test sequences (full: 4000, 2000).
    log : callable

    Returns
    -------
    (list of Claim, dict)

    Example
    -------
    >>> # meanfield model check prompt_attention --quick --out DIR
    """
    from ...engine import load, run
    from ...engine.description import StageSpec
    import dataclasses

    S = SETTINGS["quick" if quick else "full"]
    log(f"[check] prompt_attention: GD on the prompt and the head, {S['steps']} steps ...")
    desc = load(path, steps=S["steps"], n_test=S["n_test"])
    r = run(desc)
    m = measure(desc, r, S["n_test"])
    log(f"[check]   relevant mass {m['train_relevant_mass_start']:.3f} -> {m['train_relevant_mass_end']:.3f}, "
        f"test error {m['test_error_end']:.4f}")
    log("[check] prompt_attention: the same model with the attention frozen (mean pooling) ...")
    tr = desc.training
    frozen = dataclasses.replace(desc, training=dataclasses.replace(tr, stages=(
        StageSpec("values", ("values",), tr.stages[0].length, None),)))
    rf = run(frozen)
    e_f = float(rf.test_error[-1])
    se = float(np.sqrt(e_f * (1 - e_f) / S["n_test"]))
    setting = {"steps": S["steps"], "eta": tr.eta, "method": tr.method, "n_train": dict(desc.declared)["n_train"],
               "n_test": S["n_test"], "law": _law(desc), "init": "W = 0 (uniform attention), v = 0"}
    claims = [
        Claim("prompt_attends_relevant", status(m["train_relevant_mass_min_increment"] >= -ROUND
                                                and m["test_relevant_mass_min_increment"] >= -ROUND),
              "gradient descent on the prompt moves the attention onto the sparse context-relevant tokens: their "
              "attention mass grows from its uniform value at every record, on the training and the test set "
              "(abstract: 'how prompt can provably attend to sparse context-relevant tokens')", setting,
              {k: m[k] for k in m if "relevant_mass" in k}, source="expected"),
        Claim("prompt_separates_relevant", status(min(m["train_separation_min_gap"], m["test_separation_min_gap"]) > 0),
              "at the end the softmax prompt-attention separates the relevant tokens: in every training and test "
              "sequence each relevant token has more weight than every irrelevant one", setting,
              {k: m[k] for k in m if "separation" in k}, source="expected"),
        Claim("test_error_below_mean_pooling", status(m["test_error_end"] + SIGMAS * se < e_f),
              "the attention is what generalises: the held-out 0-1 error of the trained prompt-attention is below "
              "that of the same model with the attention frozen at uniform (mean pooling) by more than 3 binomial "
              "standard errors (abstract: softmax prompt-attention is more expressive than linear and self-attention)",
              setting, {"test_error_prompt": m["test_error_end"], "test_error_mean_pooling": e_f,
                        "standard_error_mean_pooling": se, "test_loss_prompt": m["test_loss_end"],
                        "test_loss_mean_pooling": float(rf.test_loss[-1])}, source="expected"),
    ]
    return claims, {"summary": "Oymak, Rawat, Soltanolkotabi, Thrampoulidis, 'On the role of attention in "
                               "prompt-tuning' (ICML 2023): engine runs of meanfield/models/prompt_attention.toml "
                               "with a held-out test set (every claim expected: only the abstract could be read, "
                               "the data law is ours)."}
