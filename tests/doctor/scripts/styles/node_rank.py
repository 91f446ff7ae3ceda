"""Style: the multi-node pattern of PyTorch's ImageNet example: one process
per device, the global rank meant to be node_rank * per_node + local index.
Here the node's rank is passed as the process's rank, so every process on
the node claims rank 0. Planted fault: process_group."""
import argparse

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main_worker(local_index, per_node, args):
    world_size = args.nodes * per_node
    dist.init_process_group(  # planted: process_group
        backend="gloo", init_method=args.dist_url, world_size=world_size, rank=args.node_rank
    )
    generator = torch.Generator().manual_seed(9)
    x = torch.randn(120, 4, generator=generator)
    dataset = TensorDataset(x, x.mean(dim=1, keepdim=True))
    loader = DataLoader(dataset, batch_size=12, sampler=DistributedSampler(dataset))
    model = DDP(nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(args.epochs):
        loader.sampler.set_epoch(epoch)
        for inputs, targets in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(inputs), targets).backward()
            optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--node-rank", type=int, default=0)
    parser.add_argument("--dist-url", default="tcp://127.0.0.1:29515")
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    per_node = max(torch.cuda.device_count(), 2)
    mp.spawn(main_worker, args=(per_node, args), nprocs=per_node)
