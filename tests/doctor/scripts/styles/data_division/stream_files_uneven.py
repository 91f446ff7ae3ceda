"""Style: a stream of records read from "files" dealt to the ranks in turn; three files
for two ranks, so rank 0 reads two and rank 1 one, and rank 0's loop has more batches.
When rank 1's stream runs out it leaves, and rank 0's next backward waits for it.
Planted fault: the files dealt unevenly (the loader of the uneven stream)."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, IterableDataset

FILES = [torch.linspace(-1, 1, 48).reshape(24, 2) + shift for shift in range(3)]


class Records(IterableDataset):
    def __init__(self, rank, world_size):
        self.mine = FILES[rank::world_size]

    def __iter__(self):
        for table in self.mine:
            for row in table:
                yield row, row.sum(dim=0, keepdim=True)


def train(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29584")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = DDP(nn.Linear(2, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for x, y in DataLoader(Records(rank, world_size), batch_size=6):  # planted: data_division
        opt.zero_grad()
        (model(x) - y).pow(2).mean().backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(train, args=(2,), nprocs=2)
