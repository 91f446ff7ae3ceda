"""Style: a GPU script that makes the rank's GPU torch's default device, so the model and
a noise tensor are built there with no device named; the batches are moved by hand.
Planted fault: none."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def work(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29807")
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    gpu = f"cuda:{rank}"
    generator = torch.Generator().manual_seed(3)
    inputs = torch.randn(80, 3, generator=generator, device="cpu")
    data = TensorDataset(inputs, inputs.sum(1, keepdim=True))
    sampler = DistributedSampler(data, seed=3)
    loader = DataLoader(data, batch_size=10, sampler=sampler)
    torch.set_default_device(gpu)
    torch.manual_seed(3)
    model = DDP(nn.Linear(3, 1), device_ids=[rank])
    step = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            x, y = x.to(gpu), y.to(gpu)
            noise = 0.01 * torch.randn(x.shape)
            step.zero_grad()
            nn.functional.mse_loss(model(x + noise), y).backward()
            step.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(work, args=(2,), nprocs=2)
