"""`meanfield model VERB MODEL --help` lists the model's own declared parameters, their defaults and meaning
(read here from the TOML text with tomllib, independently of the help module), not the mixture's flags."""

import re
import tomllib

import pytest

import meanfield.cli
from meanfield.engine.cli import model_path


def _help(capsys, argv):
    with pytest.raises(SystemExit) as e:
        meanfield.cli.main(argv)
    assert e.value.code in (0, None)
    return capsys.readouterr().out


def _line(text, flag):
    """The help text of ``flag`` (its wrapped lines joined)."""
    m = re.search(rf"^  {re.escape(flag)} V\s+(.*?)(?=^  -|^\S|\Z)", text, re.M | re.S)
    assert m, f"{flag} not in the help"
    return " ".join(m.group(1).split())


def test_incontext_help_lists_its_declared_parameters(capsys):
    out = _help(capsys, ["model", "run", "incontext", "--help"])
    table = tomllib.loads(model_path("incontext").read_text())["parameters"]
    for name, meaning in (("K", "features v1..vK"), ("N", "context tokens per prompt"), ("p1", "probability of v1")):
        text = _line(out, "--" + name)
        assert f"(default: {table[name]})" in text and meaning in text
    assert "parameters declared by incontext" in out
    assert "(default: 3000)" in _line(out, "--steps")  # a run knob with the description's default
    for mixture_only in ("--label-noise", "--schedule", "--feature-gram", "--stage3"):
        assert mixture_only not in out


@pytest.mark.parametrize("verb", ["particles", "width-sweep", "derive", "sweep"])
def test_every_model_verb_has_the_model_help(capsys, verb):
    out = _help(capsys, ["model", verb, "incontext", "--help"])
    assert "(default: 20)" in _line(out, "--N")


def test_mixture_family_help_shows_its_fields(capsys):
    out = _help(capsys, ["model", "run", "mixture", "--help"])
    assert "(default: 3)" in _line(out, "--L") and "--label-noise" in out and "the mixture family's fields" in out


def test_own_description_comments_are_the_meaning(capsys, tmp_path):
    src = model_path("incontext").read_text().replace("p1 = 0.0 ", "alpha = 0.25   # my own knob\np1 = 0.0 ")
    p = tmp_path / "mine.toml"
    p.write_text(src)
    out = _help(capsys, ["model", "run", str(p), "--help"])
    assert _line(out, "--alpha") == "my own knob (default: 0.25)"  # used nowhere: the comment alone


def test_help_without_a_model_or_with_a_broken_one_is_the_plain_help(capsys, tmp_path):
    out = _help(capsys, ["model", "run", "--help"])
    assert "--label-noise" in out  # nothing to specialise: every flag
    bad = tmp_path / "bad.toml"
    bad.write_text("[parameters\n")
    out = _help(capsys, ["model", "run", str(bad), "--help"])
    assert "usage: meanfield model run" in out


def test_mixture_family_help_gives_every_field_a_default_and_a_meaning(capsys):
    import dataclasses

    from meanfield.models.mixture.config import MixtureConfig

    out = _help(capsys, ["model", "run", "mixture", "--help"])
    table = tomllib.loads(model_path("mixture").read_text())["parameters"]
    for f in dataclasses.fields(MixtureConfig):
        text = _line(out, "--" + f.name.replace("_", "-"))
        m = re.fullmatch(r"(.+) \(default: (.*)\)", text)
        assert m, (f.name, text)  # a meaning before the default, never the default alone
        want = table.get(f.name, f.default)
        assert m.group(2) == ("none" if want is None else ",".join(map(str, want)) if isinstance(want, tuple)
                              else str(want)), (f.name, text)
    assert "number of groups" in _line(out, "--K") and "label flip probability" in _line(out, "--label-noise")


