# Right, written differently: one expression, device_ids chosen by device type.
from torch.nn.parallel import DistributedDataParallel


def wrap(model, rank, device):
    ids = None if device.type == "cpu" else [device.index]
    return DistributedDataParallel(model.to(device), device_ids=ids)
