"""Style: torchrun; the learning rate is scaled by the rank by mistake
(meant to scale with the world size), so the ranks step by different
amounts from the same averaged gradients. Planted fault: model_wrapping
(the optimiser's learning rate differs per rank)."""
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    rank = int(os.environ["RANK"])
    torch.manual_seed(1)
    model = DDP(nn.Linear(3, 1))
    lr = 0.01 * (rank + 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)  # planted: model_wrapping
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.randn(6, 3)).abs().mean().backward()
        optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
