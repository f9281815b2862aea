"""Old import path, kept as an alias for one release: the module now lives at
``meanfield.core.ensemble_cli`` (the shared core; see docs/layout.md)."""

import sys

from .core import ensemble_cli as _module

sys.modules[__name__] = _module
