"""Train a small network on scikit-learn's digits with DDP: a template.

    torchrun --standalone --nproc-per-node=2 ddp_template.py --epochs 10

single_device.py made into a DDP script: each changed line says why.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def digits(split):
    """64 floats in [0, 1] and a label: the same 80/20 split every time."""
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


def setup():
    if not torch.cuda.is_available():  # CPU processes talk over gloo
        dist.init_process_group("gloo")  # reads RANK, WORLD_SIZE, MASTER_*
        return torch.device("cpu")
    local_rank = int(os.environ["LOCAL_RANK"])  # its number on this machine
    if local_rank >= torch.cuda.device_count():  # never fall back to the CPU
        raise SystemExit(f"LOCAL_RANK {local_rank} has no GPU: start fewer")
    device = torch.device("cuda", local_rank)  # one GPU for each process
    torch.cuda.set_device(device)  # calls that name no device use this one
    dist.init_process_group("nccl", device_id=device)
    return device


def train(device, epochs, batch_size):
    torch.manual_seed(0)  # the same on every rank: random data must match
    train_dataset = digits("train")
    sampler = DistributedSampler(train_dataset)  # a share per rank; shuffles
    train_loader = DataLoader(train_dataset, batch_size=batch_size,
                              sampler=sampler)  # batch_size is per rank
    model = network().to(device)
    ids = [device.index] if device.type == "cuda" else None
    model = DDP(model, device_ids=ids)  # rank 0's weights, then synced grads
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    for epoch in range(epochs):
        sampler.set_epoch(epoch)  # a new shuffle, the same on every rank
        total = torch.zeros(2, device=device)  # loss sum, items: this rank
        for features, labels in train_loader:
            features, labels = features.to(device), labels.to(device)
            loss = F.cross_entropy(model(features), labels)
            optimizer.zero_grad()
            loss.backward()  # DDP averages the gradients over all ranks here
            optimizer.step()
            total[0] += loss.detach() * len(labels)  # no .item(): no wait
            total[1] += len(labels)
        dist.all_reduce(total)  # sums over all ranks: every rank's items
        if dist.get_rank() == 0:  # one log: every rank has the same numbers
            print(f"epoch {epoch}: mean loss {total[0] / total[1]:.4f}")
    return model


def evaluate(model, device):
    """Accuracy on the test split."""
    features, labels = digits("test").tensors
    with torch.no_grad():
        predicted = model(features.to(device)).argmax(dim=1)
    return (predicted == labels.to(device)).float().mean().item()


def main(epochs, batch_size):
    device = setup()
    try:
        model = train(device, epochs, batch_size)
        if dist.get_rank() == 0:  # .module: the model without DDP's syncing
            print(f"test accuracy {evaluate(model.module, device):.4f}")
    finally:
        dist.destroy_process_group()  # release the group, even after an error
    time.sleep(0.05)  # a torch workaround at exit (14_debugging), not DDP


def arguments():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32)
    return parser.parse_args()


if __name__ == "__main__":
    args = arguments()
    main(args.epochs, args.batch_size)
