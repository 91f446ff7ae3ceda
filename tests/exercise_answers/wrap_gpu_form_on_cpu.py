# Wrong: the GPU form of the call, whatever the device.
from torch.nn.parallel import DistributedDataParallel as DDP


def wrap(model, rank, device):
    return DDP(model.to(device), device_ids=[rank])
