"""Style: an accumulating trainer object that takes three micro-batches per update and
means to save the all-reduces of the first two, but its flag is the wrong way round: the
two early ones are exchanged, and the closing one, which the update follows, is kept on
the rank. Planted fault: model_wrapping (the closing micro-batch inside no_sync)."""

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Accumulator:
    def __init__(self, model, every):
        self.model, self.every, self.count = model, every, 0
        self.opt = torch.optim.Adam(model.parameters(), lr=0.01)

    def feed(self, x, y):
        self.count += 1
        exchange = self.count % self.every != 0  # meant: exchange only on the update
        if exchange:
            loss = nn.functional.mse_loss(self.model(x), y) / self.every
            loss.backward()
        else:
            with self.model.no_sync():  # planted: model_wrapping
                loss = nn.functional.mse_loss(self.model(x), y) / self.every
                loss.backward()
        if self.count % self.every == 0:
            self.update()

    def update(self):
        self.opt.step()
        self.opt.zero_grad()


def run(rank, world):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29850", rank=rank,
                            world_size=world)
    torch.manual_seed(3)
    acc = Accumulator(DDP(nn.Linear(4, 2)), every=3)
    data = torch.Generator().manual_seed(rank)
    for _ in range(9):
        x = torch.randn(5, 4, generator=data)
        acc.feed(x, x[:, :2] * 2)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(2,), nprocs=2)
