"""Style: the ranks are started from Python with torch's elastic launcher
(LaunchConfig + elastic_launch), which sets RANK and WORLD_SIZE for each of
them as torchrun would; the rendezvous stays on this machine.
Planted fault: none."""
import os

import torch
import torch.distributed as dist
from torch.distributed.launcher.api import LaunchConfig, elastic_launch
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def train(epochs):
    dist.init_process_group("gloo")
    rank = int(os.environ["RANK"])
    gen = torch.Generator().manual_seed(3)
    inputs = torch.randn(200, 4, generator=gen)
    dataset = TensorDataset(inputs, inputs.mean(dim=1, keepdim=True))
    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, batch_size=20, sampler=sampler)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            optimizer.step()
    dist.destroy_process_group()
    return rank


if __name__ == "__main__":
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=2,
        rdzv_backend="c10d",
        rdzv_endpoint="127.0.0.1:0",
        max_restarts=0,
        monitor_interval=0.1,
    )
    finished = elastic_launch(config, train)(2)
    print("ranks that finished:", sorted(finished))
