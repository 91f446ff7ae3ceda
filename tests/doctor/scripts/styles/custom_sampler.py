"""Style: a Sampler of the script's own that takes every world_size-th item
from a permutation drawn from the epoch (so a new order each epoch, the same
permutation on every rank). Planted fault: none."""
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Sampler, TensorDataset


class Strided(Sampler):
    def __init__(self, size, rank, world):
        self.size, self.rank, self.world, self.epoch = size, rank, world, 0

    def __iter__(self):
        order = torch.randperm(self.size, generator=torch.Generator().manual_seed(self.epoch))
        return iter(order[self.rank :: self.world].tolist())

    def __len__(self):
        return len(range(self.rank, self.size, self.world))


def run(rank, world):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29575", rank=rank,
                            world_size=world)
    xs = torch.linspace(0, 1, 60).unsqueeze(1)
    data = TensorDataset(xs, 3 * xs)
    order = Strided(len(data), rank, world)
    model = DistributedDataParallel(nn.Linear(1, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.2)
    batches = DataLoader(data, batch_size=5, sampler=order)
    for epoch in range(3):
        order.epoch = epoch
        for x, y in batches:
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(2,), nprocs=2)
