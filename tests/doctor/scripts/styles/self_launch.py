"""Style: run as plain Python, the script hands itself to torchrun's own entry point
(torch.distributed.run.main with its own path); each worker torchrun starts finds
LOCAL_RANK set and trains.
Planted fault: none."""
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def fit():
    dist.init_process_group("gloo")
    gen = torch.Generator().manual_seed(11)
    points = torch.randn(240, 5, generator=gen)
    dataset = TensorDataset(points, points.pow(2).sum(dim=1, keepdim=True))
    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, batch_size=30, sampler=sampler)
    net = DDP(torch.nn.Sequential(torch.nn.Linear(5, 6), torch.nn.ReLU(), torch.nn.Linear(6, 1)))
    step = torch.optim.SGD(net.parameters(), lr=0.02)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            step.zero_grad()
            torch.nn.functional.mse_loss(net(x), y).backward()
            step.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    if "LOCAL_RANK" not in os.environ:
        from torch.distributed import run

        run.main(["--standalone", "--nproc-per-node=2", sys.argv[0]])
    else:
        fit()
