"""Style: a learning rate that decays every epoch, with the decay put under the same
`if rank == 0` as the epoch's log line; from the second epoch on, rank 0 steps with a
smaller rate than the others and the ranks' weights part.
Planted fault: the scheduler stepped on one rank."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def train(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29799")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    grid = torch.randn(96, 4, generator=torch.Generator().manual_seed(41))
    data = TensorDataset(grid, grid[:, 2:].sum(dim=1, keepdim=True))
    sampler = DistributedSampler(data)
    model = DDP(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    decay = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.5)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        for x, y in DataLoader(data, batch_size=12, sampler=sampler):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
        if rank == 0:
            print(f"epoch {epoch}: loss {loss.item():.4f}")
            decay.step()  # planted: model_wrapping
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(train, args=(2,), nprocs=2)
