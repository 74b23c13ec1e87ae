"""The covariate-shifted ("slab") and half-shifted ("mixed") validation parts of split_validation, and the ``slab``
stage-2 recipe.

Truths: the slab rule recomputed here with numpy (sort along the coordinate, a contiguous block), and for image
inputs the first principal component computed here by numpy's SVD.
"""

import warnings

import numpy as np
import pytest
import tf_keras

from activated_dgp import train_two_stage
from activated_dgp.training import TrainingSchedule, split_validation, stage2_recipe


def _which_feature(X, X_val):
    """The feature along which X_val is a contiguous block of X's sorted values (None if there is none)."""
    for k in range(X.shape[1]):
        low, high = X_val[:, k].min(), X_val[:, k].max()
        inside = np.sum((X[:, k] >= low) & (X[:, k] <= high))
        if inside == len(X_val):
            return k
    return None


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_slab_is_a_contiguous_block_along_one_feature_between_fit_rows(seed):
    rng = np.random.default_rng(10 + seed)
    X = rng.normal(size=(400, 4))
    Y = rng.normal(size=(400, 1))
    (X_fit, Y_fit), (X_val, Y_val) = split_validation(X, Y, 0.1, seed=seed, kind="slab")
    assert len(X_val) == 40 and len(X_fit) == 360
    k = _which_feature(X, X_val)
    assert k is not None  # no fit row lies inside the slab's range along feature k (continuous data: no ties)
    low, high = X_val[:, k].min(), X_val[:, k].max()
    assert not np.any((X_fit[:, k] >= low) & (X_fit[:, k] <= high))
    # the slab is centred at a quantile in [0.25, 0.75]: fit rows on both sides, at least a fifth of the rows each
    assert np.sum(X_fit[:, k] < low) >= 80 and np.sum(X_fit[:, k] > high) >= 80
    # rows stay paired with their targets, and nothing is lost or repeated
    rows = {tuple(r) for r in np.concatenate([X, Y], 1)}
    assert rows == {tuple(r) for r in np.concatenate([np.concatenate([X_fit, Y_fit], 1), np.concatenate([X_val, Y_val], 1)])}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_mixed_part_is_half_a_slab_and_half_random_rows_from_outside_it(seed):
    rng = np.random.default_rng(20 + seed)
    X = rng.normal(size=(401, 3))
    Y = np.arange(401.0)[:, None]  # the row index: which rows went where
    (X_fit, Y_fit), (X_val, Y_val) = split_validation(X, Y, 0.1, seed=seed, kind="mixed")
    assert len(X_val) == 40 and len(X_fit) == 361
    # nothing lost or repeated, rows kept with their targets
    assert sorted(np.concatenate([Y_fit, Y_val])[:, 0].astype(int)) == list(range(401))
    assert np.array_equal(X[np.concatenate([Y_fit, Y_val])[:, 0].astype(int)], np.concatenate([X_fit, X_val]))
    # the first 20 validation rows: a contiguous block along one feature (no fit row, and none of the other 20
    # validation rows, inside its range), with fit rows on both sides
    slab, rest = X_val[:20], X_val[20:]
    k = _which_feature(X, slab)
    assert k is not None
    low, high = slab[:, k].min(), slab[:, k].max()
    assert not np.any((X_fit[:, k] >= low) & (X_fit[:, k] <= high))
    assert np.sum(X[:, k] < low) >= 80 and np.sum(X[:, k] > high) >= 80
    # the other 20 spread over the feature's whole range, as a random subset of the rows outside the slab does:
    # in the block's sorted order they are not contiguous (a contiguous run of 20 random rows out of 381 has
    # probability ~1e-30)
    ranks = np.searchsorted(np.sort(X[:, k]), rest[:, k])
    assert ranks.max() - ranks.min() > 100


def test_an_image_slab_is_contiguous_along_the_first_principal_component():
    rng = np.random.default_rng(0)
    images = rng.normal(size=(300, 6, 6, 1)) + rng.normal(size=(300, 1, 1, 1)) * np.linspace(0, 3, 36).reshape(1, 6, 6, 1)
    labels = rng.integers(0, 3, size=(300, 1))
    (X_fit, _), (X_val, _) = split_validation(images, labels, 0.2, seed=4, kind="slab")
    flat = images.reshape(300, -1)
    _, _, vt = np.linalg.svd(flat - flat.mean(0), full_matrices=False)
    score = lambda x: x.reshape(len(x), -1) @ vt[0]  # noqa: E731
    low, high = np.sort(score(X_val))[[0, -1]]
    assert len(X_val) == 60
    assert not np.any((score(X_fit) > low + 1e-9) & (score(X_fit) < high - 1e-9))


def test_bad_splits_name_the_problem():
    X, Y = np.zeros((10, 2)), np.zeros((10, 1))
    with pytest.raises(ValueError, match="validation split must be one of 'random', 'slab', 'mixed'"):
        split_validation(X, Y, 0.2, kind="gap")
    with pytest.raises(ValueError, match="needs an input feature with at least three distinct values"):
        split_validation(X, Y, 0.2, kind="slab")
    with pytest.raises(ValueError, match="validation_split must be one of"):
        stage2_recipe("validation", validation_split="middle")


@pytest.mark.parametrize("recipe", ["slab", "mixed"])
def test_the_shifted_recipes_hold_out_their_part_and_name_themselves(recipe):
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, size=(200, 2))
    Y = np.sin(X[:, :1]) + 0.05 * rng.normal(size=(200, 1))
    tf_keras.utils.set_random_seed(0)
    network = tf_keras.Sequential([tf_keras.Input((2,)), tf_keras.layers.Dense(8, "softplus"), tf_keras.layers.Dense(1)])
    network.compile("adam", "mse")
    network.fit(X, Y, epochs=5, verbose=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        result = train_two_stage(X, Y, network=network, recipe=recipe, seed=3, dgp_schedule=TrainingSchedule(epochs=1, verbose=0))
    assert result.recipe == recipe
    # the DGP trained on the fit part only: the part's 20 rows, as split_validation cuts them with the same seed
    (X_fit, _), _ = split_validation(X, Y, 0.1, seed=3, kind=recipe)
    assert result.dgp.num_data == len(X_fit) == 180
