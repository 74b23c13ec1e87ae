"""Data: the UCI regression sets and MNIST, read from a directory a user names, and the minibatch sources that
stream a data set from memory or CSV shards into training (:class:`ArraySource`, :class:`CsvSource`, re-exported
from :mod:`activated_dgp.data.streaming`).

The directory comes from an explicit argument (``--data-dir``) or the environment variable ``ADGP_DATA_DIR``;
:func:`resolve_data_dir` says which, and fails with a clear error when neither names an existing directory.
"""

from __future__ import annotations

from .directory import DATA_DIR_VARIABLE, resolve_data_dir
from .uci import (
    EMBEDDED_DATASET,
    UCI_DATASETS,
    RegressionDataset,
    Split,
    Standardizer,
    download_uci,
    load_boston_embedded,
    load_regression_dataset,
    load_uci,
    load_uci_folder,
    random_splits,
    uci_folder_name,
)

__all__ = ["DATA_DIR_VARIABLE", "resolve_data_dir"]
__all__ += [
    "EMBEDDED_DATASET",
    "UCI_DATASETS",
    "RegressionDataset",
    "Split",
    "Standardizer",
    "download_uci",
    "load_boston_embedded",
    "load_regression_dataset",
    "load_uci",
    "load_uci_folder",
    "random_splits",
    "uci_folder_name",
]

from .mnist import ImageData, load_mnist, read_idx, rotate_images, rotated_test_sets

__all__ += ["ImageData", "load_mnist", "read_idx", "rotate_images", "rotated_test_sets"]

from .streaming import ArraySource, CsvSource

__all__ += ["ArraySource", "CsvSource"]
