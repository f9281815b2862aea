"""Pieces shared by the trajectory-vectorised batches (lanes) of every system.

A lane batch advances W trajectories together, every array carrying the lane
as its last, contiguous axis, so that the inner loops run over lanes and
LLVM emits vector instructions for them (``meanfield.models.mixture.vectorised``,
the mixture's hand-written lanes; ``meanfield.engine.lanes``, the engine's,
produced from its scalar kernels by a source transform). What they share:
:class:`NoAlias`, numba's pipeline with the ``noalias`` flag, for passes whose
array arguments never overlap (their loops over lanes then vectorise without
run-time overlap checks). The per-lane control of their drivers is ``meanfield.core.lane_driver``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from numba.core.compiler import CompilerBase, DefaultPassBuilder


def source_tag(*files) -> str:
    """A checksum (10 hex digits) of the source files a lane build compiles from, for the names of its
    generated functions: numba's disk cache checks only the file defining a function, so a build whose code
    inlines others' (the per-lane control, the exp, the record writer) names them all here.

    Parameters
    ----------
    *files : str or pathlib.Path
        The files (e.g. modules' ``__file__``).

    Returns
    -------
    str

    Examples
    --------
    >>> len(source_tag(__file__))
    10
    """
    return hashlib.sha1(b"".join(Path(f).read_bytes() for f in files)).hexdigest()[:10]


class NoAlias(CompilerBase):
    """numba's nopython pipeline with its ``noalias`` flag set: every pointer argument is marked LLVM
    ``noalias``, so that the loops over lanes vectorise without run-time overlap checks (each such check costs
    about as much as a 16-lane loop's arithmetic). Only for functions whose array arguments never overlap
    (``njit(pipeline_class=NoAlias)``)."""

    def define_pipelines(self):
        self.state.flags.noalias = True
        return [DefaultPassBuilder.define_nopython_pipeline(self.state)]
