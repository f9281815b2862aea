"""Old import path, kept as an alias for one release: the module now lives at
``meanfield.core.config`` (the shared core; see docs/layout.md)."""

import sys

from .core import config as _module

sys.modules[__name__] = _module
