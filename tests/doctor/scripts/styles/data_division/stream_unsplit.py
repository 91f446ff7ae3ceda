"""Style: a generator-backed IterableDataset with no notion of ranks: each
rank streams every record, so both train on the same data.
Planted fault: data_division."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, IterableDataset


class Lines(IterableDataset):
    def __iter__(self):
        generator = torch.Generator().manual_seed(11)
        for _ in range(64):
            x = torch.randn(4, generator=generator)
            yield {"x": x, "y": (x[0] > 0).long()}


def run(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29563")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    model = DDP(nn.Linear(4, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    stream = DataLoader(Lines(), batch_size=16)  # planted: data_division
    for batch in stream:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(batch["x"]), batch["y"]).backward()
        optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(2,), nprocs=2)
