"""Data: the UCI regression sets and MNIST, read from a directory a user names, and the minibatch sources that
stream a data set from memory or CSV shards into training (:class:`ArraySource`, :class:`CsvSource`, re-exported
from :mod:`activated_dgp.streaming`).

The directory comes from an explicit argument (``--data-dir``) or the environment variable ``ADGP_DATA_DIR``;
:func:`resolve_data_dir` says which, and fails with a clear error when neither names an existing directory.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Union

DATA_DIR_VARIABLE = "ADGP_DATA_DIR"


def resolve_data_dir(data_dir: Optional[Union[str, os.PathLike]] = None, subdirectory: Optional[str] = None) -> Path:
    """The data directory: ``data_dir`` if given, else ``$ADGP_DATA_DIR``; with ``subdirectory`` appended.

    Raises ``FileNotFoundError`` naming the path and where it came from when it does not exist, and
    ``ValueError`` when neither source names one.
    """
    if data_dir is not None:
        root, source = Path(data_dir), "the data_dir argument"
    elif os.environ.get(DATA_DIR_VARIABLE):
        root, source = Path(os.environ[DATA_DIR_VARIABLE]), f"${DATA_DIR_VARIABLE}"
    else:
        raise ValueError(f"no data directory given: pass --data-dir / data_dir=... or set ${DATA_DIR_VARIABLE}")
    path = root / subdirectory if subdirectory else root
    if not path.is_dir():
        raise FileNotFoundError(f"data directory {str(path)!r} (from {source}) does not exist")
    return path


from .uci import (  # noqa: E402  (uci imports resolve_data_dir from here)
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

from .mnist import ImageData, load_mnist, read_idx, rotate_images, rotated_test_sets  # noqa: E402

__all__ += ["ImageData", "load_mnist", "read_idx", "rotate_images", "rotated_test_sets"]

from ..streaming import ArraySource, CsvSource  # noqa: E402

__all__ += ["ArraySource", "CsvSource"]
