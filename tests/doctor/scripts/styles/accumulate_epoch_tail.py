"""Accumulation over three micro-batches whose epoch's leftover is stepped unsynced.

The loop steps at each third micro-batch and at the epoch's last one, but
it picks no_sync() by the third-micro-batch test alone: the leftover
micro-batches of an epoch all run inside no_sync(), and the step after them
moves each rank by gradients of its own.
"""

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

EVERY = 3


class Accumulator:
    def __init__(self, model, optimizer, every):
        self.model, self.optimizer, self.every = model, optimizer, every

    def epoch(self, loader):
        last = len(loader) - 1
        for step, (x, y) in enumerate(loader):
            boundary = step % self.every == self.every - 1
            if boundary:
                self.push(x, y)
            else:
                with self.model.no_sync():
                    self.push(x, y)
            if boundary or step == last:
                self.optimizer.step()  # planted: model_wrapping
                self.optimizer.zero_grad()

    def push(self, x, y):
        loss = nn.functional.mse_loss(self.model(x).squeeze(1), y) / self.every
        loss.backward()


def worker(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size,
                            init_method="tcp://127.0.0.1:29835")
    g = torch.Generator().manual_seed(3)
    x = torch.randn(88, 6, generator=g)
    data = TensorDataset(x, x.sum(1))
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank)
    loader = DataLoader(data, batch_size=4, sampler=sampler)
    torch.manual_seed(0)
    model = DDP(nn.Linear(6, 1))
    trainer = Accumulator(model, torch.optim.SGD(model.parameters(), lr=0.05), EVERY)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        trainer.epoch(loader)
    total = sum(p.detach().sum().item() for p in model.parameters())
    print(f"rank {rank}: weights sum {total:.6f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2)
