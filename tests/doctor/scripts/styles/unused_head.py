"""Style: functional, one file: a model with an auxiliary head that its
forward pass never uses, wrapped in DDP without find_unused_parameters.
The first step trains; the second raises 'Expected to have finished
reduction in the prior iteration'. Planted fault: model_wrapping."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 16)
        self.head = nn.Linear(16, 4)
        self.aux = nn.Linear(16, 1)  # kept for a later experiment

    def forward(self, x):
        return self.head(torch.relu(self.body(x)))


def train(rank, world_size, epochs):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29512")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    generator = torch.Generator().manual_seed(4)
    features = torch.randn(200, 8, generator=generator)
    dataset = TensorDataset(features, features[:, :4].argmax(dim=1))
    loader = DataLoader(dataset, batch_size=10, sampler=DistributedSampler(dataset))
    model = DistributedDataParallel(TwoHeads())  # planted: model_wrapping
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(train, args=(2, 2), nprocs=2)
