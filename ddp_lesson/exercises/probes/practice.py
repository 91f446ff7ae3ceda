"""Rank-side probes for the checks of the practice notebooks (12, 13 and 14).

Each probe joins the launch's group, sets up what the exercise is about
(a DDP model, micro-batches, a test set, a data set with random
augmentation), calls the learner's function the way the lesson would,
and reports what happened, with a ``TypedDict`` per probe.
"""

from __future__ import annotations

import math
import re
import warnings
from typing import TypedDict

import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset

from ... import group
from ...reports import send_typed, sends
from ...sources import load

#: Images per micro-batch, and the learning rate of the accumulation probe.
MICRO_BATCH, LR = 8, 0.1

#: Items of the data set the seeds probe deals out.
SEEDS_SIZE = 32


class AccumulateReport(TypedDict):
    """What :func:`accumulate` sends."""

    rank: int
    gradient_floats: int
    floats_exchanged: int
    optimizer_steps: int
    params: torch.Tensor
    one_batch: torch.Tensor
    start: torch.Tensor
    params_again: torch.Tensor  # after a second call on the same micro-batches
    one_batch_again: torch.Tensor  # after a second reference step
    exchanged_after: list[int]  # for each bucket DDP all-reduced: the forwards run before it
    cleared_after: list[int]  # for each zero_grad() before the step: the backwards run before it


class EvaluateReport(TypedDict):
    """What :func:`evaluate` sends for each case (a list of them, as ``cases``)."""

    rank: int
    accuracy: float
    looked_at: list[int]  # indices read through the data set's __getitem__
    forwarded: list[int]  # indices of the images given to the model (-1: not a test image)
    size: int
    truth: float
    mean_of_parts: float
    returned: str | None  # what evaluate returned, shortened, when it was no number (else None)


class EvaluateCases(TypedDict):
    """What :func:`evaluate` sends: one :class:`EvaluateReport` per case it ran."""

    rank: int
    cases: list[EvaluateReport]


class UnusedReport(TypedDict):
    """What :func:`ddp_unused` sends."""

    rank: int
    error: str
    named: list[list[str]]  # for each of HEADS, the names DDP's error gives


class SeedsReport(TypedDict):
    """What :func:`seeds` sends."""

    rank: int
    indices: list[int]
    noise: list[float]
    workers: list[int]  # the loader workers that loaded the items (-1: the rank itself)
    again: list[float]
    reordered: list[int]  # the indices from a loader built with the next seed
    renoised: list[float]  # and its noise


def _wrap(model: nn.Module, device: torch.device) -> nn.Module:
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = model.to(device)
    return DDP(model, device_ids=[device.index] if device.type == "cuda" else None)


# -- 12: accumulating with no_sync() -------------------------------------------------
def _watch_exchanges(model: nn.Module) -> tuple[list[int], list[int]]:
    """Note each bucket DDP all-reduces: its floats, and how many forwards had run before it.

    Returns the two lists, filled as the model runs.
    """
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    exchanged: list[int] = []
    forwards: list[int] = []  # one entry per forward of the model
    exchanged_after: list[int] = []

    def counting(state, bucket):  # DDP calls it for each bucket it all-reduces
        exchanged.append(bucket.buffer().numel())
        exchanged_after.append(len(forwards))
        return default_hooks.allreduce_hook(state, bucket)

    model.register_comm_hook(None, counting)
    model.register_forward_pre_hook(lambda module, inputs: forwards.append(1))
    return exchanged, exchanged_after


