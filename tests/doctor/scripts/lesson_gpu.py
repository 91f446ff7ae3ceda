"""Planted fault: none. The lesson's script exactly as written for GPUs: hard-coded
NCCL, model.to(rank), device_ids=[rank], one process per GPU. On a machine
without CUDA the doctor runs it with gloo on the CPU and checks the devices
each rank asked for."""
import os

import torch
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from ddp_lesson.data import digits
from ddp_lesson.models import NeuralNetwork


def ddp_setup(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "12355"
    init_process_group(backend="nccl", rank=rank, world_size=world_size)
    torch.cuda.set_device(rank)


def main(rank, world_size, epochs):
    ddp_setup(rank, world_size)
    train_dataset = digits("train")
    train_loader = DataLoader(
        train_dataset, batch_size=32, sampler=DistributedSampler(train_dataset)
    )
    model = NeuralNetwork().to(rank)
    model = DDP(model, device_ids=[rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(epochs):
        train_loader.sampler.set_epoch(epoch)
        for features, labels in train_loader:
            features, labels = features.to(rank), labels.to(rank)
            loss = F.cross_entropy(model(features), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    destroy_process_group()


if __name__ == "__main__":
    print(torch.cuda.device_count())
    torch.manual_seed(0)
    world_size = torch.cuda.device_count()
    epochs = 3
    mp.spawn(main, args=(world_size, epochs), nprocs=world_size)
