"""Style: a training function with a callback-like "end of epoch" step
that calls set_epoch: after the epoch's loop, so the first two epochs
iterate the same order. Planted fault: data_division."""
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def end_of_epoch(loader, epoch, losses):
    loader.sampler.set_epoch(epoch)  # planted: data_division
    losses.clear()


def train(rank, world_size):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29565",
                            rank=rank, world_size=world_size)
    xs = torch.arange(200.0).unsqueeze(1) / 200
    data = TensorDataset(xs, 3 * xs + 1)
    loader = DataLoader(data, batch_size=20, sampler=DistributedSampler(data, seed=4))
    model = DDP(torch.nn.Linear(1, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for epoch in range(3):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        end_of_epoch(loader, epoch, losses)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(train, args=(2,), nprocs=2)
