"""Multi-head softmax attention on multi-task Gaussian in-context regression, SAMPLED
(Chen, Sheen, Wang, Yang, COLT 2024): the data of ``meanfield/models/icl_softmax_multitask.toml``
and its two claims (run by ``meanfield model check icl_softmax``).

The setting (what was read of the paper: its abstract, arXiv 2402.19442 /
COLT 2024 poster 174; its Section 2 setup was not available here, so the task
structure below is this package's reading, listed in docs/models.md 4d):
H tasks, one attention head each. A prompt has N context tokens
z_i = (x_i, y_i^1 .. y_i^H) and the query (x_q, 0); x ~ N(0, I_d) with
d = H d_task, task t reads its own block x^(t) of d_task coordinates,
y^t = w_t^T x^(t) + eps, w_t ~ N(0, I_{d_task}) drawn per prompt and task.
Heads: merged softmax key-query W~_h (0 at init) and one value vector per
task, yhat_t = sum_h v_(h,t)^T sum_i p_i^h z_i, p^h = softmax_i(z_i^T W~_h z_q);
loss (1/2) sum_t (yhat_t - y_q^t)^2. A task's prompt-wise optimum needs the
attention to compare x_i^(t) with x_q^(t), a different pattern per task: the
"task allocation" the paper proves for gradient flow on the population is
that each head ends up serving one task.

Softmax has no closed-form population loss, so the engine trains by exact GD
on ``samples`` prompts (sampled, not exact) and the claims are ``expected``:

* ``chen_multitask_learns`` (expected): on ``N_TEST`` fresh prompts every
  task's loss is below the zero predictor's (1/2) E[(y_q^t)^2] by more than
  ``N_SE`` standard errors;
* ``chen_task_allocation`` (expected): for every task one head carries more
  than half of the output's second moment (share_(h,t) =
  E[out_(h,t)^2] / sum_h' E[out_(h',t)^2] on the fresh prompts: a majority,
  the principle), and different tasks have different dominant heads.

The forward pass here is written from the heads' definition (numpy) and must
reproduce the engine's training loss on the training prompts (1e-9 relative)
before it measures anything.
"""

from __future__ import annotations

import math

import numpy as np

from . import theory

#: fresh test prompts (seed data_seed + 1)
N_TEST = 20000
#: standard errors a difference must exceed
N_SE = 4.0
#: the share of a task's output second moment its dominant head must carry (a majority)
MAJORITY = 0.5
#: at most this many floats of sampled tokens (8 bytes each): 2 GB
MAX_FLOATS = 2.5e8
SETTINGS = {"quick": {"samples": 400, "steps": 2000}, "full": {"samples": 2000, "steps": 4000}}


def features(d_task: int = 2, tasks: int = 2) -> list:
    """The feature names x1..xd, y1..yH (d = tasks x d_task).

    Parameters
    ----------
    d_task, tasks : int

    Returns
    -------
    list of str

    Example
    -------
    >>> features(1, 2)
    ['x1', 'x2', 'y1', 'y2']
    """
    d_task, tasks = _positive("d_task", d_task), _positive("tasks", tasks)
    return [f"x{i + 1}" for i in range(d_task * tasks)] + [f"y{t + 1}" for t in range(tasks)]


def _positive(name, v) -> int:
    if isinstance(v, bool) or not float(v).is_integer() or int(v) < 1:
        raise ValueError(f"{name}: must be a positive integer; got {v!r}")
    return int(v)


def prompts_size(P: float, a: dict) -> tuple[float, float]:
    """(log of the number of prompts, L) of ``prompts`` from its arguments alone (registered in
    ``.plugin``: ``meanfield model`` refuses an absurd size before the builder runs).

    Parameters
    ----------
    P : float
        The number of features.
    a : dict
        The builder's arguments.

    Returns
    -------
    (float, float)

    Example
    -------
    >>> prompts_size(6.0, {"samples": 400, "N": 8})[1]
    9.0
    """
    from ...engine.edges import arg_number

    return math.log(max(arg_number(a, "samples", 400), 1.0)), arg_number(a, "N", 8) + 1.0


def feature_count(a: dict) -> float:
    """The number of features of ``features(d_task, tasks)`` from its arguments.

    Parameters
    ----------
    a : dict

    Returns
    -------
    float

    Example
    -------
    >>> feature_count({"d_task": 2, "tasks": 3})
    9.0
    """
    from ...engine.edges import arg_number

    t = arg_number(a, "tasks", 2)
    return arg_number(a, "d_task", 2) * t + t


