"""Style: written for GPUs only, with SyncBatchNorm: the batch norm layers are
converted before DDP wraps the model on each rank's own GPU. Planted fault: none."""
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    gpu = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(gpu)
    dist.init_process_group("nccl")
    body = nn.Sequential(nn.Linear(4, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 3))
    body = nn.SyncBatchNorm.convert_sync_batchnorm(body).to(gpu)
    model = DDP(body, device_ids=[gpu])
    points = torch.rand(96, 4)
    data = TensorDataset(points, (points.sum(1) * 1.5).long().clamp(max=2))
    sampler = DistributedSampler(data)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in DataLoader(data, batch_size=8, sampler=sampler):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x.to(gpu)), y.to(gpu)).backward()
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
