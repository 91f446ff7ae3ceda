# Wrong: set_epoch is called before every epoch, but always with the same number.
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

FIRST_EPOCH = 5


def make_loader(dataset):
    return DataLoader(dataset, batch_size=2, sampler=DistributedSampler(dataset, shuffle=True))


def epoch_orders(train_loader, epochs):
    sampler = train_loader.sampler
    orders = []
    while len(orders) < epochs:
        sampler.set_epoch(FIRST_EPOCH)
        orders.append([int(n) for (batch,) in train_loader for n in batch])
    return orders
