"""The data of IKA §4 and its error measure: whitened unit-length image patches, the Gaussian kernel's scale, and the
mean absolute error of a low-rank approximation (Ronchetti, "IKA: Independent Kernel Approximator", §4 and §4.1).

Preprocessing (§4.1), each step a function of its own:

1. :func:`global_contrast_normalise`, per image Ĩ [H, W] with pixels 0..255: I = (Ĩ − mean Ĩ) / √(var Ĩ + 10);
2. :func:`patch_positions` / :func:`extract_patches`: P × P patches at random locations (image and corner uniform);
3. :func:`pca_whiten`: z = diag(λ + ε)^(−½) Uᵀ (x − m), with m the patches' mean and U diag(λ) Uᵀ their covariance
   (divisor N), so that Cov z = diag(λ / (λ + ε)); the paper does not state ε, :data:`WHITENING_EPSILON` here;
4. :func:`unit_length`: each patch divided by its Euclidean norm.

:func:`patch_data` runs them on the MNIST test images (the stand-in for STL-10) and splits 80/20 into training and
test patches (§4.1). The kernel is the Gaussian κ(x, y) = exp(−‖x − y‖² / (2σ²)) with σ² the 10th percentile of
‖x − y‖² (§4, :func:`kernel_scale`), and an approximation κ(x, y) ≈ φ(x)·φ(y) is scored by
:func:`mean_absolute_errors`, the mean of |κ(x, y) − φ(x)·φ(y)| over all pairs of held-out test patches (§4.3: the
"absolute error" whose mean reduction the paper reports), for each leading m columns of φ.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from activated_dgp.data.mnist import load_mnist

PATCH = 7
WHITENING_EPSILON = 0.1
GCN_SCALE = 10.0
TRAIN_SHARE = 0.8
SCALE_PERCENTILE = 10.0
SCALE_PAIRS = 200_000


def _finite_array(values, what: str, ndim: int) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != ndim:
        raise ValueError(f"{what} must have {ndim} dimensions, got shape {values.shape}")
    if not np.all(np.isfinite(values)):
        raise ValueError(f"{what} contain NaN or inf")
    return values


def global_contrast_normalise(images, scale: float = GCN_SCALE) -> np.ndarray:
    """I = (Ĩ − mean Ĩ) / √(var Ĩ + scale) per image (§4.1 step 1; mean and variance over the image's pixels).

    :param images: [N, H, W].
    :returns: [N, H, W], float64.
    """
    images = _finite_array(images, "the images", 3)
    if scale <= 0:
        raise ValueError(f"the GCN scale must be positive, got {scale}")
    mean = images.mean(axis=(1, 2), keepdims=True)
    variance = images.var(axis=(1, 2), keepdims=True)
    return (images - mean) / np.sqrt(variance + scale)


def patch_positions(rng: np.random.Generator, num_images: int, height: int, width: int, num_patches: int,
                    size: int = PATCH):
    """(image, row, column) [num_patches] each: uniform images and top-left corners of size × size patches."""
    if size < 1 or size > min(height, width):
        raise ValueError(f"a {size} × {size} patch does not fit a {height} × {width} image")
    if num_patches < 1 or num_images < 1:
        raise ValueError(f"need at least one image and one patch, got {num_images} images, {num_patches} patches")
    which = rng.integers(num_images, size=num_patches)
    rows = rng.integers(height - size + 1, size=num_patches)
    columns = rng.integers(width - size + 1, size=num_patches)
    return which, rows, columns


def extract_patches(images, which, rows, columns, size: int = PATCH) -> np.ndarray:
    """Patch p = images[which_p, rows_p : rows_p + size, columns_p : columns_p + size], flattened row by row:
    [num_patches, size²]."""
    images = np.asarray(images, dtype=np.float64)
    offsets = np.arange(size)
    patches = images[np.asarray(which)[:, None, None], np.asarray(rows)[:, None, None] + offsets[None, :, None],
                     np.asarray(columns)[:, None, None] + offsets[None, None, :]]
    return patches.reshape(len(patches), size * size)


def pca_whiten(X, epsilon: float = WHITENING_EPSILON) -> np.ndarray:
    """z = diag(λ + ε)^(−½) Uᵀ (x − m) for every row x of X [N, D] (§4.1 step 3), with m the mean of the rows and
    U diag(λ) Uᵀ = (1/N) Σ (x − m)(x − m)ᵀ; the whitened rows have covariance diag(λ / (λ + ε)) (the identity for
    ε = 0 and a covariance of full rank).

    :returns: [N, D] in the eigenbasis U (the Gaussian kernel is invariant to that rotation).
    """
    X = _finite_array(X, "the patches", 2)
    if epsilon < 0:
        raise ValueError(f"the whitening epsilon must be ≥ 0, got {epsilon}")
    if len(X) < 2:
        raise ValueError(f"whitening needs at least 2 patches, got {len(X)}")
    centred = X - X.mean(axis=0)
    values, vectors = np.linalg.eigh(centred.T @ centred / len(X))
    values = np.maximum(values, 0.0)  # round-off below zero
    if epsilon == 0 and values.min() <= 0:
        raise ValueError("the patch covariance is singular: whitening without epsilon would divide by zero")
    return (centred @ vectors) / np.sqrt(values + epsilon)


def unit_length(X) -> np.ndarray:
    """Every row of X [N, D] divided by its Euclidean norm (§4.1 step 4); a zero row is a ValueError."""
    X = _finite_array(X, "the patches", 2)
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    if np.any(norms == 0):
        raise ValueError(f"{int(np.sum(norms == 0))} patch(es) are zero and have no direction")
    return X / norms


def kernel_scale(X, rng: np.random.Generator, num_pairs: int = SCALE_PAIRS, percentile: float = SCALE_PERCENTILE) -> float:
    """σ² = the ``percentile``-th percentile of ‖x − y‖² over ``num_pairs`` random pairs of rows of X (§4). Pairs at
    distance zero (identical patches, e.g. blank background) are left out."""
    X = _finite_array(X, "the patches", 2)
    pairs = rng.integers(len(X), size=(2, int(num_pairs)))
    distances = np.sum((X[pairs[0]] - X[pairs[1]]) ** 2, axis=1)
    distances = distances[distances > 0]
    if distances.size == 0:
        raise ValueError("all sampled pairs of patches coincide: the kernel scale is undefined")
    return float(np.percentile(distances, percentile))


@dataclass
class PatchData:
    """Whitened unit-length patches split 80/20, the kernel scale σ² (from the training patches) and the share of
    training patches that repeat another one exactly."""

    train: np.ndarray
    test: np.ndarray
    sigma2: float
    duplicates: float
    num_images: int


def preprocess(images, num_patches: int, seed: int, size: int = PATCH, epsilon: float = WHITENING_EPSILON) -> PatchData:
    """§4.1 on ``images`` [N, H, W] (pixels 0..255): GCN, ``num_patches`` random patches, PCA whitening, unit length,
    the first 80 % of the (randomly placed) patches for training and the rest for testing, σ² from the training part."""
    images = _finite_array(images, "the images", 3)
    if num_patches < 10:
        raise ValueError(f"need at least 10 patches for an 80/20 split, got {num_patches}")
    rng = np.random.default_rng(seed)
    normalised = global_contrast_normalise(images)
    which, rows, columns = patch_positions(rng, len(images), images.shape[1], images.shape[2], num_patches, size)
    Z = unit_length(pca_whiten(extract_patches(normalised, which, rows, columns, size), epsilon))
    split = int(TRAIN_SHARE * num_patches)
    train, test = Z[:split], Z[split:]
    sigma2 = kernel_scale(train, np.random.default_rng([seed, 1]))
    duplicates = 1.0 - len(np.unique(train, axis=0)) / len(train)
    return PatchData(train, test, sigma2, float(duplicates), len(images))


def patch_data(data_dir, num_patches: int, seed: int) -> PatchData:
    """:func:`preprocess` on the 10,000 official MNIST test images found in ``data_dir`` (its ``mnist/`` folder)."""
    images = load_mnist(data_dir, embedded_train=True).x_test
    return preprocess(np.asarray(images, dtype=np.float64).reshape(-1, 28, 28), num_patches, seed)


def mean_absolute_errors(K, Phi, ranks: Sequence[int]) -> list:
    """mean over all entries of |K − Φ_m Φ_mᵀ| for each m in ``ranks``, Φ_m the first m columns of Φ.

    :param K: the kernel on the test patches, [T, T].
    :param Phi: the approximation's features φ(x) on the same patches, [T, k] (columns by decreasing eigenvalue).
    """
    K, Phi = np.asarray(K, dtype=np.float64), np.asarray(Phi, dtype=np.float64)
    if K.ndim != 2 or K.shape[0] != K.shape[1] or Phi.ndim != 2 or Phi.shape[0] != K.shape[0]:
        raise ValueError(f"K must be [T, T] and Phi [T, k], got {K.shape} and {Phi.shape}")
    if any(int(m) < 1 or int(m) > Phi.shape[1] for m in ranks):
        raise ValueError(f"ranks {list(ranks)} must lie in 1..{Phi.shape[1]}")
    return [float(np.mean(np.abs(K - Phi[:, :m] @ Phi[:, :m].T))) for m in map(int, ranks)]
