"""Building only the parser a command line uses.

A new process of ``meanfield mixture sweep ...`` parses one verb, but
building every verb of a system (a few hundred ``add_argument`` calls) costs
milliseconds that a short command waits for. A system's ``add_parser`` may
take ``verb`` (the verb the command line names; ``meanfield.cli`` passes it
when the function accepts it) and add its verbs through :func:`only_verb`:
the named verb is built in full, every other one is registered by name alone
(so that argparse still lists the choices and refuses a wrong one), its
arguments going nowhere.

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


class _OnlyVerb:
    def __init__(self, verbs, verb: str | None):
        self._verbs, self._verb = verbs, verb

    def add_parser(self, name: str, **kw):
        aliases = kw.get("aliases", ())
        if self._verb is None or self._verb == name or self._verb in aliases:
            return self._verbs.add_parser(name, **kw)
        self._verbs.add_parser(name, help=kw.get("help"), aliases=aliases)
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
