"""A network with batch normalisation, scored after each epoch by the first process.

The score runs the wrapped network itself, in evaluation mode, without
gradients; every process then meets at a barrier before the next epoch.
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def blobs(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    return TensorDataset(x, (x.sum(dim=1) > 0).long())


@torch.no_grad()
def score(net, loader):
    net.eval()
    hits = sum((net(x).argmax(1) == y).sum().item() for x, y in loader)
    net.train()
    return hits / len(loader.dataset)


def train(rank, size, port):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=size)
    torch.manual_seed(1)
    net = DDP(nn.Sequential(nn.Linear(4, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 2)))
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    data = blobs(256, 0)
    loader = DataLoader(data, batch_size=32, sampler=DistributedSampler(data, seed=3))
    held_out = DataLoader(blobs(64, 9), batch_size=32)
    for epoch in range(3):
        loader.sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(net(x), y).backward()
            opt.step()
        if rank == 0:
            print(f"epoch {epoch} accuracy {score(net, held_out):.2f}")  # planted: model_wrapping
        dist.barrier()  # the others wait for the score before the next epoch
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(train, args=(2, int(os.environ.get("MASTER_PORT", 29823))), nprocs=2)