def _watch_steps(model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[list[int], list[int]]:
    """Note each optimizer.step(), and how many backwards had run at each zero_grad() before it.

    Returns the two lists, filled as the answer runs. Both the optimiser's
    and the model's ``zero_grad`` are watched: either clears what the
    micro-batches before it added up. A backward counts once it has added
    its gradient to the model's first parameter.
    """
    steps: list[int] = []
    cleared: list[int] = []
    backwards: list[int] = []
    next(model.parameters()).register_post_accumulate_grad_hook(lambda p: backwards.append(1))
    stepping = optimizer.step

    def counted_step(*args, **kwargs):
        steps.append(1)
        return stepping(*args, **kwargs)

    optimizer.step = counted_step
    for owner in (optimizer, model):
        clearing = owner.zero_grad

        def watched(*args, _clearing=clearing, **kwargs):
            if not steps:
                cleared.append(len(backwards))
            return _clearing(*args, **kwargs)

        owner.zero_grad = watched
    return steps, cleared


@sends(AccumulateReport)
def accumulate(rank: int, world_size: int, port: int, path: str, k: int) -> None:
    """Call the learner's ``accumulate_step`` once on ``k`` micro-batches; count the exchange."""
    import torch.nn.functional as F

    from ...data import digits
    from ...models import NeuralNetwork, flat_parameters

    worker = load(path)
    device = group.join(rank, world_size, port)
    try:
        torch.manual_seed(0)
        start = NeuralNetwork()
        features, labels = digits("train")[rank * k * MICRO_BATCH : (rank + 1) * k * MICRO_BATCH]
        features, labels = features.to(device), labels.to(device)
        micro_batches = list(
            zip(features.split(MICRO_BATCH), labels.split(MICRO_BATCH), strict=True)
        )

        reference = _wrap(NeuralNetwork(), device)  # one step on all of it at once
        reference.module.load_state_dict(start.state_dict())
        optimizer = torch.optim.SGD(reference.parameters(), lr=LR)
        F.cross_entropy(reference(features), labels).backward()
        optimizer.step()
        one_batch = flat_parameters(reference)
        optimizer.zero_grad()  # a second step, from cleared gradients
        F.cross_entropy(reference(features), labels).backward()
        optimizer.step()

        model = _wrap(NeuralNetwork(), device)
        model.module.load_state_dict(start.state_dict())
        exchanged, exchanged_after = _watch_exchanges(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=LR)
        steps, cleared_after = _watch_steps(model, optimizer)
        worker.accumulate_step(model, optimizer, micro_batches)
        report = AccumulateReport(
            rank=rank,
            gradient_floats=sum(p.numel() for p in start.parameters()),
            floats_exchanged=sum(exchanged),
            optimizer_steps=len(steps),
            params=flat_parameters(model),
            one_batch=one_batch,
            start=flat_parameters(start),
            exchanged_after=list(exchanged_after),
            cleared_after=list(cleared_after),
        )
        worker.accumulate_step(model, optimizer, micro_batches)  # what the first left behind
        report.update(
            params_again=flat_parameters(model), one_batch_again=flat_parameters(reference)
        )
        send_typed(report)
        del model, reference
    finally:
        group.leave()


# -- 12: seeds for shuffling and for augmentation -----------------------------------------
class Jittered(Dataset):
    """Item ``i`` is ``(i, noise, worker)``: the noise drawn where the item is loaded
    (augmentation), and the id of the loader worker that loaded it (-1: no worker)."""

    def __init__(self, size: int):
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[int, torch.Tensor, int]:
        loading = torch.utils.data.get_worker_info()
        return index, torch.rand(()), loading.id if loading is not None else -1


@sends(SeedsReport)
def seeds(rank: int, world_size: int, port: int, path: str, seed: int) -> None:
    """Build the learner's loader three times (``seed``, ``seed`` again, ``seed + 1``); report
    the indices and the noise of one epoch each."""
    import multiprocessing

    # a rank forked from the warm server starts processes the server's way
    # (forkserver); a script starts its loader's workers the platform's way
    multiprocessing.set_start_method(None, force=True)
    # torch warns when loader workers outnumber this machine's cores (one
    # core: any num_workers > 1); the check is about seeds, not machine size
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    worker = load(path)
    group.join(rank, world_size, port)
    try:
        torch.manual_seed(0)  # what a script does first, the same on every rank

        def one_epoch(seed: int) -> tuple[list[int], list[float], list[int]]:
            loader = worker.make_loader(Jittered(SEEDS_SIZE), rank, world_size, seed)
            indices, noise, loaded_by = [], [], []
            for index, jitter, by in loader:
                indices += [int(i) for i in index]
                noise += [round(float(n), 6) for n in jitter]
                loaded_by += [int(w) for w in by]
            return indices, noise, loaded_by

        indices, noise, loaded_by = one_epoch(seed)
        _, again, _ = one_epoch(seed)
        reordered, renoised, _ = one_epoch(seed + 1)
        send_typed(
            SeedsReport(
                rank=rank,
                indices=indices,
                noise=noise,
                workers=sorted(set(loaded_by)),
                again=again,
                reordered=reordered,
                renoised=renoised,
            )
        )
    finally:
        group.leave()


# -- 13: evaluating on every rank -----------------------------------------------------
class WatchedTestSet(TensorDataset):
    """The test images, noting every index a rank looks at."""

    def __init__(self, *tensors: torch.Tensor):
        super().__init__(*tensors)
        self.looked_at: list[int] = []

    def __getitem__(self, index):
        if isinstance(index, int):
            self.looked_at.append(index)
        else:
            self.looked_at.extend(torch.arange(len(self))[index].reshape(-1).tolist())
        return super().__getitem__(index)


#: The evaluate check's cases: (test images used, training steps of the model). The
#: first is what the exercise states; the second changes both, so that an accuracy
#: written in by hand is wrong there.
EVALUATE_CASES = ((None, 20), (251, 8))


def trained_model(steps: int = 20) -> nn.Module:
    """The lesson's network after ``steps`` steps: the same on every rank, right on some images."""
    import torch.nn.functional as F

    from ...data import digits
    from ...models import NeuralNetwork

    torch.manual_seed(0)
    model = NeuralNetwork()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    features, labels = digits("train").tensors
    for step in range(steps):
        batch = slice(step * 64, (step + 1) * 64)
        optimizer.zero_grad()
        F.cross_entropy(model(features[batch]), labels[batch]).backward()
        optimizer.step()
    return model


def _forwarded(model: nn.Module, features: torch.Tensor) -> tuple[list[int], object]:
    """Note which test images go through ``model``: ``(indices, hook handle)``.

    An image is known by its pixels, however the answer reached it (the
    data set's items, its ``tensors``, a loader): each row given to the
    model is looked up among the test images.
    """
    where: dict[bytes, int] = {}
    for index, row in enumerate(features):
        where.setdefault(row.numpy().tobytes(), index)
    seen: list[int] = []

    def note(module, inputs) -> None:
        rows = inputs[0].detach().reshape(len(inputs[0]), -1).cpu().to(features.dtype)
        seen.extend(where.get(row.numpy().tobytes(), -1) for row in rows)

    return seen, model.register_forward_pre_hook(note)


def _as_number(value: object) -> tuple[float, str | None]:
    """``(value as a float, None)``, or ``(nan, its repr shortened)`` when it is no number."""
    try:
        return float(value), None
    except (TypeError, ValueError, RuntimeError):  # None, a string of words, a tensor of many
        shown = repr(value)
        return math.nan, shown if len(shown) <= 80 else shown[:77] + "..."


@sends(EvaluateCases)
def evaluate(rank: int, world_size: int, port: int, path: str) -> None:
    """Call the learner's ``evaluate`` on every rank with a DDP model, once per case.

    Reports, per case of :data:`EVALUATE_CASES`, what it returned and which
    images it looked at (by index) and gave the model.
    """
    from ...data import digits

    worker = load(path)
    device = group.join(rank, world_size, port)
    try:
        cases = []
        for used, steps in EVALUATE_CASES:
            plain = trained_model(steps)
            features, labels = digits("test").tensors
            features, labels = features[:used], labels[:used]
            with torch.no_grad():
                right = plain(features).argmax(dim=1) == labels
            parts = [right[r::world_size].float().mean().item() for r in range(world_size)]
            test_dataset = WatchedTestSet(features, labels)
            forwarded, hook = _forwarded(plain, features.reshape(len(features), -1))
            model = _wrap(plain, device)
            accuracy, returned = _as_number(
                worker.evaluate(model, test_dataset, rank, world_size, device)
            )
            hook.remove()
            cases.append(
                EvaluateReport(
                    rank=rank,
                    accuracy=accuracy,
                    returned=returned,
                    looked_at=list(test_dataset.looked_at),
                    forwarded=forwarded,
                    size=len(features),
                    truth=right.float().mean().item(),
                    mean_of_parts=sum(parts) / world_size,
                )
            )
            del model
        send_typed(EvaluateCases(rank=rank, cases=cases))
    finally:
        group.leave()


# -- 14: the parameters DDP names -------------------------------------------------------
class Branchy(nn.Module):
    """A network with a head the loss ignores and a frozen layer: what the unused check uses."""

    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 8)
        self.frozen = nn.Linear(8, 8).requires_grad_(False)  # used, never trained
        self.head = nn.Linear(8, 3)
        self.aux = nn.Linear(8, 3)  # returned, but no loss uses it

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = torch.relu(self.frozen(self.body(x)))
        return self.head(hidden), self.aux(hidden)


