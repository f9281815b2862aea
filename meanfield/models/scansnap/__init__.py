"""Tian, Wang, Chen, Du, "Scan and Snap" (NeurIPS 2023): data (``data``) and claims (``claims``)."""

from .data import dataset, features  # noqa: F401
