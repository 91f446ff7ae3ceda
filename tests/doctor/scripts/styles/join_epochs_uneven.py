"""Style: each rank streams a share of its own length, so the ranks make different numbers
of steps in every epoch, over several epochs; each epoch runs inside model.join(), which
lets a rank that ran out shadow the others' exchanges and, as the epoch ends, gives every
rank the same parameters again. Planted fault: none."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, IterableDataset


class Share(IterableDataset):
    def __init__(self, rank, epoch):
        self.rank, self.epoch = rank, epoch

    def __iter__(self):
        draws = torch.Generator().manual_seed(100 * self.epoch + self.rank)
        for _ in range(24 + 16 * self.rank):
            x = torch.randn(3, generator=draws)
            yield x, x.sum(0, keepdim=True)


def train(rank, world):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29818")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(rank)
    model = DDP(nn.Linear(3, 1))
    adam = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(3):
        with model.join():
            for x, y in DataLoader(Share(rank, epoch), batch_size=8):
                adam.zero_grad()
                nn.functional.mse_loss(model(x), y).backward()
                adam.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(train, args=(2,), nprocs=2)
