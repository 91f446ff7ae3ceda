"""Worker functions that the exercise checks launch around a learner's code.

Each probe runs in every rank, loads the learner's worker file by path,
calls the learner's function the way the lesson would, measures what
happened, and sends it back with :func:`ddp_lesson.reports.send_report`.
The checks in :mod:`ddp_lesson.checks` compare those reports with what the
real thing does.
"""

from __future__ import annotations

import importlib.util
import os
from types import ModuleType

import torch

from .reports import send_report


def load_file(path: str) -> ModuleType:
    """Import the Python file at ``path`` as a fresh module."""
    spec = importlib.util.spec_from_file_location("learner_worker", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _join_group(rank: int, world_size: int, port: int) -> None:
    """Join the launch's group the way the lesson's ddp_setup does (NCCL on GPUs, else gloo)."""
    import torch.distributed as dist

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend, rank=rank, world_size=world_size)
    if backend == "nccl":
        torch.cuda.set_device(rank)  # as ddp_setup does: this rank's own GPU


def report_rank(rank: int, world_size: int, port: int) -> None:
    """Report this process's rank, the world size it was given, and its pid."""
    send_report(rank, world_size=world_size, pid=os.getpid())


def process_group(rank: int, world_size: int, port: int, path: str) -> None:
    """Run the learner's ``ddp_setup`` and ``cleanup`` and report the group's state."""
    import torch.distributed as dist

    worker = load_file(path)
    worker.ddp_setup(rank, world_size, port)
    joined = {
        "initialized": dist.is_initialized(),
        "rank_in_group": dist.get_rank() if dist.is_initialized() else None,
        "size_of_group": dist.get_world_size() if dist.is_initialized() else None,
        "backend": str(dist.get_backend()) if dist.is_initialized() else None,
    }
    total = torch.tensor([rank + 1.0])
    if dist.is_initialized():
        device = torch.device("cuda", rank) if joined["backend"] == "nccl" else "cpu"
        total = total.to(device)
        dist.all_reduce(total)
    worker.cleanup()
    send_report(rank, **joined, total=total.item(), after_cleanup=dist.is_initialized())


def sampler(rank: int, world_size: int, port: int, path: str, size: int, epochs: int) -> None:
    """Build the learner's loader over ``numbered(size)`` and report each epoch's indices."""
    import torch.distributed as dist

    from .data import numbered

    worker = load_file(path)
    _join_group(rank, world_size, port)
    try:
        train_loader = worker.make_loader(numbered(size))
        orders = worker.epoch_orders(train_loader, epochs)
        has_sampler = type(getattr(train_loader, "sampler", None)).__name__
        send_report(rank, orders=[[int(i) for i in o] for o in orders], sampler=has_sampler)
    finally:
        dist.destroy_process_group()


def model_wrap(rank: int, world_size: int, port: int, path: str) -> None:
    """Wrap a model with the learner's ``wrap`` and report weights and gradients."""
    import gc

    import torch.distributed as dist
    import torch.nn.functional as F

    from .data import digits
    from .devices import device_for
    from .models import NeuralNetwork, flat_gradients, flat_parameters

    worker = load_file(path)
    _join_group(rank, world_size, port)
    try:
        torch.manual_seed(rank)  # every rank starts from different weights
        device = device_for(rank)
        model = worker.wrap(NeuralNetwork(), rank, device)
        features, labels = digits("train")[rank * 32 : (rank + 1) * 32]  # a different batch each
        F.cross_entropy(model(features.to(device)), labels.to(device)).backward()
        send_report(
            rank,
            wrapper=type(model).__name__,
            device=str(next(model.parameters()).device),
            params=flat_parameters(model),
            grads=flat_gradients(model),
        )
        del model
    finally:
        gc.collect()
        dist.destroy_process_group()


# -- probes behind the widgets ---------------------------------------------------------
def partition(
    rank: int,
    world_size: int,
    port: int,
    size: int,
    epochs: int,
    shuffle: bool,
    seed: int,
    drop_last: bool,
    set_epoch: bool,
) -> None:
    """Iterate a loader over ``numbered(size)`` and report the indices of every epoch.

    The sampler is built the lesson's way, from the process group
    (``DistributedSampler(dataset)`` finds ``num_replicas`` and ``rank``
    itself), so the report shows what a real rank really iterated.
    """
    import torch.distributed as dist
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    from .data import numbered
    from .reports import send_progress

    _join_group(rank, world_size, port)
    try:
        dataset = numbered(size)
        train_sampler = DistributedSampler(dataset, shuffle=shuffle, seed=seed, drop_last=drop_last)
        loader = DataLoader(dataset, batch_size=4, sampler=train_sampler)
        orders = []
        for epoch in range(epochs):
            if set_epoch:
                train_sampler.set_epoch(epoch)
            orders.append([int(i) for (batch,) in loader for i in batch])
            send_progress(rank, epoch + 1, epochs)
        send_report(
            rank,
            orders=orders,
            num_replicas=train_sampler.num_replicas,
            sampler_rank=train_sampler.rank,
        )
    finally:
        dist.destroy_process_group()


