# Wrong: DDP is right, but a hook then halves every gradient once more after the average.
from torch.nn.parallel import DistributedDataParallel


def wrap(model, rank, device):
    model = model.to(device)
    for weight in model.parameters():
        weight.register_hook(lambda grad: grad * 0.5)
    return DistributedDataParallel(model, device_ids=[rank] if device.type == "cuda" else None)
