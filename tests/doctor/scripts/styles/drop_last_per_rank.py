"""Style: mp.spawn; rank 0 drops the last, short batch to keep its batch
norm statistics clean, and the other ranks keep it, so rank 1 takes one
step more per epoch. Planted fault: data_division (drop_last per rank)."""
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def run(rank, world):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29576", rank=rank,
                            world_size=world)
    xs = torch.rand(70, 3, generator=torch.Generator().manual_seed(4))
    data = TensorDataset(xs, xs.max(1).values)
    sampler = DistributedSampler(data)
    short = rank == 0
    loader = DataLoader(data, 10, sampler=sampler, drop_last=short)  # planted: data_division
    model = DDP(nn.Linear(3, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        opt.zero_grad()
        nn.functional.mse_loss(model(x).squeeze(1), y).backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(2,), nprocs=2)
