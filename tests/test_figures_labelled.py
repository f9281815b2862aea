"""Every engine figure written by the README's commands has a legend (or a colour bar) naming each line, and
labelled axes: the README's ``meanfield model ...`` commands that write figures (``--plot``, ``model plot``,
``model width-sweep``, ``model sweep-plot``) and the runs they read are run in order at small sizes (the README
test's own rewriting), in process, with ``Figure.savefig`` wrapped so that every figure they write is kept and
its matplotlib artists read."""

from __future__ import annotations

import os
import re
import shlex
import shutil
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.figure  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import meanfield.cli  # noqa: E402
from test_readme import ROOT, _small  # noqa: E402

FIGURE_VERBS = ("plot", "width-sweep", "sweep-plot")


def _commands(text: str) -> list[str]:
    out = []
    for block in re.findall(r"^```(?:sh|bash)\n(.*?)^```", text, flags=re.S | re.M):
        joined = re.sub(r"\\\n\s*", " ", block)
        out += [ln.strip() for ln in joined.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    return out


def _figure_commands(text: str) -> list[list[str]]:
    """The README's engine commands that write figures, each preceded by the commands that write what it reads."""
    env, cmds = {}, []
    for line in _commands(text):
        m = re.fullmatch(r"([A-Z_]+)=(\S+)", line)
        if m:
            env[m.group(1)] = m.group(2)
            continue
        for k, v in env.items():
            line = line.replace(f"${k}", v)
        if not line.startswith("meanfield model ") or re.search(r"\[|\bFILE\b|\bDIR\b|RUN\.h5", line):
            continue
        cmds.append(shlex.split(line, comments=True))
    out = []
    for w in cmds:
        if w[2] in FIGURE_VERBS or "--plot" in w:
            reads = [x for x in w[3:] if x.endswith(".h5") and w[2] != "width-sweep"]
            for r in reads:  # its producer: the command whose --out is that file (or its folder)
                for p in cmds:
                    if "--out" in p and (p[p.index("--out") + 1] == r or r.startswith(p[p.index("--out") + 1] + "/")):
                        out.append(p)
                        break
            out.append(w)
    return out


def _check(fig, where: str) -> list[str]:
    bad = []
    for ax in fig.axes:
        if ax.get_label() == "<colorbar>":
            continue
        lines = [ln for ln in ax.get_lines() if len(np.atleast_1d(ln.get_xdata())) > 1]
        has_image = bool(ax.images or ax.collections and not lines)
        if not lines and not ax.containers:
            if has_image and not any(a.get_label() == "<colorbar>" for a in fig.axes):
                bad.append(f"{where}: an image without a colour bar")
            continue
        leg = ax.get_legend()
        if leg is None:
            bad.append(f"{where}: axes {ax.get_title()!r} has {len(lines)} lines and no legend")
            continue
        texts = {t.get_text() for t in leg.get_texts()}
        for ln in lines:
            if ln.get_label().startswith("_"):
                continue  # a reference line drawn without a label must be named in the legend some other way
            if ln.get_label() not in texts:
                bad.append(f"{where}: line {ln.get_label()!r} not in the legend")
        named = [ln for ln in lines if not ln.get_label().startswith("_")]
        if not named and not ax.containers:
            bad.append(f"{where}: axes {ax.get_title()!r}: no line is labelled")
        if not ax.get_xlabel() or not ax.get_ylabel():
            bad.append(f"{where}: axes {ax.get_title()!r} lacks an axis label")
    return bad


@pytest.fixture
def captured(monkeypatch):
    figs = []
    orig = matplotlib.figure.Figure.savefig

    def keep(self, *a, **k):
        figs.append(self)
        return orig(self, *a, **k)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep)
    return figs


def _doc_text() -> str:
    """The README and the page its engine walk-through moved to (docs/own_model.md): both run by tests/test_readme.py."""
    return (ROOT / "README.md").read_text() + "\n" + (ROOT / "docs" / "own_model.md").read_text()


def test_readme_finds_the_figure_commands():
    cmds = _figure_commands(_doc_text())
    verbs = {w[2] for w in cmds if w[2] in FIGURE_VERBS or "--plot" in w}
    assert {"plot", "width-sweep"} <= verbs, verbs
    assert any("--plot" in w for w in cmds)


@pytest.mark.readme  # runs the README's figure commands (minutes on 2 cores): with tests/test_readme.py
def test_every_engine_figure_of_the_readme_is_labelled(tmp_path, captured, monkeypatch):
    work = tmp_path / "clone"
    (work / "runs").mkdir(parents=True)
    shutil.copytree(ROOT / "docs", work / "docs")
    monkeypatch.chdir(work)
    bad, seen = [], 0
    for words in _figure_commands(_doc_text()):
        argv = _small(words)[1:]
        if words[2] == "sweep":
            # the chunked sweep of the README: two values of each parameter
            for i, a in enumerate(argv[:-1]):
                if a == "--param":
                    name, _, vals = argv[i + 1].partition("=")
                    argv[i + 1] = f"{name}={vals.split(':')[0].split(',')[0]}" + (
                        f",{vals.split(':')[1]}" if ":" in vals else "")
        n0 = len(captured)
        rc = meanfield.cli.main(["-q"] + argv)
        assert rc in (0, 1), f"meanfield {shlex.join(argv)}: exit {rc}"
        for fig in captured[n0:]:
            seen += 1
            bad += _check(fig, shlex.join(words[:4]))
    assert seen >= 4, seen
    assert not bad, "\n".join(bad)


def test_check_catches_an_unlabelled_figure():
    # the checker itself can fail: a figure with two unlabelled lines and no legend
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    ax.plot([0, 1], [1, 0])
    assert _check(fig, "x")
    ax.set_xlabel("t")
    ax.set_ylabel("y")
    ax.lines[0].set_label("a")
    ax.lines[1].set_label("b")
    ax.legend(handles=[ax.lines[0]])
    assert _check(fig, "x") == ["x: line 'b' not in the legend"]
    ax.legend()
    assert _check(fig, "x") == []
    plt.close(fig)
