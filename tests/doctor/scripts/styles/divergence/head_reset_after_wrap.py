"""Style: a pretrained-looking body with a fresh head, the head re-drawn after wrapping, from
a generator state each rank seeded with its own number (for "augmentation" later). Every
rank re-draws it; each draws different numbers. Planted fault: model_wrapping."""
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def fresh_head(model):
    with torch.no_grad():
        nn.init.normal_(model.module[-1].weight, std=0.5)  # planted: model_wrapping
        model.module[-1].bias.zero_()


def work(rank, world):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29854", rank=rank,
                            world_size=world)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3)))
    torch.manual_seed(1000 + rank)
    fresh_head(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(5, 4)).logsumexp(dim=1).mean().backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(work, args=(2,), nprocs=2)
