"""A fresh-clone test of the README and the docs pages (issues 14, 25): every
``meanfield ...`` command of the ``sh`` blocks of README.md and then of the
documentation pages (``docs/*.md`` in the order of ``mkdocs.yml``'s nav; the
README's sections moved there in issue 25) is extracted and run in order, as a
new user would type it after ``make demo`` and ``source .venv/bin/activate``,
in a fresh folder holding what a clone holds (``runs/*.toml``, ``docs/``). A
command written twice (the quick start repeats the README's first screen) runs
once.

Sizes are kept small by rewriting a few size flags (SMALL below: steps, stage
lengths, widths, seeds, Monte Carlo counts) and by adding ``--quick`` where a
verb has it; nothing else of a command changes, so a renamed verb or flag, a
wrong path or an inapplicable option in the README fails this test. Usage
synopses (lines with ``[...]``, ``a|b`` or placeholders such as ``FILE.toml``)
are checked only for naming an existing verb.

Marked ``readme`` (about two minutes on 2 cores): ``.ci/run`` runs it in a
second process alongside ``make test``; run it alone with ``pytest -m readme tests/test_readme.py``.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.readme

# flag -> small value (same shape as the README's: a list keeps its length)
SMALL = {
    "--steps": "20", "--stage-steps": "400,400,200", "--t-end": "5", "--stage-times": "2,4,2",
    "--phase-steps": "10", "--phase-times": "2", "--widths": "4,16", "--seeds": "1", "--n-kernels": "50",
    "--batch": "50", "--record-log": "20", "--K": None, "--omegas": None, "--tmin": "0", "--tmax": None,
    "--n": "100", "--n-train": "100",
}
QUICK_VERBS = {("mixture", "check"), ("mixture", "demo"), ("induction", "check"), ("induction", "full"),
               ("model", "check"), ("mixture", "study")}  # --quick is added where the verb's --help offers it
# verb -> flags appended when the README's command does not set them (the defaults are full-size data sets)
EXTRA = {("induction", "run"): ["--n-train", "300", "--n-test", "50"]}
PLACEHOLDER = re.compile(r"\[|\]|\bFILE\b|\bDIR\b|PATH\.h5|RUN\.h5|FILE\.|\bEXPR\b|\bM\b(?!=)| \| |\w\|\w")
SKIP_PREFIX = ("git ", "make ", "source ", "cd ", "pytest ", "python ", "pip ")


def doc_pages() -> list[Path]:
    """The site's pages in the order of ``mkdocs.yml``'s nav (read without a YAML parser)."""
    nav = (ROOT / "mkdocs.yml").read_text().partition("\nnav:")[2]
    names = re.findall(r"^\s*-\s*(?:[^:\n]+:\s*)?([\w/.-]+\.md)\s*$", nav, flags=re.M)
    return [ROOT / "docs" / n for n in names if (ROOT / "docs" / n).exists()]


def all_commands() -> list[tuple[str, str]]:
    """(source, command) for the README and then every docs page, first occurrence of each command only."""
    out, seen = [], set()
    for path in [ROOT / "README.md"] + doc_pages():
        for c in readme_commands(path.read_text()):
            key = " ".join(re.sub(r"\s+#.*$", "", c).split())  # the same command with another comment: once
            if key not in seen:
                seen.add(key)
                out.append((path.relative_to(ROOT).as_posix(), c))
    return out


def test_docs_pages_are_found():
    pages = [p.name for p in doc_pages()]
    assert pages[:3] == ["index.md", "install.md", "quickstart.md"], pages
    sources = {src for src, _ in all_commands()}
    for page in ("README.md", "docs/own_model.md", "docs/mixture.md", "docs/induction.md", "docs/catalogue.md"):
        assert page in sources, (page, sorted(sources))


def readme_commands(text: str) -> list[str]:
    """Shell lines of the ``sh`` blocks, continuation lines joined, in order."""
    out = []
    for block in re.findall(r"^```sh\n(.*?)^```", text, flags=re.S | re.M):
        joined = re.sub(r"\\\n\s*", " ", block)
        out += [ln.strip() for ln in joined.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    return out


_HELP: dict = {}


def _has_flag(verb: tuple, flag: str) -> bool:
    if verb not in _HELP:
        r = subprocess.run([sys.executable, "-m", "meanfield", *verb, "--help"], capture_output=True, text=True,
                           timeout=120)
        _HELP[verb] = r.stdout
    return flag in _HELP[verb]


def _small(words: list[str]) -> list[str]:
    out = list(words)
    verb = tuple(out[1:3])
    for flag, val in zip(EXTRA.get(verb, [])[::2], EXTRA.get(verb, [])[1::2]):
        if flag not in out:
            out += [flag, val]
    for i, w in enumerate(out[:-1]):
        if w in SMALL and SMALL[w] is not None and out[i + 1][:1] != "-":
            v = SMALL[w]
            n = out[i + 1].count(",") + 1
            if w in ("--phase-steps", "--phase-times") or (verb[0] == "induction" and "--stage-" in w):
                v = ",".join([SMALL[w.replace("stage", "phase")]] * n)  # induction stages: 10 steps each
            elif w in ("--stage-steps", "--stage-times"):  # a stage of length 0 stays 0 (it means: skip it)
                v = ",".join("0" if old.strip() in ("0", "0.0") else new
                             for old, new in zip(out[i + 1].split(","), v.split(",")))
            out[i + 1] = v
    if verb in QUICK_VERBS and "--quick" not in out and _has_flag(verb, "--quick"):
        out.insert(3, "--quick")
    if tuple(out[1:3]) == ("mixture", "study") and out[3:4] == ["--quick"] and out[4:5] == ["k-mixtures"]:
        out.pop(3)  # k-mixtures has no --quick; its sizes are the flags above
        out += ["--steps", "50", "--widths", "4", "--seeds", "1"] if "--steps" not in out else []
    return out


def test_readme_extraction_finds_the_first_screen():
    cmds = readme_commands((ROOT / "README.md").read_text())
    assert cmds[0].startswith("git clone") and any(c.startswith("make demo") for c in cmds[:3])
    assert any(c.startswith("source .venv/bin/activate") for c in cmds[:4])
    assert any("--format latex" in c for c in cmds[:6])


def test_readme_commands_run_in_order(tmp_path):
    work = tmp_path / "clone"
    work.mkdir()
    (work / "runs").mkdir()
    for t in (ROOT / "runs").glob("*.toml"):
        shutil.copy(t, work / "runs" / t.name)
    if (ROOT / "docs").exists():
        shutil.copytree(ROOT / "docs", work / "docs")
    # the bounds file the README's example names (its format is described right there)
    (work / "my_bounds.toml").write_text('[[bound]]\nname = "loss below log 2"\nexpr = "loss <= log(2)"\n')
    exe = [sys.executable, "-m", "meanfield"]
    env_vars: dict[str, str] = {}
    failures, ran = [], 0
    t_all = time.perf_counter()
    per_source: dict[str, int] = {}
    for source, line in all_commands():
        m = re.fullmatch(r"([A-Z_]+)=(\S+)", line)
        if m:
            env_vars[m.group(1)] = m.group(2)
            continue
        for k, v in env_vars.items():
            line = line.replace(f"${k}", v)
        if line.startswith(SKIP_PREFIX) or not line.startswith("meanfield "):
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError as e:
            failures.append(f"{line}: cannot split ({e})")
            continue
        redirect = None
        if ">" in words:
            j = words.index(">")
            redirect, words = words[j + 1], words[:j]
        if PLACEHOLDER.search(" ".join(words[3:])) or any(w.startswith("[") for w in words):
            r = subprocess.run(exe + words[1:3] + ["--help"], cwd=work, capture_output=True, text=True, timeout=120)
            if r.returncode != 0:
                failures.append(f"{line}: verb {' '.join(words[1:3])!r} --help exit {r.returncode}")
            continue
        argv = _small(words)[1:]
        t0 = time.perf_counter()
        r = subprocess.run(exe + argv, cwd=work, capture_output=True, text=True, timeout=600)
        ran += 1
        per_source[source] = per_source.get(source, 0) + 1
        if redirect:
            (work / redirect).write_text(r.stdout)
        if r.returncode not in (0, 1) or "Traceback" in r.stderr:
            failures.append(f"{source}: {line}\n    ran as: meanfield {shlex.join(argv)}\n    exit {r.returncode} after "
                            f"{time.perf_counter() - t0:.1f} s: {r.stderr.strip()[-400:]}")
    assert ran >= 20 and per_source.get("README.md", 0) >= 5, per_source
    assert not failures, "README / docs commands that fail:\n" + "\n".join(failures) + \
        f"\n({ran} commands run in {time.perf_counter() - t_all:.0f} s)"
