"""The induction-head paper's registration (``meanfield.engine.registry``): its command, family and run-file reader."""

from __future__ import annotations

from ...engine import registry

registry.register_command("induction", "meanfield.models.induction.cli:add_parser", order=60)
registry.register_family("induction", params="meanfield.models.induction.config:InductionConfig",
                         build="meanfield.models.induction.description:build",
                         check_options="meanfield.models.induction.config:family_check_options",
                         size_first="meanfield.models.induction.sizes:family_size_first",
                         summary="the induction system as a two-layer description (meanfield model run induction)")
# how open_run and the outcome lines read its run files (no schema check: bounds do not take them)
registry.register_run_check("induction", None, reader="meanfield.models.induction.runfile:READER")
