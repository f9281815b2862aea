"""The induction-head system (seed 002, ``docs/conventions.md``).

* :mod:`.data`: in-context n-gram Markov chains (seeded numba generator, HDF5
  data files; the kernel array layout is documented there);
* :mod:`.model`: the plain-numpy oracle of TF(M, H, d, D) (copier, selector,
  classifier; conventions, subset order, log(0) guard; the paper's loss and
  the official code's ``official-ce``);
* :mod:`.description`, :mod:`.generic`: the model as the engine's generic two-layer network (what every
  run trains on; the hand kernels that ran it are retired to ``benchmarks/induction_hand_kernels.py``);
* :mod:`.config`, :mod:`.run`, :mod:`.cli`: validated configs, training runs
  (any grouping and order of the phases c, w, a, or joint; GD or gradient
  flow; fixed data, fresh batches or mini-batch SGD) written as HDF5 run
  files, and ``meanfield induction run|data|chi2|check|plot|full``;
* :mod:`.full`: the official code's full two-layer transformer (query-key,
  output-value, layer norm) with a hand backward pass, and the study that
  trains it next to the simplified model;
* :mod:`.theory`: exact stationary laws, the modified chi-square mutual
  information I~(S) over lag subsets, the GIH / Bayes / unigram predictors;
* :mod:`.claims`, :mod:`.suite`, :mod:`.plot`: the paper's claims as checkers, the
  ``check`` suite; figures of run files.

What belongs here: this paper's own model, data, theory, claims,
figures and its command (registered in ``plugin``). What does not: generic
machinery (``meanfield.core``: the harness, run files, integrators, guards)
and anything of another paper: this package imports core (and engine) only.
"""
