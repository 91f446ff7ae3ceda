"""Style: an encoder and a classifier built apart, a dict of settings, and
one training function: DDP wraps only the encoder, while the optimiser
trains both, so each rank's classifier drifts on its own batches.
Planted fault: model_wrapping."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

SETTINGS = {"port": 29517, "items": 240, "batch": 20, "epochs": 2, "lr": 0.2}


def run(rank, world_size, settings):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(settings["port"]))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(rank)
    points = torch.linspace(-1, 1, settings["items"]).unsqueeze(1)
    labels = (points.squeeze(1) > 0).long()
    data = TensorDataset(points, labels)
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=settings["batch"], sampler=sampler)
    encoder = nn.Sequential(nn.Linear(1, 8), nn.Tanh())
    classifier = nn.Linear(8, 2)
    encoder = DDP(encoder)  # planted: model_wrapping
    optimizer = torch.optim.SGD(
        list(encoder.parameters()) + list(classifier.parameters()), lr=settings["lr"]
    )
    for epoch in range(settings["epochs"]):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(classifier(encoder(x)), y).backward()
            optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(2, SETTINGS), nprocs=2)
