"""Train a small network on scikit-learn's digits with DDP: the script the core path builds.

    python ddp_spawn.py --epochs 10

mp.spawn starts one process per GPU (two CPU processes over gloo where
there is no GPU for each), each with its rank; every process trains on
its own share of the data, and DDP keeps their models identical. The
diff from single_device.py is the course's four areas: starting the
processes, connecting them, splitting the data, synchronising the model.
"""
import argparse
import os
import signal
import socket
import sys
import time

import torch
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn
from torch.distributed import destroy_process_group, init_process_group
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


def ddp_setup(rank, world_size, port):
    """Select this process's device, then join the group; return it."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"  # where rank 0 listens
    os.environ["MASTER_PORT"] = str(port)
    if torch.cuda.device_count() >= world_size:
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)  # first: calls naming no device use it
        backend = "nccl"
    else:  # no GPU for every process: CPU processes over gloo
        device, backend = torch.device("cpu"), "gloo"
    init_process_group(backend, rank=rank, world_size=world_size)
    return device


def train(rank, device, epochs, batch_size):
    torch.manual_seed(0)
    train_dataset = digits("train")
    sampler = DistributedSampler(train_dataset)  # this rank's share, shuffled
    train_loader = DataLoader(train_dataset, batch_size=batch_size,
                              sampler=sampler)
    model = network().to(device)
    ids = [device.index] if device.type == "cuda" else None
    model = DDP(model, device_ids=ids)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    for epoch in range(epochs):
        sampler.set_epoch(epoch)  # a new shuffle, the same on every rank
        for features, labels in train_loader:
            features, labels = features.to(device), labels.to(device)
            loss = F.cross_entropy(model(features), labels)
            optimizer.zero_grad()
            loss.backward()  # DDP averages the gradients over all ranks here
            optimizer.step()
        if rank == 0:  # one log: every rank holds the same model
            print(f"epoch {epoch}: last batch loss {loss.item():.4f}")
    return model


def evaluate(model, device):
    """Accuracy on the test split, on rank 0 alone: model.module makes no collective."""
    features, labels = digits("test").tensors
    with torch.no_grad():
        predicted = model.module(features.to(device)).argmax(dim=1)
    return (predicted == labels.to(device)).float().mean().item()


def main(rank, world_size, port, epochs, batch_size):
    # mp.spawn supplies rank; args=(...) supplies the rest
    device = ddp_setup(rank, world_size, port)
    model = train(rank, device, epochs, batch_size)
    if rank == 0:
        print(f"test accuracy {evaluate(model, device):.4f}")
    destroy_process_group()
    # A workaround for a torch problem at exit, not part of DDP: one of
    # gloo's threads still frees the last collective, which takes Python's
    # lock; if Python is shutting down by then, the process aborts.
    # Sleeping lets go of the lock and lets that thread finish.
    time.sleep(0.05)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_ranks_on_signal(processes):
    """SIGINT or SIGTERM sent to this process alone stops the ranks too."""
    def stop(signum, frame):
        for process in processes:
            process.terminate()  # SIGTERM: a rank ends at once
        sys.exit(f"{signal.Signals(signum).name}: stopped every rank")
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)


def at_least_1(text):
    """An argparse type: a whole number, 1 or more."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(
            f"expected a whole number of 1 or more, got {text!r}")
    return int(text)


def arguments():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=at_least_1, default=10)
    parser.add_argument("--batch-size", type=at_least_1, default=32)
    return parser.parse_args()


if __name__ == "__main__":
    if "LOCAL_RANK" in os.environ:
        sys.exit("ddp_spawn.py starts its own processes with mp.spawn: run it "
                 "with python, or run ddp_train.py under torchrun")
    args = arguments()
    world_size = torch.cuda.device_count()
    if world_size < 2:
        world_size = 2  # no GPU (or one): two CPU processes over gloo
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # as torchrun sets it
    ranks = mp.spawn(main, nprocs=world_size, join=False, args=(
        world_size, free_port(), args.epochs, args.batch_size))
    stop_ranks_on_signal(ranks.processes)
    while not ranks.join():  # True once all ended; raises if one failed
        pass
