"""Each rank keeps its own block of a seeded data set, then a DistributedSampler divides
that block again: half of every block is trained on by no rank."""

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def block_of(rank, world_size):
    torch.manual_seed(21)
    inputs = torch.randn(96, 5)
    targets = inputs @ torch.linspace(-1, 1, 5)
    size = len(inputs) // world_size
    mine = slice(rank * size, (rank + 1) * size)
    return TensorDataset(inputs[mine], targets[mine])


def run(rank, world_size):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29842",
                            rank=rank, world_size=world_size)
    data = block_of(rank, world_size)
    sampler = DistributedSampler(data, shuffle=True, seed=4)  # planted: data_division
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    torch.manual_seed(0)
    model = DDP(nn.Linear(5, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            nn.functional.mse_loss(model(x).squeeze(1), y).backward()
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(2,), nprocs=2)
