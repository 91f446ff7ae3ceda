"""Epoch hooks that only rank 0 installs, one of which moves the sampler's epoch on.

Epoch 0 is split right; from epoch 1 rank 0's sampler is at the new epoch
and rank 1's is still at 0, so their shuffles differ and their shares
overlap (and some items go to no rank).
"""

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def console_hooks(sampler):
    def next_epoch(epoch):
        sampler.set_epoch(epoch)  # planted: data_division

    def announce(epoch):
        print(f"epoch {epoch} begins")

    return [next_epoch, announce]


def train(rank, world_size):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29837",
                            rank=rank, world_size=world_size)
    x = torch.randn(120, 3, generator=torch.Generator().manual_seed(5))
    data = TensorDataset(x, x.mean(1, keepdim=True))
    sampler = DistributedSampler(data, seed=11)
    loader = DataLoader(data, batch_size=10, sampler=sampler)
    hooks = console_hooks(sampler) if rank == 0 else []
    torch.manual_seed(0)
    model = DDP(nn.Linear(3, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        for hook in hooks:
            hook(epoch)
        for inputs, targets in loader:
            opt.zero_grad()
            nn.functional.mse_loss(model(inputs), targets).backward()
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(train, args=(2,), nprocs=2)
