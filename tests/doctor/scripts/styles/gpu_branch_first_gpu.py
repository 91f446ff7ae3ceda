"""Style: a helper picks the device, the GPU when there is one, else the CPU; on this
CPU machine the script trains cleanly. Its GPU branch sends every rank to the first
GPU: with two GPUs, both ranks would crowd onto one and leave the other idle.
Planted fault: the GPU branch's device, the same for every rank."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def pick_device():
    return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")


def loop(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29781")
    device = pick_device()
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=rank,
                            world_size=world_size)
    series = torch.randn(72, 5, generator=torch.Generator().manual_seed(13))
    data = TensorDataset(series, series[:, 1:3].mean(dim=1, keepdim=True))
    sampler = DistributedSampler(data)
    layer = torch.nn.Linear(5, 1).to(device)  # planted: model_wrapping
    ddp = DDP(layer, device_ids=[device.index] if device.type == "cuda" else None)
    sgd = torch.optim.SGD(ddp.parameters(), lr=0.04)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in DataLoader(data, batch_size=9, sampler=sampler):
            sgd.zero_grad()
            torch.nn.functional.mse_loss(ddp(x.to(device)), y.to(device)).backward()
            sgd.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(loop, args=(2,), nprocs=2)
