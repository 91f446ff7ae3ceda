"""Style: data parallelism by hand, without DistributedDataParallel: rank 0's
weights are broadcast to every rank, and gradients are summed with all_reduce
and averaged after each backward pass. The sampler does not shuffle, so there
is no set_epoch to call. Planted fault: none."""
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(6, 12)
        self.out = nn.Linear(12, 1)

    def forward(self, x):
        return self.out(torch.tanh(self.hidden(x)))


def average_gradients(model, world_size):
    for param in model.parameters():
        dist.all_reduce(param.grad, op=dist.ReduceOp.SUM)
        param.grad /= world_size


def run(rank, world_size, port):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=world_size)
    torch.manual_seed(rank)  # each rank draws its own weights...
    model = Net()
    for param in model.parameters():  # ...and takes rank 0's
        dist.broadcast(param.data, src=0)
    generator = torch.Generator().manual_seed(3)
    inputs = torch.randn(256, 6, generator=generator)
    dataset = TensorDataset(inputs, inputs.sum(dim=1, keepdim=True).sin())
    sampler = DistributedSampler(dataset, shuffle=False)
    loader = DataLoader(dataset, batch_size=16, sampler=sampler)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            average_gradients(model, world_size)
            optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    world_size = 2
    mp.spawn(run, args=(world_size, 29511), nprocs=world_size)
