"""Train a small network on scikit-learn's digits on one device: where the course starts.

    python single_device.py --epochs 10

One process, one device (a GPU if there is one), every batch of every
epoch. ddp_spawn.py is this script made into a DDP script.
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


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


def train(device, epochs, batch_size):
    torch.manual_seed(0)
    train_dataset = digits("train")
    train_loader = DataLoader(train_dataset, batch_size=batch_size,
                              shuffle=True)
    model = network().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    for epoch in range(epochs):
        for features, labels in train_loader:
            features, labels = features.to(device), labels.to(device)
            loss = F.cross_entropy(model(features), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}: last batch loss {loss.item():.4f}")
    return model


def evaluate(model, device):
    """Accuracy on the test split."""
    features, labels = digits("test").tensors
    with torch.no_grad():
        predicted = model(features.to(device)).argmax(dim=1)
    return (predicted == labels.to(device)).float().mean().item()


def main(epochs, batch_size):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = train(device, epochs, batch_size)
    print(f"test accuracy {evaluate(model, device):.4f}")


def arguments():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32)
    return parser.parse_args()


if __name__ == "__main__":
    args = arguments()
    main(args.epochs, args.batch_size)
