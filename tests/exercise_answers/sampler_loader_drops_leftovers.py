# Wrong: the sampler pads the shares to equal length, but the loader's drop_last=True then
# throws away each rank's last, incomplete batch, so some items reach no rank.
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

SETTINGS = {"batch_size": 3, "drop_last": True}


def make_loader(dataset):
    return DataLoader(dataset, sampler=DistributedSampler(dataset), **SETTINGS)


def epoch_orders(train_loader, epochs):
    orders = []
    for epoch in range(epochs):
        train_loader.sampler.set_epoch(epoch)
        orders.append([int(n) for (batch,) in train_loader for n in batch.tolist()])
    return orders
