"""Style: no sampler; each rank takes its own equal slice of the data by hand
(tensor_split by rank) and shuffles it with a plain DataLoader. Planted fault: none."""
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset


def run(rank, world):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29571", rank=rank,
                            world_size=world)
    inputs = torch.linspace(-1, 1, 96).reshape(48, 2)
    targets = inputs.prod(dim=1, keepdim=True)
    mine = [t.tensor_split(world)[rank] for t in (inputs, targets)]
    batches = DataLoader(TensorDataset(*mine), batch_size=6, shuffle=True)
    net = DistributedDataParallel(nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 1)))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for _ in range(2):
        for x, y in batches:
            opt.zero_grad()
            nn.functional.l1_loss(net(x), y).backward()
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(2,), nprocs=2)
