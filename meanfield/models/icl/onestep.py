"""One step of gradient descent (Mahankali, Hashimoto, Ma, ICLR 2024) and its
preconditioner (Ahn, Cheng, Daneshmand, Sra, NeurIPS 2023): the claims of
``meanfield/models/icl_onestep.toml``.

The description is the merged W^{KQ}, W^{PV} head of ``icl_zfb`` (ZFB's init),
trained by GD on the exact population loss. Each claim runs it at one prompt
law, reads the learned predictor A (yhat = x_q^T A h, ``common.predictor_of_T``)
and holds the preconditioner P = A / N (yhat = x_q^T P sum_i y_i x_i: one step
of preconditioned GD from w = 0 on (1/2) sum_i (y_i - w^T x_i)^2) against the
papers' closed forms (``theory``), and the trained network's prediction on
sampled prompts against that GD step computed from each prompt.

Thresholds (one principle for every claim): the run must reach the population
minimum to ``LOSS_RTOL`` relative; ||A - A*||_F must then be within what the
final loss gap allows (``common.predictor_bound``), the gradient within
lambda_max(Lambda) lambda_max(Mh) times that, and the prompt-level difference
within ||A - A*||_F |x_q| |h| per prompt (Cauchy-Schwarz) plus rounding.
"""

from __future__ import annotations

import numpy as np

from . import common, theory

LOSS_RTOL = 1e-6
ROUND = 1e-10
#: prompts drawn (seeded) for the prompt-level comparison with the explicit GD step
N_PROMPTS = 2000
#: (claim, source, the law's overrides); the check's full setting adds a second size
LAWS = {
    "mahankali_isotropic": {"cov": "1", "task_cov": "1", "noise": 0.0},
    "mahankali_isotropic_noise": {"cov": "1", "task_cov": "1", "noise": 0.5},
    "mahankali_anisotropic": {"cov": "1,0.5,0.25", "task_cov": "1,2,4", "noise": 0.0},
    "ahn_preconditioner": {"cov": "1,0.5,0.25", "task_cov": "1", "noise": 0.0},
}
#: the full check's second size runs gradient flow (what the papers' minimiser is reached by in ZFB): GD at
#: eta = 0.5 settles on a period-2 orbit at d = 5 (eta beyond the minimum's stability), which is GD's, not the claim's
SETTINGS = {"quick": {"sizes": [{}]},
            "full": {"sizes": [{}, {"d": 5, "N": 12, "method": "flow", "t_end": 3000.0, "rtol": 1e-12, "atol": 1e-14}]}}


def _cov_for(over: dict, d: int) -> dict:
    """Stretch the 3-entry covariances of LAWS to d entries (geometric from 1 to 1/4, as at d = 3) at other sizes."""
    if d == 3:
        return over
    out = dict(over)
    if over["cov"] != "1":
        lam = 0.5 ** (np.arange(d) * 2 / (d - 1))   # the quick law's extremes 1 .. 1/4 (its conditioning)
        out["cov"] = ",".join(repr(float(v)) for v in lam)
        if over["task_cov"] != "1":
            out["task_cov"] = ",".join(repr(float(v)) for v in 1 / lam)
    return out


def predicted_preconditioner(name: str, law) -> np.ndarray:
    """The paper's preconditioner for the law (``theory``): Mahankali isotropic:
    eta I, eta = 1 / (N + d + 1 + sigma^2); non-isotropic (Sigma_w = Lambda^{-1}):
    Lambda^{-1} / (N + d + 1); Ahn (Sigma_w = I): Gamma^{-1} / N.

    Parameters
    ----------
    name : str
        A key of LAWS.
    law : GaussianPrompts

    Returns
    -------
    numpy.ndarray
        d x d.

    Example
    -------
    >>> from meanfield.engine.gaussian import GaussianPrompts
    >>> law = GaussianPrompts(2, 3, np.eye(2), np.eye(2), 0.0)
    >>> float(predicted_preconditioner('mahankali_isotropic', law)[0, 0])
    0.16666666666666666
    """
    d, N = law.d, law.N
    if name.startswith("mahankali_isotropic"):
        return theory.onestep_step_size(d, N, law.sigma) * np.eye(d)
    if name == "mahankali_anisotropic":
        return np.linalg.inv(np.asarray(law.Lambda)) / (N + d + 1)
    return np.linalg.inv(theory.gamma(law.Lambda, N)) / N


