"""Model centers for kernel networks: a random subset of the data, or k-means centroids (EigenPro 3,
Sec. 5 "Flexible choice of model centers", Table 2)."""

from __future__ import annotations

import numpy as np

from ..eigen.ika import kmeans_filters
from .blocks import check_data

__all__ = ["CENTER_METHODS", "choose_centers"]

CENTER_METHODS = ("random", "kmeans")


def choose_centers(X, num_centers: int, method: str = "random", seed: int = 0, iterations: int = 20) -> np.ndarray:
    """Z [p, D]: ``"random"`` — p distinct rows of X [n, D] (ValueError if p > n); ``"kmeans"`` — the
    p centroids of Lloyd's algorithm after k-means++ seeding (``iterations`` Lloyd steps at most), the same
    k-means as IKA's filters (:func:`activated_dgp.eigen.ika.kmeans_filters`).

    Not ``scipy.cluster.vq.kmeans2(minit="++")``: its seeding recomputes the distances of every point to all
    centers chosen so far with ``cdist`` for each new center, O(p² n D) work, which ran for over 30 minutes at
    p = 1,000 on the 5,000 MNIST digits. Here the seeding keeps each point's distance to its closest center
    (O(p n D) in all) and Lloyd's distances are matrix products."""
    X = check_data(X)
    if method not in CENTER_METHODS:
        raise ValueError(f"unknown center method {method!r}; use one of {CENTER_METHODS}")
    if int(num_centers) != num_centers or num_centers < 1:
        raise ValueError(f"num_centers must be a positive integer, got {num_centers!r}")
    p, n = int(num_centers), X.shape[0]
    if p > n:
        raise ValueError(f"cannot choose p = {p} centers from n = {n} data points (more centers than data)")
    rng = np.random.default_rng(seed)
    if method == "random":
        return X[np.sort(rng.choice(n, size=p, replace=False))].copy()
    return kmeans_filters(X, p, seed=seed, iterations=iterations)
