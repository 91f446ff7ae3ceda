"""Planted fault: the training DataLoader has no sampler (data division)."""
import os

import torch
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader

from ddp_lesson.data import digits
from ddp_lesson.models import NeuralNetwork


def ddp_setup(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "12355"
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    init_process_group(backend, rank=rank, world_size=world_size)


def main(rank, world_size, epochs):
    ddp_setup(rank, world_size)
    gpu = torch.cuda.is_available()
    device = torch.device("cuda", rank) if gpu else torch.device("cpu")
    torch.manual_seed(0)
    train_dataset = digits("train")
    train_loader = DataLoader(train_dataset, batch_size=32, shuffle=True)  # planted: data_division
    model = NeuralNetwork().to(device)
    model = DDP(model, device_ids=[rank] if gpu else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(epochs):
        for features, labels in train_loader:
            features, labels = features.to(device), labels.to(device)
            loss = F.cross_entropy(model(features), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    destroy_process_group()


if __name__ == "__main__":
    world_size = torch.cuda.device_count() or 2
    epochs = 3
    mp.spawn(main, args=(world_size, epochs), nprocs=world_size)
