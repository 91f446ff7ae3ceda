"""Train a small network on scikit-learn's digits with DDP, on 1+ machines.

Runs on every rank of one or more machines, with NCCL when each process
has a GPU of its own and gloo otherwise. Start it either way:

    python ddp_train.py --epochs 10           # mp.spawn, one process per GPU
    torchrun --nproc-per-node=2 ddp_train.py  # torchrun starts them

Rank 0 logs and writes a checkpoint after every epoch; a run started again
with the same --checkpoint goes on from the last complete epoch.
"""
import argparse
import os
import socket
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def digits(split):
    """64 floats in [0, 1] and a label: the same 80/20 split on every rank."""
    from sklearn.datasets import load_digits  # ships with scikit-learn

    images, labels = load_digits(return_X_y=True)
    features = torch.tensor(images, dtype=torch.float32) / 16.0
    labels = torch.tensor(labels, dtype=torch.int64)
    seeded = torch.Generator().manual_seed(0)
    order = torch.randperm(len(labels), generator=seeded)
    n_test = len(labels) // 5
    chosen = order[:n_test] if split == "test" else order[n_test:]
    return TensorDataset(features[chosen], labels[chosen])


def network():
    return nn.Sequential(nn.Linear(64, 512), nn.ReLU(),
                         nn.Linear(512, 512), nn.ReLU(),
                         nn.Linear(512, 10))


def ddp_setup():
    """Select this process's device, then join the group; return it."""
    local_rank = int(os.environ["LOCAL_RANK"])  # its number on this machine
    if torch.cuda.device_count() >= int(os.environ["LOCAL_WORLD_SIZE"]):
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)  # before the group: NCCL binds to it
        backend = "nccl"
    else:  # no GPU for every process here: CPU processes over gloo
        device, backend = torch.device("cpu"), "gloo"
    # RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT come from the environment
    dist.init_process_group(backend, timeout=timedelta(minutes=5))
    return device


def train(device, epochs, checkpoint, batch_size):
    rank = dist.get_rank()  # global rank: which share of the data, who logs
    torch.manual_seed(0)
    train_dataset = digits("train")
    sampler = DistributedSampler(train_dataset)  # this rank's share, shuffled
    train_loader = DataLoader(train_dataset, batch_size=batch_size,
                              sampler=sampler)
    model = network().to(device)
    ids = [device.index] if device.type == "cuda" else None
    model = DDP(model, device_ids=ids)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    start = 0
    if os.path.exists(checkpoint):  # go on after the last complete epoch
        state = torch.load(checkpoint, map_location=device)
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["epoch"] + 1
        if rank == 0:
            print(f"resumed from {checkpoint} at epoch {start}")

    for epoch in range(start, epochs):
        sampler.set_epoch(epoch)  # a new shuffle, the same on every rank
        for features, labels in train_loader:
            features, labels = features.to(device), labels.to(device)
            loss = F.cross_entropy(model(features), labels)
            optimizer.zero_grad()
            loss.backward()  # DDP averages the gradients over all ranks here
            optimizer.step()
        if rank == 0:  # one writer, one log: every rank holds the same model
            print(f"epoch {epoch}: last batch loss {loss.item():.4f}")
            state = {"model": model.module.state_dict(),
                     "optimizer": optimizer.state_dict(), "epoch": epoch}
            torch.save(state, checkpoint + ".partial")
            os.replace(checkpoint + ".partial", checkpoint)  # never half
        dist.barrier()  # nobody goes on before the checkpoint is complete
    return model


def evaluate(model, device):
    """Test accuracy, on rank 0 alone: model.module makes no collective."""
    features, labels = digits("test").tensors
    with torch.no_grad():
        predicted = model.module(features.to(device)).argmax(dim=1)
    return (predicted == labels.to(device)).float().mean().item()


def run(args):
    """What every process does, however it was started."""
    device = ddp_setup()
    try:
        model = train(device, args.epochs, args.checkpoint, args.batch_size)
        if dist.get_rank() == 0:
            print(f"test accuracy {evaluate(model, device):.4f}")
    finally:
        dist.destroy_process_group()
        # A workaround for a torch problem at exit, not part of DDP: one of
        # gloo's threads still frees the last collective, which takes
        # Python's lock; if Python is shutting down by then, the process
        # aborts. Sleeping lets go of the lock and lets that thread finish.
        time.sleep(0.05)


def spawned(rank, world_size, port, args):
    """Started by mp.spawn: set what torchrun would have set, then run."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(world_size),
                      LOCAL_WORLD_SIZE=str(world_size),
                      MASTER_ADDR=args.addr, MASTER_PORT=str(port))
    run(args)


def free_port(addr):
    with socket.socket() as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def arguments():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--checkpoint", default="checkpoint.pt")
    parser.add_argument("--nprocs", type=int, default=None,
                        help="mp.spawn only: default one per GPU, or 2 "
                             "CPU processes without GPUs")
    parser.add_argument("--addr", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=None,
                        help="mp.spawn only: default a free port")
    return parser.parse_args()


if __name__ == "__main__":
    args = arguments()
    if "LOCAL_RANK" in os.environ:  # torchrun started this process
        run(args)
    else:  # python ddp_train.py: start one process per device here
        world_size = args.nprocs or torch.cuda.device_count()
        if world_size < 2 and not args.nprocs:
            world_size = 2  # no GPU (or one): two CPU processes over gloo
        os.environ.setdefault("OMP_NUM_THREADS", "1")  # as torchrun sets it
        port = args.port or free_port(args.addr)
        mp.spawn(spawned, args=(world_size, port, args), nprocs=world_size)
