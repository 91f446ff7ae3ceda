"""Style: a small network with batch norm, wrapped with broadcast_buffers=False, so each
rank keeps running statistics of its own batches: training is in step (gradients are
averaged), but the ranks' copies normalise differently afterwards; the report notes it.
Planted fault: none."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def go(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29797")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    feats = torch.randn(64, 6, generator=torch.Generator().manual_seed(37))
    data = TensorDataset(feats, feats[:, :3].sum(dim=1, keepdim=True))
    sampler = DistributedSampler(data)
    layers = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8),
                                 torch.nn.ReLU(), torch.nn.Linear(8, 1))
    model = DDP(layers, broadcast_buffers=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.03)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in DataLoader(data, batch_size=8, sampler=sampler):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(go, args=(2,), nprocs=2)
