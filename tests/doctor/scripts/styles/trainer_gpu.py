"""Style: written for GPUs only: one process per GPU from
torch.cuda.device_count(), NCCL, the device picked with torch.cuda.set_device
and .cuda(), tensors created on the GPU. On a machine without CUDA the doctor
runs it with gloo on the CPU. Planted fault: none."""
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def setup(rank, world_size):
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29517",
                            rank=rank, world_size=world_size)


def train(rank, world_size, epochs):
    setup(rank, world_size)
    device = torch.device(f"cuda:{rank}")
    generator = torch.Generator().manual_seed(2)
    features = torch.randn(400, 10, generator=generator)
    dataset = TensorDataset(features, features.argmax(dim=1) % 3)
    loader = DataLoader(dataset, batch_size=20, pin_memory=True,
                        sampler=DistributedSampler(dataset))
    model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 3)).cuda()
    model = DDP(model, device_ids=[rank], output_device=rank)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        seen = torch.zeros(1, device=device)
        for x, y in loader:
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            seen += len(y)
        torch.cuda.synchronize()
    dist.destroy_process_group()


if __name__ == "__main__":
    world_size = torch.cuda.device_count()
    mp.spawn(train, args=(world_size, 2), nprocs=world_size)
