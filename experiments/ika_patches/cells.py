"""The cells of the IKA-patches study: one per (filters, sample size S, trial), each fitting IKA and Nyström with the
same n filters and scoring both at every m of ``--ranks``.

IKA (Algorithm 1, :class:`activated_dgp.eigen.IKA`) uses the basis b_i(x) = exp(w_i · x / σ²), which on unit vectors
is κ(x, w_i) up to the constant factor exp(1/σ²): both methods then work in the span of the kernel sections at the
filters, and IKA differs from Nyström (:class:`activated_dgp.eigen.Nystrom`, the filters as landmarks) only in fitting
its eigenfunctions to S samples of the patch distribution instead of to the n landmarks. Both keep their top
eigenpairs in decreasing order, so the approximation with m < n eigenfunctions (§4.3.3) is the first m columns of the
n-eigenfunction one: one fit per cell scores every m.

The preprocessed patches are built once and shared by the cells through the artifact cache (:func:`shared_patches`).
A trial fixes the draws shared by its cells (:func:`draw_trial`): a random order of the training patches (the
samples for S are its first S, so the samples of a smaller S are among those of a larger), the random filters
(drawn among the distinct patches of the smallest S's samples, so the same filters serve every S; the blank patches
of one MNIST image coincide after preprocessing, and repeated landmarks make κ(W, W) singular) and the test patches.
"""

from __future__ import annotations

from dataclasses import dataclass
import time
from typing import Dict, List
import warnings

import gpflow
import numpy as np

from activated_dgp.eigen import IKA, Nystrom, activation_basis, kmeans_filters
from experiments.harness.protocol import Protocol, from_legacy, integers, relabel
from experiments.ika_patches.patches import (GCN_SCALE, PATCH, WHITENING_EPSILON, PatchData, mean_absolute_errors,
                                             patch_data)

KEY = ("filters", "samples", "trial")
FILTERS = ("random", "k-means")
BLOCK_COMMAND = "python -m experiments ika_patches --data-dir ../shared/data"


def add_options(parser) -> None:
    parser.add_argument("--patches", type=int, default=200_000, help="patches cut from the MNIST test images (default %(default)s)")
    parser.add_argument("--samples", type=int, nargs="+", default=[1_000, 5_000, 15_000],
                        help="IKA sample sizes S with random filters; k-means filters at the largest (default %(default)s)")
    parser.add_argument("--trials", type=int, default=5, help="independent draws of samples, filters and test patches (default %(default)s)")
    parser.add_argument("--test", type=int, default=2_000, help="held-out test patches, scored over all pairs (default %(default)s)")
    parser.add_argument("--num-filters", type=int, default=128, help="n, the filters (default %(default)s)")
    parser.add_argument("--ranks", type=int, nargs="+", default=[8, 16, 32, 64, 128],
                        help="numbers m ≤ n of eigenfunctions scored (default %(default)s)")
    parser.add_argument("--kmeans-iterations", type=int, default=25, help="Lloyd steps of the k-means filters (default %(default)s)")


def check_options(options) -> None:
    """ValueError naming the first inconsistent setting."""
    samples, n = sorted(options.samples), options.num_filters
    if options.trials < 1:
        raise ValueError(f"--trials must be ≥ 1, got {options.trials}")
    if n < 1 or samples[0] < n:
        raise ValueError(f"every sample size S must be at least n = {n} (IKA needs S ≥ n), got S = {samples[0]}")
    if not options.ranks or min(options.ranks) < 1 or max(options.ranks) > n:
        raise ValueError(f"--ranks must lie in 1..n = {n}, got {options.ranks}")
    if samples[-1] > int(0.8 * options.patches) or options.test > options.patches - int(0.8 * options.patches):
        raise ValueError(f"{options.patches} patches give {int(0.8 * options.patches)} training and "
                         f"{options.patches - int(0.8 * options.patches)} test patches: too few for S = {samples[-1]} "
                         f"and --test {options.test}")


#: The settings a cell's numbers depend on: (name, its prefix in older records' protocol strings, its type).
SETTINGS = (("patches", "patches", int), ("test", "test", int), ("num_filters", "n", int), ("pool", "pool", int),
            ("ranks", "ranks", integers), ("kmeans_iterations", "kmeans", int), ("seed", "seed", int))


def PROTOCOL(options) -> Protocol:
    """The run's sizes and seed; ``pool`` is the smallest sample (the shared pool of patches), ``ranks`` sorted."""
    return Protocol("1", {"patches": options.patches, "test": options.test, "num_filters": options.num_filters,
                          "pool": min(options.samples), "ranks": sorted(options.ranks),
                          "kmeans_iterations": options.kmeans_iterations, "seed": options.seed})


def upgrade(record: Dict) -> Dict:
    """Records made before the study declared a :class:`Protocol` carry
    ``v1:patches<…>:test<…>:n<…>:pool<…>:ranks<r1-r2-…>:kmeans<…>:seed<…>``."""
    return relabel(record, from_legacy(record.get("protocol"), SETTINGS))


