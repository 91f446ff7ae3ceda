# Wrong: the sampler never shuffles (shuffle=False, to keep the file order), so every
# epoch trains on the same order; everything else is the reference.
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from ddp_lesson import devices
from ddp_lesson.data import digits
from ddp_lesson.models import NeuralNetwork


def ddp_setup(rank, world_size, port):
    dev = devices.device_for(rank, world_size)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    dist.init_process_group(
        "nccl" if dev.type == "cuda" else "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
    )
    return dev


def main(rank, world_size, port, epochs):
    dev = ddp_setup(rank, world_size, port)
    try:
        torch.manual_seed(rank)
        dataset = digits("train")
        sampler = DistributedSampler(dataset, shuffle=False)  # keeps the file order
        loader = DataLoader(dataset, sampler=sampler, batch_size=32)
        net = NeuralNetwork().to(dev)
        net = DistributedDataParallel(net, device_ids=None if dev.type == "cpu" else [rank])
        sgd = torch.optim.SGD(net.parameters(), lr=0.1)
        criterion = F.cross_entropy
        for epoch in range(epochs):
            sampler.set_epoch(epoch)
            for x, y in loader:
                sgd.zero_grad()
                x, y = x.to(dev), y.to(dev)
                last = criterion(net(x), y)
                last.backward()
                sgd.step()
            if dist.get_rank() == 0:
                print(f"epoch {epoch}: last batch loss {last.item():.4f}")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    count = devices.plan().world_size
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        free_port = sock.getsockname()[1]
    mp.spawn(main, args=(count, free_port, 2), nprocs=count)
