"""Style: a stream of record files dealt to the ranks in turn, the way files in a bucket
are; five files of unequal length make one rank's epoch longer than the other's, and
the evaluation after each epoch has every rank meet in an all_reduce.
Planted fault: data_division (the ranks get unequal numbers of batches)."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, IterableDataset

FILE_LENGTHS = (40, 40, 40, 16, 40)


class RecordFiles(IterableDataset):
    def __init__(self, rank, ranks):
        self.files = range(rank, len(FILE_LENGTHS), ranks)

    def __iter__(self):
        for number in self.files:
            source = torch.Generator().manual_seed(number)
            rows = torch.randn(FILE_LENGTHS[number], 6, generator=source)
            for row in rows:
                yield row, row.mean(0, keepdim=True)


def fit(rank, ranks):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29810")
    dist.init_process_group("gloo", rank=rank, world_size=ranks)
    torch.manual_seed(2)
    model = DDP(nn.Linear(6, 1))
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    stream = DataLoader(RecordFiles(rank, ranks), batch_size=8)  # planted: data_division
    for epoch in range(2):
        seen = torch.tensor([0.0, epoch])
        for x, y in stream:
            sgd.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            sgd.step()
            seen += len(x)
        dist.all_reduce(seen)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(fit, args=(2,), nprocs=2)
