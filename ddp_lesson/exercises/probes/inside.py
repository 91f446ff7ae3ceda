"""Rank-side probe for the check of ``11_inside_ddp``: a learner's hand-built DDP against DDP.

Every rank loads the learner's file, builds the lesson's model from a seed
of its own (plus a buffer that holds the rank), and runs the learner's
``broadcast_parameters``, ``attach_hooks`` and ``finish`` around a few
real training steps, each rank on a batch of its own. Beside it the same
steps train a ``DDP`` copy from the same starting weights. While the
learner's code runs, ``torch.distributed.all_reduce`` is watched: which
line called it, on which tensor, during backward or not, asynchronously
or not, and whether anyone waited for its handle before
``optimizer.step()``; and, step by step, how many handles of earlier
steps ``finish`` waited for again, and how many entries what
``attach_hooks`` returned held before and after ``finish``. While
``broadcast_parameters`` runs, ``torch.distributed.broadcast`` is counted
too, and whether each call was given one of the model's own tensors or a
copy. The check
(:mod:`ddp_lesson.exercises.checks.inside`) turns what was seen into a
verdict.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TypedDict

import torch

from ... import group
from ...reports import send_typed, sends
from ...sources import load


class AllReduceCall(TypedDict):
    """One call of ``all_reduce`` made while the learner's code ran."""

    line: int | None  # the learner's line that called it (None: not their file)
    in_backward: bool  # made while loss.backward() ran, i.e. from a hook
    async_op: bool
    target: str  # "gradient", "parameter" (its values) or "other" (e.g. a bucket)
    parameter: str | None  # whose gradient or values, for those two targets
    waited: bool  # its handle's wait() called (or its future taken) before the step


class HooksReport(TypedDict):
    """What :func:`hooked_training` sends."""

    rank: int
    world_size: int
    start_gap: float  # parameters, largest difference between ranks after the broadcast
    own_gap: float  # parameters after the broadcast against this rank's own start
    broadcasts: int  # calls of broadcast from the learner's file in broadcast_parameters
    into_model: int  # of those, calls given one of the model's own parameters or buffers
    buffer_gap: float  # the same for the buffer
    start_vs_rank0: float  # parameters after the broadcast against rank 0's own start
    calls: list[list[AllReduceCall]]  # per step
    grad_gap: list[float]  # per step: this rank's gradients after finish() against DDP's
    summed_gap: list[float]  # per step: against world_size times DDP's (the sum, undivided)
    stale: list[int]  # per step: waits (or futures taken) on handles of earlier steps
    given: list[int | None]  # per step: len() of what attach_hooks returned, before finish
    held: list[int | None]  # per step: len() of what attach_hooks returned, after finish
    param_gap: float  # parameters after the last step against DDP's
    names: list[str]


class _Watched:
    """A collective's handle that remembers whether someone waited for it, and when."""

    def __init__(self, work, call: AllReduceCall, watch: _Watch) -> None:
        self._work, self._call, self._watch = work, call, watch
        self._step = watch.step  # the step whose backward started it

    def _taken(self) -> None:
        self._call["waited"] = True
        if self._watch.step != self._step:  # a handle of an earlier step, used again
            self._watch.stale[self._watch.step] = self._watch.stale.get(self._watch.step, 0) + 1

    def wait(self, *args, **kwargs):
        self._taken()
        return self._work.wait(*args, **kwargs)

    def get_future(self):
        self._taken()
        return self._work.get_future()

    def __getattr__(self, name: str):
        return getattr(self._work, name)


