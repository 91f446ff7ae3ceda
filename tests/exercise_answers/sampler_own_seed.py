# Right, written differently: a sampler seeded with a number of its own, epochs counted from 1.
from torch.utils import data as tud


def make_loader(dataset):
    return tud.DataLoader(dataset, batch_size=4, sampler=tud.DistributedSampler(dataset, seed=2024))


def epoch_orders(train_loader, epochs):
    seen = []
    for number in range(1, epochs + 1):
        train_loader.sampler.set_epoch(number)
        seen.append([int(item) for (batch,) in train_loader for item in batch])
    return seen
