# Right, written differently: the sampler kept in a variable, batch size unchanged.
import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def make_loader(dataset):
    sampler = DistributedSampler(
        dataset, num_replicas=dist.get_world_size(), rank=dist.get_rank(), shuffle=True
    )
    return DataLoader(dataset, sampler=sampler, batch_size=4, shuffle=False)


def epoch_orders(train_loader, epochs):
    sampler = train_loader.sampler
    result = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        result.append([int(x) for batch in train_loader for x in batch[0].tolist()])
    return result
