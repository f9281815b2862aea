"""MkDocs hooks of the documentation site (``mkdocs.yml``: ``hooks:``).

Generated at build time from the code, so that these pages cannot drift:

* ``<!-- gen:description -->`` (docs/description.md): every key of a model
  description, from :mod:`meanfield.engine.schema` (the loader's dataclasses
  and choice tables) and the mixture family's config dataclass;
* ``<!-- gen:cli -->`` (docs/cli.md): ``--help`` of every ``meanfield``
  subcommand, walked from the argparse parser of ``meanfield.cli``;
* ``<!-- gen:catalogue -->`` (docs/catalogue.md): one row per shipped
  description (every ``meanfield/models/**/*.toml``);
* ``tutorial.md``: the tutorial notebook ``docs/tutorial.ipynb`` as a page
  (markdown cells as they are, code cells and their stored text outputs as
  code blocks, figures as images).

``tests/test_docs.py`` calls the same functions.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import json
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # build the docs of this checkout's package
    sys.path.insert(0, str(ROOT))


# ------------------------------------------------------------------ description reference


def mixture_family_markdown() -> str:
    """The ``[parameters]`` keys of ``family = "mixture"``: the fields of the
    mixture's config dataclass (names, types, defaults from the code)."""
    from meanfield.engine.description import parameter_class
    from meanfield.engine.schema import _default_of, _type_of

    cls = parameter_class({"family": "mixture"})
    out = ["## `[parameters]` with `family = \"mixture\"`", "",
           f"The fields of `{cls.__module__}.{cls.__name__}`, i.e. the flags of `meanfield mixture run`; "
           "their meanings are in the mixture system's [config fields](mixture.md#config-fields).", "",
           "| key | type | default |", "|---|---|---|"]
    out += [f"| `{f.name}` | {_type_of(f)} | {_default_of(f)} |" for f in dataclasses.fields(cls)]
    return "\n".join(out) + "\n"


def description_markdown() -> str:
    from meanfield.engine.schema import markdown

    return markdown() + "\n" + mixture_family_markdown()


# ------------------------------------------------------------------ CLI reference


def _subcommands(parser: argparse.ArgumentParser):
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            return dict(a.choices)
    return {}


def cli_commands() -> list[tuple[str, argparse.ArgumentParser]]:
    """Every ``meanfield`` subcommand as (``"meanfield SYSTEM VERB"``, parser), depth first."""
    from meanfield.cli import build_parser

    out = []

    def walk(prefix, p):
        out.append((prefix, p))
        for name, sub in _subcommands(p).items():
            walk(f"{prefix} {name}", sub)

    walk("meanfield", build_parser())
    return out


def cli_markdown() -> str:
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # argparse wraps help at $COLUMNS: the same page on every machine
    try:
        out = []
        for name, p in cli_commands():
            p.prog = name
            depth = name.count(" ")
            out += [f"{'#' * min(depth + 1, 4)} `{name}`", "", "```text", p.format_help().rstrip(), "```", ""]
        return "\n".join(out)
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old


# ------------------------------------------------------------------ model catalogue


def shipped_descriptions() -> list[Path]:
    """Every shipped description, ``meanfield/models/**/*.toml``."""
    return sorted((ROOT / "meanfield" / "models").rglob("*.toml"))


def _checkers() -> set:
    """Names of the models with registered claims (``meanfield model check NAME``)."""
    from meanfield.engine import registry

    return set(registry.claims())


def catalogue_markdown() -> str:
    import tomllib

    from meanfield.engine.description import declared_parameters

    checks = _checkers()
    rows = ["| model | file | what it is | parameters (defaults) | claims |", "|---|---|---|---|---|"]
    for path in shipped_descriptions():
        text = path.read_text()
        raw = tomllib.loads(text)
        name = str(raw.get("name", path.stem))
        head = []
        for ln in text.splitlines():
            if not ln.startswith("#") or ln.startswith("#   ") or ln.startswith("#  meanfield"):
                break
            head.append(ln.lstrip("# ").strip())
        what = " ".join(head).split(". ")[0].replace("|", "/")
        if raw.get("family"):
            params = f"the `{raw['family']}` family's config fields"
        else:
            params = ", ".join(f"{k} = {v}" for k, v in declared_parameters(raw).items()) or "none"
        claim = f"`meanfield model check {name}`" if name in checks else "-"
        rel = path.relative_to(ROOT).as_posix()
        rows.append(f"| `{name}` | `{rel}` | {what} | {params} | {claim} |")
    return "\n".join(rows) + "\n"


# ------------------------------------------------------------------ the tutorial notebook as a page


def notebook_markdown(path: Path) -> str:
    """A notebook as Markdown: markdown cells as they are, code cells as
    ``python`` blocks, their stored outputs as text blocks and PNG images."""
    nb = json.loads(path.read_text())
    out = []
    for cell in nb["cells"]:
        src = "".join(cell.get("source", []))
        if cell["cell_type"] == "markdown":
            out += [src, ""]
            continue
        if cell["cell_type"] != "code":
            continue
        out += ["```python", src.rstrip(), "```", ""]
        for o in cell.get("outputs", []):
            data = o.get("data", {})
            if o.get("output_type") == "stream":
                text = "".join(o.get("text", []))
            elif "image/png" in data:
                png = data["image/png"]
                png = "".join(png) if isinstance(png, list) else png
                base64.b64decode(png)  # a broken image fails the build
                out += [f"![figure](data:image/png;base64,{png.strip()})", ""]
                continue
            elif "text/plain" in data:
                text = "".join(data["text/plain"])
            elif o.get("output_type") == "error":
                raise ValueError(f"{path}: a stored output is an error ({o.get('ename')}): re-execute the notebook")
            else:
                continue
            text = re.sub(r"\x1b\[[0-9;]*m", "", text).rstrip()
            if text:
                out += ["```text", text, "```", ""]
    return "\n".join(out)


# ------------------------------------------------------------------ the hooks

_GEN = {"<!-- gen:description -->": description_markdown, "<!-- gen:cli -->": cli_markdown,
        "<!-- gen:catalogue -->": catalogue_markdown}


def on_files(files, config):
    from mkdocs.structure.files import File

    nb = Path(config["docs_dir"]) / "tutorial.ipynb"
    if nb.exists():
        files.remove(files.get_file_from_path("tutorial.ipynb"))
        files.append(File.generated(config, "tutorial.md", content=notebook_markdown(nb)))
    return files


def on_page_markdown(markdown, page, config, files):
    for marker, fn in _GEN.items():
        if marker in markdown:
            markdown = markdown.replace(marker, fn())
    return markdown
