"""Style: no sampler; the data is cut by hand with the remainder going to the
last rank, so rank 1 gets one batch more per epoch and waits in its extra
backward pass. Planted fault: data_division (the loader over uneven shards)."""
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset


def run(rank, world):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29572", rank=rank,
                            world_size=world)
    inputs = torch.linspace(-1, 1, 100).reshape(50, 2)
    targets = inputs.sum(dim=1, keepdim=True)
    cut = len(inputs) // world * rank
    end = None if rank == world - 1 else cut + len(inputs) // world
    shard = TensorDataset(inputs[cut:end], targets[cut:end])
    batches = DataLoader(shard, batch_size=4)  # planted: data_division
    net = DistributedDataParallel(nn.Linear(2, 1))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for x, y in batches:
        opt.zero_grad()
        nn.functional.mse_loss(net(x), y).backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(3,), nprocs=3)
