"""The rows are made by a process pool first (a stand-in for slow parsing), and only then
are the ranks started: the pool's workers are helpers, not ranks. Planted fault: none."""

import multiprocessing

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def parse(i):
    return [float(i % 5), float(i % 3), 1.0]


def fit(rank, world, rows):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29859", rank=rank,
                            world_size=world)
    data = TensorDataset(torch.tensor(rows))
    sampler = DistributedSampler(data)
    model = DDP(nn.Linear(3, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for (x,) in DataLoader(data, batch_size=2, sampler=sampler):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    with multiprocessing.Pool(2) as pool:
        table = pool.map(parse, range(16))
    mp.spawn(fit, args=(2, table), nprocs=2)
