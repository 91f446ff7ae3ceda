# Wrong: the port is a number written into the script, not a free one, so a second
# run (or a process left from an earlier one) that holds it stops this one.
import argparse
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from ddp_lesson.data import digits
from ddp_lesson.models import NeuralNetwork


def ddp_setup(rank, world_size, port):
    on_gpu = torch.cuda.device_count() >= world_size
    device = torch.device("cuda", rank) if on_gpu else torch.device("cpu")
    if on_gpu:
        torch.cuda.set_device(device)
    dist.init_process_group(
        "nccl" if on_gpu else "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
    )
    return device


def one_epoch(net, loader, opt, device):
    for x, y in loader:
        opt.zero_grad()
        loss = F.cross_entropy(net(x.to(device)), y.to(device))
        loss.backward()
        opt.step()
    return loss.item()


PORT = 29517  # the port from the tutorial this was copied from


def main(rank, world_size, port, epochs):
    device = ddp_setup(rank, world_size, port)
    try:
        data = digits("train")
        sampler = DistributedSampler(data, shuffle=True, seed=7)
        loader = DataLoader(data, batch_size=64, sampler=sampler)
        net = NeuralNetwork().to(device)
        ids = [device.index] if device.type == "cuda" else None
        net = DistributedDataParallel(net, device_ids=ids)
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
        for epoch in range(epochs):
            sampler.set_epoch(epoch)
            loss = one_epoch(net, loader, opt, device)
            if dist.get_rank() == 0:
                print(f"{epoch=} {loss=:.3f}")
    finally:
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    n = max(torch.cuda.device_count(), 2) if torch.cuda.device_count() != 1 else 2
    mp.spawn(main, args=(n, PORT, args.epochs), nprocs=n)
