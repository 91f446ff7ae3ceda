"""Style: a script for torchrun that, started plainly, starts Python on itself once per
rank with torchrun's variables in each environment, and waits for them all.
Planted fault: none."""
import os
import subprocess
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

RANKS = 2


def train():
    dist.init_process_group("gloo")
    torch.manual_seed(8)
    data = TensorDataset(torch.randn(48, 4), torch.randn(48, 2))
    sampler = DistributedSampler(data)
    model = DDP(nn.Linear(4, 2))
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in DataLoader(data, batch_size=6, sampler=sampler):
            sgd.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            sgd.step()
    dist.destroy_process_group()


def start_ranks():
    shared = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": os.environ.get("MASTER_PORT", "29808"),
              "WORLD_SIZE": str(RANKS)}
    children = [
        subprocess.Popen([sys.executable, __file__], env={**os.environ, **shared, "RANK": str(r)})
        for r in range(RANKS)
    ]
    sys.exit(max(child.wait() for child in children))


if __name__ == "__main__":
    train() if "RANK" in os.environ else start_ranks()
