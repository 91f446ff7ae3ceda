"""Style: mp.spawn with a trainer class; after its first step rank 1
scales its own weights by hand (a "weight decay" written without the
optimiser), which no other rank does. Planted fault: model_wrapping (the
edit on one rank)."""
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Trainer:
    def __init__(self, rank, world):
        self.rank = rank
        torch.manual_seed(3)
        self.model = DDP(nn.Linear(5, 3))
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.05)

    def step(self, x):
        self.opt.zero_grad()
        self.model(x).sum().backward()
        self.opt.step()
        if self.rank == 1:
            with torch.no_grad():
                for p in self.model.parameters():
                    p.mul_(0.9)  # planted: model_wrapping


def run(rank, world):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29541",
                            rank=rank, world_size=world)
    trainer = Trainer(rank, world)
    for _ in range(3):
        trainer.step(torch.randn(4, 5))
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(2,), nprocs=2)
