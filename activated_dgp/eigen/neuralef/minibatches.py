"""The minibatch order of a NeuralEF fit (Algorithm 1 of Deng et al., 2022, draws minibatches without replacement):
a function of the fit's seed and the step alone, so that a resumed fit draws what the uninterrupted one drew; and the
learning-rate schedules a fit may follow."""

from __future__ import annotations

import numpy as np

SCHEDULES = ("constant", "cosine")


def _minibatches(seed: int, N: int, batch: int, start: int):
    """The row indices of steps start, start + 1, … of a fit: step t takes rows ``(t mod E)·B … + B`` of
    permutation ⌊t / E⌋ (E = ⌊N/B⌋ steps per pass) drawn by ``np.random.default_rng(seed)``, so any step's
    minibatch follows from the seed and t alone (a resumed fit draws what the uninterrupted one drew)."""
    per_pass = N // batch
    rng = np.random.default_rng(seed)
    for _ in range(start // per_pass):
        rng.permutation(N)
    position = start % per_pass
    while True:
        order = rng.permutation(N)
        for index in range(position, per_pass):
            yield order[index * batch : (index + 1) * batch]
        position = 0