def _across_ranks(tensor: torch.Tensor) -> float:
    """The largest elementwise difference of ``tensor`` between any two ranks."""
    import torch.distributed as dist

    if dist.get_backend() == "nccl":  # NCCL reduces GPU tensors only
        tensor = tensor.to(torch.device("cuda", torch.cuda.current_device()))
    high, low = tensor.clone(), tensor.clone()
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    return float((high - low).max())


def sync_check(rank: int, world_size: int, port: int, steps: int) -> None:
    """Train two copies of one model side by side, one wrapped in DDP, one not.

    Both start from the same weights on every rank (seed 0), so any
    difference between ranks comes from their different batches. Each step
    records, per parameter, the norm of the gradient computed from this
    rank's batch alone (``no_sync``), after DDP's all-reduce, and of the
    unwrapped copy; and, across ranks, the largest difference of gradients
    and of parameters (measured with all-reduce MAX and MIN).
    """
    import gc

    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    from .data import digits
    from .devices import ddp_device_ids, device_for
    from .models import NeuralNetwork, flat_gradients, flat_parameters
    from .reports import send_progress

    _join_group(rank, world_size, port)
    try:
        device = device_for(rank)
        torch.manual_seed(0)  # the same starting weights on every rank
        plain = NeuralNetwork().to(device)
        ddp = DDP(NeuralNetwork().to(device), device_ids=ddp_device_ids(device))
        ddp.module.load_state_dict(plain.state_dict())
        names = [name for name, _ in plain.named_parameters()]
        optimizers = {
            "plain": torch.optim.SGD(plain.parameters(), lr=0.1),
            "ddp": torch.optim.SGD(ddp.parameters(), lr=0.1),
        }
        train = digits("train")
        train_sampler = DistributedSampler(train, seed=0)
        loader = DataLoader(train, batch_size=32, sampler=train_sampler)

        def batches():
            epoch = 0
            while True:
                train_sampler.set_epoch(epoch)
                yield from loader
                epoch += 1

        def norms(model: torch.nn.Module) -> list[float]:
            module = getattr(model, "module", model)
            return [float(p.grad.norm()) for p in module.parameters()]

        record: dict[str, list] = {
            key: []
            for key in (
                "own_norms", "synced_norms", "plain_norms",
                "own_gap", "synced_gap", "plain_gap",
                "ddp_param_gap", "plain_param_gap",
            )
        }  # fmt: skip
        for step, (features, labels) in zip(range(steps), batches(), strict=False):
            features, labels = features.to(device), labels.to(device)
            # this rank's own gradient: DDP skips its all-reduce inside no_sync
            optimizers["ddp"].zero_grad()
            with ddp.no_sync():
                F.cross_entropy(ddp(features), labels).backward()
            record["own_norms"].append(norms(ddp))
            record["own_gap"].append(_across_ranks(flat_gradients(ddp)))
            # the same batch again, this time synchronised
            optimizers["ddp"].zero_grad()
            F.cross_entropy(ddp(features), labels).backward()
            record["synced_norms"].append(norms(ddp))
            record["synced_gap"].append(_across_ranks(flat_gradients(ddp)))
            # the unwrapped copy
            optimizers["plain"].zero_grad()
            F.cross_entropy(plain(features), labels).backward()
            record["plain_norms"].append(norms(plain))
            record["plain_gap"].append(_across_ranks(flat_gradients(plain)))
            for optimizer in optimizers.values():
                optimizer.step()
            record["ddp_param_gap"].append(_across_ranks(flat_parameters(ddp)))
            record["plain_param_gap"].append(_across_ranks(flat_parameters(plain)))
            send_progress(rank, step + 1, steps)
        send_report(
            rank, device=str(device), backend=str(dist.get_backend()), names=names, **record
        )
        del ddp, plain, optimizers
    finally:
        gc.collect()
        dist.destroy_process_group()


def identity(rank: int, world_size: int, port: int) -> None:
    """Join the group and report who this process is: rank, device, backend, pid."""
    import torch.distributed as dist

    from .devices import device_for

    _join_group(rank, world_size, port)
    try:
        send_report(
            rank,
            world_size=dist.get_world_size(),
            rank_in_group=dist.get_rank(),
            device=str(device_for(rank)),
            backend=str(dist.get_backend()),
            pid=os.getpid(),
        )
    finally:
        dist.destroy_process_group()
