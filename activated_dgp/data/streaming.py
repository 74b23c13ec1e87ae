"""Training data that need not fit in memory: arrays, NumPy memmaps, CSV shards and ``tf.data`` datasets
as a stream of global minibatches, sliced per replica under a ``tf.distribute`` strategy.

Every source is read in *blocks* (row ranges of an array or memmap, or CSV shard files). One epoch
visits the blocks in a seeded random order, ``window_blocks`` at a time; the rows of a window are
shuffled and cut into global batches of G rows, a remainder carried into the next window. Memory is
O(window), independent of N. A global batch b is the same set of rows whatever the number of
replicas R: replica r takes rows [r·G/R, (r+1)·G/R) of it, so a run on R replicas follows the same
trajectory as one on a single device (to round-off), which is what the ``tf.distribute`` tests check.

The minibatch ELBO of a DGP with ``num_data`` = N (gpflux's training loss, per data point):

    L_B = −(1/G) Σ_(i∈B) E_q[log p(y_i | f_i)] + (1/N) Σ_ℓ KL[q(u_ℓ) ‖ p(u_ℓ)],

so −N·L_B is an unbiased estimate of the ELBO; N comes from the model (``DeepGP.num_data`` and each
layer's ``num_data``), never from the batch. Under a strategy see :mod:`activated_dgp.training.distributed`.
"""

from __future__ import annotations

import contextlib
import csv
import math
import re
from pathlib import Path
from typing import Iterator, Optional, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf

__all__ = ["ArraySource", "CsvSource", "DatasetSource", "as_source", "global_batches", "replica_batches", "data_errors"]

#: Prefix of errors raised inside an input pipeline, turned back into a ValueError by the trainers.
DATA_ERROR = "activated_dgp data error: "


def _finite_rows(X: np.ndarray, Y: np.ndarray, first_row: int, where: str) -> None:
    """Raise (with the rows, counted from ``first_row``, of ``where``) on NaN or inf in a block."""
    for name, array in (("X", X), ("Y", Y)):
        bad = ~np.all(np.isfinite(array), axis=1)
        if np.any(bad):
            rows = (first_row + np.flatnonzero(bad)[:5]).tolist()
            raise ValueError(f"{DATA_ERROR}{name} contains NaN or inf in rows {rows} of {where}")


@contextlib.contextmanager
def data_errors():
    """Turn an error raised inside an input pipeline by these sources (a TensorFlow OpError carrying
    :data:`DATA_ERROR`) back into a ValueError with the same message."""
    try:
        yield
    except tf.errors.OpError as error:
        found = re.search(re.escape(DATA_ERROR) + r"([^\n]*)", error.message)
        if found is None:
            raise
        raise ValueError(found.group(1).strip()) from None


class _BlockSource:
    """A data set of ``num_data`` rows (x [D], y [P]) readable in ``num_blocks`` blocks."""

    num_data: int
    input_dim: int
    output_dim: int
    num_blocks: int

    def read_block(self, index: int) -> Tuple[np.ndarray, np.ndarray]:  # pragma: no cover - interface
        raise NotImplementedError

    def epoch(self, batch_size: int, seed: int, epoch: int, *, window_blocks: int = 8, drop_remainder: bool = False) -> Iterator[Tuple[np.ndarray, np.ndarray]]:
        """The global batches (x [G, D], y [G, P]) of one epoch: blocks in a random order seeded by
        (seed, epoch), rows shuffled within windows of ``window_blocks`` blocks; the last partial batch is
        yielded unless ``drop_remainder``. Batches per epoch: :meth:`batches_per_epoch`."""
        rng = np.random.default_rng([seed, epoch])
        order = rng.permutation(self.num_blocks)
        carry_x = np.empty((0, self.input_dim))
        carry_y = np.empty((0, self.output_dim))
        for start in range(0, len(order), window_blocks):
            parts = [self.read_block(int(b)) for b in order[start : start + window_blocks]]
            X = np.concatenate([carry_x] + [p[0] for p in parts])
            Y = np.concatenate([carry_y] + [p[1] for p in parts])
            shuffle = rng.permutation(len(X))
            X, Y = X[shuffle], Y[shuffle]
            full = len(X) - len(X) % batch_size
            for row in range(0, full, batch_size):
                yield X[row : row + batch_size], Y[row : row + batch_size]
            carry_x, carry_y = X[full:], Y[full:]
        if len(carry_x) and not drop_remainder:
            yield carry_x, carry_y

    def batches_per_epoch(self, batch_size: int, drop_remainder: bool = False) -> int:
        return self.num_data // batch_size if drop_remainder else math.ceil(self.num_data / batch_size)

    def sample_rows(self, count: int, seed: int, max_blocks: int = 4) -> Tuple[np.ndarray, np.ndarray]:
        """At most ``count`` rows drawn without replacement (seeded) from at most ``max_blocks`` blocks chosen
        at random (seeded): a fixed subset read in constant memory, e.g. for stage 2's ELBO guard."""
        rng = np.random.default_rng(seed)
        blocks = rng.permutation(self.num_blocks)[:max_blocks]
        parts = [self.read_block(int(b)) for b in np.sort(blocks)]
        X, Y = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
        rows = np.sort(rng.choice(len(X), min(count, len(X)), replace=False))
        return X[rows], Y[rows]


