"""Old import path, kept as an alias for one release: the module now lives at
``meanfield.core.ensemble_plot`` (sweep.h5 of any system's chunked sweep)."""

import sys

from ..core import ensemble_plot as _module

sys.modules[__name__] = _module
