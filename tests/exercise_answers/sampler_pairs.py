# Wrong: the split and the epochs are right, but the loader hands out pairs where the
# exercise asks for batches of 4.
from torch.utils.data import DataLoader, DistributedSampler


def make_loader(dataset):
    return DataLoader(dataset, sampler=DistributedSampler(dataset), batch_size=2)


def epoch_orders(train_loader, epochs):
    met = []
    for epoch in range(epochs):
        train_loader.sampler.set_epoch(epoch)
        met.append([int(value) for (batch,) in train_loader for value in batch.tolist()])
    return met