class ArraySource(_BlockSource):
    """Rows of two arrays X [N, D], Y [N, P] (NumPy arrays or memmaps, e.g. ``np.load(path, mmap_mode="r")``)
    in blocks of ``block_rows`` consecutive rows; only the rows of one window are ever in memory."""

    def __init__(self, X, Y, block_rows: int = 8192):
        X = X if hasattr(X, "shape") else np.asarray(X)
        Y = Y if hasattr(Y, "shape") else np.asarray(Y)
        if X.ndim != 2 or Y.ndim != 2 or X.shape[0] != Y.shape[0]:
            raise ValueError(f"X must be [N, D] and Y [N, P] with the same N, got {X.shape} and {Y.shape}")
        if len(X) == 0:
            raise ValueError("the training data have no rows")
        if block_rows < 1:
            raise ValueError(f"block_rows must be ≥ 1, got {block_rows}")
        self.X, self.Y, self.block_rows = X, Y, int(block_rows)
        self.num_data, self.input_dim, self.output_dim = len(X), X.shape[1], Y.shape[1]
        self.num_blocks = math.ceil(self.num_data / self.block_rows)

    @classmethod
    def from_npy(cls, x_path, y_path, block_rows: int = 8192) -> "ArraySource":
        """Two ``.npy`` files (written e.g. with ``np.lib.format.open_memmap``), read block by block with
        plain file reads: unlike a memmap, whose touched pages stay resident, the RSS stays O(window)."""
        return cls(NpyRows(x_path), NpyRows(y_path), block_rows)

    def read_block(self, index: int) -> Tuple[np.ndarray, np.ndarray]:
        start = index * self.block_rows
        X = np.asarray(self.X[start : start + self.block_rows], dtype=np.float64)
        Y = np.asarray(self.Y[start : start + self.block_rows], dtype=np.float64)
        _finite_rows(X, Y, start, "the data")
        return X, Y


class NpyRows:
    """Rows of a 2-D C-ordered ``.npy`` file read on demand (``rows[start:stop]`` → ndarray); ``shape``, ``ndim``.

    ``np.load(mmap_mode="r")`` reads the header (shape, dtype, data offset) without touching the data; the rows
    are then read with plain file reads, so that, unlike slicing the memmap, whose touched pages stay resident,
    the process's resident memory stays O(one window) however many windows are read."""

    def __init__(self, path):
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"no such .npy file: {path}")
        mapped = np.load(self.path, mmap_mode="r", allow_pickle=False)
        if mapped.ndim != 2 or not mapped.flags.c_contiguous:
            order = " (Fortran order)" if mapped.ndim == 2 else ""
            raise ValueError(f"{path} must hold a C-ordered matrix [N, D], got shape {mapped.shape}{order}")
        self.shape, self.ndim, self.dtype, self.offset = tuple(mapped.shape), 2, mapped.dtype, int(mapped.offset)
        del mapped

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows: slice) -> np.ndarray:
        start, stop, _ = rows.indices(self.shape[0])
        count = max(stop - start, 0) * self.shape[1]
        offset = self.offset + start * self.shape[1] * self.dtype.itemsize
        return np.fromfile(self.path, dtype=self.dtype, count=count, offset=offset).reshape(-1, self.shape[1])


