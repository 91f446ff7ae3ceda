"""Style: synthetic data made after seeding the global RNG with the rank, so
each rank builds a different data set; the DistributedSampler then hands
each rank its half of a different set. Planted fault: data_division."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def worker(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29564")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(rank)  # planted: data_division
    inputs = torch.randn(80, 5)
    labels = (inputs.mean(dim=1) > 0).long()
    data = TensorDataset(inputs, labels)
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=10, sampler=sampler)
    model = DDP(nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 2)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        for inputs_batch, labels_batch in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(inputs_batch), labels_batch).backward()
            optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2)
