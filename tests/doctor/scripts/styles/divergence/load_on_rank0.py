"""Style: mp.spawn; the model is wrapped, then rank 0 alone restores last
run's weights into it (a warm start), so rank 0 trains from other weights
than the rest. Planted fault: model_wrapping (the load after wrapping)."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel

WARM = "warm_start.pt"


def train(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    net = nn.Linear(6, 2)
    ddp_net = DistributedDataParallel(net)
    if rank == 0:
        net.load_state_dict(torch.load(WARM))  # planted: model_wrapping
    opt = torch.optim.SGD(ddp_net.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(rank)
    for _ in range(3):
        x = torch.randn(8, 6, generator=gen)
        opt.zero_grad()
        ddp_net(x).pow(2).mean().backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    torch.save({k: v + 1 for k, v in nn.Linear(6, 2).state_dict().items()}, WARM)
    os.environ["MASTER_PORT"] = os.environ.get("MASTER_PORT", "29533")
    mp.spawn(train, args=(2,), nprocs=2)
