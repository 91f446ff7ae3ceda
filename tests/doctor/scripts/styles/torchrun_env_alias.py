"""Style: written for torchrun, with a main(config) of its own: the rank and
world size are read through an alias of the environment and given to
init_process_group by name. Planted fault: none."""
import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main(config):
    env = os.environ
    rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
    dist.init_process_group(backend="gloo", rank=rank, world_size=world)
    table = torch.linspace(-1, 1, 300).reshape(100, 3)
    data = TensorDataset(table, table.prod(dim=1, keepdim=True))
    split = DistributedSampler(data, shuffle=True, seed=config.seed)
    feed = DataLoader(data, batch_size=10, sampler=split)
    model = DDP(torch.nn.Linear(3, 1))
    sgd = torch.optim.SGD(model.parameters(), lr=0.02)
    for epoch in range(config.epochs):
        split.set_epoch(epoch)
        for x, y in feed:
            sgd.zero_grad()
            torch.nn.functional.l1_loss(model(x), y).backward()
            sgd.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=5)
    main(parser.parse_args())
