"""Style: torchrun; the training loader gets its sampler from a helper, and
the loop calls set_epoch on a second sampler it made for logging the
shard size, so the loader's own order never changes. Planted fault:
data_division (set_epoch on the other sampler)."""
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def loader_for(data):
    return DataLoader(data, batch_size=4, sampler=DistributedSampler(data, seed=3))


def main():
    dist.init_process_group("gloo")
    xs = torch.arange(64.0).reshape(32, 2) / 64
    data = TensorDataset(xs, xs.sum(1, keepdim=True))
    train = loader_for(data)
    shard = DistributedSampler(data)
    model = DDP(nn.Linear(2, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        shard.set_epoch(epoch)  # planted: data_division
        for x, y in train:
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
