"""Oymak, Rawat, Soltanolkotabi, Thrampoulidis, "On the role of attention in prompt-tuning" (ICML 2023):
the contextual data (``data``) and the claims (``claims``)."""

from .data import dataset, features  # noqa: F401