def measure(name: str, desc, r, seed: int = 0) -> dict:
    """The numbers one claim reads from one population run.

    Parameters
    ----------
    name : str
        The claim (a key of LAWS).
    desc, r
        The description and its population run.
    seed : int
        Of the sampled prompts.

    Returns
    -------
    dict

    Example
    -------
    >>> # m = measure('ahn_preconditioner', desc, r)
    """
    law = desc.data.extra["population"]["law"]
    Lam, Sw, N, sig = np.asarray(law.Lambda), np.asarray(law.Sigma_w), law.N, law.sigma
    T = r.system.T(r.y[-1])
    A, leak = common.predictor_of_T(T)
    P_pred = predicted_preconditioner(name, law)
    A_pred = N * P_pred
    Lmin = theory.min_loss(Lam, N, Sw, sig)
    Mh = theory.h_moment(Lam, N, Sw, sig)
    bound = common.predictor_bound(r.loss[-1], Lmin, Lam, Mh)
    grad = theory.linear_loss_grad(A, Lam, N, Sw, sig)
    x, y, xq, _, _ = law.sample(N_PROMPTS, np.random.default_rng(seed))
    yhat = common.predict(T, x, y, xq)
    ygd = common.gd_step_prediction(P_pred, x, y, xq)
    h = np.einsum("nid,ni->nd", x, y) / N
    allow = bound * np.linalg.norm(xq, axis=1) * np.linalg.norm(h, axis=1) + ROUND * (1 + np.abs(ygd))
    return {"d": law.d, "N": N, "noise": sig, "Lambda": Lam, "Sigma_w": Sw,
            "loss_end": float(r.loss[-1]), "L_min": Lmin, "loss_rel_err": theory.relerr(float(r.loss[-1]), Lmin),
            "closed_form_is_minimiser": float(np.max(np.abs(A_pred - theory.optimal_A(Lam, N, Sw, sig)))),
            "P_trained": A / N, "P_predicted": P_pred, "P_err_frobenius": float(np.linalg.norm(A - A_pred)) / N,
            "A_bound": bound, "A_err": float(np.linalg.norm(A - A_pred)), "leak": leak,
            "grad_norm": float(np.linalg.norm(grad)),
            "grad_bound": float(np.linalg.eigvalsh(Lam).max() * np.linalg.eigvalsh(Mh).max()) * bound + ROUND,
            "prompts": N_PROMPTS, "prompt_diff_max": float(np.max(np.abs(yhat - ygd))),
            "prompt_excess_max": float(np.max(np.abs(yhat - ygd) - allow)), "steps": int(r.step[-1])}


def passes(m: dict) -> bool:
    """The shared thresholds (module docstring).

    Parameters
    ----------
    m : dict
        ``measure``'s numbers.

    Returns
    -------
    bool

    Example
    -------
    >>> # passes(measure(...))
    """
    return (m["loss_rel_err"] <= LOSS_RTOL and m["closed_form_is_minimiser"] <= 1e-12 * max(1.0, m["N"])
            and m["A_err"] <= m["A_bound"] + ROUND and m["leak"] <= 1e-12 and m["grad_norm"] <= m["grad_bound"]
            and m["prompt_excess_max"] <= 0.0)


