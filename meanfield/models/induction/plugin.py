"""The induction-head paper's registration (``meanfield.engine.registry``): its command."""

from __future__ import annotations

from ...engine import registry

registry.register_command("induction", "meanfield.models.induction.cli:add_parser", order=60)
