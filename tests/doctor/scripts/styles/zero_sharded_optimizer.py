"""Style: the optimiser's state sharded over the ranks with ZeroRedundancyOptimizer (whose
module compiles TorchScript as it is imported), gradients clipped on every rank.
Planted fault: none."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def run(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29577")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 1)))
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=0.01)
    inputs = torch.randn(48, 4, generator=torch.Generator().manual_seed(5))
    data = TensorDataset(inputs, inputs.sum(dim=1, keepdim=True))
    for x, y in DataLoader(data, batch_size=8, sampler=DistributedSampler(data)):
        opt.zero_grad()
        (model(x) - y).pow(2).mean().backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(2,), nprocs=2)
