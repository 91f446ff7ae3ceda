"""Style: the group is joined and released through two small helpers; the release sits
in the except block around training, so it runs when training raises, and a run that
ends well leaves every rank's group open.
Planted fault: the release only on error."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def connect(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29795")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)


def disconnect():
    dist.destroy_process_group()


def train(rank, world_size):
    connect(rank, world_size)
    try:
        grid = torch.randn(48, 2, generator=torch.Generator().manual_seed(31))
        data = TensorDataset(grid, grid[:, :1] * 3)
        sampler = DistributedSampler(data)
        model = DDP(torch.nn.Linear(2, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        for epoch in range(2):
            sampler.set_epoch(epoch)
            for x, y in DataLoader(data, batch_size=8, sampler=sampler):
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                opt.step()
    except BaseException:
        disconnect()  # planted: teardown
        raise


if __name__ == "__main__":
    mp.spawn(train, args=(2,), nprocs=2)
