"""Style: torchrun, procedural: trains with DDP, then evaluates on rank 0
only, and the evaluation helper sums its count with all_reduce, a collective
the other ranks never call. Planted fault: process_group."""
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def make_data(seed, size):
    generator = torch.Generator().manual_seed(seed)
    features = torch.randn(size, 5, generator=generator)
    return TensorDataset(features, (features[:, 0] > features[:, 1]).long())


def evaluate(model, loader):
    correct = torch.zeros(1)
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(dim=1) == y).sum()
    dist.all_reduce(correct)  # planted: process_group
    return correct.item() / len(loader.dataset)


def main():
    dist.init_process_group("gloo")
    rank = int(os.environ["RANK"])
    train_set = make_data(5, 240)
    train_loader = DataLoader(train_set, batch_size=20,
                              sampler=DistributedSampler(train_set))
    model = DDP(nn.Linear(5, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    for epoch in range(2):
        train_loader.sampler.set_epoch(epoch)
        for x, y in train_loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
    if rank == 0:
        accuracy = evaluate(model, DataLoader(make_data(6, 80), batch_size=40))
        print(f"accuracy {accuracy:.3f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
