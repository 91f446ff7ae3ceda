"""Style: a sampler of the script's own that shuffles one order for everyone from the epoch,
cuts it into one contiguous block per rank, and leaves out the few items past the last whole
block, so that every rank has as many steps. Planted fault: none."""
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Sampler, TensorDataset


class Blocks(Sampler):
    def __init__(self, size, rank, world):
        self.block = size // world
        self.size, self.rank, self.epoch = size, rank, 0

    def __iter__(self):
        order = torch.randperm(self.size, generator=torch.Generator().manual_seed(9 + self.epoch))
        return iter(order[self.rank * self.block : (self.rank + 1) * self.block].tolist())

    def __len__(self):
        return self.block


def run(rank, world):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29853", rank=rank,
                            world_size=world)
    xs = torch.linspace(-1, 1, 61).unsqueeze(1)
    data = TensorDataset(xs, xs.pow(2))
    blocks = Blocks(len(data), rank, world)
    model = DDP(nn.Sequential(nn.Linear(1, 8), nn.Tanh(), nn.Linear(8, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        blocks.epoch = epoch
        for x, y in DataLoader(data, batch_size=6, sampler=blocks):
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(2,), nprocs=2)
