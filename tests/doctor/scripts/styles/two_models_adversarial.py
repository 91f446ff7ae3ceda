"""Style: two DDP models trained against each other (a small GAN). The critic's step
backpropagates through a detached sample, so the generator gets no gradient there; its
own step reaches it. Planted fault: none."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def duel(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29578")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    maker = DDP(nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 2)))
    judge = DDP(nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 1)))
    make_opt = torch.optim.Adam(maker.parameters(), lr=1e-3)
    judge_opt = torch.optim.Adam(judge.parameters(), lr=1e-3)
    bce = nn.BCEWithLogitsLoss()
    draws = torch.Generator().manual_seed(rank)
    samples = TensorDataset(torch.randn(96, 2, generator=torch.Generator().manual_seed(9)) + 3)
    for (real,) in DataLoader(samples, batch_size=16, sampler=DistributedSampler(samples)):
        fake = maker(torch.randn(16, 2, generator=draws))
        judge_opt.zero_grad()
        scores = judge(torch.cat([real, fake.detach()]))
        truth = torch.cat([torch.ones(16, 1), torch.zeros(16, 1)])
        bce(scores, truth).backward()
        judge_opt.step()
        make_opt.zero_grad()
        bce(judge(fake), torch.ones(16, 1)).backward()
        make_opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(duel, args=(2,), nprocs=2)
