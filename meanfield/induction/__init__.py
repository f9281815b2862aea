"""The induction-head system (seed 002, ``docs/conventions.md``).

* :mod:`.data`: in-context n-gram Markov chains (seeded numba generator, HDF5
  data files; the kernel array layout is documented there);
* :mod:`.model`: the plain-numpy oracle of TF(M, H, d, D) (copier, selector,
  classifier; conventions, subset order, log(0) guard);
* :mod:`.kernels`: numba batch loss and gradients, the GD map;
* :mod:`.config`, :mod:`.run`, :mod:`.cli`: validated configs, training runs
  (three-phase or joint; GD or gradient flow; fixed or fresh data) written as
  HDF5 run files, and ``meanfield induction run|data|chi2|check|plot``;
* :mod:`.theory`: exact stationary laws, the modified chi-square mutual
  information I~(S) over lag subsets, the GIH / Bayes / unigram predictors;
* :mod:`.claims`, :mod:`.plot`: the paper's claims as checkers and the
  ``check`` suite; figures of run files.
"""
