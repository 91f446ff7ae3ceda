# Wrong: the loader shuffles by itself and has no DistributedSampler.
from torch.utils.data import DataLoader


def make_loader(dataset):
    return DataLoader(dataset, batch_size=4, shuffle=True)


def epoch_orders(train_loader, epochs):
    return [[int(i) for (batch,) in train_loader for i in batch] for _ in range(epochs)]
