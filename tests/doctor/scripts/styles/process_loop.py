"""Style: one multiprocessing.Process per rank, started in a loop, joined in a
second loop; each rank is told its rank and the address to meet at.
Planted fault: none."""
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

WORLD = 2


def worker(rank, address):
    dist.init_process_group("gloo", init_method=address, rank=rank, world_size=WORLD)
    torch.manual_seed(11)
    points = torch.randn(240, 3)
    labels = (points[:, 0] > 0).long()
    shards = DistributedSampler(TensorDataset(points, labels))
    loader = DataLoader(TensorDataset(points, labels), batch_size=16, sampler=shards)
    classifier = DDP(torch.nn.Linear(3, 2))
    step = torch.optim.SGD(classifier.parameters(), lr=0.1)
    for epoch in range(2):
        shards.set_epoch(epoch)
        for batch, target in loader:
            step.zero_grad()
            torch.nn.functional.cross_entropy(classifier(batch), target).backward()
            step.step()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


if __name__ == "__main__":
    address = f"tcp://127.0.0.1:{free_port()}"
    workers = [mp.Process(target=worker, args=(rank, address)) for rank in range(WORLD)]
    for p in workers:
        p.start()
    for p in workers:
        p.join()
