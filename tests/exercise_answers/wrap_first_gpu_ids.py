# Wrong: the model goes to the rank's GPU, but DDP is told GPU 0 on every rank.
from torch.nn.parallel import DistributedDataParallel


def wrap(model, rank, device):
    placed = model.to(device)
    if device.type == "cuda":
        return DistributedDataParallel(placed, device_ids=[0], output_device=0)
    return DistributedDataParallel(placed)