def sample(d_task: int, tasks: int, N: int, noise: float, n: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """n prompts: tokens Z (n, N + 1, P) (query last, its y entries 0) and targets Y (n, tasks).

    Parameters
    ----------
    d_task, tasks, N : int
    noise : float
        sigma of the label noise (context and query labels).
    n : int
    rng : numpy.random.Generator

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)

    Example
    -------
    >>> Z, Y = sample(1, 2, 3, 0.0, 4, np.random.default_rng(0)); Z.shape, Y.shape
    ((4, 4, 4), (4, 2))
    """
    d = d_task * tasks
    X = rng.standard_normal((n, N + 1, d))
    W = rng.standard_normal((n, tasks, d_task))
    Yall = np.einsum("nltk,ntk->nlt", X.reshape(n, N + 1, tasks, d_task), W)
    if noise:
        Yall = Yall + noise * rng.standard_normal(Yall.shape)
    Z = np.concatenate([X, Yall], axis=2)
    Y = Z[:, -1, d:].copy()
    Z[:, -1, d:] = 0.0
    return Z, Y


def prompts(features, d_task: int = 2, tasks: int = 2, N: int = 8, noise: float = 0.0, samples: int = 400,
            seed: int = 0) -> dict:
    """Data builder (``[data] function = "meanfield.models.icl.multitask:prompts"``): ``samples``
    prompts drawn with ``numpy.random.default_rng(seed)`` (``sample``), uniform weights.

    Parameters
    ----------
    features : list of str
        The dictionary (``features(d_task, tasks)``).
    d_task, tasks, N : int
    noise : float
    samples, seed : int

    Returns
    -------
    dict
        tokens (n, N + 1, P), counts, target (n, tasks), weight, names.

    Example
    -------
    >>> D = prompts(features(1, 2), 1, 2, 3, 0.0, 5, 0); D["tokens"].shape, D["target"].shape
    ((5, 4, 4), (5, 2))
    """
    d_task, tasks, N = _positive("d_task", d_task), _positive("tasks", tasks), _positive("N", N)
    samples = _positive("samples", samples)
    if not (isinstance(noise, (int, float)) and math.isfinite(noise) and noise >= 0):
        raise ValueError(f"noise: must be a finite number >= 0; got {noise!r}")
    P = d_task * tasks + tasks
    if len(features) != P:
        raise ValueError(f"features: need the {P} features of features(d_task, tasks); got {len(features)}")
    if float(samples) * (N + 1) * P > MAX_FLOATS:
        raise ValueError(f"samples: {samples} prompts of N = {N}, P = {P} need "
                         f"{samples * (N + 1) * P * 8 / 1e9:.1f} GB (limit {MAX_FLOATS * 8 / 1e9:.0f} GB); "
                         "choose fewer samples or a smaller N")
    Z, Y = sample(d_task, tasks, N, float(noise), samples, np.random.default_rng(int(seed)))
    return {"tokens": Z, "counts": np.ones(Z.shape[:2]), "target": Y, "weight": np.full(samples, 1.0 / samples),
            "names": [f"prompt{i}" for i in range(samples)]}


def heads_of(desc, r, i: int = -1) -> list:
    """(W~ (P, P), V (tasks, P), sign) per head at record ``i`` of the run (default the last).

    Parameters
    ----------
    desc, r
        The description and its run.
    i : int

    Returns
    -------
    list of (W, V, sign)

    Example
    -------
    >>> # heads_of(desc, r)
    """
    P = desc.P
    return [(np.asarray(r.var(h.name, "W")[i], float).reshape(P, P),
             np.asarray(r.var(h.name, "w")[i], float).reshape(-1, P), float(h.sign)) for h in desc.model.heads]


def head_outputs(heads, Z) -> np.ndarray:
    """Every head's outputs (H, n, tasks) on prompts Z (n, N + 1, P): a_h V_h sum_i p_i^h z_i,
    p^h = softmax over the context of z_i^T W~_h z_q (the query last, not a key).

    Parameters
    ----------
    heads : list of (W, V, sign)
    Z : numpy.ndarray

    Returns
    -------
    numpy.ndarray

    Example
    -------
    >>> Z = np.zeros((1, 3, 2)); Z[0, :2, 1] = [1.0, 3.0]
    >>> float(head_outputs([(np.zeros((2, 2)), np.array([[0.0, 1.0]]), 1.0)], Z)[0, 0, 0])
    2.0
    """
    ctx, q = Z[:, :-1, :], Z[:, -1, :]
    out = []
    for W, V, a in heads:
        z = np.einsum("nia,ab,nb->ni", ctx, W, q)
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        out.append(a * np.einsum("nia,ni,ca->nc", ctx, p, V))
    return np.asarray(out)


def measure(desc, r) -> dict:
    """The forward pass's train loss against the engine's, per-task test losses with their
    standard errors, the zero predictor's, and the heads' output shares.

    Parameters
    ----------
    desc, r
        A run of icl_softmax_multitask.

    Returns
    -------
    dict

    Example
    -------
    >>> # measure(desc, r)
    """
    a = dict(desc.declared)  # the description's declared parameters, after overrides
    heads = heads_of(desc, r)
    tasks = heads[0][1].shape[0]
    P = desc.P
    d_task = (P - tasks) // tasks
    Ztr, Ytr = np.asarray(desc.data.tokens, float), np.asarray(desc.data.target, float).reshape(-1, tasks)
    Ntr = Ztr.shape[1] - 1
    train_fwd = 0.5 * float(np.mean(np.sum((head_outputs(heads, Ztr).sum(axis=0) - Ytr) ** 2, axis=1)))
    seed = int(a.get("data_seed", 0))
    noise = float(a.get("noise", 0.0))
    Zte, Yte = sample(d_task, tasks, Ntr, noise, N_TEST, np.random.default_rng(seed + 1))
    O = head_outputs(heads, Zte)
    e = 0.5 * (O.sum(axis=0) - Yte) ** 2            # (n, tasks)
    e0 = 0.5 * Yte ** 2
    diff = e0 - e
    m2 = (O ** 2).mean(axis=1)                      # (H, tasks)
    share = m2 / np.maximum(m2.sum(axis=0, keepdims=True), 1e-300)
    m20 = (head_outputs(heads_of(desc, r, 0), Zte) ** 2).mean(axis=1)   # the same at the init (W~ = 0)
    share0 = m20 / np.maximum(m20.sum(axis=0, keepdims=True), 1e-300)
    se = lambda x: x.std(axis=0, ddof=1) / math.sqrt(x.shape[0])  # noqa: E731
    return {"samples": int(Ztr.shape[0]), "seed": seed, "n_test": N_TEST, "tasks": tasks, "heads": len(heads),
            "d_task": d_task, "N": Ntr,
            "train_loss_engine": float(r.loss[-1]), "train_loss_forward": train_fwd,
            "forward_rel_err": theory.relerr(train_fwd, float(r.loss[-1])),
            "test_loss_per_task": e.mean(axis=0).tolist(), "test_loss_se_per_task": se(e).tolist(),
            "zero_predictor_per_task": e0.mean(axis=0).tolist(),
            "improvement_per_task": diff.mean(axis=0).tolist(), "improvement_se_per_task": se(diff).tolist(),
            "train_test_gap": float(e.sum(axis=1).mean()) - float(r.loss[-1]),
            "share": share.tolist(), "share_at_init": share0.tolist(), "share_se_of_second_moment": (se(O.transpose(1, 0, 2).reshape(N_TEST, -1) ** 2)
                                                                   .reshape(len(heads), tasks)
                                                                   / np.maximum(m2.sum(axis=0), 1e-300)).tolist(),
            "loss_start": float(r.loss[0])}


def ok(m: dict) -> tuple[dict, dict]:
    """The criteria of the two claims.

    Parameters
    ----------
    m : dict
        ``measure``.

    Returns
    -------
    (dict, dict)
        {"learns": ..., "allocation": ...} (booleans) and the per-criterion parts.

    Example
    -------
    >>> m = {"forward_rel_err": 0.0, "improvement_per_task": [1.0, 1.0], "improvement_se_per_task": [0.1, 0.1],
    ...      "share": [[0.9, 0.2], [0.1, 0.8]]}
    >>> ok(m)[0]
    {'learns': True, 'allocation': True}
    """
    fwd = m["forward_rel_err"] <= 1e-9
    learns = all(i > N_SE * s for i, s in zip(m["improvement_per_task"], m["improvement_se_per_task"]))
    S = np.asarray(m["share"])
    dom = S.argmax(axis=0)
    majority = bool(np.all(S.max(axis=0) > MAJORITY))
    distinct = len(set(dom.tolist())) == S.shape[1]
    parts = {"forward_matches_engine": fwd, "every_task_learns_in_context": learns,
             "every_task_has_a_majority_head": majority, "dominant_heads_distinct": distinct,
             "dominant_head_per_task": dom.tolist()}
    return {"learns": fwd and learns, "allocation": fwd and majority and distinct}, parts


def check_claims(path, quick: bool = False, log=print) -> list:
    """The two multi-task claims on the description at ``path`` (icl_softmax_multitask.toml).

    Parameters
    ----------
    path : Path
    quick : bool
    log : callable

    Returns
    -------
    list of Claim

    Example
    -------
    >>> # check_claims(Path("meanfield/models/icl_softmax_multitask.toml"), quick=True)
    """
    from ...core.report import Claim, status
    from ...engine.description import load_description
    from ...engine.runs import run

    S = SETTINGS["quick" if quick else "full"]
    log(f"[check] icl_softmax_multitask: engine GD on {S['samples']} SAMPLED multi-task prompts (not exact), "
        f"{S['steps']} steps ...")
    desc = load_description(str(path), dict(S))
    r = run(desc)
    names = (("chen_multitask_learns", "expected"), ("chen_task_allocation", "expected"))
    if r.status != "complete":
        from .common import failed_claim

        return [failed_claim(n, src, "Chen et al. multi-task (see docs/models.md 4d).",
                             RuntimeError(f"{r.status}: {r.message}"), dict(S)) for n, src in names]
    m = measure(desc, r)
    good, parts = ok(m)
    log(f"[check]   test loss per task {np.round(m['test_loss_per_task'], 4).tolist()} (zero predictor "
        f"{np.round(m['zero_predictor_per_task'], 4).tolist()}), head shares {np.round(m['share'], 3).tolist()}")
    setting = {"heads": m["heads"], "tasks": m["tasks"], "d_task": m["d_task"], "N": m["N"], "attention": "softmax",
               "population": "sampled, not exact", "samples": m["samples"], "steps": S["steps"],
               "eta": desc.training.eta}
    samp = (f"SAMPLED, NOT EXACT: trained on {m['samples']} prompts (seed {m['seed']}), measured on {N_TEST} fresh "
            f"prompts (seed {m['seed'] + 1})")
    tl = ", ".join(f"{a:.4g} +- {b:.2g}" for a, b in zip(m["test_loss_per_task"], m["test_loss_se_per_task"]))
    sh = "; ".join(f"task {t + 1}: " + ", ".join(f"h{h + 1} {m['share'][h][t]:.3f} +- "
                                                f"{m['share_se_of_second_moment'][h][t]:.1g}"
                                                for h in range(m["heads"])) for t in range(m["tasks"]))
    claims = [
        Claim("chen_multitask_learns", status(good["learns"]),
              "Chen et al. (COLT 2024; multi-task linear regression, one softmax head per task; expected here: GD "
              "on a finite sample, not their gradient flow on the population): every task's loss on fresh prompts "
              f"is below the zero predictor's (1/2) E[(y_q^t)^2] by more than {N_SE:g} standard errors. {samp}; "
              f"sampling error: test loss per task {tl} (one standard error), train-test gap "
              f"{m['train_test_gap']:.3g}. The forward pass that measures it reproduces the engine's training loss "
              "to 1e-9 relative.", setting, {"criteria": parts, **m}, None, "expected"),
        Claim("chen_task_allocation", status(good["allocation"]),
              "Chen et al.'s task allocation (expected): after training each task's prediction is carried by one "
              f"head, more than {MAJORITY:g} of the output's second moment E[out_(h,t)^2] (a majority), and "
              f"different tasks by different heads. {samp}; shares (+- the standard error of the numerator "
              f"relative to the total): {sh}. At the init (W~ = 0, random value vectors) the shares were "
              + "; ".join(f"task {t + 1}: " + ", ".join(f"h{h + 1} {m['share_at_init'][h][t]:.3f}"
                                                       for h in range(m["heads"])) for t in range(m["tasks"]))
              + " (not gated: the init breaks the heads' symmetry).", setting, {"criteria": parts, **m}, None, "expected"),
    ]
    return claims
