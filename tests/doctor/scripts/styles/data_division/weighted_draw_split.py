"""Style: class-balanced training with a sampler of its own: one weighted draw with
replacement per epoch, from a seed shared by every rank, dealt out by position, so each
draw goes to one rank although items recur. Planted fault: none."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Sampler, TensorDataset


class DealtDraws(Sampler):
    def __init__(self, weights, rank, ranks):
        self.weights, self.rank, self.ranks, self.epoch = weights, rank, ranks, 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __iter__(self):
        source = torch.Generator().manual_seed(50 + self.epoch)
        drawn = torch.multinomial(self.weights, len(self.weights), True, generator=source)
        return iter(drawn[self.rank :: self.ranks].tolist())

    def __len__(self):
        return len(self.weights) // self.ranks


def main(rank, world):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29576")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    inputs = torch.randn(80, 3, generator=torch.Generator().manual_seed(50))
    labels = (inputs[:, 0] > 1).long()
    weights = torch.where(labels == 1, 5.0, 1.0).double()
    sampler = DealtDraws(weights, rank, world)
    torch.manual_seed(50)
    model = DDP(nn.Linear(3, 2))
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in DataLoader(TensorDataset(inputs, labels), batch_size=8, sampler=sampler):
            sgd.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            sgd.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(main, args=(2,), nprocs=2)
