"""Style: a stream of generated records that works out its own share: it asks the process
group which rank it runs on, and get_worker_info() which loader worker, from inside
__iter__. The loader's two workers start without the group, so every rank streams the
whole set. Planted fault: data_division (the rank asked where no group exists)."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

RECORDS = 96


class Records(IterableDataset):
    def __iter__(self):
        rank, ranks = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
        worker = get_worker_info()
        slot, slots = (worker.id, worker.num_workers) if worker else (0, 1)
        for index in range(rank * slots + slot, RECORDS, ranks * slots):
            point = torch.randn(3, generator=torch.Generator().manual_seed(index))
            yield point, point.sum(0, keepdim=True)


def main(rank, world):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29568")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = DDP(nn.Linear(3, 1))
    sgd = torch.optim.SGD(model.parameters(), lr=0.05)
    for x, y in DataLoader(Records(), batch_size=8, num_workers=2):  # planted: data_division
        sgd.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        sgd.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(main, args=(2,), nprocs=2)