class CsvSource(_BlockSource):
    """CSV shards, one block per file: each row holds D inputs then P targets (the last ``targets``
    columns), numbers only; ``header=True`` skips each file's first line. N is counted in one pass over
    the files (constant memory) unless ``num_data`` is given."""

    def __init__(self, paths: Sequence[Union[str, Path]], targets: int = 1, *, header: bool = False, num_data: Optional[int] = None):
        self.paths = [Path(p) for p in paths]
        if not self.paths:
            raise ValueError("no CSV shards given")
        for path in self.paths:
            if not path.is_file():
                raise FileNotFoundError(f"no such CSV shard: {path}")
        self.header, self.output_dim, self.num_blocks = bool(header), int(targets), len(self.paths)
        with open(self.paths[0], newline="") as handle:
            rows = csv.reader(handle)
            if self.header:
                next(rows, None)
            first = next(rows, None)
        if first is None:
            raise ValueError(f"the CSV shard {self.paths[0]} has no data rows")
        self.input_dim = len(first) - self.output_dim
        if self.input_dim < 1 or self.output_dim < 1:
            raise ValueError(f"{self.paths[0]} has {len(first)} columns; cannot split off {targets} target columns")
        self.num_data = int(num_data) if num_data is not None else sum(self._count(p) for p in self.paths)

    def _count(self, path: Path) -> int:
        with open(path, "rb") as handle:
            lines = sum(1 for line in handle if line.strip())
        return lines - (1 if self.header else 0)

    def read_block(self, index: int) -> Tuple[np.ndarray, np.ndarray]:
        path = self.paths[index]
        try:
            table = np.loadtxt(path, delimiter=",", skiprows=1 if self.header else 0, ndmin=2, dtype=np.float64)
        except ValueError as error:
            raise ValueError(f"{DATA_ERROR}cannot parse {path} as numbers: {error}") from None
        if table.shape[1] != self.input_dim + self.output_dim:
            raise ValueError(f"{DATA_ERROR}{path} has {table.shape[1]} columns, expected {self.input_dim + self.output_dim}")
        X, Y = table[:, : self.input_dim], table[:, self.input_dim :]
        _finite_rows(X, Y, 0, str(path))
        return X, Y


class DatasetSource:
    """A user's ``tf.data.Dataset`` of (x, y) pairs (or {"inputs": x, "targets": y}), unbatched (x [D])
    or batched (x [B, D]); rebatched to global batches. It is not shuffled here (shuffle it yourself);
    it is repeated for every epoch. ``num_data`` is the true N (the dataset's cardinality, when known,
    must agree)."""

    def __init__(self, dataset: tf.data.Dataset, num_data: int, input_dim: Optional[int] = None):
        spec = dataset.element_spec
        if isinstance(spec, dict) and set(spec) == {"inputs", "targets"}:
            dataset, spec = dataset.map(lambda d: (d["inputs"], d["targets"])), (spec["inputs"], spec["targets"])
        if not (isinstance(spec, tuple) and len(spec) == 2 and all(isinstance(s, tf.TensorSpec) for s in spec)):
            raise ValueError(f"a training dataset must yield (x, y) pairs of tensors or {{'inputs', 'targets'}} dicts, got element_spec {spec}")
        x_spec, y_spec = spec
        if x_spec.shape.rank not in (1, 2) or x_spec.shape.rank != y_spec.shape.rank:
            raise ValueError(f"dataset elements must be x [D], y [P] (or batches x [B, D], y [B, P]), got shapes {x_spec.shape} and {y_spec.shape}")
        if x_spec.shape.rank == 2:
            dataset = dataset.unbatch()
        width = x_spec.shape[-1]
        if width is None or y_spec.shape[-1] is None:
            raise ValueError(f"dataset elements need a known width, got x {x_spec.shape} and y {y_spec.shape}")
        if input_dim is not None and width != input_dim:
            raise ValueError(f"dataset inputs have {width} columns but the model takes {input_dim}")
        cardinality = int(dataset.cardinality())
        if cardinality >= 0 and cardinality != num_data:
            raise ValueError(f"the dataset has {cardinality} rows but num_data is {num_data}; the ELBO must be scaled by the true N")
        self.dataset, self.num_data, self.input_dim, self.output_dim = dataset, int(num_data), int(width), int(y_spec.shape[-1])

    def batches_per_epoch(self, batch_size: int, drop_remainder: bool = False) -> int:
        return self.num_data // batch_size if drop_remainder else math.ceil(self.num_data / batch_size)

    def sample_rows(self, count: int, seed: int) -> Tuple[np.ndarray, np.ndarray]:
        """The dataset's first ``count`` rows (a dataset cannot be indexed; ``seed`` is unused): the subset
        is only as random as the dataset's own order."""
        X, Y = zip(*[(x.numpy(), y.numpy()) for x, y in self.dataset.take(count)])
        return np.asarray(X, dtype=np.float64), np.asarray(Y, dtype=np.float64)


