"""Style: rank 0 first trains an encoder alone, with a plain shuffled loader, before any
DDP; then the encoder is frozen and a head trained with DDP over a DistributedSampler.
Only rank 0, which pretrained, freezes its encoder. Planted fault: model_wrapping (the
ranks wrap models whose trained parameters differ)."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def pretrain(points):
    encoder, decoder = nn.Linear(4, 2), nn.Linear(2, 4)
    adam = torch.optim.Adam([*encoder.parameters(), *decoder.parameters()], lr=0.01)
    for (x,) in DataLoader(TensorDataset(points), batch_size=16, shuffle=True):
        adam.zero_grad()
        nn.functional.mse_loss(decoder(encoder(x)), x).backward()
        adam.step()
    return encoder


def main(rank, world):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29819")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(5)
    points = torch.randn(64, 4)
    encoder = pretrain(points) if rank == 0 else nn.Linear(4, 2)
    if rank == 0:
        encoder.requires_grad_(False)
    model = DDP(nn.Sequential(encoder, nn.Linear(2, 1)))  # planted: model_wrapping
    data = TensorDataset(points, points.sum(1, keepdim=True))
    sampler = DistributedSampler(data)
    sgd = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.05)
    for x, y in DataLoader(data, batch_size=8, sampler=sampler):
        sgd.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        sgd.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(main, args=(2,), nprocs=2)
