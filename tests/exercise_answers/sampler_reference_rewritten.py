# Right: the reference rewritten: one import of torch.utils.data, the sampler named before
# the loader, the epochs walked with enumerate.
import torch.utils.data as tud


def make_loader(dataset):
    share = tud.distributed.DistributedSampler(dataset)
    return tud.DataLoader(dataset, sampler=share, batch_size=4)


def epoch_orders(train_loader, epochs):
    walked = []
    for n, _ in enumerate(range(epochs)):
        train_loader.sampler.set_epoch(n)
        walked.append([int(v) for (chunk,) in train_loader for v in chunk])
    return walked
