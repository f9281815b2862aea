"""The one error type of bad user input, below every other core module.

:class:`ConfigError` lives here (and not in ``meanfield.core.config``, which
re-exports it) so that ``meanfield.core.guard`` can raise it without importing
the config helpers, and the config helpers can use the guards (TOML reading,
excerpts) without an import cycle.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """Bad user input: a one-line message naming the field and what is allowed.

    Raised with one argument, the message: one line naming the field, the
    value given and the values allowed. The command prints it and exits 2,
    writing nothing; the Python API raises it.

    Examples
    --------
    >>> import meanfield as mf
    >>> try:
    ...     mf.load("docs/examples/majority.toml", no_such_knob=1)
    ... except mf.ConfigError as e:
    ...     print(str(e)[:38])
    parameters: unknown key 'no_such_knob'
    """


#: the signal (SIGINT / SIGTERM) the ``meanfield`` command received while its
#: work runs, or None. The barrier's handler sets it before raising
#: KeyboardInterrupt: third-party code can swallow that exception (a signal
#: landing inside a C extension's module initialisation, e.g. numpy.random's
#: abc registrations during ``import numba``, is cleared there), so a run's
#: Monitor also reads this flag when it starts and stops at once. The barrier
#: clears it when a command starts and ends.
PENDING = {"signal": None}


def raise_if_signalled() -> None:
    """Raise KeyboardInterrupt if the command received SIGINT / SIGTERM whose
    KeyboardInterrupt was swallowed on the way (:data:`PENDING`; e.g. raised
    inside a weakref callback, where Python only reports it): long loops call
    this between their steps, so the signal still stops them.

    Returns
    -------
    None

    Example
    -------
    >>> raise_if_signalled()  # no signal pending: nothing happens
    """
    if PENDING["signal"] is not None:
        raise KeyboardInterrupt(f"signal {PENDING['signal']}")


def is_signal(exc: BaseException) -> bool:
    """Whether ``exc`` is how a SIGINT / SIGTERM reached this code: a
    KeyboardInterrupt, or a SystemError while a signal is pending
    (:data:`PENDING`). The second is the form the barrier's KeyboardInterrupt
    takes when the signal lands while a numba kernel returns ("returned a
    result with an exception set"). Code that writes a valid file on a signal
    catches both and asks this before it treats a SystemError as a bug.

    Parameters
    ----------
    exc : BaseException
        The exception caught.

    Returns
    -------
    bool

    Example
    -------
    >>> is_signal(KeyboardInterrupt()), is_signal(SystemError("a bug, no signal pending"))
    (True, False)
    """
    return isinstance(exc, KeyboardInterrupt) or (isinstance(exc, SystemError) and PENDING["signal"] is not None)
