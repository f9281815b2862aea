"""meanfield: exact reduced training dynamics of small transformers.

Systems live in subpackages (``meanfield.models.mixture``, ``meanfield.models.induction``);
shared machinery in ``meanfield.core.integrate`` (steppers), ``meanfield.core.io`` (HDF5
run files) and ``meanfield.cli`` (the ``meanfield`` command).
"""

__version__ = "0.1.0"
