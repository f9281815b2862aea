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


def _run(argv, capsys):
    """(exit code, stdout, stderr) of ``main(argv)``."""
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def _run_full(argv, capsys):
    """The same through the parser with every system and verb built (no stand-ins): argparse's own output."""
    try:
        rc = build_parser().parse_args(argv).system and None
    except SystemExit as e:
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("argv", [["mixture", "badverb"], ["-q", "mixture", "swep"], ["mixture", "--help"],
                                  ["mixture", "sweep", "--help"], ["mixture", "sweep", "--param"],
                                  ["mixture", "run", "--nosuchopt"], ["mixture"], ["induction", "badverb"],
                                  ["induction", "--help"], ["model", "--help"], ["model", "badverb"],
                                  ["warm", "--help"], ["plot", "--help"], ["plot"], ["nosuch", "run"],
                                  ["--help"], ["mixture", "badverb", "--help"]])
def test_stand_ins_print_what_the_full_parser_prints(argv, capsys):
    """Help, usage errors and wrong names: the parser of the named system and verb (the others by name)
    says exactly what argparse says with every parser built."""
    assert _run(argv, capsys) == _run_full(argv, capsys)


def test_no_parser_made_for_the_verbs_not_named(monkeypatch):
    import argparse

    made = []
    init = argparse.ArgumentParser.__init__
    monkeypatch.setattr(argparse.ArgumentParser, "__init__", lambda self, *a, **k: made.append(k.get("prog"))
                        or init(self, *a, **k))
    build_parser(only="mixture", verb="sweep")
    assert made == ["meanfield", "meanfield mixture", "meanfield mixture sweep"]


def test_a_stand_in_used_is_the_parser_add_parser_makes():
    """Read, a stand-in is the parser add_parser would have made: the other systems' empty ones, warm's
    and plot's in full (compared with the full build's)."""
    full_sys = next(a for a in build_parser()._actions if a.dest == "system")
    full = full_sys.choices
    sys_ = next(a for a in build_parser(only="mixture", verb="sweep")._actions if a.dest == "system")
    for name in ("warm", "plot"):
        assert _shape(sys_.choices[name]) == _shape(full[name]) and sys_.choices[name].prog == full[name].prog
    for name in ("induction", "model"):
        assert _shape(sys_.choices[name]) == [(("-h", "--help"), "help", "==SUPPRESS==", 0, "None", False)]
        assert sys_.choices[name].prog == f"meanfield {name}"
    assert list(sys_.choices) == list(full)  # the same names in the same order (argparse's messages list them)
    assert [(a.dest, a.metavar, a.help) for a in sys_._choices_actions] == \
        [(a.dest, a.metavar, a.help) for a in full_sys._choices_actions if a.dest in ("mixture", "warm", "plot")]


def test_add_named_records_what_add_parser_records():
    """A toy parser: help with aliases and help None, the choices, a wrong name, a conflict; against argparse's
    add_parser."""
    import argparse

    from meanfield.core.cliparse import add_named

    def make(named):
        p = argparse.ArgumentParser(prog="x", allow_abbrev=False)
        v = p.add_subparsers(dest="verb", required=True)
        v.add_parser("run", help="run it").add_argument("--n", default="1")
        if named:
            add_named(v, "plot", help="figures", aliases=["pl", "p"])
            add_named(v, "quiet", help=None)
            add_named(v, "hidden")
        else:
            v.add_parser("plot", help="figures", aliases=["pl", "p"])
            v.add_parser("quiet", help=None)
            v.add_parser("hidden")
        return p, v

    (a, va), (b, vb) = make(True), make(False)
    assert a.format_help() == b.format_help() and a.format_usage() == b.format_usage()
    assert list(va.choices) == list(vb.choices) == ["run", "plot", "pl", "p", "quiet", "hidden"]
    assert va.choices["pl"] is va.choices["plot"]
    assert a.parse_args(["pl"]).verb == "pl" and a.parse_args(["hidden"]).verb == "hidden"
    assert _shape(va.choices["p"]) == _shape(vb.choices["p"]) and va.choices["p"].prog == vb.choices["p"].prog == "x plot"
    for p in (a, b):
        with pytest.raises(argparse.ArgumentError, match="conflicting subparser: run"):
            add_named(p._subparsers._group_actions[0], "run")
        with pytest.raises(argparse.ArgumentError, match="conflicting subparser alias: pl"):
            add_named(p._subparsers._group_actions[0], "new", aliases=["pl"])


def test_parser_checks_each_argument_as_argparse_does(monkeypatch):
    """meanfield.cli._Parser checks a metavar with one formatter per parser; help and usage still use a new
    one (the terminal's width read each time), and a bad metavar is refused as argparse refuses it."""
    import argparse

    from meanfield.cli import _Parser

    def fill(p):
        p.add_argument("--pair", nargs=2, metavar=("A", "B"), help="two values " * 12)
        p.add_argument("run", help="a run file")
        with pytest.raises(ValueError, match="length of metavar tuple does not match nargs"):
            p.add_argument("--bad", nargs=2, metavar=("A", "B", "C"))
        return p

    for cols in ("40", "200"):
        monkeypatch.setenv("COLUMNS", cols)
        ours, theirs = fill(_Parser(prog="x")), fill(argparse.ArgumentParser(prog="x", allow_abbrev=False))
        monkeypatch.setenv("COLUMNS", "60")  # after the arguments: help is formatted at today's width
        assert ours.format_help() == theirs.format_help() and ours.format_usage() == theirs.format_usage()
        assert "two values two" in ours.format_help()
