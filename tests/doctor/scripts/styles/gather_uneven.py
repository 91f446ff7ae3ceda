"""Style: torchrun; after training, each rank gathers the predictions of its
own validation shard, which holds one item more on rank 0 (the shards are
cut by hand), so all_gather gets tensors of different shapes. Planted fault:
process_group (the all_gather of unequal tensors)."""
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    xs = torch.linspace(-2, 2, 80).unsqueeze(1)
    data = TensorDataset(xs, xs.abs())
    sampler = DistributedSampler(data)
    model = DDP(nn.Sequential(nn.Linear(1, 4), nn.ReLU(), nn.Linear(4, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for x, y in DataLoader(data, batch_size=8, sampler=sampler):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    held_out = torch.linspace(-1, 1, 21).unsqueeze(1)
    mine = held_out[rank * 11 : (rank + 1) * 11]  # 11 items on rank 0, 10 on rank 1
    with torch.no_grad():
        guesses = model(mine).squeeze(1)
    everyone = [torch.zeros_like(guesses) for _ in range(world)]
    dist.all_gather(everyone, guesses)  # planted: process_group
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
