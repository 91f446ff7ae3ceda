"""Each rank scores its own share of a validation set, padded by its DistributedSampler,
and prints that share's error itself: nothing is summed over the ranks, so the padded item
is counted once per share it is in, as the share's own metric. Planted fault: none."""

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def regression(count, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(count, 4, generator=g)
    return TensorDataset(x, x.sum(1, keepdim=True))


def main(rank, world_size):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29844",
                            rank=rank, world_size=world_size)
    train_set, valid_set = regression(64, 1), regression(23, 2)
    sampler = DistributedSampler(train_set, seed=3)
    train = DataLoader(train_set, batch_size=8, sampler=sampler)
    valid = DataLoader(valid_set, batch_size=8, sampler=DistributedSampler(valid_set))
    torch.manual_seed(0)
    model = DDP(nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in train:
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        with torch.no_grad():
            error = sum(nn.functional.mse_loss(model(x), y, reduction="sum") for x, y in valid)
        print(f"rank {rank} epoch {epoch}: error on its share {error.item():.3f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(main, args=(2,), nprocs=2)