class _Watch:
    """Replaces ``all_reduce`` and ``broadcast`` in this rank with versions that take notes."""

    def __init__(self, path: str, model: torch.nn.Module) -> None:
        import torch.distributed as dist
        import torch.distributed.distributed_c10d as c10d

        self.path, self.model = str(Path(path).resolve()), model
        self.calls: list[AllReduceCall] = []
        self.works: list = []  # every real handle, waited for before the rank leaves
        self.in_backward = False
        self.step = -1  # the training step now running (-1: before the first)
        self.stale: dict[int, int] = {}  # step -> uses of earlier steps' handles in it
        self.broadcasts = 0  # calls of broadcast from the learner's file
        self.into_model = 0  # of those, given a tensor whose memory is one of the model's
        self._modules = (dist, c10d)
        self._real, self._real_broadcast = c10d.all_reduce, c10d.broadcast
        for module in self._modules:
            module.all_reduce = self._all_reduce
            module.broadcast = self._broadcast

    def _broadcast(self, tensor, *args, **kwargs):
        caller = sys._getframe(1)
        if str(Path(caller.f_code.co_filename).resolve()) == self.path:  # not torch's own
            # a tensor sharing memory with a parameter or buffer (detach(), .data, a
            # state_dict entry) writes into the model; a clone or a new tensor does not
            self.broadcasts += 1
            model = {t.untyped_storage().data_ptr() for t in self._model_tensors()}
            self.into_model += int(
                isinstance(tensor, torch.Tensor) and tensor.untyped_storage().data_ptr() in model
            )
        return self._real_broadcast(tensor, *args, **kwargs)

    def _model_tensors(self) -> list[torch.Tensor]:
        return [*self.model.parameters(), *self.model.buffers()]

    def _target(self, tensor: torch.Tensor) -> tuple[str, str | None]:
        address = tensor.data_ptr()
        for name, param in self.model.named_parameters():
            if param.grad is not None and param.grad.data_ptr() == address:
                return "gradient", name
            if param.data_ptr() == address:
                return "parameter", name
        return "other", None

    def _all_reduce(self, tensor, *args, **kwargs):
        caller = sys._getframe(1)
        own = str(Path(caller.f_code.co_filename).resolve()) == self.path
        async_op = kwargs.get("async_op", args[2] if len(args) > 2 else False)
        target, parameter = self._target(tensor)
        call = AllReduceCall(
            line=caller.f_lineno if own else None,
            in_backward=self.in_backward,
            async_op=bool(async_op),
            target=target,
            parameter=parameter,
            waited=not async_op,  # a blocking all-reduce has finished when it returns
        )
        self.calls.append(call)
        work = self._real(tensor, *args, **kwargs)
        if work is None:
            return None
        self.works.append(work)
        return _Watched(work, call, self)

    def restore(self) -> None:
        for work in self.works:  # nothing may still be in flight when the group goes
            work.wait()
        for module in self._modules:
            module.all_reduce = self._real
            module.broadcast = self._real_broadcast


def _length(pending: object) -> int | None:
    """How many entries what ``attach_hooks`` returned holds, if it can say."""
    try:
        return len(pending)  # type: ignore[arg-type]
    except TypeError:
        return None


def _batch(step: int, rank: int, world_size: int, device: torch.device):
    from ...data import digits

    start = (step * world_size + rank) * 32  # a different batch on every rank, every step
    features, labels = digits("train")[start : start + 32]
    return features.to(device), labels.to(device)


