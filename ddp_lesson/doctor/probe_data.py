"""What the probe records of a learner's data: DataLoader epochs and DistributedSampler calls.

:func:`.probe.install` wraps ``DataLoader.__init__``, the DataLoader
iterator's ``recorded_next_index``, and ``DistributedSampler.__init__`` and
``set_epoch`` with the functions here. The first batch of each epoch of a
loader records every index this rank would get in the epoch, with the
loader's and the sampler's lines, the sampler's kind, replicas, shuffling
and epoch, and how many indices ``drop_last`` dropped; then only the first
``Settings.batches`` batches go through, to keep the run short. Each
``set_epoch`` is recorded with its sampler and the learner's line.
"""

from __future__ import annotations

from torch.utils.data import RandomSampler
from torch.utils.data import dataloader as _dataloader

from .probe_state import learner_line, process_state, save_record


def loader_init(original):
    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self._doctor_line = learner_line()
        self._doctor_number = process_state["loaders"] = process_state.get("loaders", 0) + 1
        try:
            self._index_sampler._doctor_loader = self
        except AttributeError:
            pass

    return init


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
        return  # an iterable data set has no indices to record
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
        "shuffle": bool(shuffle),
        "epoch": getattr(sampler, "epoch", None),
        "indices": flat,
        "dropped": dropped_indices(iterator._index_sampler, len(flat)),
        "batches": len(batches),
        "used": min(keep, len(batches)),
        "trained": False,
    }
    record.loaders.append(entry)
    process_state["epoch"] = entry
    save_record()


def dropped_indices(batches: object, taken: int) -> int:
    """Indices the sampler gave that no batch took (a DataLoader's ``drop_last=True``)."""
    sampler = getattr(batches, "sampler", None)
    if not getattr(batches, "drop_last", False) or not hasattr(sampler, "__len__"):
        return 0
    try:
        return max(0, len(sampler) - taken)
    except TypeError:
        return 0


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
