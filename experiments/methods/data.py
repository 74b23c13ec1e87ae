"""The regression splits the methods are fitted on: the UCI sets by name, in one order, and one split standardised on
its training part (:class:`experiments.methods.protocol.SplitData`)."""

from __future__ import annotations

from typing import List, Sequence

from experiments.methods.protocol import SplitData

# small to large (rows), as in the shared data README; the embedded Boston first
DATASET_ORDER = (
    "boston-embedded",
    "yacht",
    "bostonHousing",
    "energy",
    "concrete",
    "wine-quality-red",
    "kin8nm",
    "power-plant",
    "naval-propulsion-plant",
    "protein-tertiary-structure",
)


def canonical_datasets(names: Sequence[str]) -> List[str]:
    """The data folders named by ``names`` (any spelling :func:`activated_dgp.data.uci_folder_name` accepts; default
    the embedded Boston set), each once, in :data:`DATASET_ORDER`."""
    from activated_dgp.data import EMBEDDED_DATASET, uci_folder_name

    canonical = []
    for name in names or [EMBEDDED_DATASET]:
        key = EMBEDDED_DATASET if name.strip().lower() == EMBEDDED_DATASET else uci_folder_name(name)
        if key not in canonical:
            canonical.append(key)
    return in_order(canonical)


def in_order(names) -> List[str]:
    """Dataset names in :data:`DATASET_ORDER` (unknown names last)."""
    return sorted(names, key=lambda n: DATASET_ORDER.index(n) if n in DATASET_ORDER else len(DATASET_ORDER))


def use_fixed(dataset, args) -> bool:
    """The dataset's fixed splits (published or gap) where it has them (the embedded Boston set has none), unless
    ``args.random_splits``."""
    if getattr(args, "random_splits", False):
        return False
    return bool(getattr(args, "fixed_splits", False)) or bool(dataset.splits)


def prepare_split(dataset, split_index: int, args) -> SplitData:
    """Standardised :class:`SplitData` for one split (statistics of the training part only): the dataset's fixed
    split ``split_index`` (:func:`use_fixed`), else seeded random 90/10 splits (seed ``args.seed``)."""
    from activated_dgp.data import Standardizer, random_splits

    if use_fixed(dataset, args):
        split = dataset.split(split_index)
    else:
        split = random_splits(dataset.num_data, split_index + 1, 0.1, args.seed)[split_index]
    sx, sy = Standardizer.fit(dataset.X[split.train]), Standardizer.fit(dataset.y[split.train])
    return SplitData(
        sx.transform(dataset.X[split.train]),
        sy.transform(dataset.y[split.train]),
        sx.transform(dataset.X[split.test]),
        sy.transform(dataset.y[split.test]),
        float(sy.std[0]),
        seed=1000 * args.seed + split_index,
    )
