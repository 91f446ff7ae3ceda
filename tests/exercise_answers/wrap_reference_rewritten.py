# Right: the reference rewritten: the class imported from torch.nn.parallel by its own
# name, the CPU case first, the device's index instead of the rank.
from torch.nn.parallel import DistributedDataParallel


def wrap(model, rank, device):
    placed = model.to(device)
    if device.type != "cuda":
        return DistributedDataParallel(placed)
    return DistributedDataParallel(placed, device_ids=[device.index])
