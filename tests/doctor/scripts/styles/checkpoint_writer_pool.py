"""Rank 0 hands its checkpoints to a thread pool, so that training goes on while they are
written; the pool is left to Python to close at exit. Planted fault: none."""

import concurrent.futures
import os
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

WRITER = concurrent.futures.ThreadPoolExecutor(max_workers=1)


def train(rank, world_size, folder):
    dist.init_process_group("gloo", rank=rank, world_size=world_size,
                            init_method=f"tcp://127.0.0.1:{os.environ['MASTER_PORT']}")
    g = torch.Generator().manual_seed(6)
    data = TensorDataset(torch.randn(48, 3, generator=g), torch.randn(48, 1, generator=g))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=6, sampler=sampler)
    torch.manual_seed(0)
    model = DDP(nn.Linear(3, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        if rank == 0:
            state = {k: v.clone() for k, v in model.module.state_dict().items()}
            WRITER.submit(torch.save, state, os.path.join(folder, f"epoch{epoch}.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("MASTER_PORT", "29834")
    with tempfile.TemporaryDirectory() as folder:
        mp.spawn(train, args=(2, folder), nprocs=2)
