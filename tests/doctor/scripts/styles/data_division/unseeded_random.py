"""Style: synthetic data drawn from a random generator no line seeds, as
PyTorch's own examples make toy data: each rank draws a data set of its own,
which the doctor remarks on without calling it a fault. Planted fault: none."""
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
    os.environ.setdefault("MASTER_PORT", "29567")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    inputs = torch.randn(80, 5)
    labels = (inputs.mean(dim=1) > 0).long()
    data = TensorDataset(inputs, labels)
    loader = DataLoader(data, batch_size=10, sampler=DistributedSampler(data))
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
