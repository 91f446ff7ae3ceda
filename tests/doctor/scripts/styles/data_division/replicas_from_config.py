"""Style: a config written for a four-GPU machine, run with two processes. The sampler is
told num_replicas=4, so the two ranks take two of four shares and half the items are
never trained on; the padding of an odd-sized data set also puts one item in both.
Planted fault: num_replicas from the config, not the group."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

CONFIG = {"gpus": 4, "batch": 6, "epochs": 2}


def train(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29575")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    xs = torch.linspace(0, 1, 90).reshape(45, 2)
    data = TensorDataset(xs, xs.prod(dim=1, keepdim=True))
    shard = DistributedSampler(data, CONFIG["gpus"], rank)  # planted: data_division
    loader = DataLoader(data, batch_size=CONFIG["batch"], sampler=shard)
    model = DDP(nn.Linear(2, 1))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(CONFIG["epochs"]):
        shard.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(train, args=(2,), nprocs=2)