def as_source(X, Y=None, *, num_data: Optional[int] = None, input_dim: Optional[int] = None):
    """A source from what :func:`activated_dgp.train_dgp` accepts: a tf.data.Dataset (``Y`` None), a
    source object, or arrays / memmaps X [N, D], Y [N, P]."""
    if isinstance(X, tf.data.Dataset):
        if Y is not None:
            raise ValueError("give either a tf.data.Dataset of (x, y) pairs or arrays X and Y, not a dataset and Y")
        if num_data is None:
            raise ValueError("training on a tf.data.Dataset needs num_data, the true number of rows")
        return DatasetSource(X, num_data, input_dim)
    if isinstance(X, (_BlockSource, DatasetSource)):
        source = X
    else:
        if Y is None:
            raise ValueError("targets Y are missing")
        source = ArraySource(X, Y)
    if input_dim is not None and source.input_dim != input_dim:
        raise ValueError(f"the data have {source.input_dim} input columns but the model takes {input_dim}")
    if num_data is not None and source.num_data != num_data:
        raise ValueError(f"the data have {source.num_data} rows but num_data is {num_data}")
    return source


def _finite_batch(x: tf.Tensor, y: tf.Tensor):
    x = tf.debugging.assert_all_finite(x, f"{DATA_ERROR}X contains NaN or inf")
    y = tf.debugging.assert_all_finite(y, f"{DATA_ERROR}Y contains NaN or inf")
    return x, y


def global_batches(source, batch_size: int, *, seed: int = 0, drop_remainder: bool = False, window_blocks: int = 8) -> tf.data.Dataset:
    """An endless dataset of global batches (x [G, D], y [G, P]) float64, epoch after epoch."""
    dtype = tf.float64
    if isinstance(source, DatasetSource):
        dataset = source.dataset.map(lambda x, y: (tf.cast(x, dtype), tf.cast(y, dtype)))
        return dataset.batch(batch_size, drop_remainder=drop_remainder).map(_finite_batch).repeat()

    def generate():
        epoch = 0
        while True:
            yield from source.epoch(batch_size, seed, epoch, window_blocks=window_blocks, drop_remainder=drop_remainder)
            epoch += 1

    signature = (tf.TensorSpec([None, source.input_dim], dtype), tf.TensorSpec([None, source.output_dim], dtype))
    return tf.data.Dataset.from_generator(generate, output_signature=signature)


def replica_batches(dataset: tf.data.Dataset, batch_size: int, num_replicas: int, pipeline: int = 0, num_pipelines: int = 1) -> tf.data.Dataset:
    """From global batches of G rows, the per-replica batches of input pipeline ``pipeline``: replica r
    (of R = ``num_replicas``) takes rows [r·G/R, (r+1)·G/R); a pipeline serving R/P replicas yields their
    slices in replica order (how ``tf.distribute`` hands a pipeline's elements to its replicas)."""
    local = batch_size // num_replicas
    per_pipeline = num_replicas // num_pipelines
    start = pipeline * per_pipeline * local

    def split(x, y):
        x = tf.reshape(x[start : start + per_pipeline * local], [per_pipeline, local, x.shape[-1]])
        y = tf.reshape(y[start : start + per_pipeline * local], [per_pipeline, local, y.shape[-1]])
        return tf.data.Dataset.from_tensor_slices((x, y))

    return dataset.flat_map(split)
