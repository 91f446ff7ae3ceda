# Wrong, in a style of its own (a step function built with functools.partial, the loader's
# sampler reached through the loader, epochs counted with itertools.islice): set_epoch IS
# called every epoch, but always with 0, so every epoch repeats epoch 0's order.
import functools
import itertools
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn import functional
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

from ddp_lesson.data import digits
from ddp_lesson.models import NeuralNetwork


def ddp_setup(rank, world_size, port):
    gpus = torch.cuda.device_count()
    device = torch.device("cuda", rank) if gpus >= world_size else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(
        "nccl" if device.type == "cuda" else "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
    )
    return device


def step(model, optimizer, device, batch):
    inputs, targets = (t.to(device) for t in batch)
    optimizer.zero_grad(set_to_none=True)
    loss = functional.cross_entropy(model(inputs), targets)
    loss.backward()
    optimizer.step()
    return float(loss)


def main(rank, world_size, port, epochs):
    device = ddp_setup(rank, world_size, port)
    try:
        dataset = digits("train")
        loader = DataLoader(dataset, batch_size=48, sampler=DistributedSampler(dataset))
        model = DistributedDataParallel(
            NeuralNetwork().to(device),
            device_ids=None if device.type == "cpu" else [device.index],
        )
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        train = functools.partial(step, model, optimizer, device)
        for epoch in itertools.islice(itertools.count(), epochs):
            loader.sampler.set_epoch(0)  # a "fresh" shuffle each epoch
            losses = [train(batch) for batch in loader]
            if rank == 0:
                print(f"epoch {epoch}: mean loss {sum(losses) / len(losses):.3f}")
    finally:
        dist.destroy_process_group()


def unused_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    count = torch.cuda.device_count()
    procs = count if count >= 2 else 2
    mp.spawn(main, args=(procs, unused_port(), epochs), nprocs=procs)
