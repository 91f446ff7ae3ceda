"""Style: a GPU script whose setup selects "the GPU" once, the first, on every process;
the model then goes to whatever GPU is current. Planted fault: process_group (every rank
selects cuda:0)."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def setup(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29598")
    torch.cuda.set_device(0)  # planted: process_group
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    return torch.device("cuda", torch.cuda.current_device())


def main(rank, world_size):
    device = setup(rank, world_size)
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(48, 5), torch.randint(0, 2, (48,)))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=6, sampler=sampler)
    model = DDP(nn.Linear(5, 2).to(device), device_ids=[device.index])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x.to(device)), y.to(device)).backward()
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(main, args=(2,), nprocs=2)
