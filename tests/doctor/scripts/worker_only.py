"""Planted fault: none. A worker file in the course's style: main(rank, world_size,
epochs, port) and no __main__ block; the doctor spawns it itself."""
import gc
import os
from datetime import timedelta

import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.optim import SGD
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from ddp_lesson.data import digits
from ddp_lesson.models import NeuralNetwork


def train(epochs):
    train_dataset = digits("train")
    train_loader = DataLoader(
        train_dataset, batch_size=32, sampler=DistributedSampler(train_dataset)
    )
    model = DDP(NeuralNetwork())
    optimizer = SGD(model.parameters(), lr=0.1)
    for epoch in range(epochs):
        train_loader.sampler.set_epoch(epoch)
        for features, labels in train_loader:
            loss = F.cross_entropy(model(features), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


def main(rank, world_size, epochs, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    init_process_group("gloo", rank=rank, world_size=world_size,
                       timeout=timedelta(seconds=30))
    try:
        train(epochs)
    finally:
        gc.collect()
        destroy_process_group()
