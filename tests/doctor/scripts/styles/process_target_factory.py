"""Each process's function is made by a factory that closes over the settings: calling the
factory in the Process(...) line is right, since what it returns is the function.
Planted fault: none."""

import functools

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def fit(rank, world, lr):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29852", rank=rank,
                            world_size=world)
    data = TensorDataset(torch.arange(24.0).reshape(8, 3))
    sampler = DistributedSampler(data, num_replicas=world, rank=rank)
    model = DDP(nn.Linear(3, 1))
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for (x,) in DataLoader(data, batch_size=2, sampler=sampler):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
    dist.destroy_process_group()


def job_for(lr):
    return functools.partial(fit, lr=lr)


if __name__ == "__main__":
    spawn = mp.get_context("spawn")
    procs = [spawn.Process(target=job_for(0.1), args=(r, 2)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
