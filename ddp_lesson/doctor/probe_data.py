"""What the probe records of a learner's data: DataLoader epochs and DistributedSampler calls.

:func:`install_data_recording` (called by :func:`.probe.install`) wraps
``DataLoader.__init__``, the DataLoader iterator's ``_next_index`` and
``__next__``, and ``DistributedSampler.__init__`` and ``set_epoch`` with the
functions here. The first batch of each epoch of a
loader records every index this rank would get in the epoch, with the
loader's and the sampler's lines, the sampler's kind, replicas, shuffling
and epoch, and how many indices ``drop_last`` dropped; then only the first
``Settings.batches`` batches go through, to keep the run short. Each
``set_epoch`` is recorded with its sampler and the learner's line.

An ``IterableDataset`` has no indices: what its loader hands the training
loop is recorded instead, a fingerprint per item of the first
``Settings.batches`` batches (:func:`recorded_next`). Each map-style data
set a loader is built on leaves a fingerprint of a few of its items
(:func:`dataset_prints`), so the judge can tell whether every rank built
the same data set; the seeds the learner's lines give the random
generators (:func:`recorded_seed`: torch's, ``random``'s, NumPy's, and a
``torch.Generator``'s through :class:`RecordedGenerator`) tell why they differ.
"""

from __future__ import annotations

import hashlib
import random
import sys

import torch
from torch.utils.data import DataLoader, IterableDataset, RandomSampler, Subset
from torch.utils.data import dataloader as _dataloader
from torch.utils.data.distributed import DistributedSampler

from .probe_state import (
    caller_line,
    is_learner,
    learner_line,
    process_state,
    save_record,
    wrap_for_good,
)


def install_data_recording() -> None:
    """Wrap the DataLoader, its iterators, DistributedSampler and the random generators'
    seeds with the recorders here, for the rest of this process (:func:`.probe.install`)."""
    iterators = _dataloader._BaseDataLoaderIter
    wrap_for_good(DataLoader, "__init__", loader_init)
    wrap_for_good(iterators, "_next_index", recorded_next_index)
    wrap_for_good(iterators, "__next__", recorded_next)
    wrap_for_good(DataLoader, "__len__", short_length)
    wrap_for_good(DistributedSampler, "__init__", sampler_init)
    wrap_for_good(DistributedSampler, "set_epoch", recorded_set_epoch)
    wrap_for_good((torch, torch.random), "manual_seed", recorded_seed("torch.manual_seed"))
    wrap_for_good(random, "seed", recorded_seed("random.seed"))
    wrap_for_good(random.Random, "seed", recorded_seed("random.Random", method=True))
    wrap_for_good(torch, "Generator", recorded_generator)
    if "numpy" in sys.modules:  # its generator is seeded only if the script imports it
        numpy_random = sys.modules["numpy"].random
        wrap_for_good(numpy_random, "seed", recorded_seed("numpy.random.seed"))
        wrap_for_good(numpy_random, "default_rng", recorded_seed("numpy.random.default_rng"))


def short_length(original):
    def length(self):
        """The batches of an epoch the short run hands out (every index is still recorded).

        A loop that acts at its epoch's last batch (``i + 1 == len(loader)``:
        a last optimiser step after accumulating) then meets that batch in the
        short run, as it would in the full one."""
        full = original(self)
        if isinstance(self.dataset, IterableDataset) or process_state.get("settings") is None:
            return full
        return min(full, process_state["settings"].batches)

    return length


def loader_init(original):
    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self._doctor_line = learner_line()
        self._doctor_number = process_state["loaders"] = process_state.get("loaders", 0) + 1
        try:
            self._index_sampler._doctor_loader = self
        except AttributeError:
            pass
        record = process_state.get("record")
        if record is not None and not isinstance(self.dataset, IterableDataset):
            record.datasets.append({
                "loader": self._doctor_number,
                "line": self._doctor_line,
                "sampler": type(getattr(self, "sampler", None)).__name__,
                **dataset_prints(self.dataset),
                **subset_of(self.dataset),
            })  # fmt: skip

    return init


def tensors_in(value: object) -> list[torch.Tensor]:
    """Every tensor in an item or a batch (tuples, lists and dicts opened), in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [t for part in value for t in tensors_in(part)]
    return []


def fingerprint(parts: list[object]) -> str:
    """A short hash of the bytes of some tensors (other values by their repr)."""
    digest = hashlib.blake2b(digest_size=8)
    for part in parts:
        if isinstance(part, torch.Tensor):
            flat = part.detach().cpu().contiguous().reshape(-1)
            digest.update(f"{flat.dtype}{tuple(part.shape)}".encode())
            digest.update(flat.view(torch.uint8).numpy().tobytes())
        else:
            digest.update(repr(part).encode())
    return digest.hexdigest()


def item_prints(batch: object, collated: bool) -> list[str]:
    """One fingerprint per item of a batch: the item's rows of every tensor in it."""
    tensors = tensors_in(batch)
    if not collated:
        return [fingerprint(tensors or [batch])]
    if not tensors or tensors[0].dim() == 0:
        return []
    rows = tensors[0].shape[0]
    same = [t for t in tensors if t.dim() > 0 and t.shape[0] == rows]
    return [fingerprint([t[i] for t in same]) for i in range(rows)]


