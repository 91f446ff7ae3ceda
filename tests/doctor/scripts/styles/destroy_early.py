"""Style: small helper functions (setup, train, cleanup, report): the group
is destroyed in a finally block, and the report that follows it averages the
loss with all_reduce, in a group that no longer exists. Planted fault: teardown."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def setup(rank, world_size):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = "29513"
    dist.init_process_group("gloo", rank=rank, world_size=world_size)


def cleanup():
    dist.destroy_process_group()  # planted: teardown


def train(epochs):
    generator = torch.Generator().manual_seed(7)
    x = torch.randn(160, 3, generator=generator)
    dataset = TensorDataset(x, x.prod(dim=1, keepdim=True))
    loader = DataLoader(dataset, batch_size=16, sampler=DistributedSampler(dataset))
    model = DDP(nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 1)))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    total = 0.0
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        for inputs, targets in loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(inputs), targets)
            loss.backward()
            optimizer.step()
            total += loss.item()
    return total


def report(total):
    summed = torch.tensor([total])
    dist.all_reduce(summed)
    return summed.item()


def worker(rank, world_size):
    setup(rank, world_size)
    try:
        total = train(epochs=2)
    finally:
        cleanup()
    summed = report(total)
    if rank == 0:
        print(f"summed loss {summed:.4f}")


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2)
