# Right: the script's __main__ starts its ranks inside launch.bounded, as the notebooks'
# launch cells do, and hands main the port of that launch.
import torch
import torch.multiprocessing as mp
from torch import distributed as dist
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from ddp_lesson import devices, launch
from ddp_lesson.data import digits
from ddp_lesson.models import NeuralNetwork


def ddp_setup(rank, world_size, port):
    device = devices.device_for(rank, world_size)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    address = f"tcp://127.0.0.1:{port}"
    dist.init_process_group(backend, init_method=address, rank=rank, world_size=world_size)
    return device


def main(rank, world_size, port, epochs):
    device = ddp_setup(rank, world_size, port)
    try:
        train_set = digits("train")
        sampler = DistributedSampler(train_set)
        batches = DataLoader(train_set, batch_size=32, sampler=sampler)
        torch.manual_seed(0)
        ids = [rank] if device.type == "cuda" else None
        model = DDP(NeuralNetwork().to(device), device_ids=ids)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(epochs):
            sampler.set_epoch(epoch)
            for images, labels in batches:
                images, labels = images.to(device), labels.to(device)
                opt.zero_grad()
                loss = F.cross_entropy(model(images), labels)
                loss.backward()
                opt.step()
            if rank == 0:
                print(f"epoch {epoch}: loss {loss.item():.3f}")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    size = devices.plan().world_size
    with launch.bounded(size, timeout_s=240) as run:
        mp.spawn(main, args=(size, run.port, 2), nprocs=size)
