"""Style: early stopping written for one process: each rank watches the loss of its own
batches and leaves the epoch loop once that loss has dropped far enough, without asking
the others. Planted fault: model_wrapping (a stop decided on one rank)."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def train(rank, world):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29814")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    inputs = torch.randn(256, 4, generator=torch.Generator().manual_seed(12))
    targets = inputs @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    data = TensorDataset(inputs, targets * (1 + torch.arange(256).unsqueeze(1) % 2))
    sampler = DistributedSampler(data, shuffle=False)
    torch.manual_seed(12)
    model = DDP(nn.Linear(4, 1))
    sgd = torch.optim.SGD(model.parameters(), lr=0.02)
    first = None
    for epoch in range(40):
        sampler.set_epoch(epoch)
        for x, y in DataLoader(data, batch_size=16, sampler=sampler):
            sgd.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            sgd.step()
        first = first or loss.item()
        if loss.item() < 0.3 * first:
            break  # planted: model_wrapping
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(train, args=(2,), nprocs=2)