#: Which of a ``Branchy``'s two outputs each of the unused check's runs trains: the
#: head first, then the other one, so that the names left out change between runs.
HEADS = (0, 1)


def branchy_loss(model: nn.Module, seed: int = 0, head: int = 0) -> torch.Tensor:
    """The loss of one batch through ``model`` (a ``Branchy``), from output ``head`` only."""
    import torch.nn.functional as F

    generator = torch.Generator().manual_seed(seed)
    features = torch.randn(16, 8, generator=generator)
    labels = torch.randint(0, 3, (16,), generator=generator)
    device = next(model.parameters()).device
    logits = model(features.to(device))[head]
    return F.cross_entropy(logits, labels.to(device))


@sends(UnusedReport)
def ddp_unused(rank: int, world_size: int, port: int) -> None:
    """Train a ``Branchy`` under DDP until it fails; report the parameters DDP's error names."""
    import torch.distributed as dist

    device = group.join(rank, world_size, port)
    try:
        dist.set_debug_level(dist.DebugLevel.INFO)  # DDP's error then names them
        errors, named = [], []
        for head in HEADS:
            torch.manual_seed(0)
            model = _wrap(Branchy(), device)
            error = ""
            try:
                for step in range(2):
                    branchy_loss(model, seed=rank + step, head=head).backward()
            except RuntimeError as failure:
                error = str(failure)
            found = re.search(r"Parameters which did not receive grad for rank \d+: (.*)", error)
            named.append(sorted(found[1].strip().split(", ")) if found else [])
            errors.append(error.splitlines()[0] if error else "")
            del model
        send_typed(UnusedReport(rank=rank, error=errors[0], named=named))
    finally:
        dist.set_debug_level(dist.DebugLevel.OFF)
        group.leave()
