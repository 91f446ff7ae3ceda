# Wrong: a DistributedSampler, but set_epoch is never called.
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def make_loader(dataset):
    return DataLoader(dataset, batch_size=4, sampler=DistributedSampler(dataset))


def epoch_orders(train_loader, epochs):
    return [[int(i) for (batch,) in train_loader for i in batch] for _ in range(epochs)]