#: The most indices of a Subset a record keeps (what is compared across the ranks).
SUBSET_KEPT = 20_000


def subset_of(dataset: object) -> dict:
    """For a ``Subset``: ``{"base", "positions"}``, the data set it picks from (as
    :func:`dataset_prints` tells it) and the positions it picks; else ``{}``."""
    if not isinstance(dataset, Subset):
        return {}
    try:
        positions = [int(i) for i in list(dataset.indices)[:SUBSET_KEPT]]
    except (TypeError, ValueError):
        return {}
    return {"base": dataset_prints(dataset.dataset), "positions": positions}


#: The most items of a data set :func:`dataset_prints` fingerprints all of (``"every"``),
#: and the seconds it may spend on them (a data set read from files stops early).
EVERY_ITEM_MAX, EVERY_ITEM_S = 4096, 0.25


def dataset_prints(dataset: object) -> dict:
    """``{"size", "items", "every"}``: the data set's length and fingerprints of its items.

    ``items`` maps a position (first, quarters, last) to its item's
    fingerprint, or to None when two reads of it differ (random
    augmentation): only what is stable can tell data sets apart. ``every``
    holds a short fingerprint of each item in order, for a data set of at
    most :data:`EVERY_ITEM_MAX` items whose stable positions read the same
    twice (cut short after :data:`EVERY_ITEM_S`): it tells the same items
    in another order or selection from items of their own. The random
    generators are left as they were, so the learner's run is unchanged.
    """
    try:
        size = len(dataset)
    except (TypeError, NotImplementedError):
        return {"size": None, "items": {}, "every": []}
    items: dict[str, str | None] = {}
    every: list[str] = []
    numpy = sys.modules.get("numpy")
    state, numpy_state = random.getstate(), numpy.random.get_state() if numpy else None
    try:
        with torch.random.fork_rng(devices=[]):
            for at in sorted({0, size // 4, size // 2, 3 * size // 4, size - 1} if size else ()):
                first, again = (fingerprint(tensors_in(dataset[at]) or [dataset[at]])
                                for _ in range(2))  # fmt: skip
                items[str(at)] = first if first == again else None
            if size <= EVERY_ITEM_MAX and items and None not in items.values():
                every = _every_item(dataset, size)
    except Exception:  # an item that cannot be read here: no fingerprint, no verdict
        items, every = {}, []
    finally:
        random.setstate(state)
        if numpy_state is not None:
            numpy.random.set_state(numpy_state)
    return {"size": size, "items": items, "every": every}


def _every_item(dataset, size: int) -> list[str]:
    """A short fingerprint of each item, in order, for as long as :data:`EVERY_ITEM_S` allows."""
    import time

    end = time.monotonic() + EVERY_ITEM_S
    every = []
    for at in range(size):
        if time.monotonic() > end:
            break
        every.append(fingerprint(tensors_in(dataset[at]) or [dataset[at]])[:8])
    return every


def recorded_next_index(original):
    def next_index(self):
        if getattr(self, "_doctor_iter", None) is not self._sampler_iter:
            begin_epoch(self)
        return original(self)

    return next_index


def begin_epoch(iterator) -> None:
    """Record the whole epoch's indices, then let only the first few batches through."""
    iterator._doctor_iter = iterator._sampler_iter
    if iterator._dataset_kind == _dataloader._DatasetKind.Iterable:
        begin_stream(iterator)  # no indices to record: the items it yields are
        return
    batches = list(iterator._sampler_iter)
    keep = process_state["settings"].batches
    iterator._sampler_iter = iter(batches[:keep])
    iterator._doctor_iter = iterator._sampler_iter
    record = process_state["record"]
    if record is None:
        return
    loader = getattr(iterator._index_sampler, "_doctor_loader", None)
    sampler = getattr(loader, "sampler", None)
    shuffle = getattr(sampler, "shuffle", isinstance(sampler, RandomSampler))
    flat = [int(i) for batch in batches for i in (batch if isinstance(batch, list) else [batch])]
    entry = {
        "line": getattr(loader, "_doctor_line", None),
        "loader": getattr(loader, "_doctor_number", 0),
        "size": len(iterator._dataset) if hasattr(iterator._dataset, "__len__") else None,
        "sampler": type(sampler).__name__,
        "sampler_line": getattr(sampler, "_doctor_line", None),
        "sampler_id": id(sampler),
        "replicas": getattr(sampler, "num_replicas", None),
        "sampler_rank": getattr(sampler, "rank", None),
        "seed": _seed_of(sampler),
        "shuffle": bool(shuffle),
        "epoch": getattr(sampler, "epoch", None),
        "indices": flat,
        "dropped": dropped_indices(iterator._index_sampler, len(flat)),
        "batches": len(batches),
        "used": min(keep, len(batches)),
        "collectives": len(record.collectives),  # made before this epoch began
        "trained": False,
    }
    record.loaders.append(entry)
    process_state["epoch"] = entry
    save_record()


def _seed_of(sampler: object) -> int | None:
    """A DistributedSampler's shuffle seed (None for another sampler, or a seed not an int)."""
    seed = getattr(sampler, "seed", None) if isinstance(sampler, DistributedSampler) else None
    return seed if isinstance(seed, int) else None


def begin_stream(iterator) -> None:
    """Start recording what an iterable data set's loader hands out in this epoch."""
    record = process_state["record"]
    if record is None:
        return
    loader = getattr(iterator._index_sampler, "_doctor_loader", None)
    entry = {
        "line": getattr(loader, "_doctor_line", None),
        "loader": getattr(loader, "_doctor_number", 0),
        "workers": iterator._num_workers,
        "items": [],
        "batches": 0,
        "trained": False,
    }
    iterator._doctor_stream = entry
    record.streams.append(entry)
    process_state["epoch"] = entry
    save_record()


def recorded_next(original):
    def next_batch(self):
        try:
            batch = original(self)
        except StopIteration:
            entry = getattr(self, "_doctor_stream", None)  # (made by the epoch's first call)
            if entry is not None and not entry.get("ended"):
                entry["ended"] = True  # (the stream gave "yielded" batches in all)
                save_record()
            raise
        entry = getattr(self, "_doctor_stream", None)
        if entry is not None:
            entry["yielded"] = entry.get("yielded", 0) + 1
        if entry is not None and entry["batches"] < _stream_batches(entry):
            entry["items"].extend(item_prints(batch, self._auto_collation))
            entry["batches"] += 1
            save_record()
        return batch

    return next_batch


def _stream_batches(entry: dict) -> int:
    """Batches of a stream's epoch to record: ``Settings.batches``, rounded up to a
    multiple of its loader workers, so that each worker's batches are seen as often."""
    workers = max(1, entry.get("workers") or 1)
    return -(-process_state["settings"].batches // workers) * workers


def dropped_indices(batches: object, taken: int) -> int:
    """Indices the sampler gave that no batch took (a DataLoader's ``drop_last=True``)."""
    sampler = getattr(batches, "sampler", None)
    if not getattr(batches, "drop_last", False) or not hasattr(sampler, "__len__"):
        return 0
    try:
        return max(0, len(sampler) - taken)
    except TypeError:
        return 0


def recorded_seed(call: str, method: bool = False):
    """Record each seed the learner's file gives ``call`` (``method``: its first argument is
    the generator), with how many DataLoaders this process had built by then."""

    def make(original):
        def seed(*args, **kwargs):
            given = args[1:] if method else args
            value = given[0] if given else next(iter(kwargs.values()), None)
            record, line = process_state["record"], learner_line()
            # the first few are what built the data; a seed per step would flood the record
            if record is not None and line is not None and len(record.seeds) < 32:
                record.seeds.append({
                    "call": call, "value": repr(value)[:40], "line": line,
                    "loaders": process_state.get("loaders", 0),
                    "caller": caller_line(sys._getframe(1)),
                })  # fmt: skip
                save_record()
            return original(*args, **kwargs)

        return seed

    return make


class _GeneratorKind(type(torch._C.Generator)):
    """Makes ``isinstance(g, torch.Generator)`` hold for every generator, as without the probe."""

    def __instancecheck__(cls, instance) -> bool:
        return isinstance(instance, torch._C.Generator)

    def __subclasscheck__(cls, subclass) -> bool:
        return issubclass(subclass, torch._C.Generator)


class RecordedGenerator(torch._C.Generator, metaclass=_GeneratorKind):
    """``torch.Generator`` in a diagnosed script: ``manual_seed`` from the learner's file is
    recorded as the other seeds are (a generator torch seeds itself, a sampler's, is not)."""

    def manual_seed(self, seed):
        if is_learner(sys._getframe(1).f_code.co_filename):
            seeded = recorded_seed("torch.Generator.manual_seed", method=True)
            return seeded(torch._C.Generator.manual_seed)(self, seed)
        return super().manual_seed(seed)


def recorded_generator(original):
    """The ``make`` that turns ``torch.Generator`` into :class:`RecordedGenerator`."""
    return RecordedGenerator


def sampler_init(original):
    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self._doctor_line = learner_line()

    return init


def recorded_set_epoch(original):
    def set_epoch(self, epoch):
        record, line = process_state["record"], learner_line()
        if record is not None and line is not None:
            record.set_epochs.append({"epoch": epoch, "line": line, "sampler_id": id(self)})
        return original(self, epoch)

    return set_epoch
