"""A paper's names in the bound language and its run figures come from its registration (issue 21):
core/bound_parse and core/bounds know only the generic names, engine/plot only generic panels. A toy
system registers its own signed atom and panels here; its values are checked against the arrays
themselves (an independent read), and its failure paths are one-line errors."""

from __future__ import annotations

import numpy as np
import pytest

from meanfield.core import hooks
from meanfield.core.bound_parse import VARIABLES, BoundNames, atom_forms, variables
from meanfield.core.bounds import BoundError, values
from meanfield.engine import registry


@pytest.fixture
def toy_names():
    names = BoundNames({"zeta": "the toy's scale"}, attrs={"zeta": "zeta_attr"},
                       groups={"min_margin_odd": ("odd", True)}, signed={"Z": ("Zdata", "pair")},
                       heads=("+", "-"), feature_pattern=r"x[0-9]+", forms="Z+[a,b], Z-[a,b]",
                       help="meanfield toy bound --help")
    registry.register_bound_names("toy_system", names)
    try:
        yield names
    finally:
        hooks._BOUND_NAMES.pop("toy_system", None)


class _Run(dict):
    def __init__(self, data, attrs):
        super().__init__(data)
        self.attrs = attrs


def _run():
    rng = np.random.default_rng(0)
    Z = rng.standard_normal((4, 2, 3, 3))
    margin = rng.standard_normal((4, 5))
    return _Run({"t": np.arange(4.0), "Zdata": Z, "features": np.array(["x1", "x2", "x3"]), "margin": margin,
                 "samples": {"odd": np.array([0, 1, 0, 1, 0])}}, {"system": "toy_system", "zeta_attr": 2.5})


def test_core_names_no_paper_and_the_mixture_registers_its_own():
    for name in ("omega", "K", "L", "min_margin_consistent", "min_margin_inconsistent"):
        assert name not in VARIABLES and name in variables()
    assert "S+[a,b]" in atom_forms() and registry.run_panels("mixture") is not None


def test_a_registered_system_s_names_read_its_arrays(toy_names):
    r = _run()
    np.testing.assert_array_equal(values("Z-[x3,x1]", r), r["Zdata"][:, 1, 2, 0])
    np.testing.assert_array_equal(values("Z+[x1,x2] * zeta", r), r["Zdata"][:, 0, 0, 1] * 2.5)
    np.testing.assert_array_equal(values("min_margin_odd", r), r["margin"][:, [1, 3]].min(axis=1))


@pytest.mark.parametrize("expr, msg", [
    ("Z+[x9,x1] > 0", "unknown feature 'x9'"),
    ("Z+[c1,x1] > 0", "expected two feature names"),
    ("Z > 0", "'Z' needs a head and two features: write Z+[a,b] or Z-[a,b]"),
    ("zzz > 0", "the full list: meanfield"),
])
def test_a_registered_system_s_bad_names_are_one_line(toy_names, expr, msg):
    with pytest.raises(BoundError, match=msg.replace("[", r"\[").replace("]", r"\]").replace("+", r"\+")) as ei:
        values(expr.split(" >")[0], _run())
    assert "\n" not in str(ei.value)


def test_registered_panels_draw_the_named_arrays(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from meanfield.core.io import read_run
    from meanfield.engine.plot import HeadPanels, Lines, LossMargins, RunPanels, plot_panels
    from meanfield.models.mixture import run as R
    from meanfield.models.mixture.config import make_config

    path = tmp_path / "m.h5"
    R.run_to_file(make_config(steps=20), path, progress=False)
    panels = RunPanels((HeadPanels("toy", (Lines("w", ("*",), "w{head}[{f}]"),), "head {head}", "w"),
                        LossMargins("lm", "consistent")))
    import matplotlib.figure

    drawn = []
    orig = matplotlib.figure.Figure.savefig

    def keep(fig, *a, **k):
        drawn.append(fig)
        return orig(fig, *a, **k)

    matplotlib.figure.Figure.savefig = keep
    try:
        files = plot_panels(read_run(path), panels, tmp_path / "figs")
    finally:
        matplotlib.figure.Figure.savefig = orig
    assert [f.name for f in files] == ["toy.png", "lm.png"]
    run = read_run(path)
    ax = drawn[0].axes[1]  # head '-'
    labels = [ln.get_label() for ln in ax.get_lines() if not ln.get_label().startswith("_")]
    assert labels == [f"w-[{f}]" for f in run["features"].astype(str)]
    np.testing.assert_array_equal(ax.get_lines()[2].get_ydata(), np.asarray(run["w"])[:, 1, 2])