@pytest.mark.parametrize("name", ["icl_softmax", "icl_zfb", "icl_onestep"])
def test_icl_declared_parameters_have_the_meaning_of_the_key_using_them(capsys, name):
    out = _help(capsys, ["model", "run", name, "--help"])
    raw = tomllib.loads(model_path(name).read_text())
    data = raw["data"]
    for p, default in raw["parameters"].items():
        used = [k for k, v in data.items() if v == f"${p}"]
        if not used or p in ("eta", "steps"):
            continue
        text = _line(out, "--" + p)
        assert f"data.{used[0]}" in text and f"(default: {default})" in text, (p, text)
        assert len(text.split("(default")[0].strip()) > 15  # a meaning, not only the default


def test_declared_parameter_without_comment_gets_the_schema_meaning(capsys, tmp_path):
    src = model_path("incontext").read_text().replace("p1 = 0.0 ", "sc = 1.5\np1 = 0.0 ")
    src = src.replace("[[heads]]\n", '[[heads]]\nscale = "$sc"\n', 1)
    p = tmp_path / "mine.toml"
    p.write_text(src)
    out = _help(capsys, ["model", "run", str(p), "--help"])
    assert _line(out, "--sc") == "heads[0].scale: multiplies the logits z_i = scale x_i^T S x_q (default: 1.5)"


def test_every_shipped_description_gives_every_parameter_and_knob_a_meaning():
    """No row of any shipped description's help is a bare default (a new knob or parameter without a meaning
    in the schema, the family registration or a comment fails here)."""
    from meanfield.engine.help import model_parameters

    root = model_path("incontext").parent
    files = sorted(root.glob("*.toml")) + sorted((root.parents[1] / "docs" / "examples").glob("*.toml"))
    assert len(files) >= 8
    for p in files:
        _fam, declared, knobs = model_parameters(p)
        for name, _default, meaning in declared + knobs:
            assert meaning.strip(), (p.name, name)


def test_a_plugin_family_registers_its_fields_meanings(tmp_path, monkeypatch):
    from dataclasses import dataclass

    from meanfield.engine import registry
    from meanfield.engine.help import model_parameters

    @dataclass(frozen=True)
    class Knobs:
        steps: int = 5
        alpha: float = 0.5

    monkeypatch.setattr(registry, "_FAMILIES", dict(registry._FAMILIES))  # the registration stays in this test
    registry.register_family("help_test_family", params=Knobs, build=lambda values, name, source: None,
                             field_help={"alpha": "the user's own coupling"}, replace=True)
    p = tmp_path / "fam.toml"
    p.write_text('family = "help_test_family"\n[parameters]\nalpha = 0.75\n')
    fam, rows, _ = model_parameters(p)
    assert fam == "help_test_family"
    assert dict((n, (d, m)) for n, d, m in rows) == {"steps": ("5", "GD steps (when the description has no "
                                                              "[[training.stages]])"),
                                                     "alpha": ("0.75", "the user's own coupling")}


def test_unknown_flag_hint_names_the_model_as_given_and_its_help_works(capsys, tmp_path):
    """The one-line refusal of an undeclared flag ends with a help command; for a user's file it must
    name the file (the bare stem is no shipped model, and its --help would be the plain one)."""
    src = (model_path("incontext").parent.parent.parent / "docs" / "examples" / "majority.toml").read_text()
    p = tmp_path / "mine.toml"
    p.write_text(src)
    out = tmp_path / "x.h5"
    assert meanfield.cli.main(["model", "run", str(p), "--bogus", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and not out.exists(), err
    hint = re.search(r"meanfield (model run \S+ --help)$", err[0])
    assert hint and hint.group(1).split()[2] == str(p), err[0]
    text = _help(capsys, hint.group(1).split())
    assert "--overlap V" in text and "--label-noise" not in text  # the model's own help, not the plain one


def test_help_of_a_model_that_does_not_exist_says_so(capsys):
    """--help with an unknown model name: the one-line 'no such file' error, exit 2 (it used to print
    the mixture's flags as if they were the model's)."""
    with pytest.raises(SystemExit) as e:
        meanfield.cli.main(["model", "run", "NOSUCHNAME", "--help"])
    assert e.value.code == 2
    cap = capsys.readouterr()
    assert "--label-noise" not in cap.out
    err = cap.err.strip()
    assert "\n" not in err and "no such file 'NOSUCHNAME'" in err, err
