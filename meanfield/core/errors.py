"""The one error type of bad user input, below every other core module.

:class:`ConfigError` lives here (and not in ``meanfield.core.config``, which
re-exports it) so that ``meanfield.core.guard`` can raise it without importing
the config helpers, and the config helpers can use the guards (TOML reading,
excerpts) without an import cycle.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """Bad user input: a one-line message naming the field and what is allowed."""
