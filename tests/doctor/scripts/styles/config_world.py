"""Style: settings in a dataclass passed to every process: the config says a
world of 4, but mp.spawn starts 2 processes, so the group waits for two ranks
that never come. Planted fault: spawning."""
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


@dataclass
class Config:
    world_size: int = 4
    epochs: int = 2
    lr: float = 0.05
    address: str = "tcp://127.0.0.1:29516"


def train(rank, config):
    dist.init_process_group("gloo", init_method=config.address, rank=rank,
                            world_size=config.world_size)
    x = torch.linspace(-1, 1, 64).unsqueeze(1)
    dataset = TensorDataset(x, 3 * x + 1)
    loader = DataLoader(dataset, batch_size=8, sampler=DistributedSampler(dataset))
    model = DDP(nn.Linear(1, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr)
    for epoch in range(config.epochs):
        loader.sampler.set_epoch(epoch)
        for inputs, targets in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(inputs), targets).backward()
            optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    config = Config()
    mp.spawn(train, args=(config,), nprocs=2)  # planted: spawning
