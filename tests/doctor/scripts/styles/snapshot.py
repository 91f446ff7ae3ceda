"""Style: written for torchrun on GPUs, with a snapshot: rank 0 saves the
model after every epoch, and every process reloads the latest snapshot onto
its own GPU (map_location="cuda:N") to check it before going on. The
sampler drops the one item that would not divide evenly. Planted fault: none."""
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

SNAPSHOT = "snapshot.pt"


def restore(model, local_rank):
    state = torch.load(SNAPSHOT, map_location=f"cuda:{local_rank}")
    model.load_state_dict(state["weights"])
    return state["epoch"]


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    grid = torch.cartesian_prod(torch.arange(13.0), torch.arange(13.0)) / 13
    dataset = TensorDataset(grid, (grid[:, :1] - grid[:, 1:]).abs())
    sampler = DistributedSampler(dataset, shuffle=True, drop_last=True)
    loader = DataLoader(dataset, batch_size=12, sampler=sampler)
    inner = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 1)).to(f"cuda:{local_rank}")
    model = DDP(inner, device_ids=[local_rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            x, y = x.to(local_rank), y.to(local_rank)
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        if dist.get_rank() == 0:
            torch.save({"weights": inner.state_dict(), "epoch": epoch}, SNAPSHOT)
        dist.barrier()
        assert restore(inner, local_rank) == epoch
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
