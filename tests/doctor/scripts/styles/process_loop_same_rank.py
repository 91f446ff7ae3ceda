"""Style: a script for several machines that starts this machine's processes itself with
multiprocessing.Process, working out each one's global rank but handing it the
machine's number instead. Planted fault: spawning (every process is given rank 0)."""
import os
from multiprocessing import Process

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def fit(rank, size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29813")
    dist.init_process_group("gloo", rank=rank, world_size=size)
    torch.manual_seed(1)
    data = TensorDataset(torch.randn(32, 3), torch.randn(32, 1))
    model = DDP(nn.Linear(3, 1))
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in DataLoader(data, batch_size=4, sampler=DistributedSampler(data)):
        sgd.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        sgd.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    machine, per_machine = int(os.environ.get("MACHINE", 0)), 2
    workers = []
    for local in range(per_machine):
        global_rank = machine * per_machine + local
        worker = Process(target=fit, args=(machine, per_machine))  # planted: spawning
        worker.start()
        workers.append(worker)
    for worker in workers:
        worker.join()
