"""Style: a GPU script that builds its layers straight on the rank's GPU (device=) instead
of moving them there, with NCCL and one world size per GPU. Planted fault: none."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29594")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    gpu = torch.device("cuda", rank)
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 6), torch.randn(64, 1))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    net = nn.Sequential(nn.Linear(6, 8, device=gpu), nn.ReLU(), nn.Linear(8, 1, device=gpu))
    model = DDP(net, device_ids=[rank])
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            x, y = x.to(gpu, non_blocking=True), y.to(gpu, non_blocking=True)
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(main, args=(torch.cuda.device_count(),), nprocs=torch.cuda.device_count())
