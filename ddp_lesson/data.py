"""Data sets for the lesson, all available offline.

The training data is scikit-learn's copy of the UCI handwritten digits: 1797
images of 8x8 pixels, shipped inside the scikit-learn package, so nothing is
downloaded at run time.
"""

from __future__ import annotations

import gzip
import importlib.util
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import TensorDataset

from .validate import flag, whole_number

#: Fraction of the digits kept aside to measure accuracy.
TEST_FRACTION = 0.2

#: Seed of the fixed train/test split, identical in every process.
SPLIT_SEED = 0


def digits(split: str = "train") -> TensorDataset:
    """The digits set as a ``TensorDataset`` of (64 floats in [0, 1], label 0-9).

    Every process that calls this gets the same split, so ranks agree on what
    index ``i`` means, which ``DistributedSampler`` relies on.

    Args:
        split: ``"train"`` (1438 images) or ``"test"`` (359 images).

    >>> len(digits("train")), len(digits("test"))
    (1438, 359)
    >>> x, y = digits("train")[0]
    >>> tuple(x.shape), x.dtype, y.dtype
    ((64,), torch.float32, torch.int64)
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    pixels, targets = _digits_arrays()
    features = torch.tensor(pixels, dtype=torch.float32) / 16.0
    labels = torch.tensor(targets, dtype=torch.int64)
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(SPLIT_SEED))
    n_test = int(len(labels) * TEST_FRACTION)
    chosen = order[:n_test] if split == "test" else order[n_test:]
    return TensorDataset(features[chosen], labels[chosen])


@lru_cache(maxsize=1)
def _digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """Pixels (1797 x 64, values 0-16) and labels of scikit-learn's digits file.

    The file is read straight from the scikit-learn package: importing
    scikit-learn itself would cost seconds in every rank of every launch.
    """
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "scikit-learn is not installed; it ships the digits data set. "
            "Run `make lab` (or `pip install -e .`) to install the course's packages."
        )
    path = Path(spec.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz"
    with gzip.open(path, "rt") as handle:
        table = np.loadtxt(handle, delimiter=",")
    return table[:, :-1], table[:, -1].astype(np.int64)


def numbered(size: int) -> TensorDataset:
    """A data set whose item ``i`` is just the number ``i``.

    Iterating it shows exactly which indices a sampler handed out.

    Args:
        size: number of items, at least 1.

    >>> [int(x) for (x,) in numbered(3)]
    [0, 1, 2]
    """
    whole_number("size", size, minimum=1)
    return TensorDataset(torch.arange(size))


def sampler_partition(
    size: int,
    world_size: int,
    *,
    epoch: int = 0,
    shuffle: bool = True,
    seed: int = 0,
    drop_last: bool = False,
) -> list[list[int]]:
    """The indices each rank gets from the real ``DistributedSampler``, in order.

    No process group is needed: ``DistributedSampler`` accepts ``num_replicas``
    and ``rank`` directly, and this asks it once per rank, exactly as each
    launched rank would.

    Args:
        size: items in the data set.
        world_size: number of ranks sharing it.
        epoch: the value given to ``set_epoch`` (0 if it is never called).
        shuffle, seed, drop_last: passed to ``DistributedSampler``.

    >>> sampler_partition(5, 2, shuffle=False)
    [[0, 2, 4], [1, 3, 0]]
    >>> sampler_partition(5, 2, shuffle=False, drop_last=True)
    [[0, 2], [1, 3]]
    """
    from torch.utils.data.distributed import DistributedSampler

    dataset = numbered(size)
    whole_number("world_size", world_size, minimum=1)
    whole_number("epoch", epoch)
    whole_number("seed", seed)
    flag("shuffle", shuffle)
    flag("drop_last", drop_last)
    if drop_last and size < world_size:
        raise ValueError(
            f"with drop_last=True, {size} items on {world_size} ranks leaves every rank "
            "nothing: use a data set at least as large as world_size, or drop_last=False"
        )
    partition = []
    for rank in range(world_size):
        sampler = DistributedSampler(
            dataset,
            num_replicas=world_size,
            rank=rank,
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
        )
        sampler.set_epoch(epoch)
        partition.append([int(i) for i in sampler])
    return partition


def padding_of(partition: list[list[int]], size: int) -> dict[str, list[int]]:
    """Which indices appear twice (padding) and which appear nowhere (dropped).

    >>> padding_of([[0, 2, 4], [1, 3, 0]], 5)
    {'repeated': [0], 'dropped': []}
    >>> padding_of([[0, 2], [1, 3]], 5)
    {'repeated': [], 'dropped': [4]}
    """
    counts = [0] * size
    for indices in partition:
        for i in indices:
            counts[i] += 1
    return {
        "repeated": [i for i, n in enumerate(counts) if n > 1],
        "dropped": [i for i, n in enumerate(counts) if n == 0],
    }


#: The one-pixel moves :func:`digits_shifted` applies, as (rows, columns); (0, 0) first.
SHIFTS = [(0, 0)] + [(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1) if (dy, dx) != (0, 0)]


def digits_shifted(split: str = "train") -> TensorDataset:
    """The digits set enlarged nine times: every image as it is and moved one pixel each way.

    A digit moved one pixel up, down, sideways or diagonally is still the
    same digit, so this is more real data of the same shape (64 floats, a
    label), not noise. It gives each training step enough work to measure
    how DDP scales (see :mod:`ddp_lesson.bench`). Pixels moved off the edge
    are dropped; the uncovered edge is blank.

    Args:
        split: ``"train"`` (1438 x 9 = 12942 images) or ``"test"`` (359 x 9).

    >>> train = digits_shifted("train")
    >>> len(train)
    12942
    >>> torch.equal(train[:1438][0], digits("train").tensors[0])  # originals first
    True
    """
    features, labels = digits(split).tensors
    images = features.reshape(-1, 8, 8)
    moved = []
    for dy, dx in SHIFTS:
        out = torch.zeros_like(images)
        rows_to, rows_from = slice(max(dy, 0), 8 + min(dy, 0)), slice(max(-dy, 0), 8 - max(dy, 0))
        cols_to, cols_from = slice(max(dx, 0), 8 + min(dx, 0)), slice(max(-dx, 0), 8 - max(dx, 0))
        out[:, rows_to, cols_to] = images[:, rows_from, cols_from]
        moved.append(out.reshape(-1, 64))
    return TensorDataset(torch.cat(moved), labels.repeat(len(SHIFTS)))
