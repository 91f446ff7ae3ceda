"""Style: a loop that looks at one batch before each epoch (to log its size)
and only then calls set_epoch, as PyTorch's DDP tutorial scripts do. The look
makes an iterator of its own with last epoch's order; the batches that train
still get a new order every epoch. Planted fault: none."""
import os
import sys

import torch
import torch.multiprocessing as mp
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def worker(rank, world_size, epochs):
    os.environ.update(MASTER_ADDR="localhost", MASTER_PORT="29533")
    init_process_group("gloo", rank=rank, world_size=world_size)
    inputs = torch.linspace(-1, 1, 240).reshape(120, 2)
    dataset = TensorDataset(inputs, inputs.prod(dim=1, keepdim=True))
    batches = DataLoader(dataset, batch_size=10, sampler=DistributedSampler(dataset))
    net = DDP(torch.nn.Linear(2, 1))
    step = torch.optim.Adam(net.parameters(), lr=0.01)
    for epoch in range(epochs):
        size = len(next(iter(batches))[0])  # a look before the epoch
        if rank == 0:
            print(f"epoch {epoch}: batches of {size}, {len(batches)} steps")
        batches.sampler.set_epoch(epoch)
        for x, y in batches:
            step.zero_grad()
            torch.nn.functional.mse_loss(net(x), y).backward()
            step.step()
    destroy_process_group()


if __name__ == "__main__":
    epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    mp.spawn(worker, args=(2, epochs), nprocs=2)
