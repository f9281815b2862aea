"""A command line builds only its verb's parser (meanfield.core.cliparse.only_verb): each verb's parser
built alone equals the one built with every verb, the other verbs stay valid choices, and --help / a wrong
verb see them all."""

import pytest

from meanfield.cli import _verb_word, build_parser, main


def _verbs(parser, system):
    sub = next(a for a in parser._actions if a.dest == "system").choices[system]
    return next(a for a in sub._actions if a.dest == "verb").choices


def _shape(p):
    return [(tuple(a.option_strings), a.dest, a.default, a.nargs, repr(a.choices), a.required) for a in p._actions] + \
        sorted((k, repr(v)) for k, v in p._defaults.items())


def test_each_verb_alone_equals_its_full_build():
    full = _verbs(build_parser(only="mixture"), "mixture")
    assert {"run", "sweep", "sweep-plot", "width-sweep", "escape", "bound"} <= set(full)
    for name, p in full.items():
        alone = _verbs(build_parser(only="mixture", verb=name), "mixture")
        assert set(alone) == set(full), name  # the others are still choices
        assert _shape(alone[name]) == _shape(p), name
        other = next(n for n in full if n != name)
        assert _shape(alone[other]) != _shape(full[other]) or not full[other]._actions[1:]  # a stub, not built


def test_verb_word():
    assert _verb_word(["mixture", "sweep", "--steps", "5"]) == "sweep"
    assert _verb_word(["-q", "mixture", "run"]) == "run"
    assert _verb_word(["mixture", "--help"]) is None and _verb_word(["mixture"]) is None


def test_wrong_verb_lists_every_choice(capsys):
    with pytest.raises(SystemExit) as e:
        main(["mixture", "swep"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "sweep" in err and "width-sweep" in err and "escape" in err


def test_help_of_the_system_and_of_a_verb(capsys):
    with pytest.raises(SystemExit) as e:
        main(["mixture", "--help"])
    assert e.value.code == 0 and "width-sweep" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["mixture", "sweep", "--help"])
    assert e.value.code == 0 and "--param" in capsys.readouterr().out


def test_main_builds_the_named_verb_alone(monkeypatch):
    import meanfield.cli as cli

    seen = []
    real = cli.build_parser
    monkeypatch.setattr(cli, "build_parser", lambda only=None, verb=None: seen.append((only, verb)) or real(only, verb))
    assert main(["mixture", "bound", "no_such_run.h5", "loss <= 1"]) == 2  # one line: the file is missing
    assert seen == [("mixture", "bound")]


def test_sink_and_aliases():
    import argparse

    from meanfield.core.cliparse import only_verb

    p = argparse.ArgumentParser(prog="x")
    v = only_verb(p.add_subparsers(dest="verb"), "r")
    v.add_parser("run", aliases=["r"]).add_argument("--n", default="1")
    stub = v.add_parser("other")
    stub.add_subparsers(dest="x").add_parser("y").add_argument("--z")  # nested builders go into the sink
    stub.add_argument_group("g").add_argument("--q")
    assert p.parse_args(["r"]).n == "1" and p.parse_args(["other"]).verb == "other"