def cells(options) -> List[Dict]:
    check_options(options)
    largest = max(options.samples)
    out = []
    for trial in range(options.trials):
        out += [{"filters": "random", "samples": S, "trial": trial} for S in sorted(options.samples)]
        out.append({"filters": "k-means", "samples": largest, "trial": trial})
    return out


@dataclass
class Draw:
    """A trial's draws: ``sample_rows`` [max S] into the training patches (S samples: the first S),
    ``test_rows`` [T] into the test patches, ``random_filters`` [n, D]."""

    sample_rows: np.ndarray
    test_rows: np.ndarray
    random_filters: np.ndarray


def draw_trial(train: np.ndarray, num_test_pool: int, options, trial: int) -> Draw:
    """The draws of ``trial`` (seeded by ``--seed`` and the trial): see the module docstring."""
    rng = np.random.default_rng([options.seed, 1000 + trial])
    sample_rows = rng.permutation(len(train))[: max(options.samples)]
    test_rows = rng.choice(num_test_pool, size=options.test, replace=False)
    distinct = np.unique(train[sample_rows[: min(options.samples)]], axis=0)
    if len(distinct) < options.num_filters:
        raise ValueError(f"only {len(distinct)} distinct patches among the first {min(options.samples)} samples, "
                         f"fewer than n = {options.num_filters} filters")
    filters = distinct[rng.choice(len(distinct), size=options.num_filters, replace=False)]
    return Draw(sample_rows, test_rows, filters)


def shared_patches(options, context) -> PatchData:
    """The preprocessed patches every cell uses: built once (:func:`patch_data`) and kept in the run's artifact cache
    (``--artifacts``, default .cache/experiments/ika_patches) as an .npz."""
    key = {"patches": options.patches, "seed": options.seed, "size": PATCH, "epsilon": WHITENING_EPSILON, "gcn": GCN_SCALE}

    def save(data: PatchData, path) -> None:
        np.savez(path, train=data.train, test=data.test, sigma2=data.sigma2, duplicates=data.duplicates,
                 num_images=data.num_images)

    def load(path) -> PatchData:
        with np.load(path) as saved:
            return PatchData(saved["train"], saved["test"], float(saved["sigma2"]), float(saved["duplicates"]),
                             int(saved["num_images"]))

    return context.artifacts.get_or_build("patches", key, ".npz", lambda: patch_data(context.data(), options.patches, options.seed),
                                          save, load)


def gram_rank_deficit(K_WW: np.ndarray, relative: float = 1e-10) -> int:
    """How many eigenvalues of κ(W, W) are at most ``relative`` × the largest (numerically zero)."""
    values = np.linalg.eigvalsh(K_WW)
    return int(np.sum(values <= relative * values[-1]))


def run_cell(cell, options, context) -> Dict:
    check_options(options)
    gpflow.config.set_default_float(np.float64)
    start = time.process_time()
    data = shared_patches(options, context)
    draw = draw_trial(data.train, len(data.test), options, cell["trial"])
    samples = data.train[draw.sample_rows[: cell["samples"]]]
    X_test = data.test[draw.test_rows]
    if cell["filters"] == "random":
        W = draw.random_filters
    elif cell["filters"] == "k-means":
        W = kmeans_filters(samples, options.num_filters, seed=cell["trial"], iterations=options.kmeans_iterations, normalise=True)
    else:
        raise ValueError(f"unknown filters {cell['filters']!r}; choose one of {FILTERS}")
    kernel = gpflow.kernels.SquaredExponential(lengthscales=np.sqrt(data.sigma2))
    n, ranks = options.num_filters, sorted(options.ranks)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        ika = IKA(n, activation_basis(W / data.sigma2, "exp", offsets=None)).fit(samples, kernel)
        nystrom = Nystrom(n).fit(W, kernel)
    K = kernel(X_test).numpy()
    record = {
        "ranks": ranks,
        "ika_error": mean_absolute_errors(K, ika.features(X_test).numpy(), ranks),
        "nystrom_error": mean_absolute_errors(K, nystrom.features(X_test).numpy(), ranks),
        "nystrom_zero_eigenvalues": gram_rank_deficit(kernel(W).numpy()),
        "ika_jitter_warning": any(str(w.message).startswith("P̃") for w in caught),
        "sigma2": data.sigma2, "duplicates": data.duplicates, "num_images": data.num_images,
        "num_train": len(data.train), "num_test_pool": len(data.test), "num_test": len(X_test),
        "cpu_seconds": time.process_time() - start, "command": options.command,
    }
    context.progress(f"  {cell['filters']} S={cell['samples']} trial {cell['trial']}: m={ranks[-1]} IKA "
                     f"{record['ika_error'][-1]:.5f}, Nyström {record['nystrom_error'][-1]:.5f}")
    return record
