"""Run plainly, the script hands itself to torchrun, run as a program of its own; under
torchrun, each process trains. Planted fault: none."""

import os
import subprocess
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def train():
    dist.init_process_group("gloo")
    g = torch.Generator().manual_seed(2)
    data = TensorDataset(torch.randn(64, 3, generator=g), torch.randn(64, 1, generator=g))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    torch.manual_seed(0)
    model = DDP(nn.Linear(3, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    if "LOCAL_RANK" in os.environ:
        train()
    else:
        port = os.environ.get("MASTER_PORT", "29829")
        done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nnodes=1",
                               "--nproc-per-node=2", "--master-addr=127.0.0.1",
                               f"--master-port={port}", __file__], check=False)
        sys.exit(done.returncode)
