# Wrong: set_epoch is given each epoch's number, but only once that epoch has been iterated.
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def make_loader(dataset):
    return DataLoader(dataset, batch_size=5, sampler=DistributedSampler(dataset))


def one_pass(train_loader):
    return [int(n) for (batch,) in train_loader for n in batch]


def epoch_orders(train_loader, epochs):
    orders = []
    for _ in range(epochs):
        orders.append(one_pass(train_loader))
        train_loader.sampler.set_epoch(len(orders) - 1)  # the epoch just finished
    return orders
