"""Building only the parser a command line uses.

A new process of ``meanfield mixture sweep ...`` parses one verb, but
building every verb of a system (a few hundred ``add_argument`` calls) costs
milliseconds that a short command waits for. A system's ``add_parser`` may
take ``verb`` (the verb the command line names; ``meanfield.cli`` passes it
when the function accepts it) and add its verbs through :func:`only_verb`:
the named verb is built in full, every other one is registered by name alone
(so that argparse still lists the choices and refuses a wrong one), its
arguments going nowhere. A name alone is :func:`add_named`: argparse's
choice, its help line, and a parser built only if something uses it (no
``ArgumentParser`` made, which costs ~0.15 ms each with its gettext look-ups).

Example
-------
>>> import argparse
>>> p = argparse.ArgumentParser(prog="x")
>>> verbs = only_verb(p.add_subparsers(dest="verb"), "run")
>>> verbs.add_parser("run").add_argument("--steps", default="5")  # doctest: +ELLIPSIS
_StoreAction(...)
>>> verbs.add_parser("plot").add_argument("--out")  # doctest: +ELLIPSIS
<meanfield.core.cliparse._Sink object at ...>
>>> p.parse_args(["run"]).steps
'5'
"""

from __future__ import annotations


class _Sink:
    """Absorbs every method call a verb's builder makes on a parser it is not building (add_argument,
    set_defaults, add_argument_group, add_subparsers, add_parser, ...): each returns the sink. A builder
    that reads a parser's attributes (``p.description``, ``p._actions``) cannot be skipped this way: its
    system's ``add_parser`` should not take ``verb``."""

    def __getattr__(self, name):
        return lambda *a, **k: self


class _Later:
    """A subparser known to argparse by name, made on first use: any attribute
    (``parse_known_args`` when argparse selects it, ``_actions``, ...) makes
    it with ``build()`` and reads it there."""

    def __init__(self, build):
        self._build, self._parser = build, None

    def __getattr__(self, name):
        if name in ("_build", "_parser"):  # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        if self._parser is None:
            self._parser = self._build()
        return getattr(self._parser, name)


def add_named(verbs, name: str, fill=None, **kw):
    """``verbs.add_parser(name, **kw)`` without making the parser now.

    ``name`` and its ``aliases`` become choices of ``verbs`` (a wrong one is
    refused with argparse's message listing them, in the same order) and
    ``help``, when given (even None), is its line in the parent's ``--help``,
    exactly as ``add_parser`` records them; the parser ``add_parser(name,
    **kw)`` would make, given its arguments by ``fill(parser)`` (None: none),
    is made when first used (argparse selecting it, an attribute read).

    Parameters
    ----------
    verbs : argparse._SubParsersAction
        The subparsers.
    name : str
        The verb (or system).
    fill : callable, optional
        ``fill(parser)`` adds the parser's arguments and defaults.
    **kw
        As for ``add_parser``: ``help``, ``aliases``, ``prog``, the parser's own.

    Returns
    -------
    object
        The stand-in registered under ``name`` (attributes: the built parser's).

    Example
    -------
    >>> import argparse
    >>> p = argparse.ArgumentParser(prog="x")
    >>> v = p.add_subparsers(dest="verb")
    >>> _ = add_named(v, "plot", help="figures")
    >>> p.parse_args(["plot"]).verb
    'plot'
    """
    aliases = tuple(kw.get("aliases", ()))
    if name in verbs._name_parser_map or any(a in verbs._name_parser_map for a in aliases):
        return verbs.add_parser(name, **kw)  # argparse's own conflict error
    kw.pop("aliases", None)
    if kw.get("prog") is None:
        kw["prog"] = f"{verbs._prog_prefix} {name}"
    if "help" in kw:
        verbs._choices_actions.append(verbs._ChoicesPseudoAction(name, aliases, kw.pop("help")))
    cls = verbs._parser_class

    def build():
        parser = cls(**kw)
        if fill is not None:
            fill(parser)
        return parser

    later = _Later(build)
    verbs._name_parser_map[name] = later
    for a in aliases:
        verbs._name_parser_map[a] = later
    return later


class _OnlyVerb:
    def __init__(self, verbs, verb: str | None):
        self._verbs, self._verb = verbs, verb

    def add_parser(self, name: str, **kw):
        aliases = kw.get("aliases", ())
        if self._verb is None or self._verb == name or self._verb in aliases:
            return self._verbs.add_parser(name, **kw)
        add_named(self._verbs, name, help=kw.get("help"), aliases=aliases)
        return _Sink()

    def __getattr__(self, name):
        return getattr(self._verbs, name)


def only_verb(verbs, verb: str | None):
    """``verbs`` (an argparse subparsers action) building the parser of ``verb`` alone.

    Parameters
    ----------
    verbs : argparse._SubParsersAction
        A system's verbs.
    verb : str or None
        The verb to build; None builds every verb (``--help``, an unknown verb).

    Returns
    -------
    object
        With ``add_parser(name, **kw)`` as ``verbs`` has: the real parser for
        ``verb``, for every other name a stub registered under that name and a
        sink for its arguments.

    Example
    -------
    >>> import argparse
    >>> p = argparse.ArgumentParser(prog="x")
    >>> v = only_verb(p.add_subparsers(dest="verb"), None)
    >>> v.add_parser("run") is not None
    True
    """
    return verbs if verb is None else _OnlyVerb(verbs, verb)
