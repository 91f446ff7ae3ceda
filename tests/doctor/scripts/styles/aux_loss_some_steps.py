"""Style: a model with an auxiliary head whose loss is added only on every third step,
wrapped without find_unused_parameters: the first step uses every parameter, the second
leaves the head out. Planted fault: model_wrapping (the DDP(...) that expects every
parameter in every step)."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 8)
        self.main = nn.Linear(8, 1)
        self.aux = nn.Linear(8, 4)

    def forward(self, x, with_aux=False):
        hidden = torch.relu(self.body(x))
        return (self.main(hidden), self.aux(hidden)) if with_aux else self.main(hidden)


def run(rank, world):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29816")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    inputs = torch.randn(48, 4, generator=torch.Generator().manual_seed(3))
    data = TensorDataset(inputs, inputs.sum(1, keepdim=True))
    torch.manual_seed(3)
    model = DDP(TwoHeads())  # planted: model_wrapping
    adam = torch.optim.Adam(model.parameters(), lr=0.01)
    for step, (x, y) in enumerate(DataLoader(data, batch_size=6, sampler=DistributedSampler(data))):
        adam.zero_grad()
        if step % 3 == 0:
            out, rebuilt = model(x, with_aux=True)
            loss = nn.functional.mse_loss(out, y) + nn.functional.mse_loss(rebuilt, x)
        else:
            loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        adam.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(2,), nprocs=2)