@sends(HooksReport)
def hooked_training(rank: int, world_size: int, port: int, path: str, steps: int) -> None:
    """Train with the learner's hand-built DDP and with DDP itself, side by side; report.

    Args:
        path: the learner's file, defining ``broadcast_parameters(model)``,
            ``attach_hooks(model)`` (returns what ``finish`` needs) and
            ``finish(model, pending)``.
        steps: training steps.
    """
    from ...models import flat_parameters

    device = group.join(rank, world_size, port)
    watch = None
    try:
        rank0_start, model, reference = _models(rank, device)
        watch = _Watch(path, model)
        worker = load(path)  # after the watch: its imports see the watched collectives
        own_start = flat_parameters(model)
        worker.broadcast_parameters(model)
        broadcasts, into_model = watch.broadcasts, watch.into_model  # its calls, no others
        start = flat_parameters(model)
        start_gap = group.across_ranks(start)
        buffer_gap = group.across_ranks(model.seen.detach().clone())
        pending = worker.attach_hooks(model)
        calls, grad_gap, summed_gap, given, held = _train(
            worker, model, reference, pending, watch, steps, rank, world_size, device
        )
        param_gap = float((flat_parameters(model) - flat_parameters(reference)).abs().max())
        send_typed(
            HooksReport(
                rank=rank,
                world_size=world_size,
                start_gap=start_gap,
                own_gap=float((start - own_start).abs().max()),
                broadcasts=broadcasts,
                into_model=into_model,
                buffer_gap=buffer_gap,
                start_vs_rank0=float((start - rank0_start).abs().max()),
                calls=calls,
                grad_gap=grad_gap,
                summed_gap=summed_gap,
                stale=[watch.stale.get(step, 0) for step in range(steps)],
                given=given,
                held=held,
                param_gap=param_gap,
                names=[name for name, _ in model.named_parameters()],
            )
        )
        del reference
    finally:
        if watch is not None:
            watch.restore()
        group.leave()


def _models(
    rank: int, device: torch.device
) -> tuple[torch.Tensor, torch.nn.Module, torch.nn.Module]:
    """Build the learner's model and its DDP reference from this rank's seed, and rank 0's start.

    Returns:
        rank 0's starting parameters (flat), the model the learner's code
        trains (with a buffer that holds the rank) and a ``DDP`` model that
        starts from the same weights.
    """
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ...devices import ddp_device_ids
    from ...models import NeuralNetwork, flat_parameters

    torch.manual_seed(0)
    rank0_start = flat_parameters(NeuralNetwork())  # what rank 0 builds below
    torch.manual_seed(rank)  # every rank starts from weights of its own
    model = NeuralNetwork().to(device)
    model.register_buffer("seen", torch.full((4,), float(rank), device=device))
    torch.manual_seed(rank)
    reference = DDP(NeuralNetwork().to(device), device_ids=ddp_device_ids(device))
    return rank0_start, model, reference


def _train(
    worker,
    model: torch.nn.Module,
    reference: torch.nn.Module,
    pending: object,
    watch: _Watch,
    steps: int,
    rank: int,
    world_size: int,
    device: torch.device,
) -> tuple[list[list[AllReduceCall]], list[float], list[float], list[int | None], list[int | None]]:
    """Train the learner's model and the DDP reference side by side on this rank's batches.

    Args:
        worker: the learner's loaded file; ``finish(model, pending)`` runs
            after each backward.
        pending: what the learner's ``attach_hooks`` returned.

    Returns:
        per step, as :class:`HooksReport` names them: ``calls``,
        ``grad_gap``, ``summed_gap``, ``given`` and ``held``.
    """
    import torch.nn.functional as F

    from ...models import flat_gradients

    optimizers = [
        torch.optim.SGD(model.parameters(), lr=0.1),
        torch.optim.SGD(reference.parameters(), lr=0.1),
    ]
    calls, grad_gap, summed_gap, given, held = [], [], [], [], []
    for step in range(steps):
        watch.step = step
        features, labels = _batch(step, rank, world_size, device)
        for optimizer in optimizers:
            optimizer.zero_grad()
        first = len(watch.calls)
        watch.in_backward = True
        F.cross_entropy(model(features), labels).backward()
        watch.in_backward = False
        given.append(_length(pending))
        worker.finish(model, pending)
        calls.append([dict(c) for c in watch.calls[first:]])  # as they were at the step
        held.append(_length(pending))
        mine = flat_gradients(model)
        F.cross_entropy(reference(features), labels).backward()
        ddp = flat_gradients(reference)
        grad_gap.append(float((mine - ddp).abs().max()))
        summed_gap.append(float((mine - world_size * ddp).abs().max()))
        for optimizer in optimizers:
            optimizer.step()
    return calls, grad_gap, summed_gap, given, held