STATEMENTS = {
    "mahankali_isotropic": (
        "Mahankali et al. (main theorem, isotropic case): with x ~ N(0, I), w ~ N(0, I), no noise, the minimiser "
        "of the population loss of one linear self-attention layer is one step of GD from w = 0 with step size "
        "eta = 1/(N + d + 1): yhat = eta x_q^T sum_i y_i x_i. Here: the engine's GD run ends at the population "
        "minimum and its trained preconditioner A/N equals eta I (within what the loss gap allows), and its "
        "prediction on sampled prompts equals that GD step computed from each prompt."),
    "mahankali_isotropic_noise": (
        "Mahankali et al., isotropic with label noise sigma = 0.5: the optimal step size becomes "
        "eta = 1/(N + d + 1 + sigma^2) (the same statement with the noise term)."),
    "mahankali_anisotropic": (
        "Mahankali et al. (non-isotropic case): with x ~ N(0, Lambda) and w ~ N(0, Lambda^{-1}) the minimiser is "
        "one step of GD preconditioned by Lambda^{-1}: yhat = x_q^T Lambda^{-1} sum_i y_i x_i / (N + d + 1)."),
    "ahn_preconditioner": (
        "Ahn et al. (single-layer theorem): with x ~ N(0, Lambda), w ~ N(0, I) the global minimiser (a critical "
        "point of the population loss) is one step of preconditioned GD with P = Gamma^{-1}/N, "
        "Gamma = (1 + 1/N) Lambda + tr(Lambda)/N I (not Lambda^{-1}: the finite-N correction). Here: the "
        "gradient at the trained weights vanishes within what the loss gap allows and A/N = Gamma^{-1}/N."),
}


def claims_from(measured: dict, setting: dict) -> list:
    """One claim per law from {claim name: [measure(...) per size]}.

    Parameters
    ----------
    measured : dict
        {claim: [measure(...) per size]}.
    setting : dict

    Returns
    -------
    list of Claim

    Example
    -------
    >>> claims_from({}, {})
    []
    """
    from ...core.report import Claim, status

    claims = []
    for name, ms in measured.items():
        ok = all(passes(m) for m in ms)
        rows = [{k: common.jl(v) for k, v in m.items()} | {"pass": passes(m)} for m in ms]
        claims.append(Claim(name, status(ok), STATEMENTS[name] + (
            f" Thresholds: final loss within {LOSS_RTOL:g} relative of the closed-form minimum; "
            "||A - N P||_F <= sqrt(2 (L - L*) / (lambda_min(Lambda) lambda_min(Mh))); |grad| <= "
            "lambda_max(Lambda) lambda_max(Mh) times that; per prompt |yhat - yhat_GD| <= that bound |x_q| |h| "
            f"(+{ROUND:g} rounding), {N_PROMPTS} seeded prompts."), setting | LAWS[name], {"runs": rows}, None,
            "proved"))
    return claims


def check(path, out, quick: bool = False, log=print):
    """The one-step claims on the description at ``path`` (icl_onestep.toml as shipped).

    Parameters
    ----------
    path : Path
        The description.
    out : Path
        The report folder.
    quick : bool
    log : callable

    Returns
    -------
    (list of Claim, dict)

    Example
    -------
    >>> # meanfield model check icl_onestep --quick --out DIR
    """
    S = SETTINGS["quick" if quick else "full"]
    measured = {}
    failed = []
    tr = None
    for name, law_over in LAWS.items():
        measured[name] = []
        for size in S["sizes"]:
            over = _cov_for(law_over, int(size.get("d", 3))) | size
            log(f"[check] icl_onestep {name}: engine GD on the population, {over} ...")
            try:
                desc, r = common.engine_run(path, **over)
            except common.RunFailed as e:
                failed.append(common.failed_claim(name, "proved", STATEMENTS[name], e, LAWS[name] | size))
                measured.pop(name)
                break
            tr = desc.training
            m = measure(name, desc, r)
            measured[name].append(m)
            log(f"[check]   d {m['d']} N {m['N']}: loss rel err {m['loss_rel_err']:.2e}, ||P - P_paper|| "
                f"{m['P_err_frobenius']:.2e}, prompt diff {m['prompt_diff_max']:.2e}")
    if tr is None:  # no run completed: the setting as described
        from ...engine.description import load_description

        tr = load_description(str(path)).training
    setting = {"init": "W^{PV} = sigma [[0,0],[0,1]], W^{KQ} = sigma [[I,0],[0,0]] (ZFB)", "method": tr.method,
               "eta": tr.eta, "population": "exact (closed-form Gaussian moments)",
               "loss": "(1/2) E[(yhat - y_q)^2]"}
    return claims_from(measured, setting) + failed, {
        "summary": "Mahankali, Hashimoto, Ma (ICLR 2024) and Ahn et al. (NeurIPS 2023), engine runs of "
                   "meanfield/models/icl_onestep.toml."}
