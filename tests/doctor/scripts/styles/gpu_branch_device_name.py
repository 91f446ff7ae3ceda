"""Style: with a GPU the script prints the card's name and whether it reaches its
neighbour's memory, which only a real GPU answers; without one it trains on the CPU.
The CPU branch runs here and is checked; the GPU branch cannot run on stand-ins.
Planted fault: none."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def fit(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29782")
    gpu = torch.cuda.is_available()
    if gpu:
        torch.cuda.set_device(rank)
        print(rank, torch.cuda.get_device_name(rank), torch.cuda.can_device_access_peer(0, 1))
    device = torch.device("cuda", rank) if gpu else torch.device("cpu")
    dist.init_process_group("nccl" if gpu else "gloo", rank=rank, world_size=world_size)
    points = torch.randn(60, 3, generator=torch.Generator().manual_seed(17))
    data = TensorDataset(points, points.norm(dim=1, keepdim=True))
    sampler = DistributedSampler(data)
    model = DDP(torch.nn.Linear(3, 1).to(device), device_ids=[rank] if gpu else None)
    adam = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in DataLoader(data, batch_size=10, sampler=sampler):
            adam.zero_grad()
            torch.nn.functional.smooth_l1_loss(model(x.to(device)), y.to(device)).backward()
            adam.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(fit, args=(2,), nprocs=2)
