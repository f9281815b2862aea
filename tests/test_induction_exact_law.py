"""The induction system's data generator (meanfield.models.induction.data, its own
Dirichlet and chain sampler) draws from the exact law of meanfield.engine.twolayer:
the frequency of every sequence of [d]^{L+1} within 5 binomial standard errors, so
the exact population (the finite sum) is the population those runs sample."""

from __future__ import annotations

import numpy as np
import pytest

from meanfield.engine.twolayer import markov_law
from meanfield.models.induction.data import generate


@pytest.mark.parametrize("d,L,pa,alpha", [(2, 4, (1, 2), 0.5), (3, 3, (1,), 1.0), (2, 5, (2,), 2.0)])
def test_generator_frequencies_match_the_exact_law(d, L, pa, alpha):
    N = 200_000
    data = generate(N, d=d, L=L, pa=pa, alpha=alpha, seed=12345)
    law = markov_law(d, L, pa, alpha)
    codes = data.tokens @ (d ** np.arange(L, -1, -1))  # lexicographic code, the law's row order
    freq = np.bincount(codes, minlength=d ** (L + 1)) / N
    se = np.sqrt(law.prob * (1 - law.prob) / N)
    z = np.abs(freq - law.prob) / se
    assert z.max() < 5.0, (z.max(), int(z.argmax()))
