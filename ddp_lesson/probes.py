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
