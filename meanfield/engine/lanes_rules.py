"""The rules of the engine's lane transform (``meanfield.engine.lanes``) that name kernels.py's sites: its roots,
the scalar primitives called per lane, the exact-zero skips and span trims with their reviewed reasons and the
checksums of the statements they were reviewed with (:func:`site_sha`)."""

from __future__ import annotations

import ast
import hashlib


def site_sha(loop_body) -> str:
    r"""The checksum a zero skip or span trim is reviewed with: of ``ast.unparse`` of the statements of the body
    of its innermost enclosing loop (kernels.py's text, before the transform renames anything).

    Parameters
    ----------
    loop_body : list of ast.stmt
        The loop's body (the function's body for a site outside every loop).

    Returns
    -------
    str
        The first 12 hex digits of the sha1.

    Examples
    --------
    >>> import ast
    >>> site_sha(ast.parse("if d == 0.0:\n    continue\nx += d").body)
    'f73f3ad5b648'
    """
    return hashlib.sha1("\n".join(ast.unparse(s) for s in loop_body).encode()).hexdigest()[:12]


#: the transform's roots and, per root, its lane arrays and lane scalars (by parameter name)
ROOTS = {
    "eng_loss_grads": (("y", "u", "margin", "zb", "f", "df", "G", "gflat", "T", "p", "v", "om", "tk", "pa"), ()),
    "eng_update": (("y", "out", "G", "gflat", "Xm", "Ym", "tmp"), ("eta",)),
    "eng_criterion": (("margin", "gflat"), ("loss",)),
}

#: scalar primitives called once per lane with the lane's values (their source unchanged), besides ``math.*``
ELEMENTWISE = frozenset({"relu_prime", "sigmoid_neg_e", "softplus_neg_e", "abs", "max", "min", "float"})

#: builtins a uniform statement may call
UNIFORM_CALLS = frozenset({"range", "int", "float", "abs", "max", "min", "len"})

#: (function, test) of the exact-zero skips ``if <test>: continue`` (a lane test): taken only when every lane
#: takes it. Per site: the checksum of the statements it was reviewed with (:func:`site_sha`: its loop's body;
#: an edit there is refused until the reason is re-checked and the checksum updated), and why computing a zero
#: lane's terms anyway changes at most the sign of a zero (finite gradients):
ZERO_SKIPS = {
    ("eng_backward_sample", "d == 0.0"): (
        "be1a1b666e64", "d multiplies every term that follows (G, gflat: d * zb; om: d * y), zb and y finite"),
    ("eng_backward_sample", "not nz"): (
        "84c6c5fd54d4", "om is zero: v = sum om c is a signed zero, so is every dz = ql p (v - vbar) or ql c v / lk "
                        "(p finite) and every tk, ta = scale tk (the next skip), gflat += dz"),
    ("eng_backward_sample", "ta == 0.0"): ("0d9a52ba2e8b", "ta multiplies every term that follows (c, qv finite)"),
    ("eng_update", "gs == 0.0"): ("dbf5df13baa6", "gs multiplies every term that follows (gs * gr, Gr finite)"),
    ("eng_normalise_wide", "not nz"): (
        "5ef2921001bd", "the object's columns of Xm are zero: they are only scaled (by a finite factor, its "
                        "gradient finite)"),
}

#: (function, lane test) of the span trims ``while <uniform> and <lane test>: <index> +/-= 1`` of eng_update:
#: trimmed while every lane's test holds (the union of the lanes' spans of non-zero Xm entries); a lane's terms
#: outside its own span are products with an exact zero of Xm (finite factors: a signed zero). Per site: the
#: checksum of its loop's body, as for ZERO_SKIPS
SPAN_TRIMS = {("eng_update", "Xm[c, b0] == 0.0"): "353701d9f681",
              ("eng_update", "Xm[c, b1 - 1] == 0.0"): "353701d9f681",
              ("eng_update", "Xm[c0, a] == 0.0"): "d4dbeea09ca5",
              ("eng_update", "Xm[c1 - 1, a] == 0.0"): "d4dbeea09ca5"}

#: with ``vector_exp`` (``lanes.transform(vector_exp=True)``): a call inside a loop over lanes replaced by a
#: vectorisable equivalent of ``meanfield.core.lane_exp`` (straight-line arithmetic, no library call; within one
#: ulp of the C library's, not bit for bit), by the name the generated module imports it under
VECTOR_CALLS = {"math.exp": "exp_lane"}
