# Wrong: trusts DDP to move the model; on GPUs it stays on the CPU.
from torch.nn.parallel import DistributedDataParallel


def wrap(model, rank, device):
    gpu = device.type == "cuda"
    return DistributedDataParallel(model, device_ids=[rank] if gpu else None)
