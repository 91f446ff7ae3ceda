"""Style: gradient accumulation, written as functions with a config dict;
the sampler is told there are as many replicas as processes times
accumulation steps, so the ranks' shards never overlap but half of the data
set is never seen. Planted fault: data_division."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

CONFIG = {"world": 2, "accumulate": 2, "items": 128, "batch": 8, "epochs": 2}


def make_loader(rank, world, cfg):
    torch.manual_seed(3)
    x = torch.randn(cfg["items"], 5)
    data = TensorDataset(x, x.sum(dim=1, keepdim=True))
    replicas = world * cfg["accumulate"]
    sampler = DistributedSampler(data, num_replicas=replicas, rank=rank)  # planted: data_division
    return DataLoader(data, batch_size=cfg["batch"], sampler=sampler)


def run(rank, cfg):
    world = cfg["world"]
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29563")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    loader = make_loader(rank, world, cfg)
    model = DDP(nn.Linear(5, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.02)
    for epoch in range(cfg["epochs"]):
        loader.sampler.set_epoch(epoch)
        for step, (x, y) in enumerate(loader):
            loss = nn.functional.mse_loss(model(x), y) / cfg["accumulate"]
            loss.backward()
            if (step + 1) % cfg["accumulate"] == 0:
                opt.step()
                opt.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(CONFIG,), nprocs=CONFIG["world"])
