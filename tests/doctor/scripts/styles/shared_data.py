"""Style: one function per step, options from argparse: the model is wrapped
in DDP, but the loader shuffles the whole data set in every process instead
of giving each its share. Planted fault: data_division."""
import argparse
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset


def build_data(size):
    generator = torch.Generator().manual_seed(8)
    points = torch.rand(size, 2, generator=generator)
    inside = (points.pow(2).sum(dim=1) < 0.5).long()
    return TensorDataset(points, inside)


def fit(rank, world_size, args):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = str(args.port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    dataset = build_data(args.size)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True)  # planted: data_division
    model = DDP(nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 2)))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    for _ in range(args.epochs):
        for points, inside in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(points), inside).backward()
            optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--size", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=25)
    parser.add_argument("--lr", type=float, default=0.3)
    parser.add_argument("--port", type=int, default=29514)
    args = parser.parse_args()
    mp.spawn(fit, args=(2, args), nprocs=2)
