"""The Gaussian in-context regression papers' registration (``meanfield.engine.registry``):
their claims (``meanfield model check icl_zfb|icl_onestep|icl_saddles|icl_softmax``)."""

from __future__ import annotations

from ...engine import registry

registry.register_claims("icl_zfb", "meanfield.models.icl.zfb:check",
                         "Zhang, Frei, Bartlett (JMLR 2024): global minimum, predictor, covariate shift")
registry.register_claims("icl_onestep", "meanfield.models.icl.onestep:check",
                         "Mahankali et al. (ICLR 2024), Ahn et al. (NeurIPS 2023): one step of preconditioned GD")
registry.register_claims("icl_saddles", "meanfield.models.icl.saddles:check",
                         "Zhang, Singh, Latham, Saxe (ICML 2025): saddle-to-saddle plateaus, scalar ODEs, merged drop")
registry.register_claims("icl_softmax", "meanfield.models.icl.softmax:check",
                         "Chen, Sheen, Wang, Yang (COLT 2024): multi-head softmax, one task and one head per task, "
                         "sampled (not exact)")
registry.register_data_size("meanfield.models.icl.multitask:prompts", size="meanfield.models.icl.multitask:prompts_size")
registry.register_data_size("meanfield.models.icl.multitask:features",
                            feature_count="meanfield.models.icl.multitask:feature_count")
