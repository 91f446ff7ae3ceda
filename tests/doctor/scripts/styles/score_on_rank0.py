"""Style: a model with batch norm, scored after every epoch by rank 0 alone through the
DDP wrapper. In eval mode DDP still sends rank 0's buffers (the running statistics) to
every rank before the forward pass, so rank 0 waits in a collective the others never make.
Planted fault: the forward through DDP on one rank."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def run(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29767")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    gen = torch.Generator().manual_seed(21)
    inputs, held_out = torch.randn(120, 7, generator=gen), torch.randn(30, 7, generator=gen)
    train = TensorDataset(inputs, (inputs[:, 0] > 0).long())
    sampler = DistributedSampler(train)
    body = nn.Sequential(nn.Linear(7, 12), nn.BatchNorm1d(12), nn.Tanh(), nn.Linear(12, 2))
    net = DDP(body)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        net.train()
        for x, y in DataLoader(train, batch_size=15, sampler=sampler):
            optimizer.zero_grad()
            nn.functional.cross_entropy(net(x), y).backward()
            optimizer.step()
        if rank == 0:
            net.eval()
            with torch.no_grad():
                scores = net(held_out)  # planted: model_wrapping
            print("epoch", epoch, "mean score", float(scores.mean()))
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(2,), nprocs=2)
