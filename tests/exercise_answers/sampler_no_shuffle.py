# Wrong: a DistributedSampler told not to shuffle, so every epoch walks the data in order.
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def make_loader(dataset):
    return DataLoader(dataset, batch_size=4, sampler=DistributedSampler(dataset, shuffle=False))


def epoch_orders(train_loader, epochs):
    orders = []
    for epoch in range(epochs):
        train_loader.sampler.set_epoch(epoch)
        orders.append([int(i) for (batch,) in train_loader for i in batch])
    return orders
