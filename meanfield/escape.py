"""Old import path, kept as an alias for one release: the module now lives at
``meanfield.core.escape`` (the shared core; see docs/layout.md)."""

import sys

from .core import escape as _module

sys.modules[__name__] = _module
