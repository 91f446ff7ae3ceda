# Right, written differently: inputs standardised per batch before the forward pass.
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

from ddp_lesson import devices
from ddp_lesson.data import digits
from ddp_lesson.models import NeuralNetwork


def ddp_setup(rank, world_size, port):
    device = devices.device_for(rank, world_size)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(
        "nccl" if device.type == "cuda" else "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
    )
    return device


def main(rank, world_size, port, epochs):
    device = ddp_setup(rank, world_size, port)
    try:
        torch.manual_seed(0)
        images = digits("train")
        shards = DistributedSampler(images)
        batches = DataLoader(images, batch_size=32, sampler=shards)
        net = DistributedDataParallel(
            NeuralNetwork().to(device),
            device_ids=[device.index] if device.type == "cuda" else None,
        )
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        criterion = nn.CrossEntropyLoss()
        for epoch in range(epochs):
            shards.set_epoch(epoch)
            for x, y in batches:
                optimizer.zero_grad()
                x = (x - x.mean()) / (x.std() + 1e-6)  # standardised inputs
                loss = criterion(net(x.to(device)), y.to(device))
                loss.backward()
                optimizer.step()
            if rank == 0:
                print("epoch", epoch, "loss", round(loss.item(), 3))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    size = devices.plan().world_size
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    mp.spawn(main, args=(size, free, 2), nprocs=size)
